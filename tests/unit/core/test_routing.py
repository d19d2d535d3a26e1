"""Unit tests for :mod:`adapter.core.routing`: ack_index splitting and failed-message routing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.core.delay import DelayLevels
from adapter.core.routing import (
    BatchOutcome,
    ConsumeConcurrentlyStatus,
    DeadLetter,
    DeadLetterReason,
    MessageModel,
    RetryLater,
    ack_index_clamped,
    route_failed,
    split_batch,
)
from adapter.errors import InvalidDelayLevelError, ListenerResultError

pytestmark = pytest.mark.unit

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
LEVELS = DelayLevels.DEFAULT


class TestEnums:
    def test_values(self) -> None:
        assert SUCCESS.value == "CONSUME_SUCCESS"
        assert LATER.value == "RECONSUME_LATER"
        assert MessageModel.CLUSTERING.value == "CLUSTERING"
        assert MessageModel.BROADCASTING.value == "BROADCASTING"
        assert DeadLetterReason.MAX_RECONSUME_TIMES.value == "MAX_RECONSUME_TIMES"
        assert DeadLetterReason.LISTENER_REQUESTED.value == "LISTENER_REQUESTED"


# --- split_batch --------------------------------------------------------------------------
class TestSplitBatch:
    @pytest.mark.parametrize(
        ("ack_index", "done", "failed"),
        [
            (None, [0, 1, 2, 3], []),
            (0, [0], [1, 2, 3]),
            (1, [0, 1], [2, 3]),
            (3, [0, 1, 2, 3], []),  # last
            (4, [0, 1, 2, 3], []),  # beyond last: clamped
            (1000, [0, 1, 2, 3], []),
            (-1, [], [0, 1, 2, 3]),
            (-7, [], [0, 1, 2, 3]),
        ],
    )
    def test_consume_success(
        self, ack_index: int | None, done: list[int], failed: list[int]
    ) -> None:
        outcome = split_batch(SUCCESS, ack_index, 4)
        assert list(outcome.succeeded) == done
        assert list(outcome.failed) == failed

    @pytest.mark.parametrize("ack_index", [None, -1, 0, 2, 10])
    def test_reconsume_later_fails_all(self, ack_index: int | None) -> None:
        outcome = split_batch(LATER, ack_index, 3)
        assert outcome == BatchOutcome(range(0), range(3))
        assert list(outcome.failed) == [0, 1, 2]
        assert list(outcome.succeeded) == []

    def test_single_message_batch(self) -> None:
        assert list(split_batch(SUCCESS, None, 1).succeeded) == [0]
        assert list(split_batch(SUCCESS, 0, 1).failed) == []
        assert list(split_batch(SUCCESS, -1, 1).failed) == [0]

    def test_empty_batch(self) -> None:
        outcome = split_batch(SUCCESS, None, 0)
        assert list(outcome.succeeded) == []
        assert list(outcome.failed) == []

    def test_negative_size(self) -> None:
        with pytest.raises(ListenerResultError) as info:
            split_batch(SUCCESS, None, -1)
        assert (info.value.field, info.value.value, info.value.reason) == (
            "batch size",
            -1,
            "must be >= 0",
        )

    @pytest.mark.parametrize(
        "result",
        [None, "CONSUME_SUCCESS", "RECONSUME_LATER", 0, 1, True, object(), MessageModel.CLUSTERING],
    )
    def test_non_status_raises_naming_the_value(self, result: object) -> None:
        with pytest.raises(ListenerResultError) as info:
            split_batch(result, None, 1)
        assert info.value.value is result
        assert repr(result) in str(info.value)
        assert (info.value.field, info.value.reason) == (
            "listener result",
            "expected ConsumeConcurrentlyStatus, counted as RECONSUME_LATER",
        )

    @given(
        st.sampled_from([SUCCESS, LATER]),
        st.one_of(st.none(), st.integers(min_value=-5, max_value=40)),
        st.integers(min_value=0, max_value=32),
    )
    def test_partition_of_the_batch(
        self, status: ConsumeConcurrentlyStatus, ack_index: int | None, size: int
    ) -> None:
        outcome = split_batch(status, ack_index, size)
        done, failed = list(outcome.succeeded), list(outcome.failed)
        assert done + failed == list(range(size))  # disjoint, ordered, complete
        if status is LATER:
            assert done == []
        elif ack_index is None:
            assert failed == []
        else:
            assert len(done) == max(0, min(ack_index + 1, size))


# --- route_failed -------------------------------------------------------------------------
def route(
    reconsume_times: int,
    *,
    max_times: int = 16,
    level: int = 0,
    message_max: int | None = None,
    levels: DelayLevels = LEVELS,
) -> RetryLater | DeadLetter:
    return route_failed(
        reconsume_times=reconsume_times,
        max_reconsume_times=max_times,
        delay_level_when_next_consume=level,
        levels=levels,
        message_max_reconsume_times=message_max,
    )


class TestRouteFailed:
    @pytest.mark.parametrize(
        ("n", "level", "delay_ms"),
        [
            (0, 3, 10_000),
            (1, 4, 30_000),
            (2, 5, 60_000),
            (13, 16, 1_800_000),
            (14, 17, 3_600_000),
            (15, 18, 7_200_000),
        ],
    )
    def test_system_chooses_three_plus_n(self, n: int, level: int, delay_ms: int) -> None:
        assert route(n) == RetryLater(level=level, delay_ms=delay_ms, reconsume_times=n + 1)

    def test_retries_past_the_table_clamp_to_highest(self) -> None:
        assert route(20, max_times=100) == RetryLater(18, 7_200_000, 21)

    @pytest.mark.parametrize(("asked", "served"), [(1, 1), (5, 5), (18, 18), (19, 18), (500, 18)])
    def test_listener_level_clamped(self, asked: int, served: int) -> None:
        dest = route(0, level=asked)
        assert dest == RetryLater(served, LEVELS.delay_ms(served), 1)

    @pytest.mark.parametrize("asked", [-1, -5])
    def test_negative_level_goes_to_dlq(self, asked: int) -> None:
        assert route(0, level=asked) == DeadLetter(DeadLetterReason.LISTENER_REQUESTED, 1)
        assert route(7, level=asked) == DeadLetter(DeadLetterReason.LISTENER_REQUESTED, 8)

    @pytest.mark.parametrize("n", [16, 17, 100])
    def test_max_reached_goes_to_dlq(self, n: int) -> None:
        assert route(n) == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, n + 1)

    def test_max_beats_listener_level(self) -> None:
        assert route(16, level=2) == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 17)

    def test_one_below_max_retries(self) -> None:
        assert isinstance(route(15), RetryLater)
        assert isinstance(route(2, max_times=3), RetryLater)
        assert isinstance(route(3, max_times=3), DeadLetter)

    def test_max_zero_dead_letters_first_failure(self) -> None:
        assert route(0, max_times=0) == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 1)

    def test_per_message_max_overrides_group(self) -> None:
        assert route(2, max_times=16, message_max=2) == DeadLetter(
            DeadLetterReason.MAX_RECONSUME_TIMES, 3
        )
        assert isinstance(route(1, max_times=16, message_max=2), RetryLater)
        # also upwards
        assert isinstance(route(20, max_times=16, message_max=30), RetryLater)
        assert isinstance(route(30, max_times=16, message_max=30), DeadLetter)

    def test_per_message_minus_one_means_sixteen(self) -> None:
        assert isinstance(route(15, max_times=3, message_max=-1), RetryLater)
        assert isinstance(route(16, max_times=3, message_max=-1), DeadLetter)

    def test_per_message_zero(self) -> None:
        assert route(0, message_max=0) == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 1)

    def test_custom_table(self) -> None:
        short = DelayLevels.parse("10ms 20ms 30ms 40ms")
        assert route(0, levels=short) == RetryLater(3, 30, 1)
        assert route(1, levels=short) == RetryLater(4, 40, 2)
        assert route(9, levels=short) == RetryLater(4, 40, 10)

    def test_listener_level_zero_is_system_choice(self) -> None:
        assert route(4, level=0) == RetryLater(7, LEVELS.delay_ms(7), 5)

    def test_delay_matches_table(self) -> None:
        for n in range(16):
            dest = route(n)
            assert isinstance(dest, RetryLater)
            assert dest.delay_ms == LEVELS.delay_ms(dest.level)

    def test_bad_level_type_is_an_error(self) -> None:
        with pytest.raises(InvalidDelayLevelError):
            route(0, level=2.5)  # type: ignore[arg-type]


class TestPoisonMessage:
    def test_seventeen_deliveries_then_dlq(self) -> None:
        reconsume_times = 0
        deliveries = 0
        levels_used: list[int] = []
        while True:
            deliveries += 1  # the listener sees the message and fails
            dest = route(reconsume_times, max_times=16)
            if isinstance(dest, DeadLetter):
                break
            levels_used.append(dest.level)
            assert dest.reconsume_times == reconsume_times + 1
            reconsume_times = dest.reconsume_times
        assert deliveries == 17
        assert dest == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 17)
        assert levels_used == list(range(3, 19))  # 16 retries: 10s ... 2h
        assert levels_used[0] == 3
        assert levels_used[-1] == 18
        total_ms = sum(LEVELS.delay_ms(lv) for lv in levels_used)
        # 10s + 30s + (1..10)m + 20m + 30m + 1h + 2h: RocketMQ's 4h45m40s retry horizon
        assert total_ms == (4 * 3600 + 45 * 60 + 40) * 1000

    @given(st.integers(min_value=0, max_value=40))
    def test_any_max_gives_max_plus_one_deliveries(self, max_times: int) -> None:
        n = 0
        deliveries = 0
        while True:
            deliveries += 1
            dest = route(n, max_times=max_times)
            if isinstance(dest, DeadLetter):
                break
            n = dest.reconsume_times
        assert deliveries == max_times + 1
        assert dest.reconsume_times == max_times + 1


@pytest.mark.parametrize(
    ("ack", "size", "says"),
    [
        (None, 4, None),
        (-1, 4, None),
        (3, 4, None),
        (4, 4, "context.ack_index=4 is outside -1..3 for a batch of 4; clamped to 3"),
        (99, 1, "context.ack_index=99 is outside -1..0 for a batch of 1; clamped to 0"),
        (-2, 4, "context.ack_index=-2 is outside -1..3 for a batch of 4; clamped to -1"),
        ("2", 4, None),  # not an int: an error of its own, not a clamp
    ],
)
def test_an_ack_index_outside_the_batch_is_named_and_clamped(
    ack: object, size: int, says: str | None
) -> None:
    assert ack_index_clamped(ack, size) == says


def test_a_dead_letter_the_listener_asked_for_says_so() -> None:
    """The demo's dlq-now was described as ``CONSUME_SUCCESS with ack_index=-1``."""
    from adapter.core.codec import Failure
    from adapter.core.listener import ConsumeConcurrentlyContext, judge

    ctx = ConsumeConcurrentlyContext(None)  # type: ignore[arg-type]
    ctx.ack_index = -1
    ctx.delay_level_when_next_consume = -1
    outcome = judge(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ctx, 1)
    assert outcome is not None
    assert outcome.failure == Failure(
        "DeadLetterRequested", "listener set delay_level_when_next_consume=-1"
    )
    # a real failure keeps its own name
    ctx.delay_level_when_next_consume = -1
    raised = judge(ValueError("no"), ctx, 1)
    assert raised is not None and raised.failure.type == "ValueError"
