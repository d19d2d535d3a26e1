"""Where a failed message's copy goes and what it carries (``adapter.core.hops.send_back``):
a retry parked on its delay level and due that delay after the send-back, a straight retry
to the group's retry topic, a dead letter with or without its body."""

from __future__ import annotations

import zlib

import pytest

from adapter.constants import (
    FAILURE_MESSAGE_MAX_CHARS,
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HEADER_GROUP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import hops, naming
from adapter.core.codec import Failure, decode_record, dlq_headers, straight_retry_headers
from adapter.core.delay import DelayLevels
from adapter.core.message import MessageExt
from adapter.core.omitted_body import OmittedBody
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryLater, RetryNow
from adapter.core.schedule import Placement
from adapter.errors import InvalidDelayLevelError

pytestmark = pytest.mark.unit

GROUP = "cg"
TOPICS = hops.GroupTopics(GROUP, DelayLevels.DEFAULT)
FAILURE = Failure("ValueError", "bad input")
NOW_MS = 1_700_000_000_000


def message(body: bytes = b"body", key: bytes = b"k") -> MessageExt:
    return decode_record(
        kafka_topic="orders",
        partition=2,
        offset=7,
        value=body,
        key=key,
        headers=None,
        timestamp_ms=NOW_MS - 5_000,
        log_append_time=False,
    )


def header(out: hops.OutRecord, name: str) -> str | None:
    values = [v for k, v in out.headers if k == name]
    assert len(values) == 1, (name, out.headers)
    return None if values[0] is None else values[0].decode()


def test_a_retry_is_parked_on_its_level_and_due_that_levels_delay_after_the_send_back() -> None:
    dest = RetryLater(3, DelayLevels.DEFAULT.delay_ms(3), 1)
    out = hops.send_back(message(), dest, TOPICS, now_ms=NOW_MS, failure=FAILURE)
    assert out.topic == TOPICS.level_topic(3)
    assert header(out, HEADER_DUE_MS) == str(NOW_MS + 10_000)
    assert (out.value, out.key, out.partition) == (b"body", b"k", None)
    assert header(out, HEADER_GROUP) == GROUP
    assert header(out, HEADER_FAILURE_TYPE) == "ValueError"


def test_a_straight_retry_goes_to_the_groups_retry_topic_with_the_retry_headers() -> None:
    msg = message()
    out = hops.send_back(msg, RetryNow(1), TOPICS, now_ms=NOW_MS, failure=FAILURE)
    assert out.topic == TOPICS.retry_kafka
    assert (out.value, out.key, out.partition) == (b"body", b"k", None)
    assert out.headers == straight_retry_headers(msg, group=GROUP, failure=FAILURE)
    assert header(out, HEADER_GROUP) == GROUP
    assert header(out, HEADER_FAILURE_MESSAGE) == "bad input"
    assert header(out, PROPERTY_RECONSUME_TIME) == "1"


def test_a_dead_letter_keeps_its_body_and_says_why() -> None:
    msg = message()
    dest = DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 17)
    out = hops.send_back(msg, dest, TOPICS, now_ms=NOW_MS, failure=FAILURE)
    assert out.topic == TOPICS.dlq_kafka
    assert (out.value, out.key, out.partition) == (b"body", b"k", None)
    expected = dlq_headers(
        msg,
        group=GROUP,
        reason="MAX_RECONSUME_TIMES",
        now_ms=NOW_MS,
        failure=FAILURE,
        reconsume_times=17,
    )
    assert out.headers == expected
    assert header(out, HEADER_DLQ_REASON) == "MAX_RECONSUME_TIMES"
    assert header(out, PROPERTY_RECONSUME_TIME) == "17"
    assert HEADER_BODY_OMITTED not in dict(out.headers)


def test_a_dead_letter_without_its_body_names_where_the_body_stays() -> None:
    dest = DeadLetter(DeadLetterReason.LISTENER_REQUESTED, 1)
    out = hops.send_back(
        message(b"x" * 10), dest, TOPICS, now_ms=NOW_MS, failure=None, omit_body=True
    )
    assert out.topic == TOPICS.dlq_kafka
    assert (out.value, out.key) == (None, b"k")
    assert header(out, HEADER_BODY_OMITTED) == "10 bytes; body at orders[2]@7"


def test_the_level_topics_are_levels_1_to_the_last_and_no_other() -> None:
    last = DelayLevels.DEFAULT.max_level
    assert TOPICS.level_topic(1) == naming.to_kafka(naming.schedule_topic(1, DelayLevels.DEFAULT))
    assert TOPICS.level_topic(last) == naming.to_kafka(
        naming.schedule_topic(last, DelayLevels.DEFAULT)
    )
    for level in (0, last + 1):
        with pytest.raises(InvalidDelayLevelError, match=str(level)):
            TOPICS.level_topic(level)


