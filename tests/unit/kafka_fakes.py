"""In-memory stand-ins for confluent-kafka's clients (the subset in
:mod:`adapter.io.protocols`), for unit tests of the loops that use them.

They record what they were asked to do (public lists and dicts the tests read) and answer
from what the test set up; records are real ``confluent_kafka.Message`` objects.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaException, Message, TopicPartition

TP = tuple[str, int]


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def now_ms(self) -> int:
        return int(self.now * 1000)

    def advance(self, seconds: float) -> None:
        self.now += seconds


def record(topic: str, partition: int, offset: int, value: bytes = b"body") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=value, timestamp=(1, 1))


@dataclass
class _TopicMetadata:
    partitions: dict[int, Any]
    error: Any = None


@dataclass
class _Metadata:
    topics: dict[str, _TopicMetadata] = field(default_factory=dict)


class FakeConsumer:
    """A consumer whose partitions, offsets and records the test sets up."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.subscribed: list[str] = []
        self.subscribe_calls = 0
        #: each subscribe() (its topics) and unsubscribe() (``[]``), in order
        self.subscriptions: list[list[str]] = []
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.queue: list[Message] = []
        #: the group's committed offsets (what ``committed()`` answers)
        self.group_offsets: dict[TP, int] = {}
        self.watermarks: dict[TP, tuple[int, int]] = {}
        self.positions: dict[TP, int] = {}
        #: partitions per topic (what ``list_topics()`` answers)
        self.topics: dict[str, int] = {}
        self.assigned: dict[TP, int] = {}
        self.stored: list[dict[TP, int]] = []
        self.commits: list[dict[TP, int]] = []
        self.paused: list[TP] = []
        self.resumed: list[TP] = []
        self.seeks: list[tuple[TP, int]] = []
        self.closed = False

    # -- what the test drives --------------------------------------------------------------
    def rebalance(self, kind: str, partitions: list[TP]) -> None:
        """Run the ``on_assign`` / ``on_revoke`` / ``on_lost`` callback for ``partitions``."""
        self.callbacks[kind](self, [TopicPartition(t, p) for t, p in partitions])

    # -- ConsumerLike ----------------------------------------------------------------------
    def subscribe(
        self,
        topics: list[str],
        on_assign: Any = None,
        on_revoke: Any = None,
        on_lost: Any = None,
    ) -> None:
        self.subscribed = list(topics)
        self.subscribe_calls += 1
        self.subscriptions.append(sorted(topics))
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}

    def unsubscribe(self) -> None:
        self.subscribed = []
        self.subscriptions.append([])

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        out, self.queue = self.queue[:num_messages], self.queue[num_messages:]
        return out

    def assign(self, partitions: list[Any]) -> None:
        self.assigned.update({(p.topic, p.partition): p.offset for p in partitions})

    incremental_assign = assign

    def unassign(self) -> None:
        self.assigned.clear()

    def incremental_unassign(self, partitions: list[Any]) -> None:
        for p in partitions:
            self.assigned.pop((p.topic, p.partition), None)

    def pause(self, partitions: list[Any]) -> None:
        self.paused += [(p.topic, p.partition) for p in partitions]

    def resume(self, partitions: list[Any]) -> None:
        self.resumed += [(p.topic, p.partition) for p in partitions]

    def seek(self, partition: Any) -> None:
        self.seeks.append(((partition.topic, partition.partition), partition.offset))

    def position(self, partitions: list[Any]) -> list[Any]:
        return [
            TopicPartition(p.topic, p.partition, self.positions.get((p.topic, p.partition), -1001))
            for p in partitions
        ]

    def store_offsets(self, message: Any = None, offsets: Any = None) -> None:
        self.stored.append({(o.topic, o.partition): o.offset for o in offsets})

    def commit(self, *args: Any, offsets: Any = None, asynchronous: bool = True) -> None:
        done = {(o.topic, o.partition): o.offset for o in offsets}
        self.commits.append(done)
        self.group_offsets.update(done)

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [
            TopicPartition(
                p.topic, p.partition, self.group_offsets.get((p.topic, p.partition), OFFSET_INVALID)
            )
            for p in partitions
        ]

    def offsets_for_times(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        raise KafkaException("not set up")

    def get_watermark_offsets(
        self, partition: Any, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        return self.watermarks.get((partition.topic, partition.partition), (0, 0))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return _Metadata(
            {t: _TopicMetadata({p: None for p in range(n)}) for t, n in self.topics.items()}
        )

    def memberid(self) -> str:
        return "member-1"

    def close(self) -> None:
        self.closed = True


@dataclass
class Produced:
    topic: str
    value: Any
    key: Any
    partition: int
    headers: Any
    on_delivery: Callable[[Any, Any], None]


class FakeProducer:
    """A producer that holds each record until the test decides its verdict."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.produced: list[Produced] = []
        self.pending: list[Produced] = []
        #: the verdict ``poll`` delivers for each pending record (``None``: acknowledged)
        self.verdict: Any = None
        #: when set, the verdict of each record instead (``verdict_of(record)``)
        self.verdict_of: Callable[[Produced], Any] | None = None
        #: raised by the next ``produce`` calls, in turn
        self.refuse: list[BaseException] = []
        self.polls = 0
        self.flushes = 0

    def produce(  # noqa: PLR0917 - confluent-kafka's positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        if self.refuse:
            raise self.refuse.pop(0)
        rec = Produced(topic, value, key, partition, headers, callback or on_delivery)
        self.produced.append(rec)
        self.pending.append(rec)

    def poll(self, timeout: float = -1) -> int:
        self.polls += 1
        pending, self.pending = self.pending, []
        judge = self.verdict_of
        for rec in pending:
            rec.on_delivery(self.verdict if judge is None else judge(rec), None)
        return len(pending)

    def flush(self, timeout: float = -1) -> int:
        self.flushes += 1
        self.poll(0)
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.pending.clear()

    def __len__(self) -> int:
        return len(self.pending)


@dataclass
class _Offset:
    offset: int


class FakeAdmin:
    """Answers ``list_offsets`` from ``ends`` (``(log start, end)`` per partition) with
    futures that are done at once (or left pending while ``hold`` is set)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.ends: dict[TP, tuple[int, int]] = {}
        self.requests = 0
        self.hold = False
        #: member id -> what it holds (what ``describe_consumer_groups`` answers)
        self.members: dict[str, list[TP]] = {}
        self.describes = 0

    def list_offsets(self, topic_partition_offsets: Any, **kwargs: Any) -> dict[Any, Any]:
        self.requests += 1
        out: dict[Any, Any] = {}
        for tp, spec in topic_partition_offsets.items():
            low, high = self.ends.get((tp.topic, tp.partition), (0, 0))
            future: Future[Any] = Future()
            if not self.hold:
                future.set_result(_Offset(low if type(spec).__name__ == "EarliestSpec" else high))
            out[tp] = future
        return out

    def describe_consumer_groups(self, groups: list[str], **kwargs: Any) -> dict[str, Any]:
        self.describes += 1
        members = [
            SimpleNamespace(
                member_id=member_id,
                assignment=SimpleNamespace(topic_partitions=[TopicPartition(*tp) for tp in held]),
            )
            for member_id, held in self.members.items()
        ]
        out: dict[str, Any] = {}
        for group in groups:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(members=members))
            out[group] = future
        return out


class Factory:
    """A client factory that remembers every client it made."""

    def __init__(
        self, cls: Callable[[dict[str, Any]], Any], setup: Callable[[Any], None] | None = None
    ) -> None:
        self.cls = cls
        self.setup = setup  # called on each new client: what the cluster holds already
        self.made: list[Any] = []

    def __call__(self, config: dict[str, Any]) -> Any:
        client = self.cls(config)
        if self.setup is not None:
            self.setup(client)
        self.made.append(client)
        return client
