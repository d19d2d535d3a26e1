"""The committable offset of a partition (the engine's ``PartitionState``) and the flow-control
limits (:mod:`adapter.core.offsets`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from adapter.constants import (
    DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN,
    DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
    DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
)
from adapter.core.engine.tracking import PartitionState, Work
from adapter.core.offsets import (
    FROM_BEGINNING,
    ConsumeFromWhere,
    FlowLimits,
    StartAt,
    consume_from_where_of,
    end_at_start,
    first_start,
    timestamp_ms,
)
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit


class TestFlowLimits:
    def test_defaults_are_rocketmq(self) -> None:
        limits = FlowLimits()
        assert limits.max_count == DEFAULT_PULL_THRESHOLD_FOR_QUEUE == 1000
        assert limits.max_bytes == DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB * 1024 * 1024
        assert limits.max_span == DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN == 2000

    def test_within_limits(self) -> None:
        limits = FlowLimits(max_count=3, max_bytes=100, max_span=10)
        assert limits.reason(0, 0, 0) is None
        assert limits.reason(3, 100, 10) is None  # all at the limit: == is not >

    @pytest.mark.parametrize(
        ("count", "nbytes", "span", "says"),
        [
            (4, 0, 0, "4 messages in flight > 3"),
            (0, 101, 0, "101 bytes in flight > 100"),
            (0, 0, 11, "in-flight offset span 11 > 10"),
        ],
    )
    def test_each_limit_names_itself(self, count: int, nbytes: int, span: int, says: str) -> None:
        assert (
            FlowLimits(max_count=3, max_bytes=100, max_span=10).reason(count, nbytes, span) == says
        )

    def test_default_limits(self) -> None:
        limits = FlowLimits()
        assert limits.reason(1000, 100 * 1024 * 1024, 2000) is None
        assert limits.reason(1001, 0, 0) is not None
        assert limits.reason(0, 100 * 1024 * 1024 + 1, 0) is not None
        assert limits.reason(0, 0, 2001) is not None

    @pytest.mark.parametrize(
        ("count", "nbytes", "span", "below"),
        [
            (0, 0, 0, True),
            (2, 50, 5, True),  # half of every limit, exactly
            (3, 0, 0, False),  # more than half of the messages
            (0, 51, 0, False),  # ... of the bytes
            (0, 0, 6, False),  # ... of the span
        ],
    )
    def test_below_half_of_every_limit(
        self, count: int, nbytes: int, span: int, below: bool
    ) -> None:
        limits = FlowLimits(max_count=4, max_bytes=100, max_span=10)
        assert limits.below_half(count, nbytes, span) is below


# --- the engine's per-partition offsets (PartitionState over fetched runs) -----------------
class _Msg:
    __slots__ = ("queue_offset",)

    def __init__(self, offset: int) -> None:
        self.queue_offset = offset


class PartitionStateMachine(RuleBasedStateMachine):
    """Fetched runs, batches completing in any order, failed messages held until their copy is
    acknowledged, commits taken: against a model, the set of offsets in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.state = PartitionState(("t", 0), 1)
        self.works: list[Work] = []
        self.inflight: set[int] = set()
        self.held: dict[int, Work] = {}
        self.next = 0
        self.last_committable: int | None = None
        self.last_taken: int | None = None

    @initialize(start=st.integers(min_value=0, max_value=1000))
    def start(self, start: int) -> None:
        self.next = start
        self.state.advance(start)

    @rule(
        n=st.integers(min_value=1, max_value=7),
        size=st.integers(min_value=1, max_value=3),
        gap=st.integers(min_value=0, max_value=2),
    )
    def fetch(self, n: int, size: int, gap: int) -> None:
        first = self.next + gap  # compacted or transaction-marker offsets leave gaps
        msgs = [_Msg(first + i) for i in range(n)]
        work = Work(("t", 0), 1, msgs, size, first + n)
        self.state.add(work)
        self.state.advance(first + n)
        self.works.append(work)
        self.inflight.update(first + i for i in range(n))
        self.next = first + n

    @precondition(lambda self: any(w.left for w in self.works))
    @rule(pick=st.integers(min_value=0), fail=st.sets(st.integers(0, 2)))
    def complete(self, pick: int, fail: set[int]) -> None:
        open_batches = [
            (w, i) for w in self.works for i in range(w.nbatches) if not (w.done and w.done[i])
        ]
        work, index = open_batches[pick % len(open_batches)]
        batch = work.batch(index)
        for j, m in enumerate(batch):
            if j in fail:  # its copy goes out: the offset stays in flight until acknowledged
                work.hold(m.queue_offset, "send-back")
                self.held[m.queue_offset] = work
            else:
                self.inflight.discard(m.queue_offset)
        assert work.mark_done(index)
        assert not work.mark_done(index)  # twice is refused

    @precondition(lambda self: bool(self.held))
    @rule(pick=st.integers(min_value=0))
    def acknowledge(self, pick: int) -> None:
        offset = sorted(self.held)[pick % len(self.held)]
        work = self.held.pop(offset)
        assert not work.release(offset, "someone else")
        assert work.release(offset, "send-back")
        assert not work.release(offset)
        self.inflight.discard(offset)

    @rule()
    def take(self) -> None:
        taken = self.state.take_commit()
        if taken is not None:
            assert self.last_taken is None or taken > self.last_taken
            self.last_taken = taken

    @invariant()
    def committable_is_the_smallest_offset_in_flight(self) -> None:
        c = self.state.committable()
        assert c == (min(self.inflight) if self.inflight else self.next)
        if self.last_committable is not None:
            assert c >= self.last_committable
        self.last_committable = c

    @invariant()
    def running_while_a_batch_is_open(self) -> None:
        assert self.state.running() == any(w.left for w in self.works)


PartitionStateMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None
)
TestPartitionStateMachine = PartitionStateMachine.TestCase


def test_end_at_start_reads_what_was_sent_after_the_member_started() -> None:
    ends = {("t", 0): 10}
    assert end_at_start(ends, set(), ("t", 0)) == 10  # where it ended at start
    assert end_at_start(ends, set(), ("t", 1)) == FROM_BEGINNING  # a partition added later
    assert end_at_start(ends, set(), ("new", 0)) == FROM_BEGINNING  # a topic created later
    assert end_at_start(ends, {"lost"}, ("lost", 0)) is None  # unknown: look it up now


_W = ConsumeFromWhere


@pytest.mark.parametrize(
    ("where", "retry_topic", "expected"),
    [
        (_W.CONSUME_FROM_LAST_OFFSET, False, StartAt.END),
        (_W.CONSUME_FROM_FIRST_OFFSET, False, StartAt.BEGINNING),
        (_W.CONSUME_FROM_TIMESTAMP, False, StartAt.TIMESTAMP),
        (_W.CONSUME_FROM_LAST_OFFSET, True, StartAt.BEGINNING),
        (_W.CONSUME_FROM_FIRST_OFFSET, True, StartAt.BEGINNING),
        (_W.CONSUME_FROM_TIMESTAMP, True, StartAt.BEGINNING),
    ],
)
def test_first_start_reads_a_retry_topic_from_its_beginning(
    where: ConsumeFromWhere, retry_topic: bool, expected: StartAt
) -> None:
    assert first_start(where, retry_topic=retry_topic) is expected


@pytest.mark.parametrize(
    "reset", ["earliest", "smallest", "beginning", "SMALLEST", "Beginning", "EARLIEST"]
)
def test_every_spelling_of_an_earliest_reset_starts_at_the_first_offset(reset: str) -> None:
    assert consume_from_where_of(None, reset) is _W.CONSUME_FROM_FIRST_OFFSET


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: consume_from_where_of("FROM_NOW", None),
            "consume_from_where='FROM_NOW': expected one of ['CONSUME_FROM_LAST_OFFSET', "
            "'CONSUME_FROM_FIRST_OFFSET', 'CONSUME_FROM_TIMESTAMP']",
        ),
        (
            lambda: timestamp_ms(True),
            "consume_timestamp=True: expected epoch ms, a datetime or text",
        ),
        (lambda: timestamp_ms(-1), "consume_timestamp=-1: epoch milliseconds must be >= 0"),
        (
            lambda: timestamp_ms("garbage"),
            "consume_timestamp='garbage': expected epoch ms, a datetime or 'yyyyMMddHHmmss' (UTC)",
        ),
        (
            lambda: timestamp_ms(1.5),
            "consume_timestamp=1.5: expected epoch ms, a datetime or 'yyyyMMddHHmmss' (UTC)",
        ),
    ],
)
def test_start_settings_errors_read_field_value_cause(call: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    assert str(info.value) == message


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process runs in a zone 5:30 ahead of UTC (naive times must still read as UTC)."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_timestamps_read_naive_times_as_utc_and_keep_a_given_zone() -> None:
    noon_utc = 1_795_867_200_000  # 2026-11-28T12:00:00Z
    assert timestamp_ms(0) == 0
    assert timestamp_ms(noon_utc) == noon_utc
    assert timestamp_ms("20261128120000") == noon_utc
    assert timestamp_ms(datetime(2026, 11, 28, 12)) == noon_utc  # noqa: DTZ001
    assert timestamp_ms(datetime(2026, 11, 28, 12, tzinfo=UTC)) == noon_utc
    plus_one = timezone(timedelta(hours=1))
    assert timestamp_ms(datetime(2026, 11, 28, 13, tzinfo=plus_one)) == noon_utc
