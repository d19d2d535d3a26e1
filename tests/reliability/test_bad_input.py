"""Bad input end to end: malformed, oversized, duplicate and null headers, non-UTF-8 values,
records at the size limit, invalid delay levels, group ids and topic names.

The rule (docs/semantics.md §3 and §5, README "Headers" and "Errors"): a clear error that
names the field and the value, or a documented handling rule; no crash, no stall,
nothing lost.  Malformed
records are injected with plain confluent-kafka producers.  (``tests/integration`` already
covers the basic malformed user headers, bad schedule-entry values, a retry copy refused by
a small delay topic, negative delay levels and unknown options; this file adds what they
do not.)
"""

from __future__ import annotations

from typing import Any

import pytest

from adapter import (
    ConsumeConcurrentlyStatus,
    InvalidDelayLevelError,
    InvalidInputError,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
)
from adapter.constants import (
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import naming
from adapter.errors import ConfigError, TopicNameError
from adapter.services.dlq import read_dlq

try:
    from tests.support.rel_common import (
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
        Collector,
        delete_topics,
        now_ms,
        planned_kafka_topics,
        produce_raw,
        unique,
        wait_until,
    )

from tests.support.consumer_helpers import (
    LEVELS,
    RecordingListener,
    committed_offsets,
    end_offsets,
    read_dlq_raw,
    read_topic,
    retry_kafka_topic,
    running_pair,
)

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def _retry_settled(pair: Any, records: int) -> bool:
    got = pair.retry_records()
    if len(got) != records:
        return False
    committed = pair.committed(retry_kafka_topic(pair.group))
    return all(committed.get(r.partition, -1) > r.offset for r in got)


# --------------------------------------------------------------------------------------------
# records at the size limit
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_body_at_the_client_size_limit_is_retried_with_its_retry_headers(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A body just under librdkafka's default ``message.max.bytes`` (1 000 000, below the
    broker's 1 048 588) fits its topic as a default producer writes it; the retry copy's
    headers push it over the client limit.  The adapter's own producers allow up to the
    broker's limit, so it is retried (twice) and completes, byte-exact.  (It used to be
    refused client-side for the delay topic *and* the DLQ, and re-consumed locally for ever
    with its offset held: a stalled partition.)"""
    topic = kafka_topic_factory("rel-big")
    big = b"B" * (1_000_000 - 300)
    produce_raw(kafka_bootstrap_servers, topic, [(big, [("u", b"1")])], partition=0)

    def decide(msgs: list[Any], ctx: Any) -> Any:
        return LATER if len(msgs[0].body) > 1000 and msgs[0].reconsume_times < 2 else OK

    listener = RecordingListener(decide)
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        send_back_retry_interval=0.5,
        config={"auto.commit.interval.ms": "200"},
    ) as pair:
        produce_raw(kafka_bootstrap_servers, topic, [(b"after", None)], partition=0)
        wait_until(lambda: listener.of("after"), 30, "the message after the big one")
        wait_until(lambda: len(listener.of(big)) == 3, 30, "the big message's two retries")
        wait_until(lambda: pair.committed() == pair.end_offsets(), 30, "the offsets committed")
        wait_until(lambda: _retry_settled(pair, 2), 30, "the retries committed")
        pair.consumer.check_alive()
        stats = pair.topic_stats()
    assert [d.reconsume_times for d in listener.of(big)] == [0, 1, 2]
    assert all(d.properties.get("u") == "1" for d in listener.of(big))
    assert (stats.sent_back, stats.send_back_failed, stats.dead_lettered) == (2, 0, 0)
    assert read_dlq(pair.conf, pair.group) == []


@pytest.mark.timeout(120)
def test_body_at_the_broker_size_limit_is_dead_lettered_not_stalled(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A record right at the broker's limit (written by a producer that raised its own
    ``message.max.bytes``): the broker refuses the retry copy *and* the dead-letter copy.
    It must still end up somewhere sane - a DLQ entry without the body, naming where the
    body stays - and its offset must be committed, instead of being re-consumed locally for
    ever with the partition's offset held."""
    topic = kafka_topic_factory("rel-huge")
    huge = b"H" * (1_048_588 - 250)
    produce_raw(
        kafka_bootstrap_servers,
        topic,
        [(huge, [("u", b"1")])],
        partition=0,
        extra={"message.max.bytes": 1_048_588},
    )

    def decide(msgs: list[Any], ctx: Any) -> Any:
        return LATER if len(msgs[0].body) > 1000 else OK

    listener = RecordingListener(decide)
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        send_back_retry_interval=0.5,
        config={"auto.commit.interval.ms": "200"},
    ) as pair:
        produce_raw(kafka_bootstrap_servers, topic, [(b"after", None)], partition=0)
        wait_until(lambda: listener.of("after"), 30, "the message after the huge one")
        wait_until(lambda: pair.committed() == pair.end_offsets(), 30, "the offsets committed")
        pair.consumer.check_alive()
        stats = pair.topic_stats()
    [entry] = read_dlq_raw(pair.conf, pair.group)
    assert entry.value in (None, b"")
    assert entry.text(HEADER_DLQ_REASON) == "SEND_BACK_REFUSED"
    omitted = entry.text(HEADER_BODY_OMITTED) or ""
    assert str(len(huge)) in omitted and f"{topic}[0]@0" in omitted, omitted
    assert entry.text("u") == "1"
    assert entry.text(PROPERTY_DLQ_ORIGIN_TOPIC) == topic
    assert [d.reconsume_times for d in listener.of(huge)] == [0]
    assert stats.dead_lettered == 1


