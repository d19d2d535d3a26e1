"""The Kafka trace sink (:class:`adapter.io.trace_sink.KafkaTraceSink`) on a fake clock and a
fake producer: how long it waits for room in the producer and for its thread at close is
measured on the injected clock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapter.core.trace import TraceEvent, TraceStatus
from adapter.io import trace_sink
from adapter.io.trace_sink import KafkaTraceSink
from tests.unit.kafka_fakes import FakeClock

pytestmark = pytest.mark.unit

CONF = {"bootstrap.servers": "127.0.0.1:1"}


def _event(i: int) -> TraceEvent:
    return TraceEvent(
        1_700_000_000_000 + i, "consumer", "g", "orders", 0, i, f"id-{i}", f"id-{i}",
        TraceStatus.SUCCESS, 0,
    )  # fmt: skip


class _Producer:
    """A producer whose ``produce`` blocks until :attr:`release` (``stuck``) or finds its
    queue always full (``full``: each ``poll`` then takes its timeout on the clock)."""

    def __init__(self, clock: FakeClock, *, stuck: bool = False, full: bool = False) -> None:
        self.clock = clock
        self.stuck = stuck
        self.full = full
        self.entered = threading.Event()
        self.release = threading.Event()
        self.polls = 0
        self.produced = 0
        self.flushes: list[float] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None, **_: Any) -> None:
        self.entered.set()
        if self.stuck:
            self.release.wait(30)
        if self.full:
            raise BufferError("Local: Queue full")
        self.produced += 1

    def poll(self, timeout: float = 0) -> int:
        if timeout:
            self.polls += 1
            self.clock.advance(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        self.flushes.append(timeout)
        return 0

    def __len__(self) -> int:
        return 0


def _sink(monkeypatch: pytest.MonkeyPatch, producer: _Producer, clock: FakeClock) -> KafkaTraceSink:
    monkeypatch.setattr(trace_sink, "make_client", lambda *_, **__: producer)
    return KafkaTraceSink(CONF, "traces", create_topic=False, clock=clock)


def test_close_gives_up_on_a_stuck_sink_when_its_clock_passes_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    producer = _Producer(clock, stuck=True)
    sink = _sink(monkeypatch, producer, clock)
    sink(_event(1))
    closer = threading.Thread(target=sink.close, kwargs={"timeout_s": 60.0}, daemon=True)
    closer.start()
    try:
        assert producer.entered.wait(10)  # the sink's thread is stuck producing the pack
        clock.advance(61.0)
        closer.join(5)  # real seconds: the 60 s are the fake clock's
        assert not closer.is_alive(), "close() waited on the system's clock"
        assert sink.dropped == 1  # the event it held is counted as not delivered
        assert producer.flushes == [0.0]  # no time left for the producer either
    finally:
        producer.release.set()
        closer.join(10)


def test_no_room_in_the_producer_drops_the_pack_once_the_clock_passed_the_room_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    producer = _Producer(clock, full=True)
    sink = _sink(monkeypatch, producer, clock)
    sink(_event(1))
    assert sink.flush(timeout_s=60.0) == 0
    # ten waits of 0.05 s of the fake clock (one more as the sum rounds), then the pack is
    # dropped (not a busy loop on the system's clock for half a second)
    assert producer.polls in (10, 11)
    assert sink.dropped == 1 and sink.sent == 0
    sink.close()
