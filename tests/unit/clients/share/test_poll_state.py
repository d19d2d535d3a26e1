"""The share consumer's poll state (:mod:`adapter.clients.share.poll_state`) on a fake
``ShareConsumer``, and the names the classic consumer's modules still export."""

from __future__ import annotations

import threading
from typing import Any

import confluent_kafka
import pytest

from adapter.clients.share.poll_state import PollState
from adapter.core.engine.pull import HandleState
from adapter.errors import InvalidReceiptHandleError

pytestmark = pytest.mark.unit

ACCEPT = confluent_kafka.AcknowledgeType.ACCEPT
RELEASE = confluent_kafka.AcknowledgeType.RELEASE


class FakeRecord:
    def __init__(self, offset: int, count: int = 1, topic: str = "orders") -> None:
        self._offset, self._count, self._topic = offset, count, topic

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def delivery_count(self) -> int:
        return self._count


class FakeShareConsumer:
    def __init__(self) -> None:
        self.acks: list[tuple[int, Any]] = []

    def acknowledge(self, record: FakeRecord, kind: Any) -> None:
        self.acks.append((record.offset(), kind))


def make_state(max_attempts: int = 3) -> tuple[PollState, FakeShareConsumer]:
    state = PollState(
        "test consumer",
        max_delivery_attempts=max_attempts,
        delivery_limit=max_attempts + 1,
        lock_duration=30.0,
        cond=threading.Condition(),
    )
    kc = FakeShareConsumer()
    state.kc = kc
    state.by_kafka = {"orders": ("orders", None)}
    return state, kc


def test_records_are_held_then_released_when_their_invisible_duration_runs_out() -> None:
    state, kc = make_state()
    state.accept([FakeRecord(0), FakeRecord(1), FakeRecord(2)], now=100.0)
    views = state.take(2, invisible_s=5.0, now=100.0)
    assert [v.record.offset() for v in views] == [0, 1]  # type: ignore[attr-defined]
    assert state.unacked == 2 and len(state.buffer) == 1
    with state.cond:
        state.expire(106.0)
    assert sorted(kc.acks) == [(0, RELEASE), (1, RELEASE)]
    assert state.released == 2 and not state.unacked and state.pending_acks


def test_a_record_of_an_unsubscribed_topic_is_released_unseen() -> None:
    state, kc = make_state()
    state.accept([FakeRecord(7, topic="gone"), FakeRecord(8)], now=1.0)
    assert kc.acks == []  # looked at when a receive reaches it
    assert [v.record.offset() for v in state.take(2, 5.0, now=1.0)] == [8]  # type: ignore[attr-defined]
    assert kc.acks == [(7, RELEASE)]
    assert not state.buffer and state.pending_acks


def test_a_record_past_its_last_delivery_goes_to_the_dead_letters() -> None:
    state, kc = make_state(max_attempts=3)
    state.accept([FakeRecord(4, count=4)], now=1.0)
    assert state.take(1, 5.0, now=1.0) == []
    assert [v.record.offset() for v in state.dead] == [4]
    assert state.dead[0].state is HandleState.EXPIRED
    assert not state.buffer and kc.acks == []


def test_live_refuses_a_settled_hold_and_another_consumers_view() -> None:
    state, _ = make_state()
    other, _ = make_state()
    state.accept([FakeRecord(0)], now=0.0)
    other.accept([FakeRecord(1)], now=0.0)
    (mine,) = state.take(1, invisible_s=5.0, now=0.0)
    (theirs,) = other.take(1, invisible_s=5.0, now=0.0)
    assert state.live(mine, 1.0) is mine
    with pytest.raises(InvalidReceiptHandleError, match="another consumer"):
        state.live(theirs, 1.0)
    held = state.live(mine, 1.0)
    state.unhold(held)
    with state.cond:
        state.settle(held, ACCEPT, HandleState.ACKED)
    assert state.acked == 1
    with pytest.raises(InvalidReceiptHandleError, match="already acknowledged"):
        state.live(mine, 1.0)


