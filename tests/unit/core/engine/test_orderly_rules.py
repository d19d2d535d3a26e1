"""The orderly rules that need no partition state: the maximum of reconsumes, the suspend
time and how a listener's answer for a batch is judged, with the texts a user reads."""

from __future__ import annotations

import pytest

from adapter.core.codec import Failure
from adapter.core.engine.orderly_rules import (
    ORDERLY_UNLIMITED,
    BatchVerdict,
    Judged,
    judge_orderly,
    orderly_max_reconsume_times,
    suspend_ms_of,
)
from adapter.core.listener import ConsumeOrderlyStatus
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit

SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
SUCCESS = ConsumeOrderlyStatus.SUCCESS
NOT_A_STATUS = "not a ConsumeOrderlyStatus; counted as SUSPEND_CURRENT_QUEUE_A_MOMENT"
BAD_CONTEXT = (
    "context.suspend_current_queue_time_millis='x': must be an int; "
    "the consumer's suspend time is used"
)


@pytest.mark.parametrize(("value", "expected"), [(-1, ORDERLY_UNLIMITED), (0, 0), (1, 1)])
def test_the_maximum_of_reconsumes(value: int, expected: int) -> None:
    assert orderly_max_reconsume_times(value) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("3", "max_reconsume_times='3': must be an int"),
        (True, "max_reconsume_times=True: must be an int"),
        (1.0, "max_reconsume_times=1.0: must be an int"),
        (-2, "max_reconsume_times=-2: must be >= 0, or -1 for unlimited"),
    ],
)
def test_a_bad_maximum_names_the_field_the_value_and_the_cause(value: object, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        orderly_max_reconsume_times(value)  # type: ignore[arg-type]
    assert str(caught.value) == text


@pytest.mark.parametrize(
    ("value", "expected"),
    [(-1, (700, None)), (5, (10, None)), (500, (500, None)), (40_000, (30_000, None))],
)
def test_the_suspend_time_of_a_context_value(value: int, expected: tuple[int, None]) -> None:
    assert suspend_ms_of(value, 700) == expected


def test_a_context_value_that_is_no_int_is_named() -> None:
    assert suspend_ms_of("x", 700) == (700, BAD_CONTEXT)


@pytest.mark.parametrize(
    ("verdict", "judged"),
    [
        (BatchVerdict(SUCCESS, -1, 2.0), Judged(None)),  # exactly the timeout: in time
        (BatchVerdict(SUCCESS, "x", 2.0), Judged(None)),
        (
            BatchVerdict(SUCCESS, -1, 2.5),
            Judged(
                Failure("ConsumeTimeout", "listener ran 2.500s, longer than consume_timeout=2.0s"),
                700,
            ),
        ),
        (
            BatchVerdict(SUSPEND, 50, 0.0),
            Judged(Failure(SUSPEND.value, f"listener returned {SUSPEND.value}"), 50),
        ),
        (
            BatchVerdict(RuntimeError("boom"), 50, 0.0),
            Judged(Failure("RuntimeError", "boom"), 50, "listener raised RuntimeError: boom"),
        ),
        (
            BatchVerdict(None, -1, 0.0),
            Judged(
                Failure("NoneReturned", f"listener result=None: {NOT_A_STATUS}"),
                700,
                f"listener result=None: {NOT_A_STATUS}",
            ),
        ),
        (
            BatchVerdict("SUCCESS", -1, 0.0),
            Judged(
                Failure("ListenerResultError", f"listener result='SUCCESS': {NOT_A_STATUS}"),
                700,
                f"listener result='SUCCESS': {NOT_A_STATUS}",
            ),
        ),
        (
            BatchVerdict(SUSPEND, "x", 0.0),
            Judged(Failure(SUSPEND.value, f"listener returned {SUSPEND.value}"), 700, BAD_CONTEXT),
        ),
        (
            BatchVerdict(RuntimeError("boom"), "x", 0.0),
            Judged(Failure("RuntimeError", "boom"), 700, "listener raised RuntimeError: boom"),
        ),
    ],
    ids=repr,
)
def test_how_a_listeners_answer_is_judged(verdict: BatchVerdict, judged: Judged) -> None:
    assert judge_orderly(verdict, timeout_s=2.0, default_suspend_ms=700) == judged