# --------------------------------------------------------------------------------------------
# malformed delay-topic entries (ScheduleService)
# --------------------------------------------------------------------------------------------

BAD_UTF8 = b"\xff\xfe\xc3("


@pytest.mark.timeout(90)
def test_schedule_service_handles_duplicate_null_non_utf8_and_oversized_entry_headers(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Raw delay-topic entries with every kind of malformed header, interleaved with good
    ones on one partition.  Documented rules: duplicate keys -> the last wins; a null value
    -> absent; non-UTF-8 user values -> forwarded byte-exact; an entry that cannot be
    scheduled -> the service DLQ with a reason naming the header and its value.  The
    service keeps running, nothing is lost, nothing is forwarded twice."""
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = unique("relb")
    real = kafka_topic_factory("rel-bad-entries")
    svc = ScheduleService(conf, delay_levels="200ms 1s", namespace=ns, partitions=1)
    delay_topic = naming.to_kafka(
        naming.schedule_topic(1, svc.options.levels, ns)  # 200 ms
    )
    out = Collector(kafka_bootstrap_servers, real, 1)
    dlq_topic = naming.to_kafka(naming.dlq_topic(svc.group))
    try:
        svc.start()
        wait_until(lambda: len(svc.assignment) == 2, 30, "the service assigned")
        now = str(now_ms()).encode()
        far = str(now_ms() + 3_600_000).encode()
        rt = real.encode()
        blob = bytes(range(256)) * 400  # a 100 KiB binary header value
        many = [(f"h{i:04d}", str(i).encode()) for i in range(1000)]
        good: dict[bytes, list[tuple[str, bytes | None]]] = {
            b"dup-real-topic": [
                (PROPERTY_REAL_TOPIC, b"nowhere"),
                (PROPERTY_REAL_TOPIC, rt),
                (HEADER_DUE_MS, now),
            ],
            b"dup-due": [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, far), (HEADER_DUE_MS, now)],
            b"utf8-user": [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, now), ("note", BAD_UTF8)],
            b"null-user": [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, now), ("gone", None)],
            b"blob": [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, now), ("blob", blob)],
            b"many": [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, now), *many],
            b"bad-delay": [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, now), ("DELAY", b"abc")],
        }
        bad: dict[bytes, tuple[list[tuple[str, bytes | None]], list[str]]] = {
            b"null-real-topic": (
                [(PROPERTY_REAL_TOPIC, None), (HEADER_DUE_MS, now)],
                [PROPERTY_REAL_TOPIC, "missing"],
            ),
            b"dup-real-topic-null-last": (
                [(PROPERTY_REAL_TOPIC, rt), (PROPERTY_REAL_TOPIC, None), (HEADER_DUE_MS, now)],
                [PROPERTY_REAL_TOPIC, "missing"],
            ),
            b"utf8-real-topic": (
                [(PROPERTY_REAL_TOPIC, BAD_UTF8 + rt), (HEADER_DUE_MS, now)],
                ["\ufffd"],
            ),
            b"long-real-topic": (
                [(PROPERTY_REAL_TOPIC, b"t" * 300), (HEADER_DUE_MS, now)],
                ["t" * 50],
            ),
            b"utf8-due": (
                [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, BAD_UTF8)],
                [HEADER_DUE_MS, "\ufffd"],
            ),
            # more digits than int() converts: used to kill the service loop (ValueError)
            b"huge-due": (
                [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, b"9" * 5000)],
                [HEADER_DUE_MS],
            ),
        }
        records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = []
        for body, headers in good.items():
            records.append((body, headers))
        for body, (headers, _) in bad.items():
            records.append((body, headers))
        # a null body (and no key) is a valid entry too
        records.append((None, [(PROPERTY_REAL_TOPIC, rt), (HEADER_DUE_MS, now), ("id", b"nul")]))
        produce_raw(kafka_bootstrap_servers, delay_topic, records, partition=0)

        got = out.wait_values(set(good) | {None}, timeout=30)  # type: ignore[arg-type]
        got = out.drain(quiet_s=1.0)
        dead: dict[bytes | None, Any] = {}

        def dead_letters() -> bool:
            dead.update({r.value: r for r in read_topic(conf, dlq_topic)})
            return len(dead) >= len(bad)

        wait_until(dead_letters, 30, "the dead letters")
        assert svc.error is None
        svc.check_alive()  # the service loop is still running
    finally:
        svc.shutdown(20)
        out.close()
        delete_topics(
            kafka_bootstrap_servers,
            planned_kafka_topics(groups=[svc.group], levels="200ms 1s", namespace=ns),
        )
    by_value = {r.value: r for r in got}
    assert sorted(v or b"" for v in by_value) == sorted([*good, b""])
    assert len(got) == len(good) + 1, "each forwarded once"
    assert by_value[b"dup-real-topic"].text(PROPERTY_REAL_TOPIC) == real
    assert by_value[b"utf8-user"].headers["note"] == BAD_UTF8  # byte-exact
    assert (
        "gone" not in by_value[b"null-user"].headers
        or by_value[b"null-user"].headers["gone"] is None
    )
    assert by_value[b"blob"].headers["blob"] == blob
    assert all(by_value[b"many"].headers[k] == v for k, v in many)
    assert "DELAY" not in by_value[b"bad-delay"].headers
    assert by_value[None].text("id") == "nul"
    assert set(dead) == set(bad), f"dead-lettered: {sorted(k or b'' for k in dead)}"
    for body, (_, words) in bad.items():
        reason = dead[body].text(HEADER_FAILURE_MESSAGE) or ""
        assert dead[body].text(HEADER_DLQ_REASON) == "INVALID_SCHEDULE_ENTRY"
        for word in words:
            assert word in reason, f"{body!r}: {reason!r} should name {word!r}"
    assert svc.stats.invalid == len(bad)


# --------------------------------------------------------------------------------------------
# malformed records on the consumer side
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_consumer_handles_oversized_many_and_non_utf8_system_headers(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Beyond ``tests/integration``'s malformed user headers: a 200 KiB header, 2000
    headers, non-UTF-8 ``UNIQ_KEY``/``TAGS``/``RECONSUME_TIME``, a null key and value, and a
    record injected into the retry topic without ``RETRY_TOPIC``.  Each is consumed (and
    retried once, keeping its headers and its message id), nothing crashes the consumer,
    and every offset is committed."""
    topic = kafka_topic_factory("rel-bad-consumer")
    big_header = b"h" * (200 * 1024)
    many = [(f"k{i:04d}", b"v") for i in range(2000)]
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (b"big-header", [("big", big_header)]),
        (b"many-headers", many),
        (b"utf8-uniq", [(PROPERTY_UNIQ_KEY, BAD_UTF8)]),
        (b"utf8-tags", [(PROPERTY_TAGS, BAD_UTF8)]),
        (b"utf8-count", [(PROPERTY_RECONSUME_TIME, BAD_UTF8)]),
        # more digits than int() converts (4300): used to kill the poll loop with a ValueError
        (b"huge-count", [(PROPERTY_RECONSUME_TIME, b"9" * 5000)]),
        (b"huge-max", [("MAX_RECONSUME_TIMES", b"9" * 5000)]),
        (None, [("nullbody", b"1")]),
    ]
    produce_raw(kafka_bootstrap_servers, topic, records, partition=0)

    def decide(msgs: list[Any], ctx: Any) -> Any:
        return LATER if msgs[0].reconsume_times == 0 else OK

    listener = RecordingListener(decide)
    with running_pair(kafka_bootstrap_servers, topic, listener) as pair:
        wait_until(lambda: len(listener) >= 2 * len(records), 40, "every record and its retry")
        # a record on the retry topic that lacks RETRY_TOPIC (a foreign writer)
        produce_raw(
            kafka_bootstrap_servers,
            retry_kafka_topic(pair.group),
            [(b"foreign-retry", [(PROPERTY_RECONSUME_TIME, b"1")])],
            partition=0,
        )
        wait_until(lambda: listener.of("foreign-retry"), 30, "the foreign retry record")
        wait_until(lambda: pair.committed() == pair.end_offsets(), 30, "offsets committed")
        wait_until(lambda: _retry_settled(pair, len(records) + 1), 30, "retries committed")
        pair.consumer.check_alive()
    for body, _ in records:
        seen = listener.of(body or b"")
        assert [d.reconsume_times for d in seen] == [0, 1], (body, seen)
        assert seen[0].msg_id == seen[1].msg_id, "one message id across hops"
    big = listener.of("big-header")
    assert all(dict(d.raw_headers)["big"] == big_header for d in big)
    assert all(
        sum(1 for k, _ in d.raw_headers if k.startswith("k")) == 2000
        for d in listener.of("many-headers")
    )
    first_tags = listener.of("utf8-tags")[0]
    assert first_tags.tags is not None and "\ufffd" in first_tags.tags
    assert first_tags.header_errors
    for body in ("utf8-count", "huge-count", "huge-max"):
        assert listener.of(body)[0].header_errors, body  # read as 0 / group maximum, noted
        assert listener.of(body)[0].reconsume_times == 0
    [foreign] = listener.of("foreign-retry")
    assert foreign.reconsume_times == 1 and foreign.header_errors
    assert read_dlq_raw(pair.conf, pair.group) == []