def test_the_moved_names_stay_importable_from_the_consumer_modules() -> None:
    from adapter.clients.simple import message_view as simple_view
    from adapter.clients.simple import simple_consumer, simple_options

    for name in ("SimpleConsumerBackend", "SimpleConsumerOptions", "SimpleOptions"):
        assert getattr(simple_consumer, name) is getattr(simple_options, name)
        assert name in simple_consumer.__all__
    for name in ("FilterExpression", "MessageView", "PullFuture", "tag_filter_of"):
        assert getattr(simple_consumer, name) is getattr(simple_view, name)
        assert name in simple_consumer.__all__


def test_take_fills_the_receive_past_skipped_records_and_shares_one_hold() -> None:
    state, kc = make_state(max_attempts=3)
    records = [
        FakeRecord(0),
        FakeRecord(1, topic="gone"),  # unsubscribed: released unseen
        FakeRecord(2, count=2),  # redelivered: handed out with its count
        FakeRecord(3, count=4),  # past its last delivery: set aside
        FakeRecord(4),
        FakeRecord(5),
        FakeRecord(6),
    ]
    state.accept(records, now=10.0)
    views = state.take(4, invisible_s=5.0, now=10.0)
    assert [v.record.offset() for v in views] == [0, 2, 4, 5]  # type: ignore[attr-defined]
    assert [v.count for v in views] == [1, 2, 1, 1]  # type: ignore[attr-defined]
    assert kc.acks == [(1, RELEASE)] and [v.record.offset() for v in state.dead] == [3]
    assert [r.offset() for r in state.buffer] == [6] and state.unacked == 4
    # what one receive shares is kept once: one hold for its four views
    assert len({id(v.hold) for v in views}) == 1  # type: ignore[attr-defined]
    assert {(v.deadline, v.duration, v.acquired_at) for v in views} == {(15.0, 5.0, 10.0)}  # type: ignore[attr-defined]


def test_an_expired_hold_of_a_receive_ends_each_of_its_views() -> None:
    state, kc = make_state()
    state.accept([FakeRecord(0), FakeRecord(1)], now=0.0)
    first = state.take(1, invisible_s=2.0, now=0.0)
    second = state.take(1, invisible_s=8.0, now=1.0)
    with state.cond:
        state.expire(5.0)
    assert kc.acks == [(0, RELEASE)] and state.unacked == 1
    assert first[0].state is HandleState.EXPIRED  # type: ignore[attr-defined]
    assert state.live(second[0], 5.0) is second[0]


def real(offset: int, count: int = 1, topic: str = "orders", error: Any = None) -> Any:
    """A librdkafka record (``take`` judges a poll of them in C-level passes)."""
    return confluent_kafka.Message(
        topic=topic, partition=0, offset=offset, value=b"x", delivery_count=count, error=error
    )


@pytest.mark.parametrize(
    ("records", "offsets", "counts", "released"),
    [
        # a clean poll, all taken: every record viewed, first deliveries
        ([real(0), real(1), real(2)], [0, 1, 2], [1, 1, 1], []),
        # one redelivered, one unsubscribed, one in error: looked at one by one
        ([real(0), real(1, count=2), real(2)], [0, 1, 2], [1, 2, 1], []),
        ([real(0), real(1, topic="gone"), real(2)], [0, 2], [1, 1], [1]),
        ([real(0), real(1, error=confluent_kafka.KafkaError(-191)), real(2)], [0, 2], [1, 1], []),
    ],
)
def test_take_of_librdkafkas_records_views_each_as_one_by_one(
    records: list[Any], offsets: list[int], counts: list[int], released: list[int]
) -> None:
    state, kc = make_state()
    state.accept(records, now=10.0)
    views = state.take(32, invisible_s=5.0, now=10.0)
    assert [v.record.offset() for v in views] == offsets  # type: ignore[attr-defined]
    assert [v.count for v in views] == counts  # type: ignore[attr-defined]
    assert [v.user_topic for v in views] == ["orders"] * len(offsets)  # type: ignore[attr-defined]
    assert kc.acks == [(o, RELEASE) for o in released]
    assert not state.buffer and state.unacked == len(offsets)
    assert len({id(v.hold) for v in views}) == 1  # type: ignore[attr-defined]
    assert all(v.state is HandleState.INVISIBLE for v in views)  # type: ignore[attr-defined]
