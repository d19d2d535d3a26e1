"""Building a producer's Kafka record (``adapter.clients.producer.records``) and the one
``produce()`` call (``adapter.clients.producer.produce``): pure, no client but a recorder."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.clients.producer.produce import produce
from adapter.clients.producer.records import (
    Record,
    check_deliver_time,
    check_message,
    delay_warning,
    is_scheduled,
    message_headers,
    placement,
    plain_record,
    scheduled_record,
)
from adapter.constants import (
    ANY_PARTITION,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import naming
from adapter.core.codec import encode_message_headers
from adapter.core.delay import DelayLevels
from adapter.core.message import Message
from adapter.core.schedule import Placement
from adapter.errors import InvalidDelayLevelError, InvalidInputError

pytestmark = pytest.mark.unit

LEVELS = DelayLevels.DEFAULT
MSG_ID = "0" * 20 + "00000000002A"
NOW_MS = 1_700_000_000_000


@pytest.mark.parametrize(
    ("msg", "error", "field"),
    [
        ("not a message", InvalidInputError, "msg"),
        (Message(topic="t", body="text"), InvalidInputError, "body"),  # type: ignore[arg-type]
        (
            Message(topic="t", body=b"x", delay_time_level=True),
            InvalidDelayLevelError,
            "delay_time_level",
        ),
        (
            Message(topic="t", body=b"x", delay_time_level=-1),
            InvalidDelayLevelError,
            "delay_time_level",
        ),
        (
            Message(topic="t", body=b"x", delay_time_level=2, deliver_time_ms=5),
            InvalidInputError,
            "deliver_time_ms",
        ),
        (Message(topic="t", body=b"x", deliver_time_ms=-1), InvalidInputError, "deliver_time_ms"),
    ],
    ids=["not-message", "str-body", "bool-level", "negative-level", "level-and-time", "neg-time"],
)
def test_check_message_names_the_bad_field(msg: Any, error: type[Exception], field: str) -> None:
    with pytest.raises(error) as info:
        check_message(msg)
    assert info.value.field == field  # type: ignore[attr-defined]


def test_check_message_accepts_a_plain_and_a_delayed_message() -> None:
    check_message(Message(topic="t", body=bytearray(b"x")))
    check_message(Message(topic="t", body=b"x", delay_time_level=3))
    check_message(Message(topic="t", body=b"x", deliver_time_ms=0))


def test_headers_of_a_bare_message_are_only_its_id() -> None:
    msg = Message(topic="t", body=b"x")
    assert message_headers(msg, MSG_ID) == [(PROPERTY_UNIQ_KEY, MSG_ID.encode())]
    assert message_headers(msg, MSG_ID) == encode_message_headers(msg, MSG_ID)


def test_headers_with_tags_keys_and_properties_are_what_the_codec_encodes() -> None:
    msg = Message(topic="t", body=b"x", tags="TagA", keys=["k1", "k2"], properties={"a": "1"})
    headers = message_headers(msg, MSG_ID)
    assert headers == encode_message_headers(msg, MSG_ID)
    assert dict(headers)[PROPERTY_UNIQ_KEY] == MSG_ID.encode()
    assert dict(headers)["a"] == b"1"


def test_plain_record_keeps_topic_key_partition_and_copies_the_body() -> None:
    body = bytearray(b"payload")
    msg = Message(topic="orders", body=body, sharding_key="k", partition=3)
    headers = message_headers(msg, MSG_ID)
    record = plain_record(msg, "orders-kafka", MSG_ID, headers)
    assert record == Record("orders-kafka", "orders", b"payload", "k", headers, 3, MSG_ID)
    assert type(record.value) is bytes
    body[0:1] = b"X"
    assert record.value == b"payload"


def test_placement_of_plain_level_and_deliver_time() -> None:
    assert not is_scheduled(Message(topic="t", body=b"x"))
    assert placement(Message(topic="t", body=b"x"), NOW_MS, LEVELS) is None
    level3 = Message(topic="t", body=b"x", delay_time_level=3)
    assert is_scheduled(level3)
    assert placement(level3, NOW_MS, LEVELS) == Placement(3, NOW_MS + LEVELS.delay_ms(3))
    past = Message(topic="t", body=b"x", deliver_time_ms=NOW_MS - 1)
    assert is_scheduled(past)
    assert placement(past, NOW_MS, LEVELS) is None  # due already: sent to its own topic


def test_scheduled_record_goes_to_its_level_topic_with_the_real_topic_in_headers() -> None:
    msg = Message(topic="orders", body=b"x", delay_time_level=2, sharding_key=b"k", partition=1)
    place = placement(msg, NOW_MS, LEVELS)
    assert place is not None
    asked: list[str] = []

    def kafka_topic_of(logical: str) -> str:
        asked.append(logical)
        return "kafka:" + logical

    record = scheduled_record(
        msg,
        MSG_ID,
        message_headers(msg, MSG_ID),
        place,
        now_ms=NOW_MS,
        levels=LEVELS,
        namespace="ns",
        kafka_topic_of=kafka_topic_of,
    )
    logical = naming.schedule_topic(2, LEVELS, "ns")
    assert asked == [logical]
    assert (record.topic, record.logical_topic) == ("kafka:" + logical, logical)
    assert (record.partition, record.key, record.value, record.msg_id) == (None, b"k", b"x", MSG_ID)
    headers = dict(record.headers)
    assert headers[PROPERTY_REAL_TOPIC] == b"orders"
    assert headers[PROPERTY_DELAY_TIME_LEVEL] == b"2"
    assert headers[PROPERTY_UNIQ_KEY] == MSG_ID.encode()


class Recorder:
    """A stand-in client that keeps the arguments of each ``produce()`` call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))


