"""``ScheduleService`` against a real broker: timing, order, clamping, timer messages, bad
entries, due-time correction, rebalances, exactly-once and kill -9.

Every test uses its own namespace (so its own delay topics and service group) and short delay
tables.  "Not early" is checked two ways: the forwarded record's CreateTime (stamped by the
service's producer when it forwards) is not before ``RMQ_DUE_MS``, and the time a consumer
receives it is not before send time + the level delay.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient

from adapter.clients.producer import Producer, SendResult
from adapter.constants import (
    HEADER_DLQ_REASON,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
)
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.message import Message
from adapter.core.schedule import Forward
from adapter.errors import ClientClosedError
from adapter.io.topics import plan_topics
from adapter.services.schedule import (
    INVALID_SCHEDULE_ENTRY,
    DeliveryGuarantee,
    ScheduleService,
)
from adapter.services.schedule.destinations import Destinations, partition_count
from adapter.testing import TopicFactory
from tests.support.clocks import SkippingClock
from tests.support.collector import Arrival, Collector, now_ms
from tests.support.consumer_helpers import wait_until
from tests.support.group_protocol import member_config
from tests.support.service_procs import ServiceProcess

pytestmark = pytest.mark.integration

LEVELS = "200ms 400ms 600ms 1s"
#: a due message reaches a consumer within this much of its due time
TOLERANCE_MS = 1500
#: a group member that dies is noticed after this (the broker's minimum)
SESSION = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}


# --------------------------------------------------------------------------------------------
# reading the real topic
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture
def namespace() -> str:
    return f"qa{uuid.uuid4().hex[:12]}"


@pytest.fixture
def conf(kafka_bootstrap_servers: str) -> dict[str, Any]:
    return {"bootstrap.servers": kafka_bootstrap_servers}


class Harness:
    """Services, producers and collectors of one test, torn down at its end."""

    def __init__(self, conf: dict[str, Any], namespace: str) -> None:
        self.conf = conf
        self.bootstrap = str(conf["bootstrap.servers"])
        self.namespace = namespace
        self.services: list[ScheduleService] = []
        self.producers: list[Producer] = []
        self.collectors: list[Collector] = []
        self.procs: list[ServiceProcess] = []
        self.groups: set[str] = set()
        self.tables: set[str] = set()

    def service(
        self,
        levels: str = LEVELS,
        *,
        partitions: int = 1,
        wait_assigned: bool = True,
        config: dict[str, Any] | None = None,
        **options: Any,
    ) -> ScheduleService:
        svc = ScheduleService(
            {**self.conf, **(config or {})},
            delay_levels=levels,
            namespace=self.namespace,
            partitions=partitions,
            **options,
        )
        self.services.append(svc)
        self.groups.add(svc.group)
        self.tables.add(levels)
        svc.start()
        if wait_assigned:
            expected = len(DelayLevels.parse(levels)) * partitions
            wait_until(lambda: len(svc.assignment) == expected, 30, "full assignment")
        return svc

    def process(self, levels: str, *, partitions: int = 1, **kwargs: Any) -> ServiceProcess:
        proc = ServiceProcess(
            self.bootstrap,
            self.namespace,
            levels,
            partitions=partitions,
            name=f"svc{len(self.procs)}",
            **kwargs,
        )
        self.procs.append(proc)
        self.tables.add(levels)
        self.groups.add(f"rmq-schedule-service.{self.namespace}")
        return proc.start()

    def producer(self, levels: str = LEVELS) -> Producer:
        p = Producer(self.conf, delay_levels=levels, namespace=self.namespace).start()
        self.producers.append(p)
        return p

    def collect(self, topic: str, partitions: int = 1, *, read_committed: bool = True) -> Collector:
        c = Collector(self.bootstrap, topic, partitions, read_committed=read_committed)
        self.collectors.append(c)
        return c

    def delay_topic(self, level: int, levels: str = LEVELS) -> str:
        return naming.to_kafka(
            naming.schedule_topic(level, DelayLevels.parse(levels), self.namespace)
        )

    def close(self) -> list[str]:
        """Stop everything; what went wrong in a client's loop or its shutdown, as text (a
        service stopped by the test itself is not an error)."""
        errors: list[str] = []
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.close()
        for svc in self.services:
            try:
                svc.check_alive()  # the one place a dead service loop surfaces
            except ClientClosedError:
                pass  # the test shut it down
            except Exception as exc:
                errors.append(f"{svc.group}: loop died: {exc!r}")
            try:
                svc.shutdown(15)
            except Exception as exc:
                errors.append(f"{svc.group}: shutdown failed: {exc!r}")
        for p in self.producers:
            try:
                p.shutdown(5)
            except Exception as exc:
                errors.append(f"producer: shutdown failed: {exc!r}")
        for c in self.collectors:
            with contextlib.suppress(Exception):
                c.close()
        topics = {
            plan.kafka_topic
            for levels in self.tables
            for plan in plan_topics(
                groups=sorted(self.groups),
                delay_levels=DelayLevels.parse(levels),
                namespace=self.namespace,
            )
        }
        with contextlib.suppress(Exception):
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            futures = admin.delete_topics(sorted(topics), operation_timeout=10)
            for fut in futures.values():
                with contextlib.suppress(Exception):
                    fut.result(timeout=15)
        return errors


@pytest.fixture
def h(conf: dict[str, Any], namespace: str) -> Iterator[Harness]:
    harness = Harness(conf, namespace)
    try:
        yield harness
    finally:
        errors = harness.close()
    assert not errors, "\n".join(errors)


def assert_on_time(
    rec: Arrival, sent_ms: int, delay_ms: int, tolerance: int = TOLERANCE_MS
) -> None:
    """Not early (forward time vs due, receive time vs send + delay) and not too late."""
    assert rec.created_ms >= rec.due_ms, (
        f"{rec.value!r} forwarded {rec.due_ms - rec.created_ms}ms early"
    )
    assert rec.received_ms >= sent_ms + delay_ms, (
        f"{rec.value!r} received {sent_ms + delay_ms - rec.received_ms}ms before send + delay"
    )
    assert rec.received_ms <= rec.due_ms + tolerance, (
        f"{rec.value!r} received {rec.received_ms - rec.due_ms}ms after due (> {tolerance})"
    )


def raw_produce(bootstrap: str, topic: str, entries: list[tuple[bytes, dict[str, str]]]) -> None:
    kp = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    for value, headers in entries:
        kp.produce(
            topic,
            value=value,
            headers=list(headers.items()),
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert kp.flush(15) == 0
    assert errors == []


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_scheduled_messages_arrive_when_due_with_their_properties(
    h: Harness, kafka_topic: str
) -> None:
    levels = DelayLevels.parse(LEVELS)
    svc = h.service()
    p = h.producer()
    out = h.collect(kafka_topic)

    sent: dict[bytes, tuple[int, int, SendResult]] = {}
    for round_ in range(3):
        for level in levels.levels():
            body = f"L{level}-{round_}".encode()
            before = now_ms()
            result = p.send(
                Message(
                    topic=kafka_topic,
                    body=body,
                    tags="TagS",
                    keys="k1 k2",
                    properties={"trace": f"t{level}"},
                    delay_time_level=level,
                )
            )
            assert result.topic == naming.schedule_topic(level, levels, h.namespace)
            sent[body] = (before, level, result)

    records = out.wait_values(set(sent), timeout=15)
    assert len(records) == len(sent), "each scheduled message arrives once"
    for rec in records:
        before, level, result = sent[rec.value]
        assert_on_time(rec, before, levels.delay_ms(level))
        assert rec.uniq == result.msg_id
        assert rec.text(PROPERTY_TAGS) == "TagS"
        assert rec.text(PROPERTY_KEYS) == "k1 k2"
        assert rec.text("trace") == f"t{level}"
        assert rec.text(PROPERTY_REAL_TOPIC) == kafka_topic
        assert PROPERTY_DELAY_TIME_LEVEL not in rec.headers  # dropped on forward
        assert len(rec.header_keys) == len(set(rec.header_keys))
    assert svc.stats.forwarded == len(sent)
    assert svc.stats.early == 0


@pytest.mark.timeout(60)
def test_order_is_kept_within_a_level(h: Harness, kafka_topic: str) -> None:
    svc = h.service()
    p = h.producer()
    out = h.collect(kafka_topic)

    bodies = [f"o{i:03d}".encode() for i in range(120)]
    before = now_ms()
    results = p.send_batch([Message(topic=kafka_topic, body=b, delay_time_level=2) for b in bodies])
    assert {r.topic for r in results} == {
        naming.schedule_topic(2, DelayLevels.parse(LEVELS), h.namespace)
    }

    records = out.wait_count(len(bodies), timeout=15)
    assert [r.value for r in records] == bodies
    for rec in records:
        assert_on_time(rec, before, 400)
    assert svc.stats.early == 0


@pytest.mark.timeout(60)
def test_level_above_max_is_clamped_to_max(h: Harness, kafka_topic: str) -> None:
    h.service()
    p = h.producer()
    out = h.collect(kafka_topic)
    levels = DelayLevels.parse(LEVELS)

    sent: dict[bytes, int] = {}
    for level in (5, 18, 1000):
        body = f"clamp-{level}".encode()
        sent[body] = now_ms()
        result = p.send(Message(topic=kafka_topic, body=body, delay_time_level=level))
        assert result.topic == naming.schedule_topic(4, levels, h.namespace)

    for rec in out.wait_values(set(sent), timeout=15):
        assert_on_time(rec, sent[rec.value], 1000)  # the highest level: 1 s


@pytest.mark.timeout(60)
def test_absolute_deliver_time_cascades_and_is_never_early(h: Harness, kafka_topic: str) -> None:
    svc = h.service()
    p = h.producer()
    out = h.collect(kafka_topic)

    ahead = {
        b"in-2.7s": 2700,  # 1s, 1s, then the short levels
        b"in-1.3s": 1300,
        b"in-150ms": 150,  # shorter than every level: the shortest, exact due time
    }
    targets: dict[bytes, int] = {}
    for body, ms in ahead.items():
        # from the moment of each send: a loaded machine may take 150 ms between two sends
        targets[body] = deliver = now_ms() + ms
        result = p.send(Message(topic=kafka_topic, body=body, deliver_time_ms=deliver))
        assert naming.schedule_level_of(naming.to_kafka(result.topic)) is not None
    base = now_ms()
    past = p.send(Message(topic=kafka_topic, body=b"past", deliver_time_ms=base - 5000))
    assert past.topic == kafka_topic  # due already: sent straight to the topic

    records = out.wait_values({*targets, b"past"}, timeout=15)
    assert len(records) == len(targets) + 1
    for rec in records:
        if rec.value == b"past":
            continue
        deliver = targets[rec.value]
        assert int(rec.text(PROPERTY_TIMER_DELIVER_MS)) == deliver
        assert rec.created_ms >= deliver, f"{rec.value!r} forwarded early"
        assert rec.received_ms >= deliver
        assert rec.received_ms <= deliver + TOLERANCE_MS, (
            f"{rec.value!r} {rec.received_ms - deliver}ms late"
        )
    assert svc.stats.reparked >= 2  # the long ones hopped through the levels
    assert svc.stats.early == 0


@pytest.mark.timeout(60)
def test_due_time_beyond_one_level_delay_is_corrected_to_now(h: Harness, kafka_topic: str) -> None:
    """``correctDeliverTimestamp``: a forged or clock-jumped due time never parks a message for
    longer than its level; one within the level delay is honoured."""
    h.service()
    out = h.collect(kafka_topic)
    topic = h.delay_topic(2)  # 400ms

    sent = now_ms()
    raw_produce(
        h.bootstrap,
        topic,
        [
            (b"far", {PROPERTY_REAL_TOPIC: kafka_topic, HEADER_DUE_MS: str(sent + 3_600_000)}),
            (b"near", {PROPERTY_REAL_TOPIC: kafka_topic, HEADER_DUE_MS: str(sent + 350)}),
        ],
    )
    records = {r.value: r for r in out.wait_values({b"far", b"near"}, timeout=10)}
    # the level delay (400 ms) from when the service read it, not an hour; the service may
    # read it a second late on a loaded machine
    assert records[b"far"].received_ms - sent <= TOLERANCE_MS + 1000
    assert records[b"near"].created_ms >= sent + 350
    assert records[b"near"].received_ms - (sent + 350) <= TOLERANCE_MS


# --------------------------------------------------------------------------------------------
# bad entries
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_malformed_entries_go_to_the_service_dlq_and_good_ones_keep_flowing(
    h: Harness, kafka_topic: str
) -> None:
    svc = h.service()
    p = h.producer()
    out = h.collect(kafka_topic)
    dlq = h.collect(naming.to_kafka(naming.dlq_topic(svc.group)))
    topic = h.delay_topic(1)
    missing = f"qa-missing-{uuid.uuid4().hex}"
    now = str(now_ms())

    bad: dict[bytes, tuple[dict[str, str], list[str]]] = {
        b"no-real-topic": ({HEADER_DUE_MS: now}, [PROPERTY_REAL_TOPIC, "missing"]),
        b"bad-due": (
            {PROPERTY_REAL_TOPIC: kafka_topic, HEADER_DUE_MS: "soon"},
            [HEADER_DUE_MS, "soon"],
        ),
        b"no-due": ({PROPERTY_REAL_TOPIC: kafka_topic}, [HEADER_DUE_MS]),
        b"missing-topic-1": (
            {PROPERTY_REAL_TOPIC: missing, HEADER_DUE_MS: now},
            [missing, "does not exist"],
        ),
        b"missing-topic-2": (
            {PROPERTY_REAL_TOPIC: missing, HEADER_DUE_MS: now},
            [missing, "does not exist"],
        ),
        b"bad-qid": (
            {PROPERTY_REAL_TOPIC: kafka_topic, HEADER_DUE_MS: now, PROPERTY_REAL_QUEUE_ID: "x"},
            [PROPERTY_REAL_QUEUE_ID, "'x'"],
        ),
        b"qid-out-of-range": (
            {PROPERTY_REAL_TOPIC: kafka_topic, HEADER_DUE_MS: now, PROPERTY_REAL_QUEUE_ID: "7"},
            [PROPERTY_REAL_QUEUE_ID, "7"],
        ),
    }
    good_raw = {PROPERTY_REAL_TOPIC: kafka_topic, HEADER_DUE_MS: now}
    entries: list[tuple[bytes, dict[str, str]]] = []
    for i, (body, (headers, _)) in enumerate(bad.items()):
        entries.append((body, headers))
        entries.append((f"good-raw-{i}".encode(), good_raw))  # interleaved on the same partition
    raw_produce(h.bootstrap, topic, entries)
    # and the service still serves ordinary scheduled messages afterwards
    before = now_ms()
    p.send(Message(topic=kafka_topic, body=b"good-scheduled", delay_time_level=1))

    goods = {f"good-raw-{i}".encode() for i in range(len(bad))} | {b"good-scheduled"}
    records = out.wait_values(goods, timeout=15)
    assert {r.value for r in records} == goods
    assert_on_time(next(r for r in records if r.value == b"good-scheduled"), before, 200)

    dead = {r.value: r for r in dlq.wait_values(set(bad), timeout=15)}
    assert set(dead) == set(bad)
    logical_topic = naming.from_kafka(topic)
    for body, (_, words) in bad.items():
        entry = dead[body]
        assert entry.text(HEADER_DLQ_REASON) == INVALID_SCHEDULE_ENTRY
        reason = entry.text(HEADER_FAILURE_MESSAGE) or ""
        for word in words:
            assert word in reason, f"{body!r}: {reason!r} should mention {word!r}"
        assert entry.text(PROPERTY_DLQ_ORIGIN_TOPIC) == logical_topic
    assert svc.stats.invalid == len(bad)

    # checking the destination must not create it (brokers may auto-create topics)
    admin = AdminClient({"bootstrap.servers": h.bootstrap})
    assert missing not in admin.list_topics(timeout=10).topics


# --------------------------------------------------------------------------------------------
# scale-out and delivery modes
# --------------------------------------------------------------------------------------------


def _waiting(svc: ScheduleService) -> int:
    """Entries the service holds until they are due."""
    return sum(w["entries"] for w in svc.running_info()["waiting"].values())


@pytest.mark.timeout(90)
@pytest.mark.parametrize("delivery", list(DeliveryGuarantee), ids=lambda d: d.value.lower())
def test_rebalance_between_two_instances_loses_nothing_and_is_never_early(
    h: Harness, kafka_topic_factory: TopicFactory, delivery: DeliveryGuarantee, group_protocol: str
) -> None:
    levels_text = "300ms 1s 2s"
    levels = DelayLevels.parse(levels_text)
    parts = 3
    real = kafka_topic_factory("qa-rebal", partitions=2)
    all_tps = {(h.delay_topic(lv, levels_text), p) for lv in levels.levels() for p in range(parts)}

    session = member_config(group_protocol)  # a member that left is noticed in seconds
    a = h.service(levels_text, partitions=parts, delivery=delivery, config=session)
    p = h.producer(levels_text)
    out = h.collect(real, partitions=2)
    sent: dict[bytes, tuple[int, int]] = {}

    def send_wave(tag: str, n: int = 24) -> None:
        for i in range(n):
            level = 3 if i % 3 else 2  # mostly the 2s level: they wait through the rebalance
            body = f"{tag}-{i}".encode()
            sent[body] = (now_ms(), level)
            p.send(Message(topic=real, body=body, delay_time_level=level, sharding_key=body))

    send_wave("w1")
    wait_until(lambda: _waiting(a) > 0, 10, "entries waiting in instance A")
    b = h.service(
        levels_text, partitions=parts, delivery=delivery, config=session, wait_assigned=False
    )
    send_wave("w2")
    wait_until(
        lambda: (
            b.assignment
            and a.assignment
            and not (a.assignment & b.assignment)
            and (a.assignment | b.assignment) == all_tps
        ),
        30,
        "A and B sharing the partitions",
    )
    send_wave("w3")
    wait_until(lambda: _waiting(a) > 0 and _waiting(b) > 0, 10, "entries waiting in both")
    # A serves before it leaves: the consumer protocol's rebalance can be over before any
    # entry A holds is due (the classic one took seconds: A had forwarded the "w1" entries)
    wait_until(lambda: a.stats.forwarded > 0, 10, "instance A forwarding")
    a.shutdown(20)  # a second rebalance while messages wait: B takes everything
    wait_until(lambda: b.assignment == all_tps, 30, "B owning every partition")
    send_wave("w4")

    records = out.wait_values(set(sent), timeout=30)
    records = out.drain(quiet_s=1.0)
    counts = Counter(r.value for r in records)
    assert set(counts) == set(sent), "every message arrives"
    for rec in records:
        assert rec.created_ms >= rec.due_ms, f"{rec.value!r} forwarded early"
        sent_at, level = sent[rec.value]
        assert rec.received_ms >= sent_at + levels.delay_ms(level)
    if delivery is DeliveryGuarantee.EXACTLY_ONCE:
        assert {v: c for v, c in counts.items() if c > 1} == {}
    # (at-least-once may repeat what was in flight at a hand-over: not asserted)
    assert a.stats.early == 0 and b.stats.early == 0
    # both instances served partitions
    assert a.stats.forwarded > 0 and b.stats.forwarded > 0


@pytest.mark.timeout(60)
def test_exactly_once_forwards_are_read_committed_once(h: Harness, kafka_topic: str) -> None:
    levels = DelayLevels.parse(LEVELS)
    svc = h.service(delivery=DeliveryGuarantee.EXACTLY_ONCE)
    p = h.producer()
    committed = h.collect(kafka_topic, read_committed=True)

    sent: dict[bytes, tuple[int, int]] = {}
    for i in range(40):
        level = 1 + i % 4
        body = f"eos-{i}".encode()
        sent[body] = (now_ms(), level)
        p.send(Message(topic=kafka_topic, body=body, delay_time_level=level))

    committed.wait_values(set(sent), timeout=15)
    records = committed.drain(quiet_s=1.0)
    counts = Counter(r.uniq for r in records)
    assert len(counts) == len(sent) and max(counts.values()) == 1
    for rec in records:
        sent_at, level = sent[rec.value]
        assert_on_time(rec, sent_at, levels.delay_ms(level))
    assert svc.stats.forwarded == len(sent)


# --------------------------------------------------------------------------------------------
# kill -9
# --------------------------------------------------------------------------------------------


@pytest.mark.reliability
@pytest.mark.timeout(90)
def test_kill9_while_messages_wait_loses_nothing(
    h: Harness, kafka_topic_factory: TopicFactory
) -> None:
    levels_text = "300ms 1s 3s"
    levels = DelayLevels.parse(levels_text)
    parts = 2
    real = kafka_topic_factory("qa-kill", partitions=2)

    first = h.process(levels_text, partitions=parts, config=SESSION)
    first.wait_for(lambda s: len(s["assigned"]) == 3 * parts, 30, "full assignment")
    p = h.producer(levels_text)
    out = h.collect(real, partitions=2)

    sent: dict[bytes, tuple[int, int]] = {}
    for i in range(30):
        level = 3 if i % 2 else 2
        body = f"k-{i}".encode()
        sent[body] = (now_ms(), level)
        p.send(Message(topic=real, body=body, delay_time_level=level, sharding_key=body))
    first.wait_for(lambda s: s["waiting"] >= 2, 10, "messages waiting to be due")
    first.kill()
    delivered_before_kill = {r.value for r in out.snapshot()}
    assert delivered_before_kill != set(sent), "the kill must happen while messages wait"

    second = h.process(levels_text, partitions=parts, config=SESSION)
    records = out.wait_values(set(sent), timeout=40)
    second.wait_for(lambda s: s["forwarded"] > 0, 10, "forwards by the new instance")
    assert set(Counter(r.value for r in records)) == set(sent)
    for rec in records:
        assert rec.created_ms >= rec.due_ms, f"{rec.value!r} forwarded early"
        sent_at, level = sent[rec.value]
        assert rec.received_ms >= sent_at + levels.delay_ms(level)


@pytest.mark.reliability
@pytest.mark.timeout(90)
@pytest.mark.parametrize("txn_id", ["stable", "default"])
def test_kill9_during_a_forward_stream_exactly_once_has_no_duplicates(
    h: Harness, kafka_topic_factory: TopicFactory, txn_id: str
) -> None:
    """``stable``: the successor reuses the victim's transactional.id and fences its open
    transaction at once.  ``default``: every instance draws a fresh id, so the victim's open
    transaction blocks read_committed readers until the broker times it out (the service
    keeps ``transaction.timeout.ms`` short for this)."""
    levels_text = "200ms 1s"
    parts = 2
    real = kafka_topic_factory("qa-kill-eos", partitions=2)
    txn = f"qa-txn-{h.namespace}" if txn_id == "stable" else None

    first = h.process(
        levels_text,
        partitions=parts,
        delivery="EXACTLY_ONCE",
        transactional_id=txn,
        config=SESSION,
    )
    first.wait_for(lambda s: len(s["assigned"]) == 2 * parts, 30, "full assignment")
    p = h.producer(levels_text)
    out = h.collect(real, partitions=2, read_committed=True)

    total = 600
    bodies = [f"s-{i:04d}".encode() for i in range(total)]
    sent_at: dict[bytes, int] = {}
    uniq: dict[bytes, str] = {}
    killed = False
    for start in range(0, total, 20):  # ~20 messages every 20 ms: a steady due stream
        chunk = bodies[start : start + 20]
        stamp = now_ms()
        results = p.send_batch(
            [Message(topic=real, body=b, delay_time_level=1, sharding_key=b) for b in chunk]
        )
        for b, r in zip(chunk, results, strict=True):
            sent_at[b] = stamp
            uniq[b] = r.msg_id
        if not killed and first.status.get("forwarded", 0) >= 100:
            first.kill()  # right after forwards, with more due every moment
            killed = True
        time.sleep(0.02)
    if not killed:
        first.wait_for(lambda s: s["forwarded"] >= 100, 15, "a forward stream")
        first.kill()
    forwarded_by_victim = first.status["forwarded"]
    assert 0 < forwarded_by_victim < total, "killed in the middle of the stream"

    second = h.process(
        levels_text,
        partitions=parts,
        delivery="EXACTLY_ONCE",
        transactional_id=txn,
        config=SESSION,
    )
    out.wait_values(set(bodies), timeout=45)
    records = out.drain(quiet_s=1.5)
    second.wait_for(lambda s: s["forwarded"] > 0, 10, "forwards by the new instance")

    counts = Counter(r.uniq for r in records)
    dupes = {k: c for k, c in counts.items() if c > 1}
    assert dupes == {}, f"{len(dupes)} duplicates by UNIQ_KEY in a read_committed consumer"
    assert set(counts) == set(uniq.values()), "none lost"
    for rec in records:
        assert rec.created_ms >= rec.due_ms, f"{rec.value!r} forwarded early"
        assert rec.received_ms >= sent_at[rec.value] + 200


# --------------------------------------------------------------------------------------------
def test_a_destination_count_ages_on_the_services_clock(
    kafka_bootstrap_servers: str, kafka_topic_factory: TopicFactory
) -> None:
    """The cached partition count of a forward's destination is looked up again once it is
    older than its TTL on the service's clock: a destination deleted after it was cached is
    still taken while the count is young (an hour's TTL, no real hour passes), and found
    gone as soon as the clock is an hour on."""
    clock = SkippingClock()
    topic = kafka_topic_factory("dest", partitions=2)
    bootstrap = kafka_bootstrap_servers
    destinations = Destinations({"bootstrap.servers": bootstrap}, 3600.0, 30.0, clock=clock)
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"dest-{uuid.uuid4()}"})
    forward = Forward(topic, None)
    try:
        assert destinations.check(forward, consumer) == (None, 2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=35)
        wait_until(lambda: partition_count(consumer, topic) is None, what="the topic gone")
        assert destinations.check(forward, consumer) == (None, 2)  # young: cached
        clock.skip(3601)
        assert destinations.check(forward, consumer) == (
            f"REAL_TOPIC {topic!r} does not exist",
            0,
        )
    finally:
        consumer.close()
        destinations.close()
