"""``Judge``: ``judge`` with its answers remembered, for the consumer loop's failing batches."""

from __future__ import annotations

import pytest

from adapter.core.listener import (
    JUDGEMENTS_MAX,
    ConsumeConcurrentlyContext,
    Judge,
    MessageQueue,
    judge,
)
from adapter.core.routing import ConsumeConcurrentlyStatus, ack_index_clamped

MQ = MessageQueue("t", 0)
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def ctx(ack: object = None, level: object = 0) -> ConsumeConcurrentlyContext:
    c = ConsumeConcurrentlyContext(MQ)
    c.ack_index = ack  # type: ignore[assignment]
    c.delay_level_when_next_consume = level  # type: ignore[assignment]
    return c


CASES = [
    (OK, None, 0, 1),
    (OK, -1, 0, 1),
    (OK, 3, 0, 8),
    (OK, 12, 0, 8),  # clamped: warned about
    (OK, -5, 0, 8),  # clamped
    (OK, 0, -1, 4),  # straight to the DLQ
    (OK, 1, 5, 4),
    (LATER, None, 0, 32),
    (LATER, 2, 3, 32),
]


@pytest.mark.parametrize(("result", "ack", "level", "size"), CASES)
def test_answers_what_judge_and_ack_index_clamped_answer(
    result: object, ack: object, level: object, size: int
) -> None:
    j = Judge()
    want = (judge(result, ctx(ack, level), size), ack_index_clamped(ack, size))
    assert j(result, ctx(ack, level), size) == want
    assert j(result, ctx(ack, level), size) == want  # remembered: the same answer


def test_a_remembered_outcome_is_given_again_not_rebuilt() -> None:
    j = Judge()
    first, _ = j(OK, ctx(-1), 1)
    again, _ = j(OK, ctx(-1), 1)
    assert first is not None
    assert again is first
    other, _ = j(OK, ctx(-1), 2)  # another batch size: judged on its own
    assert other is not first
    assert other == judge(OK, ctx(-1), 2)


@pytest.mark.parametrize(
    ("result", "ack", "level"),
    [
        (ValueError("boom"), None, 0),  # raised: its own failure text and error each time
        (None, None, 0),  # not a status
        ("CONSUME_SUCCESS", None, 0),  # a plain string is not a status
        (OK, True, 0),  # a bool is not an index
        (OK, "1", 0),
        (OK, None, 1.5),
    ],
)
def test_everything_else_is_judged_afresh(result: object, ack: object, level: object) -> None:
    j = Judge()
    a, clamped_a = j(result, ctx(ack, level), 4)
    b, clamped_b = j(result, ctx(ack, level), 4)
    assert a is not None
    assert b is not None
    assert a == judge(result, ctx(ack, level), 4)
    assert a is not b
    assert a.problem is not None
    assert clamped_a is None
    assert clamped_b is None


def test_answers_stay_right_past_what_it_remembers() -> None:
    j = Judge()
    for size in range(1, JUDGEMENTS_MAX * 3):
        outcome, _ = j(OK, ctx(-1), size)
        assert outcome == judge(OK, ctx(-1), size)
    first, _ = j(OK, ctx(-1), 1)
    assert first == judge(OK, ctx(-1), 1)
