"""The listener contract: the contexts a listener is handed, ``judge`` (what its answer means
for the batch), ``Judge`` (``judge`` with its answers remembered, for the consumer loop's
failing batches) and ``InlinePolicy`` (where an AUTO listener runs)."""

from __future__ import annotations

import pytest

from adapter.core.breaker import OpenCircuit
from adapter.core.codec import Failure
from adapter.core.listener import (
    JUDGEMENTS_MAX,
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    InlinePolicy,
    Judge,
    ListenerMode,
    MessageQueue,
    Outcome,
    judge,
    timed_out,
)
from adapter.core.routing import ConsumeConcurrentlyStatus, ack_index_clamped, split_batch

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


def test_a_concurrent_context_starts_with_its_queue_and_no_ack_index_nor_level() -> None:
    c = ConsumeConcurrentlyContext(MQ)
    assert (c.message_queue, c.ack_index, c.delay_level_when_next_consume) == (MQ, None, 0)


def test_an_orderly_context_starts_auto_committing_with_the_consumers_suspend_time() -> None:
    c = ConsumeOrderlyContext(MQ)
    assert c.message_queue == MQ
    assert c.auto_commit is True
    assert c.suspend_current_queue_time_millis == -1


@pytest.mark.parametrize(
    "context", [ConsumeConcurrentlyContext(MQ), ConsumeOrderlyContext(MQ)], ids=type
)
def test_open_circuit_raises_open_circuit_with_its_reason(
    context: ConsumeConcurrentlyContext | ConsumeOrderlyContext,
) -> None:
    with pytest.raises(OpenCircuit) as raised:
        context.open_circuit()
    assert str(raised.value) == "the listener opened the circuit"
    with pytest.raises(OpenCircuit) as raised:
        context.open_circuit("the payment service is down")
    assert str(raised.value) == "the payment service is down"


def test_a_timed_out_batch_is_retried_whole_at_the_brokers_level_saying_the_limit() -> None:
    assert timed_out(2.5, 3) == Outcome(
        split_batch(LATER, None, 3),
        None,
        0,
        Failure("ConsumeTimeout", "listener ran longer than 2.5s"),
    )


NOT_A_STATUS = "not a ConsumeConcurrentlyStatus; counted as RECONSUME_LATER"
NOT_AN_INT = "must be an int; the batch counts as RECONSUME_LATER"


@pytest.mark.parametrize(
    ("result", "ack", "level", "failure_type", "text"),
    [
        (
            "CONSUME_SUCCESS",
            None,
            0,
            "ListenerResultError",
            f"listener result='CONSUME_SUCCESS': {NOT_A_STATUS}",
        ),
        (None, None, 0, "NoneReturned", f"listener result=None: {NOT_A_STATUS}"),
        (OK, "1", 0, "ListenerResultError", f"context.ack_index='1': {NOT_AN_INT}"),
        (OK, True, 0, "ListenerResultError", f"context.ack_index=True: {NOT_AN_INT}"),
        (
            OK,
            None,
            "3",
            "ListenerResultError",
            f"context.delay_level_when_next_consume='3': {NOT_AN_INT}",
        ),
        (
            OK,
            None,
            1.5,
            "ListenerResultError",
            f"context.delay_level_when_next_consume=1.5: {NOT_AN_INT}",
        ),
        (
            OK,
            1,
            False,
            "ListenerResultError",
            f"context.delay_level_when_next_consume=False: {NOT_AN_INT}",
        ),
        # a wrong answer and a wrong field: the answer is what the failure names
        (None, "1", 0, "NoneReturned", f"listener result=None: {NOT_A_STATUS}"),
    ],
)
def test_a_wrong_answer_or_field_fails_the_whole_batch_at_the_brokers_level_naming_it(
    result: object, ack: object, level: object, failure_type: str, text: str
) -> None:
    assert judge(result, ctx(ack, level), 3) == Outcome(
        split_batch(LATER, None, 3), None, 0, Failure(failure_type, text), problem=text
    )


@pytest.mark.parametrize(
    ("result", "ack", "level", "want"),
    [
        (
            LATER,
            None,
            0,
            Outcome(
                split_batch(LATER, None, 3),
                None,
                0,
                Failure("RECONSUME_LATER", "listener returned RECONSUME_LATER"),
            ),
        ),
        (
            LATER,
            1,
            4,
            Outcome(
                split_batch(LATER, 1, 3),
                1,
                4,
                Failure("RECONSUME_LATER", "listener returned RECONSUME_LATER"),
            ),
        ),
        (
            OK,
            0,
            0,
            Outcome(
                split_batch(OK, 0, 3),
                0,
                0,
                Failure("NotAcknowledged", "CONSUME_SUCCESS with ack_index=0"),
            ),
        ),
        (
            OK,
            -1,
            -2,
            Outcome(
                split_batch(OK, -1, 3),
                -1,
                -2,
                Failure("DeadLetterRequested", "listener set delay_level_when_next_consume=-2"),
            ),
        ),
    ],
)
def test_a_status_that_fails_messages_says_why_with_no_problem_and_no_error(
    result: object, ack: object, level: object, want: Outcome
) -> None:
    got = judge(result, ctx(ack, level), 3)
    assert got == want
    assert got is not None
    assert got.problem is None
    assert got.error is None


