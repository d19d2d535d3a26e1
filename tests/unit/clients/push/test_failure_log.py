"""Listener failures in the log: the first of a kind with its traceback, then summaries."""

from __future__ import annotations

import logging

import pytest

from adapter.clients.push.failure_log import FailureLog

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _raise(kind: type[Exception]) -> Exception:
    try:
        raise kind("downstream said no")
    except Exception as exc:
        return exc


def test_first_of_a_kind_has_its_traceback_repeats_are_summarised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    failures = FailureLog(logging.getLogger("t.failures"), "g1", clock, every_s=10)
    with caplog.at_level(logging.WARNING, "t.failures"):
        for _ in range(50):
            failures.report("listener raised ValueError: downstream said no", _raise(ValueError))
        assert len(caplog.records) == 1
        first = caplog.records[0]
        assert first.exc_info is not None and first.exc_info[0] is ValueError
        assert "g1: listener raised ValueError" in first.getMessage()

        clock.t = 10.5
        failures.report("listener raised ValueError: downstream said no", _raise(ValueError))
        assert len(caplog.records) == 2
        assert "and 49 more like it in the last 10 s" in caplog.records[1].getMessage()
        assert caplog.records[1].exc_info is None

        # another kind is logged at once, with its own traceback
        failures.report("listener raised KeyError: 'x'", _raise(KeyError))
        assert len(caplog.records) == 3 and caplog.records[2].exc_info[0] is KeyError


def test_bad_answers_are_kinds_too(caplog: pytest.LogCaptureFixture) -> None:
    failures = FailureLog(logging.getLogger("t.answers"), "g2", Clock())
    with caplog.at_level(logging.WARNING, "t.answers"):
        for i in range(5, 9):
            failures.report(
                f"context.ack_index={i} is outside -1..3 for a batch of 4; clamped to 3"
            )
    assert len(caplog.records) == 1  # the values differ, the kind does not


def test_a_single_repeat_says_again_not_zero_more(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = FailureLog(logging.getLogger("t.again"), "g1", clock, every_s=10)
    with caplog.at_level(logging.WARNING, "t.again"):
        failures.report("listener raised RuntimeError: cannot handle", _raise(RuntimeError))
        clock.t = 11
        failures.report("listener raised RuntimeError: cannot handle", _raise(RuntimeError))
    assert len(caplog.records) == 2
    repeat = caplog.records[1].getMessage()
    assert "0 more" not in repeat
    assert repeat == (
        "g1: listener raised RuntimeError: cannot handle (again; the first was logged with its "
        "traceback)"
    )