def test_produce_passes_the_parts_in_confluent_kafkas_order() -> None:
    client = Recorder()

    def on_delivery(err: Any, kmsg: Any) -> None:
        del err, kmsg

    headers = [(PROPERTY_UNIQ_KEY, MSG_ID.encode())]
    produce(
        client,
        "topic",
        value=b"v",
        key="k",
        partition=ANY_PARTITION,
        on_delivery=on_delivery,
        headers=headers,
    )
    # topic, value, key, partition, on_delivery, callback, timestamp, headers
    assert client.calls == [(("topic", b"v", "k", -1, on_delivery, None, 0, headers), {})]


class TestDelayWarnings:
    LEVELS = DelayLevels.parse("1s 5s 2h")

    def test_a_level_above_the_highest_is_named_and_clamped(self) -> None:
        msg = Message(topic="t", body=b"x", delay_time_level=99)
        assert delay_warning(msg, 0, self.LEVELS) == (
            "level",
            "delay_time_level=99 is above the highest level 3 (2h); clamped to 3",
        )
        assert (
            delay_warning(Message(topic="t", body=b"x", delay_time_level=3), 0, self.LEVELS) is None
        )

    def test_a_delivery_time_in_the_past_is_named(self) -> None:
        now = 1_800_000_000_000
        late = Message(topic="t", body=b"x", deliver_time_ms=now - 1500)
        assert delay_warning(late, now, self.LEVELS) == (
            "past",
            "deliver_time_ms=1799999998500 is 1500 ms in the past; delivered at once",
        )
        soon = Message(topic="t", body=b"x", deliver_time_ms=now + 1)
        assert delay_warning(soon, now, self.LEVELS) is None

    def test_a_delivery_time_in_seconds_is_refused(self) -> None:
        now = 1_800_000_000_000
        with pytest.raises(InvalidInputError, match="looks like seconds") as info:
            check_deliver_time(Message(topic="t", body=b"x", deliver_time_ms=1_800_000_060), now)
        assert info.value.field == "deliver_time_ms" and info.value.value == 1_800_000_060
        # milliseconds, and small times on a test clock, are fine
        check_deliver_time(Message(topic="t", body=b"x", deliver_time_ms=now + 60_000), now)
        check_deliver_time(Message(topic="t", body=b"x", deliver_time_ms=5_000), 1_000)