# --------------------------------------------------------------------------------------------
# invalid levels, names and options: clear errors naming field and value
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["3", 2.5, True, None, -1])
def test_invalid_delay_level_names_the_field_and_value(
    kafka_bootstrap_servers: str, kafka_topic: str, level: Any
) -> None:
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as p:
        with pytest.raises(InvalidDelayLevelError) as info:
            p.send(Message(topic=kafka_topic, body=b"x", delay_time_level=level))
        assert info.value.field == "delay_time_level" and info.value.value == level
        assert repr(level) in str(info.value)
        for bad in (-5, "soon"):
            with pytest.raises(InvalidInputError) as info_t:
                p.send(Message(topic=kafka_topic, body=b"x", deliver_time_ms=bad))
            assert info_t.value.field == "deliver_time_ms" and repr(bad) in str(info_t.value)
        p.send(Message(topic=kafka_topic, body=b"still works"))  # the producer is fine


@pytest.mark.parametrize(
    ("table", "token"),
    [("1s 0s", "'0s'"), ("", "''"), ("1s -5s", "'-5s'"), ("1s 5x", "'5x'"), ("1y", "'1y'")],
)
def test_invalid_delay_tables_name_the_token(table: str, token: str) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:9"}  # never contacted: validation comes first
    makers = [
        lambda: Producer(conf, delay_levels=table),
        lambda: ScheduleService(conf, delay_levels=table),
        lambda: PushConsumer({**conf, "group.id": "g"}, delay_levels=table),
    ]
    for make in makers:
        with pytest.raises(InvalidDelayLevelError) as info:
            make()
        assert info.value.field.startswith("messageDelayLevel") and token in str(info.value)


