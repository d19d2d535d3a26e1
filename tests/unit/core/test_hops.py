"""Where a failed message's copy goes and what it carries (``adapter.core.hops.send_back``):
a retry parked on its delay level and due that delay after the send-back, a straight retry
to the group's retry topic, a dead letter with or without its body."""

from __future__ import annotations

import pytest

from adapter.constants import (
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HEADER_GROUP,
    PROPERTY_RECONSUME_TIME,
)
from adapter.core import hops, naming
from adapter.core.codec import Failure, decode_record, dlq_headers, straight_retry_headers
from adapter.core.delay import DelayLevels
from adapter.core.message import MessageExt
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryLater, RetryNow
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