@pytest.mark.parametrize("namespace", [None, "shop"])
def test_every_level_has_the_topic_of_its_own_delay(namespace: str | None) -> None:
    levels = DelayLevels.parse("1s 5s 10s")
    topics = hops.GroupTopics(GROUP, levels, namespace)
    assert [topics.level_topic(n) for n in (1, 2, 3)] == [
        naming.to_kafka(naming.schedule_topic(n, levels, namespace)) for n in (1, 2, 3)
    ]
    assert len({topics.level_topic(n) for n in (1, 2, 3)}) == 3


# --- the ScheduleService's hops ------------------------------------------------------------
RAW = [
    (PROPERTY_UNIQ_KEY, b"U1"),
    (PROPERTY_DELAY_TIME_LEVEL, b"3"),
    ("biz", b"\xff"),
    ("biz", b"v2"),  # repeated: the last value wins, once
]


@pytest.mark.parametrize(("partitions", "key", "spread"), [(7, b"k", b"k"), (13, b"k", b"k"),
                         (7, None, b"U1"), (13, None, b"U1")])  # fmt: skip
def test_a_forward_goes_to_its_real_topic_on_the_partition_librdkafka_would_pick(
    partitions: int, key: bytes | None, spread: bytes
) -> None:
    out = hops.forward(
        RAW, b"v", key, real_topic="orders", real_queue_id=None, partitions=partitions
    )
    partition = zlib.crc32(spread) % partitions
    assert out == hops.OutRecord(
        naming.to_kafka("orders"),
        b"v",
        key,
        [
            (PROPERTY_UNIQ_KEY, b"U1"),
            ("biz", b"v2"),
            (PROPERTY_REAL_QUEUE_ID, str(partition).encode()),
        ],
        partition,
    )


@pytest.mark.parametrize("partitions", [7, 11, 13])
def test_a_keyless_forward_without_a_message_id_goes_to_partition_0(partitions: int) -> None:
    out = hops.forward(
        [], None, None, real_topic="orders", real_queue_id=None, partitions=partitions
    )
    assert (out.partition, out.value, out.key) == (0, None, None)
    assert out.headers == [(PROPERTY_REAL_QUEUE_ID, b"0")]


def test_a_forward_keeps_the_queue_it_was_sent_to() -> None:
    out = hops.forward(RAW, b"v", b"k", real_topic="%RETRY%cg", real_queue_id=4, partitions=5)
    assert (out.topic, out.partition) == (naming.to_kafka("%RETRY%cg"), 4)
    assert dict(out.headers)[PROPERTY_REAL_QUEUE_ID] == b"4"


@pytest.mark.parametrize("namespace", [None, "shop"])
def test_a_repark_parks_the_entry_on_its_new_level_due_at_its_time(namespace: str | None) -> None:
    levels = DelayLevels.parse("1s 5s 10s")
    out = hops.repark(RAW, b"v", b"k", placement=Placement(2, 12_345), levels=levels,
                      namespace=namespace)  # fmt: skip
    assert out == hops.OutRecord(
        naming.to_kafka(naming.schedule_topic(2, levels, namespace)),
        b"v",
        b"k",
        [
            (PROPERTY_UNIQ_KEY, b"U1"),
            (PROPERTY_DELAY_TIME_LEVEL, b"2"),
            ("biz", b"v2"),
            (HEADER_DUE_MS, b"12345"),
        ],
    )


def test_an_invalid_entry_is_dead_lettered_saying_why_and_from_where() -> None:
    reason = "x" * (FAILURE_MESSAGE_MAX_CHARS + 10)
    out = hops.invalid_entry(RAW, b"v", b"k", dlq_topic="%DLQ%schedule", origin_topic="orders",
                             reason=reason, now_ms=NOW_MS)  # fmt: skip
    invalid = DeadLetterReason.INVALID_SCHEDULE_ENTRY.value.encode()
    assert out == hops.OutRecord(
        naming.to_kafka("%DLQ%schedule"),
        b"v",
        b"k",
        [(PROPERTY_UNIQ_KEY, b"U1"), (PROPERTY_DELAY_TIME_LEVEL, b"3"), ("biz", b"v2"),
         (HEADER_DLQ_REASON, invalid), (HEADER_FAILURE_TYPE, invalid),
         (HEADER_FAILURE_MESSAGE, reason[:FAILURE_MESSAGE_MAX_CHARS].encode()),
         (PROPERTY_DLQ_ORIGIN_TOPIC, b"orders"), (HEADER_DLQ_TIME_MS, str(NOW_MS).encode())],
    )  # fmt: skip


def test_a_dead_letter_without_its_body_names_it_once_and_keeps_the_rest() -> None:
    stale = OmittedBody(1, "old", 0, 0).header()
    record = hops.OutRecord("rmq.dlq.cg", b"x" * 10, b"k", [("a", b"1"), stale, ("b", b"2")], 3)
    omitted = OmittedBody(10, "orders", 2, 7)
    assert hops.without_body(record, omitted) == hops.OutRecord(
        "rmq.dlq.cg",
        None,
        b"k",
        [("a", b"1"), ("b", b"2"), (HEADER_BODY_OMITTED, b"10 bytes; body at orders[2]@7")],
        3,
    )
