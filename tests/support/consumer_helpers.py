"""Helpers for the consumer tests: a recording listener, bounded waits, a ScheduleService +
PushConsumer pair on a fresh group and namespace, raw readers for the group's retry, delay
and dead-letter topics (plain confluent-kafka, no adapter decoding), and for the fault tests
unique ids, raw producing with acknowledgement, an offset probe and the DLQ's entries."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.dlq import DeadLetterEntry, read_dlq

#: A short ladder: level 3 (the first retry) waits 300 ms, level 6 (the last) 600 ms.
LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"
LADDER = DelayLevels.parse(LEVELS)
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER

T = TypeVar("T")


def wait_until(
    cond: Callable[[], T], timeout: float = 30.0, what: str = "condition", step: float = 0.05
) -> T:
    """Poll ``cond`` until it returns something truthy (returned) or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def level_delay_s(level: int) -> float:
    return LADDER[level].total_seconds()


# --------------------------------------------------------------------------------------------
# the recording listener
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One message as the listener saw it."""

    body: bytes
    msg_id: str
    topic: str
    kafka_topic: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    raw_headers: tuple[tuple[str, bytes | None], ...]
    header_errors: tuple[str, ...]
    batch: int  # sequence number of the listener call
    batch_size: int
    index: int  # position in the batch
    at: float  # time.monotonic() when the listener was called

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class RecordingListener:
    """Records every delivery (thread-safe), then asks ``decide(msgs, ctx)`` what to return
    (CONSUME_SUCCESS when no ``decide`` is given).  Exceptions from ``decide`` propagate to
    the consumer, like a failing listener's would."""

    def __init__(self, decide: Callable[[list[Any], Any], Any] | None = None) -> None:
        self.decide = decide
        self.lock = threading.Lock()
        self.seen: list[Delivery] = []
        self.batches: list[list[Delivery]] = []
        self.calls = 0
        self.returned = 0  # listener calls that have finished (returned or raised)
        self.running = 0  # listener calls in progress right now
        self.max_running = 0

    def __call__(self, msgs: list[Any], ctx: Any) -> Any:
        now = time.monotonic()
        with self.lock:
            batch_no = self.calls
            self.calls += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            batch = [
                Delivery(
                    body=m.body,
                    msg_id=m.msg_id,
                    topic=m.topic,
                    kafka_topic=m.kafka_topic,
                    queue_id=m.queue_id,
                    queue_offset=m.queue_offset,
                    reconsume_times=m.reconsume_times,
                    tags=m.tags,
                    keys=m.keys,
                    properties=dict(m.properties),
                    raw_headers=tuple(m.raw_headers),
                    header_errors=tuple(m.header_errors),
                    batch=batch_no,
                    batch_size=len(msgs),
                    index=i,
                    at=now,
                )
                for i, m in enumerate(msgs)
            ]
            self.seen.extend(batch)
            self.batches.append(batch)
        try:
            if self.decide is None:
                return OK
            return self.decide(msgs, ctx)
        finally:
            with self.lock:
                self.running -= 1
                self.returned += 1

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.seen)

    def of(self, body: bytes | str) -> list[Delivery]:
        """Every delivery of the message with this body, in order."""
        b = body.encode() if isinstance(body, str) else body
        with self.lock:
            return [d for d in self.seen if d.body == b]

    def count(self) -> Counter[bytes]:
        with self.lock:
            return Counter(d.body for d in self.seen)

    def __len__(self) -> int:
        with self.lock:
            return len(self.seen)


# --------------------------------------------------------------------------------------------
# producing
# --------------------------------------------------------------------------------------------


def send(bootstrap: str, messages: Sequence[Message]) -> list[Any]:
    """Send with the adapter's Producer (sync, in order); returns the SendResults."""
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        return [producer.send(m) for m in messages]


def send_bodies(bootstrap: str, topic: str, bodies: Sequence[str], **fields: Any) -> list[Any]:
    return send(bootstrap, [Message(topic=topic, body=b.encode(), **fields) for b in bodies])


def produce_raw(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes | None, list[tuple[str, bytes | None]] | None]],
    partition: int = 0,
) -> None:
    """Plain confluent-kafka records (value, headers or None for no headers at all)."""
    producer = RawProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[Any] = []
    for value, headers in records:
        kwargs: dict[str, Any] = {"partition": partition}
        if headers is not None:
            kwargs["headers"] = headers
        producer.produce(
            topic, value, on_delivery=lambda err, _m: errors.append(err) if err else None, **kwargs
        )
        producer.flush(10)  # one by one: offsets follow the list order
    assert producer.flush(10) == 0 and not errors, errors


# --------------------------------------------------------------------------------------------
# raw readers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    def header(self, key: str) -> bytes | None:
        """The single value of ``key``; fails when the key is repeated."""
        values = [v for k, v in self.headers if k == key]
        assert len(values) <= 1, f"header {key} repeated: {values}"
        return values[0] if values else None

    def text(self, key: str) -> str | None:
        value = self.header(key)
        return None if value is None else value.decode("utf-8")