def test_a_raised_exception_fails_the_batch_and_is_kept_for_the_breaker() -> None:
    boom = ValueError("boom")
    assert judge(boom, ctx(), 2) == Outcome(
        split_batch(LATER, None, 2),
        None,
        0,
        Failure("ValueError", "boom"),
        problem="listener raised ValueError: boom",
        error=boom,
    )


def test_an_ack_index_outside_the_batch_is_warned_about_even_beside_a_wrong_answer() -> None:
    outcome, clamped = Judge()(None, ctx(12), 8)
    assert outcome == judge(None, ctx(12), 8)
    assert clamped == ack_index_clamped(12, 8)
    assert clamped == "context.ack_index=12 is outside -1..7 for a batch of 8; clamped to 7"


def test_it_remembers_at_most_judgements_max_shapes_of_answer() -> None:
    j = Judge()
    first, _ = j(OK, ctx(-1), 1)
    for size in range(2, JUDGEMENTS_MAX + 1):  # JUDGEMENTS_MAX shapes in all
        j(OK, ctx(-1), size)
    again, _ = j(OK, ctx(-1), 1)
    assert again is first  # still remembered
    j(OK, ctx(-1), JUDGEMENTS_MAX + 1)  # one more: the memory starts afresh
    rebuilt, _ = j(OK, ctx(-1), 1)
    assert rebuilt == first
    assert rebuilt is not first


def test_inline_policy_defaults() -> None:
    p = InlinePolicy()
    assert (p.mode, p.slow_s, p.fast_s, p.warmup, p.inline) == (
        ListenerMode.AUTO,
        0.010,
        0.001,
        64,
        False,
    )
    assert InlinePolicy(ListenerMode.INLINE).inline is True
    assert InlinePolicy(ListenerMode.POOL).inline is False


def auto(warmup: int = 3) -> InlinePolicy:
    return InlinePolicy(slow_s=0.5, fast_s=0.1, warmup=warmup)


def test_auto_goes_inline_after_exactly_warmup_fast_batches_in_a_row() -> None:
    p = auto()
    p.pooled(0.05)
    p.pooled(0.0)
    assert p.inline is False
    p.pooled(0.099)
    assert p.inline is True
    p.pooled(0.05)  # past the warm-up: stays inline
    assert p.inline is True


def test_the_64th_fast_batch_sends_a_default_policy_inline() -> None:
    p = InlinePolicy()
    for _ in range(63):
        p.pooled(0.0005)
    assert p.inline is False
    p.pooled(0.0005)
    assert p.inline is True


@pytest.mark.parametrize("rt_s", [0.1, 0.2, 3.0])
def test_a_batch_not_faster_than_fast_s_restarts_the_streak(rt_s: float) -> None:
    p = auto()
    p.pooled(0.0)
    p.pooled(0.0)
    p.pooled(rt_s)
    p.pooled(0.0)
    p.pooled(0.0)
    assert p.inline is False
    p.pooled(0.0)
    assert p.inline is True


def test_a_batch_at_fast_s_does_not_count_as_fast() -> None:
    p = auto(warmup=1)
    p.pooled(0.1)
    assert p.inline is False


@pytest.mark.parametrize("mode", [ListenerMode.INLINE, ListenerMode.POOL])
def test_a_fixed_mode_never_moves(mode: ListenerMode) -> None:
    p = InlinePolicy(mode, slow_s=0.5, fast_s=0.1, warmup=1)
    was = p.inline
    for _ in range(3):
        p.pooled(0.0)
    p.ran_inline(10.0)
    assert p.inline is was


def test_one_slow_inline_run_sends_auto_back_to_the_pool_and_restarts_the_streak() -> None:
    p = auto(warmup=2)
    p.pooled(0.0)
    p.pooled(0.0)
    assert p.inline is True
    p.ran_inline(0.5)  # at slow_s: not slow
    assert p.inline is True
    p.ran_inline(0.51)
    assert p.inline is False
    p.pooled(0.0)  # the streak starts again from nothing
    assert p.inline is False
    p.pooled(0.0)
    assert p.inline is True