@pytest.mark.parametrize(
    "topic", ["", "a b", "x" * 250, "rmq.retry.g", "rmq_x", "..", "топик", "t/1"]
)
def test_invalid_topic_names_are_refused_naming_the_topic(topic: str) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:9"}  # refused before any broker call
    consumer = PushConsumer({**conf, "group.id": "g"})
    with pytest.raises(TopicNameError) as info:
        consumer.subscribe(topic)
    assert info.value.field == "topic" and info.value.value == topic
    producer = Producer(conf)
    with pytest.raises(TopicNameError) as info:
        producer.prepare(Message(topic=topic, body=b"x"))
    assert info.value.field == "topic" and repr(topic)[:60] in str(info.value)


@pytest.mark.parametrize(
    ("options", "name", "value"),
    [
        ({"delivery": "MAYBE"}, "delivery", "MAYBE"),
        ({"partitions": 0}, "partitions", 0),
        ({"batch_size": -1}, "batch_size", -1),
        ({"poll_timeout_s": "fast"}, "poll_timeout_s", "fast"),
    ],
)
def test_invalid_schedule_service_options_name_field_and_value(
    options: dict[str, Any], name: str, value: Any
) -> None:
    with pytest.raises(ConfigError) as info:
        ScheduleService({"bootstrap.servers": "127.0.0.1:9"}, **options)
    assert info.value.field == name and info.value.value == value
    assert name in str(info.value) and repr(value) in str(info.value)