def _probe(conf: dict[str, Any], **extra: Any) -> Any:
    return Consumer(
        {
            "bootstrap.servers": conf["bootstrap.servers"],
            "group.id": f"probe-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **extra,
        }
    )


def partitions_of(conf: dict[str, Any], kafka_topic: str) -> list[int]:
    c = _probe(conf)
    try:
        tmd = c.list_topics(kafka_topic, timeout=10).topics.get(kafka_topic)
        if tmd is None or tmd.error is not None:
            return []
        return sorted(tmd.partitions)
    finally:
        c.close()


def end_offsets(conf: dict[str, Any], kafka_topic: str) -> dict[int, int]:
    c = _probe(conf)
    try:
        tmd = c.list_topics(kafka_topic, timeout=10).topics.get(kafka_topic)
        if tmd is None or tmd.error is not None:
            return {}
        return {
            p: c.get_watermark_offsets(TopicPartition(kafka_topic, p), timeout=10)[1]
            for p in sorted(tmd.partitions)
        }
    finally:
        c.close()


def set_topic_config(bootstrap: str, topics: list[str], key: str, value: str | None) -> None:
    """Set (or, with ``None``, delete back to the default) one config of ``topics``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            t,
            incremental_configs=[ConfigEntry(key, value or "", incremental_operation=op)],
        )
        for t in topics
    ]
    for fut in admin.incremental_alter_configs(resources).values():
        fut.result(timeout=30)

    # The controller has committed the change; each broker applies it when it replays the
    # metadata log, a moment later. A record produced in between is judged by the old value
    # (measured: 3 of 40 records 400 bytes over a just-lowered limit were accepted), so wait
    # until the broker describes the new one. That narrows the gap without closing it (its
    # logs take the change a moment after its description does: under load, 1 of 30 records
    # was still judged by the old limit); a test that needs the limit from its first record
    # creates the topic with it.
    def applied() -> bool:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics])
        for fut in futures.values():
            entry = fut.result(timeout=30)[key]
            if value is None and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
                return False
            if value is not None and entry.value != value:
                return False
        return True

    wait_until(applied, 30, f"{key}={value} in force on {topics}")


def ensure_configured(
    conf: dict[str, Any], plans: list[TopicPlan], kafka_topics: list[str], config: dict[str, str]
) -> None:
    """Create ``plans``, those named in ``kafka_topics`` with ``config`` on top of their own.
    A config given at creation holds from the first record; one changed later reaches the
    broker's logs a moment after the admin call returns (see :func:`set_topic_config`)."""
    ensure_topics(
        conf,
        [
            dataclasses.replace(p, config={**p.config, **config})
            if p.kafka_topic in kafka_topics
            else p
            for p in plans
        ],
    )


