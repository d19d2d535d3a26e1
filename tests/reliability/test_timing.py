"""Nothing is redelivered early: under a backlog, across ScheduleService rebalances, and for a
consumer's retries.

* ``test_backlog_and_rebalance_never_forward_early`` queues ``BACKLOG`` delay-topic entries
  (20 000; 100 000 with ``RMQ_RELIABILITY_FULL=1``) over three levels and three partitions
  before any service runs, starts instance A, lets instance B join once a quarter of the
  backlog went out and leave again at 60 %, while a live stream of new scheduled messages
  keeps arriving.  Every record on the real topic must carry a CreateTime (stamped by the
  forwarding producer) at or after its ``RMQ_DUE_MS`` - zero milliseconds of tolerance, the
  two clocks are the same wall clock at ms granularity - and reach the reader no earlier;
  nothing is lost, and exactly-once readers see no duplicate.
* ``test_consumer_retries_never_reach_the_listener_early`` fails every message twice while a
  second ScheduleService joins and leaves: a retry never reaches the listener before the
  failed delivery's return + its level's delay (the earliest moment its send-back could
  have been born), nor before its ``RMQ_DUE_MS``.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService
from adapter.constants import HEADER_DUE_MS, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.services.schedule import DeliveryGuarantee

try:
    from tests.support.rel_common import (
        FULL,
        Collector,
        delete_topics,
        now_ms,
        planned_kafka_topics,
        produce_raw,
        unique,
        wait_until,
    )
except ModuleNotFoundError:  # pragma: no cover - if this folder becomes a package
    from tests.reliability.rel_common import (
        FULL,
        Collector,
        delete_topics,
        now_ms,
        planned_kafka_topics,
        produce_raw,
        unique,
        wait_until,
    )

from tests.support.consumer_helpers import (
    read_topic,
)

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

BACKLOG = 100_000 if FULL else 20_000
LEVELS = "1s 2s 4s"
PARTS = 3
#: a member that leaves is noticed at once (clean close); one that dies after this
SESSION = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}


class Cleanup:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.topics: set[str] = set()
        self.stack = contextlib.ExitStack()


@pytest.fixture
def cleanup(kafka_bootstrap_servers: str) -> Iterator[Cleanup]:
    c = Cleanup(kafka_bootstrap_servers)
    try:
        yield c
    finally:
        c.stack.close()
        delete_topics(kafka_bootstrap_servers, c.topics)


def _service(conf: dict[str, Any], cleanup: Cleanup, **options: Any) -> ScheduleService:
    svc = ScheduleService({**conf, **SESSION}, **options)
    cleanup.stack.callback(svc.shutdown, 20)
    return svc.start()


# --------------------------------------------------------------------------------------------
# 1. backlog + rebalance
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "delivery", [DeliveryGuarantee.EXACTLY_ONCE, DeliveryGuarantee.AT_LEAST_ONCE], ids=str.lower
)
def test_backlog_and_rebalance_never_forward_early(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    cleanup: Cleanup,
    delivery: DeliveryGuarantee,
) -> None:
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = unique("relt")
    levels = DelayLevels.parse(LEVELS)
    cleanup.topics.update(
        planned_kafka_topics(
            groups=[f"rmq-schedule-service.{ns}"], levels=LEVELS, namespace=ns, partitions=PARTS
        )
    )
    real = kafka_topic_factory("rel-backlog", partitions=PARTS)
    out = Collector(kafka_bootstrap_servers, real, PARTS, read_committed=True)
    cleanup.stack.callback(out.close)
    options = {"delay_levels": LEVELS, "namespace": ns, "partitions": PARTS, "delivery": delivery}

    # the delay topics exist (with PARTS partitions) before the backlog is written
    from adapter.io.topics import ensure_topics, plan_topics

    ensure_topics(
        conf,
        plan_topics(
            groups=[f"rmq-schedule-service.{ns}"],
            delay_levels=levels,
            namespace=ns,
            partitions=PARTS,
        ),
    )
    # the backlog: raw delay-topic entries as the Producer writes them (due = now + delay)
    sent: dict[bytes, int] = {}  # body (= UNIQ_KEY) -> due ms
    chunk = 2000
    for start in range(0, BACKLOG, chunk):
        for level in levels.levels():
            topic = naming.to_kafka(naming.schedule_topic(level, levels, ns))
            records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = []
            due = now_ms() + levels.delay_ms(level)
            for i in range(start, min(start + chunk, BACKLOG)):
                if i % 3 != level - 1:
                    continue
                body = f"b{level}-{i:06d}".encode()
                sent[body] = due
                records.append(
                    (
                        body,
                        [
                            (PROPERTY_REAL_TOPIC, real.encode()),
                            (HEADER_DUE_MS, str(due).encode()),
                            (PROPERTY_UNIQ_KEY, body),
                        ],
                    )
                )
            produce_raw(kafka_bootstrap_servers, topic, records, extra={"linger.ms": 20})
    assert len(sent) == BACKLOG

    a = _service(conf, cleanup, **options)
    # a live stream of scheduled messages beside the backlog, through the whole run
    live_stop = threading.Event()
    live_sent: dict[bytes, tuple[int, int]] = {}  # body -> (sent ms, level)
    live_error: list[BaseException] = []

    def live() -> None:
        try:
            with Producer(conf, delay_levels=LEVELS, namespace=ns) as p:
                n = 0
                while not live_stop.is_set():
                    level = 1 + n % 3
                    body = f"live-{n:05d}".encode()
                    live_sent[body] = (now_ms(), level)
                    p.send(
                        Message(topic=real, body=body, delay_time_level=level, sharding_key=body)
                    )
                    n += 1
                    live_stop.wait(0.02)
        except BaseException as exc:
            live_error.append(exc)

    live_thread = threading.Thread(target=live, name="rel-live", daemon=True)
    live_thread.start()
    cleanup.stack.callback(live_stop.set)

    wait_until(lambda: len(out) >= BACKLOG // 4, 90, "a quarter of the backlog forwarded")
    b = _service(conf, cleanup, **options)
    wait_until(lambda: b.assignment and a.assignment, 60, "B sharing the partitions with A")
    # B may be handed partitions whose backlog A already drained (the 1 s level's backlog
    # goes first): it then forwards only the live stream's entries, after their delay
    wait_until(
        lambda: len(out) >= BACKLOG * 6 // 10 and b.stats.forwarded > 0,
        90,
        "60 % of the backlog forwarded, some of it by B",
    )
    b_share = set(b.assignment)
    b.shutdown(20)  # B leaves mid-stream: A takes its partitions back
    total = len(levels.levels()) * PARTS
    wait_until(lambda: len(a.assignment) == total, 60, "A owning every partition again")
    live_stop.set()
    live_thread.join(30)
    assert not live_error, live_error

    wanted = set(sent) | set(live_sent)
    out.wait_values(wanted, timeout=90)
    records = out.drain(quiet_s=1.0)

    early = []
    for rec in records:
        assert rec.value is not None
        due = int(rec.text(HEADER_DUE_MS) or "0")
        if rec.created_ms < due or rec.received_ms < due:
            early.append((rec.value, due - rec.created_ms, due - rec.received_ms))
        if rec.value in live_sent:
            sent_ms, level = live_sent[rec.value]
            assert rec.received_ms >= sent_ms + levels.delay_ms(level), rec.value
        else:
            assert due == sent[rec.value]
    assert early == [], (
        f"{len(early)} forwarded early (value, ms early by CreateTime/receipt): "
        + (f"{early[:10]}")
    )
    counts = Counter(r.value for r in records)
    assert set(counts) == wanted, "nothing lost, nothing invented"
    if delivery is DeliveryGuarantee.EXACTLY_ONCE:
        dupes = {v: c for v, c in counts.items() if c > 1}
        if dupes:
            entries = {
                level: [
                    (r.partition, r.offset)
                    for r in read_topic(
                        conf, naming.to_kafka(naming.schedule_topic(level, levels, ns))
                    )
                    if r.value in dupes
                ]
                for level in levels.levels()
            }
            detail = [
                (r.value, r.partition, r.offset, r.created_ms, r.text(PROPERTY_UNIQ_KEY))
                for r in records
                if r.value in dupes
            ]
            raise AssertionError(
                f"{len(dupes)} duplicates for a read_committed reader: {detail[:10]}; "
                f"their delay-topic entries (partition, offset) by level: {entries}"
            )
    assert a.stats.early == 0 and b.stats.early == 0
    assert b_share and b.stats.forwarded > 0, "B took part in the forwarding"


# --------------------------------------------------------------------------------------------
# 2. consumer retries
# --------------------------------------------------------------------------------------------

RETRY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


@pytest.mark.timeout(180)
def test_consumer_retries_never_reach_the_listener_early(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, cleanup: Cleanup
) -> None:
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    levels = DelayLevels.parse(RETRY_LEVELS)
    ns = unique("relr")
    group = f"g-{uuid.uuid4().hex[:12]}"
    cleanup.topics.update(
        planned_kafka_topics(
            groups=[group, f"rmq-schedule-service.{ns}"],
            levels=RETRY_LEVELS,
            namespace=ns,
            partitions=PARTS,
        )
    )
    topic = kafka_topic_factory("rel-retry-timing", partitions=PARTS)
    n_msgs = 1500 if FULL else 400
    fails = 2  # every message fails twice: levels 3 (300 ms) and 4 (400 ms)

    lock = threading.Lock()
    # body -> list of (reconsume_times, arrived ms, returned ms, RMQ_DUE_MS or None)
    seen: dict[bytes, list[tuple[int, int, int, int | None]]] = {}

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        arrived = now_ms()
        m = msgs[0]
        due_text = m.properties.get(HEADER_DUE_MS)
        status = (
            ConsumeConcurrentlyStatus.RECONSUME_LATER
            if m.reconsume_times < fails
            else ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        )
        returned = now_ms()
        with lock:
            seen.setdefault(m.body, []).append(
                (m.reconsume_times, arrived, returned, int(due_text) if due_text else None)
            )
        return status

    svc_options = {"delay_levels": RETRY_LEVELS, "namespace": ns, "partitions": PARTS}
    a = _service(conf, cleanup, **svc_options)
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=RETRY_LEVELS,
        namespace=ns,
        partitions=PARTS,
        shutdown_await=10.0,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    consumer.start()
    cleanup.stack.callback(consumer.shutdown)

    bodies = [f"r-{i:05d}".encode() for i in range(n_msgs)]
    with Producer(conf) as p:
        half = n_msgs // 2
        p.send_batch([Message(topic=topic, body=b, sharding_key=b) for b in bodies[:half]])

        def done_count() -> int:
            with lock:
                return sum(1 for v in seen.values() if any(d[0] == fails for d in v))

        wait_until(lambda: done_count() >= half // 4, 60, "a first share of the retries")
        b = _service(conf, cleanup, **svc_options)  # a second service joins mid-stream
        p.send_batch([Message(topic=topic, body=b_, sharding_key=b_) for b_ in bodies[half:]])
        wait_until(lambda: b.assignment, 60, "B assigned")
        wait_until(lambda: done_count() >= half, 60, "half of the messages through their retries")
        b.shutdown(20)  # ... and leaves again
    wait_until(lambda: done_count() == n_msgs, 90, "every message through its retries")
    time.sleep(1.0)  # (a bounded grace period to catch late repeats; nothing waits on topics)
    consumer.check_alive()

    with lock:
        snapshot = {k: list(v) for k, v in seen.items()}
    assert set(snapshot) == set(bodies), "nothing lost"
    early: list[str] = []
    for body, deliveries in snapshot.items():
        deliveries.sort(key=lambda d: (d[0], d[1]))
        by_count: dict[int, tuple[int, int, int, int | None]] = {}
        for d in deliveries:
            by_count.setdefault(d[0], d)  # the first delivery with this reconsume count
        assert sorted(by_count) == list(range(fails + 1)), (body, deliveries)
        for k in range(1, fails + 1):
            _, arrived, _, due = by_count[k]
            _, _, prev_returned, _ = by_count[k - 1]
            min_arrival = prev_returned + levels.delay_ms(3 + k - 1)
            if arrived < min_arrival:
                early.append(f"{body!r}#{k}: {min_arrival - arrived} ms before return + delay")
            if due is None or arrived < due:
                early.append(f"{body!r}#{k}: arrived {arrived}, RMQ_DUE_MS {due}")
    assert early == [], f"{len(early)} early retries: {early[:10]}"
    assert a.stats.early == 0
    stats = consumer.stats()[topic]
    assert stats.dead_lettered == 0