@pytest.mark.parametrize("group", [None, "", 123, b"bytes"])
def test_invalid_group_ids_name_group_id(group: Any) -> None:
    with pytest.raises(ConfigError) as info:
        PushConsumer({"bootstrap.servers": "127.0.0.1:9", "group.id": group})
    assert info.value.field == "group.id" and repr(group) in str(info.value)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "group",
    ["Grüße aus Köln/%RETRY%x y", "g." + "ü" * 200, "rmq.retry.same-looking_group"],
    ids=["unicode-and-specials", "too-long-for-a-topic", "reserved-looking"],
)
def test_legal_but_awkward_group_ids_retry_and_dead_letter_end_to_end(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, group: str
) -> None:
    """Kafka group ids may hold any characters; the retry and DLQ topics are escaped (or
    hashed when too long) and still work: one retry, then the DLQ, nothing lost."""
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = kafka_topic_factory("rel-awkward-group")
    ns = unique("relg")
    produce_raw(kafka_bootstrap_servers, topic, [(b"awkward", None)], partition=0)
    seen: list[int] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        seen.append(msgs[0].reconsume_times)
        if msgs[0].reconsume_times >= 1:
            ctx.delay_level_when_next_consume = -1  # straight to the DLQ
        return LATER

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        shutdown_await=10.0,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    try:
        with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1), consumer:
            wait_until(lambda: read_dlq(conf, group), 40, "the dead letter")
            consumer.check_alive()
        [entry] = read_dlq(conf, group)
        assert entry.message.body == b"awkward" and entry.reason == "LISTENER_REQUESTED"
        assert seen == [0, 1]
        assert committed_offsets(conf, group, topic) == end_offsets(conf, topic)
    finally:
        delete_topics(
            kafka_bootstrap_servers,
            planned_kafka_topics(
                groups=[group, f"rmq-schedule-service.{ns}"], levels=LEVELS, namespace=ns
            ),
        )