def committed_offsets(conf: dict[str, Any], group: str, kafka_topic: str) -> dict[int, int]:
    """The group's committed offsets (``committed()`` of a raw consumer; < 0 = none)."""
    parts = partitions_of(conf, kafka_topic)
    c = Consumer(
        {
            "bootstrap.servers": conf["bootstrap.servers"],
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    try:
        got = c.committed([TopicPartition(kafka_topic, p) for p in parts], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def read_topic(
    conf: dict[str, Any],
    kafka_topic: str,
    timeout: float = 15.0,
    *,
    isolation: str = "read_committed",
) -> list[RawRecord]:
    """Every record of ``kafka_topic`` from the beginning to EOF: the committed ones
    (``isolation="read_uncommitted"``: those of aborted and open transactions too)."""
    parts = partitions_of(conf, kafka_topic)
    if not parts:
        return []
    c = _probe(conf, **{"enable.partition.eof": True, "isolation.level": isolation})
    out: list[RawRecord] = []
    try:
        c.assign([TopicPartition(kafka_topic, p, OFFSET_BEGINNING) for p in parts])
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {kafka_topic} to its end in {timeout}s")
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise AssertionError(f"reading {kafka_topic}: {err}")
            done.discard(msg.partition())
            out.append(
                RawRecord(
                    kafka_topic,
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    list(msg.headers() or []),
                )
            )
        return out
    finally:
        c.close()


def read_dlq_raw(conf: dict[str, Any], group: str) -> list[RawRecord]:
    """The group's dead letters as raw Kafka records."""
    return read_topic(conf, naming.to_kafka(naming.dlq_topic(group)))


def retry_kafka_topic(group: str) -> str:
    return naming.to_kafka(naming.retry_topic(group))


def delay_kafka_topic(level: int, namespace: str) -> str:
    return naming.to_kafka(naming.schedule_topic(level, LADDER, namespace))


def delay_records(conf: dict[str, Any], namespace: str) -> dict[int, list[RawRecord]]:
    """What each delay level's topic of ``namespace`` holds, by level."""
    return {
        level: read_topic(conf, delay_kafka_topic(level, namespace)) for level in LADDER.levels()
    }


# --------------------------------------------------------------------------------------------
# a ScheduleService + PushConsumer pair
# --------------------------------------------------------------------------------------------


@dataclass
class Pair:
    conf: dict[str, Any]
    topics: list[str]
    group: str
    namespace: str
    consumer: PushConsumer
    service: ScheduleService | None
    listener: RecordingListener
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return self.topics[0]

    def committed(self, topic: str | None = None) -> dict[int, int]:
        return committed_offsets(self.conf, self.group, topic or self.topic)

    def end_offsets(self, topic: str | None = None) -> dict[int, int]:
        return end_offsets(self.conf, topic or self.topic)

    def dlq(self) -> list[RawRecord]:
        return read_dlq_raw(self.conf, self.group)

    def retry_records(self) -> list[RawRecord]:
        return read_topic(self.conf, retry_kafka_topic(self.group))

    def delay_records(self) -> dict[int, list[RawRecord]]:
        return delay_records(self.conf, self.namespace)

    def topic_stats(self, topic: str | None = None) -> Any:
        return self.consumer.stats().get(topic or self.topic)


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def new_namespace() -> str:
    return f"ns{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def running_pair(
    bootstrap: str,
    topics: str | Sequence[str],
    listener: RecordingListener,
    *,
    expression: str = "*",
    service: bool = True,
    config: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[Pair]:
    """Start a ScheduleService (unless ``service=False``) and a PushConsumer, both on a fresh
    uuid namespace and the short ladder, the consumer on a fresh group reading from the
    earliest offset.  Both are shut down (the consumer first) on exit."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    group = new_group()
    ns = new_namespace()
    options.setdefault("delay_levels", LEVELS)
    options.setdefault("partitions", 1)
    options.setdefault("shutdown_await", 10.0)
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", **(config or {})},
        namespace=ns,
        **options,
    )
    for t in topic_list:
        consumer.subscribe(t, expression)
    consumer.register_message_listener(listener)
    svc = (
        ScheduleService(conf, delay_levels=options["delay_levels"], namespace=ns, partitions=1)
        if service
        else None
    )
    with contextlib.ExitStack() as stack:
        if svc is not None:
            stack.enter_context(svc)
        stack.enter_context(consumer)
        yield Pair(conf, topic_list, group, ns, consumer, svc, listener)


# --------------------------------------------------------------------------------------------
# ids, raw producing, offsets and the DLQ (the fault tests)
# --------------------------------------------------------------------------------------------


def new_ids(n: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(n)]


def produce(
    bootstrap: str,
    topic: str,
    ids: list[str],
    *,
    headers: Callable[[str], list[tuple[str, bytes]]] | None = None,
    partition: Callable[[str], int] | None = None,
) -> dict[str, tuple[int, int]]:
    """Produce one record per id (body = key = id); where each landed: {id: (partition,
    offset)}.  Fails unless every record is acknowledged."""
    where: dict[str, tuple[int, int]] = {}
    errors: list[Any] = []
    p = RawProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def on_delivery(err: Any, m: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            where[m.value().decode()] = (m.partition(), m.offset())

    for msg_id in ids:
        kwargs: dict[str, Any] = {}
        if headers is not None:
            kwargs["headers"] = headers(msg_id)
        if partition is not None:
            kwargs["partition"] = partition(msg_id)
        p.produce(topic, msg_id.encode(), key=msg_id.encode(), on_delivery=on_delivery, **kwargs)
    assert p.flush(30) == 0 and not errors, errors
    return where


#: What a committed-offsets lookup may meet while the group's coordinator moves or loads.
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


def _retriable(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (
        err.code() in _COORDINATOR_MOVING or bool(err.retriable())
    )


class OffsetProbe:
    """Reads a group's committed offsets and partitions' end offsets (never joins the group)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self._committed = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._ends = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}"}
        )

    def committed(self, topic: str, partitions: list[int], timeout: float = 10) -> dict[int, int]:
        """``{partition: offset}``; -1 where the group has no offset yet.  A retriable error
        (the coordinator moving or loading, after a broker pause) is asked again, with
        back-off, within ``timeout``."""
        asked = [TopicPartition(topic, p) for p in partitions]
        for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception(_retriable),
            wait=tenacity.wait_exponential(multiplier=0.05, max=1.0),
            stop=tenacity.stop_after_delay(timeout),
            reraise=True,
        ):
            with attempt:
                tps = self._committed.committed(asked, timeout=timeout)
        return {tp.partition: max(tp.offset, -1) for tp in tps}

    def ends(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return {
            p: self._ends.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }

    def close(self) -> None:
        self._committed.close()
        self._ends.close()


@contextlib.contextmanager
def offset_probe(bootstrap: str, group: str) -> Iterator[OffsetProbe]:
    probe = OffsetProbe(bootstrap, group)
    try:
        yield probe
    finally:
        probe.close()


def dlq_ids(bootstrap: str, group: str) -> list[DeadLetterEntry]:
    return read_dlq({"bootstrap.servers": bootstrap}, group, timeout_s=5)


def names() -> tuple[str, str]:
    """A fresh group and namespace (so the delay/retry/DLQ topics are this test's own)."""
    return new_group(), new_namespace()
