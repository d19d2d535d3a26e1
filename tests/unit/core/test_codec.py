"""Unit tests for :mod:`adapter.core.codec`: Kafka record ↔ message, and per-hop headers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.constants import (
    FAILURE_MESSAGE_MAX_CHARS,
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HEADER_GROUP,
    HEADER_MALFORMED,
    HEADER_ORIGIN_BORN_MS,
    HEADER_ORIGIN_OFFSET,
    HEADER_ORIGIN_PARTITION,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_HEADERS,
)
from adapter.core import hops
from adapter.core.codec import (
    Failure,
    decode_record,
    derived_message_id,
    dlq_headers,
    encode_message_headers,
    forward_headers,
    logical_topic,
    redrive_headers,
    replace_headers,
    retry_headers,
    schedule_headers,
)
from adapter.core.delay import DelayLevels
from adapter.core.headers import HeaderView, parse_non_negative
from adapter.core.message import Message, MessageExt
from adapter.core.naming import dlq_topic, retry_topic, schedule_topic, to_kafka
from adapter.core.omitted_body import OmittedBody
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryLater, route_failed
from adapter.errors import MalformedHeaderError

pytestmark = pytest.mark.unit

Headers = Sequence[tuple[str, bytes | None]]
GROUP = "cg"
LEVELS = DelayLevels.DEFAULT


def record(
    headers: Iterable[tuple[str, bytes | None]] | None = None,
    *,
    kafka_topic: str = "orders",
    partition: int = 2,
    offset: int = 7,
    value: bytes | None = b"body",
    key: bytes | None = b"k",
    timestamp_ms: int | None = 1_700_000_000_000,
    log_append_time: bool = False,
) -> MessageExt:
    return decode_record(
        kafka_topic=kafka_topic,
        partition=partition,
        offset=offset,
        value=value,
        key=key,
        headers=headers,
        timestamp_ms=timestamp_ms,
        log_append_time=log_append_time,
    )


def as_dict(headers: Headers) -> dict[str, bytes | None]:
    """Headers as a dict, asserting there is one value per key."""
    keys = [k for k, _ in headers]
    dupes = [k for k, n in Counter(keys).items() if n > 1]
    assert not dupes, f"duplicate headers {dupes}"
    return dict(headers)


def text(headers: Headers, key: str) -> str | None:
    value = as_dict(headers).get(key)
    return None if value is None else value.decode()


def retry(msg: MessageExt, **kw: Any) -> list[tuple[str, bytes | None]]:
    args: dict[str, Any] = {
        "group": GROUP,
        "retry_topic": retry_topic(GROUP),
        "level": 3,
        "due_ms": 1_000,
        "failure": Failure("RECONSUME_LATER"),
    }
    args.update(kw)
    return retry_headers(msg, **args)


RETRY_KAFKA_TOPIC = to_kafka(retry_topic(GROUP))


# --- small helpers ---------------------------------------------------------------------------
class TestHelpers:
    def test_derived_message_id(self) -> None:
        assert derived_message_id("orders", 3, 42) == "orders:3:42"

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (None, None),
            ("0", 0),
            ("17", 17),
            (" 5 ", 5),
            ("007", 7),
            ("-1", None),
            ("+1", None),
            ("1.5", None),
            ("", None),
            ("abc", None),
            ("\uff11\uff12", None),  # full-width digits are not ASCII
            ("²", None),
            ("1_000", None),
        ],
    )
    def test_parse_non_negative(self, raw: str | None, expected: int | None) -> None:
        assert parse_non_negative(raw) == expected


# --- decoding -----------------------------------------------------------------------------
class TestDecodePlainRecord:
    def test_no_headers(self) -> None:
        msg = record(None)
        assert msg.msg_id == "orders:2:7"
        assert msg.origin_message_id == "orders:2:7"
        assert msg.reconsume_times == 0
        assert msg.topic == "orders"
        assert msg.kafka_topic == "orders"
        assert msg.queue_id == 2
        assert msg.queue_offset == 7
        assert msg.body == b"body"
        assert msg.sharding_key == b"k"
        assert msg.tags is None
        assert msg.keys is None
        assert msg.properties == {}
        assert msg.raw_headers == ()
        assert msg.header_errors == ()
        assert msg.born_timestamp == 1_700_000_000_000
        assert msg.store_timestamp == 1_700_000_000_000

    def test_empty_header_list_same_as_none(self) -> None:
        assert record([]).msg_id == record(None).msg_id == "orders:2:7"

    def test_null_value_is_empty_body(self) -> None:
        assert record(value=None).body == b""

    def test_log_append_time_has_no_born_timestamp(self) -> None:
        msg = record(log_append_time=True)
        assert msg.born_timestamp is None
        assert msg.store_timestamp == 1_700_000_000_000

    def test_derived_ids_differ_per_record(self) -> None:
        assert record(offset=1).msg_id != record(offset=2).msg_id
        assert record(partition=0).msg_id != record(partition=1).msg_id


class TestDecodeRocketMQHeaders:
    def test_properties(self) -> None:
        msg = record(
            [
                (PROPERTY_UNIQ_KEY, b"U1"),
                (PROPERTY_TAGS, b"TagA"),
                (PROPERTY_KEYS, b"k1 k2"),
                (PROPERTY_RECONSUME_TIME, b"4"),
                ("color", "grün".encode()),
            ]
        )
        assert msg.msg_id == "U1"
        assert msg.tags == "TagA"
        assert msg.keys == "k1 k2"
        assert msg.reconsume_times == 4
        assert msg.properties["color"] == "grün"
        assert msg.get_property("color") == "grün"
        assert msg.header_errors == ()

    def test_uniq_key_empty_falls_back_to_derived_id(self) -> None:
        assert record([(PROPERTY_UNIQ_KEY, b"")]).msg_id == "orders:2:7"

    def test_record_from_retry_topic_resets_topic(self) -> None:
        assert RETRY_KAFKA_TOPIC == "rmq.retry.cg"
        msg = record(
            [
                (PROPERTY_UNIQ_KEY, b"U1"),
                (PROPERTY_RETRY_TOPIC, b"orders"),
                (PROPERTY_RECONSUME_TIME, b"3"),
                (PROPERTY_ORIGIN_MESSAGE_ID, b"O1"),
            ],
            kafka_topic=RETRY_KAFKA_TOPIC,
        )
        assert msg.topic == "orders"  # resetRetryTopic
        assert msg.kafka_topic == RETRY_KAFKA_TOPIC
        assert msg.reconsume_times == 3
        assert msg.msg_id == "U1"
        assert msg.origin_message_id == "O1"
        assert msg.header_errors == ()

    def test_retry_record_without_retry_topic_keeps_logical_name(self) -> None:
        msg = record([(PROPERTY_RECONSUME_TIME, b"1")], kafka_topic=RETRY_KAFKA_TOPIC)
        assert msg.topic == retry_topic(GROUP)
        assert any(PROPERTY_RETRY_TOPIC in e for e in msg.header_errors)

    def test_retry_topic_header_ignored_on_a_normal_topic(self) -> None:
        msg = record([(PROPERTY_RETRY_TOPIC, b"elsewhere")], kafka_topic="orders")
        assert msg.topic == "orders"

    def test_dlq_topic_record_keeps_its_logical_name(self) -> None:
        msg = record([(PROPERTY_RETRY_TOPIC, b"orders")], kafka_topic=to_kafka(dlq_topic(GROUP)))
        assert msg.topic == dlq_topic(GROUP)

    def test_schedule_topic_record_topic_is_logical(self) -> None:
        msg = record(None, kafka_topic=to_kafka(schedule_topic(3, LEVELS)))
        assert msg.topic == "SCHEDULE_TOPIC_XXXX/L03-10s"

    def test_unmappable_kafka_topic_does_not_crash(self) -> None:
        msg = record(None, kafka_topic="rmq.weird")
        assert msg.topic == "rmq.weird"
        assert msg.msg_id == "rmq.weird:2:7"


class TestDecodeMalformed:
    @pytest.mark.parametrize("raw", [b"abc", b"-1", b"1.5", b"", b" ", b"+2", "\uff13".encode()])
    def test_bad_reconsume_time_reads_as_zero_with_a_note(self, raw: bytes) -> None:
        msg = record([(PROPERTY_RECONSUME_TIME, raw)])
        assert msg.reconsume_times == 0
        assert len(msg.header_errors) == 1
        assert PROPERTY_RECONSUME_TIME in msg.header_errors[0]
        assert repr(raw.decode()) in msg.header_errors[0]

    def test_bad_utf8_in_reconsume_time(self) -> None:
        msg = record([(PROPERTY_RECONSUME_TIME, b"\xff")])
        assert msg.reconsume_times == 0
        assert len(msg.header_errors) == 2  # not UTF-8, and not a count

    def test_bad_utf8_value(self) -> None:
        raw = b"ok\xff\xfe!"
        msg = record([("note", raw), ("other", b"x")])
        assert msg.properties["note"] == "ok\ufffd\ufffd!"
        assert msg.properties["other"] == "x"
        assert msg.raw_headers == (("note", raw), ("other", b"x"))
        assert len(msg.header_errors) == 1
        assert "note" in msg.header_errors[0]
        assert "UTF-8" in msg.header_errors[0]

    def test_bad_utf8_survives_retry_and_dlq_byte_exact(self) -> None:
        raw = b"\xc3\x28\x80 \xf0\x28\x8c\xbc"
        msg = record([("note", raw)])
        assert as_dict(retry(msg))["note"] == raw
        out = dlq_headers(msg, group=GROUP, reason="MAX_RECONSUME_TIMES", now_ms=5, failure=None)
        assert as_dict(out)["note"] == raw
        assert as_dict(forward_headers(msg.raw_headers))["note"] == raw

    def test_bad_utf8_survives_many_hops(self) -> None:
        raw = b"\xff\x00\xfe"
        headers: Headers = [("note", raw)]
        topic = "orders"
        for _ in range(5):
            msg = record(headers, kafka_topic=topic)
            headers = forward_headers(retry(msg))
            topic = RETRY_KAFKA_TOPIC
        assert as_dict(headers)["note"] == raw

    def test_duplicate_keys_last_wins(self) -> None:
        msg = record([("k", b"1"), ("x", b"x"), ("k", b"2")])
        assert msg.properties["k"] == "2"
        assert msg.raw_headers == (("k", b"1"), ("x", b"x"), ("k", b"2"))
        assert any("duplicate header k" in e for e in msg.header_errors)
        out = as_dict(retry(msg))
        assert out["k"] == b"2"

    def test_duplicate_reconsume_time_last_wins(self) -> None:
        msg = record([(PROPERTY_RECONSUME_TIME, b"9"), (PROPERTY_RECONSUME_TIME, b"2")])
        assert msg.reconsume_times == 2
        assert text(retry(msg), PROPERTY_RECONSUME_TIME) == "3"

    def test_duplicate_uniq_key_last_wins(self) -> None:
        msg = record([(PROPERTY_UNIQ_KEY, b"A"), (PROPERTY_UNIQ_KEY, b"B")])
        assert msg.msg_id == "B"

    def test_null_values_read_as_absent(self) -> None:
        msg = record(
            [
                ("n", None),
                (PROPERTY_RECONSUME_TIME, None),
                (PROPERTY_UNIQ_KEY, None),
                (PROPERTY_TAGS, None),
            ]
        )
        assert "n" not in msg.properties
        assert msg.reconsume_times == 0
        assert msg.msg_id == "orders:2:7"
        assert msg.tags is None
        assert msg.header_errors == ()
        assert ("n", None) in msg.raw_headers

    def test_null_after_value_removes_it(self) -> None:
        msg = record([("k", b"v"), ("k", None)])
        assert "k" not in msg.properties

    def test_value_after_null_is_kept(self) -> None:
        msg = record([("k", None), ("k", b"v")])
        assert msg.properties["k"] == "v"

    def test_null_user_header_survives_a_hop(self) -> None:
        msg = record([("n", None)])
        out = retry(msg)
        assert ("n", None) in out

    @pytest.mark.parametrize("raw", [b"x", b"-2", b"1.0"])
    def test_bad_max_reconsume_times_noted(self, raw: bytes) -> None:
        msg = record([(PROPERTY_MAX_RECONSUME_TIMES, raw)])
        assert msg.max_reconsume_times is None
        assert any(PROPERTY_MAX_RECONSUME_TIMES in e for e in msg.header_errors)

    @pytest.mark.parametrize(("raw", "expected"), [(b"-1", -1), (b"0", 0), (b"5", 5)])
    def test_good_max_reconsume_times(self, raw: bytes, expected: int) -> None:
        msg = record([(PROPERTY_MAX_RECONSUME_TIMES, raw)])
        assert msg.max_reconsume_times == expected
        assert msg.header_errors == ()

    def test_header_view_bytearray_values(self) -> None:
        view = HeaderView.read([("k", bytearray(b"v"))])  # type: ignore[list-item]
        assert view.raw == (("k", b"v"),)
        assert view.text == {"k": "v"}

    def test_header_view_last_raw_keeps_position_of_last(self) -> None:
        view = HeaderView.read([("a", b"1"), ("b", b"2"), ("a", b"3")])
        assert list(view.last_raw().items()) == [("b", b"2"), ("a", b"3")]

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(
                    [
                        PROPERTY_RECONSUME_TIME,
                        PROPERTY_UNIQ_KEY,
                        PROPERTY_RETRY_TOPIC,
                        PROPERTY_MAX_RECONSUME_TIMES,
                        PROPERTY_TAGS,
                        "u",
                    ]
                ),
                st.one_of(st.none(), st.binary(max_size=8)),
            ),
            max_size=8,
        ),
        st.sampled_from(["orders", RETRY_KAFKA_TOPIC]),
    )
    def test_decode_never_raises_and_hops_never_raise(
        self, headers: list[tuple[str, bytes | None]], kafka_topic: str
    ) -> None:
        msg = record(headers, kafka_topic=kafka_topic)
        assert msg.reconsume_times >= 0
        out = retry(msg)
        as_dict(out)
        assert text(out, PROPERTY_RECONSUME_TIME) == str(msg.reconsume_times + 1)
        dlq = dlq_headers(msg, group=GROUP, reason="R", now_ms=1, failure=None)
        as_dict(dlq)


# --- retry hop ----------------------------------------------------------------------------
class TestRetryHeaders:
    def test_from_a_plain_record(self) -> None:
        msg = record([("user", b"u")], partition=1, offset=99)
        out = retry(msg, level=4, due_ms=123_456, failure=Failure("ValueError", "boom"))
        d = as_dict(out)
        assert text(out, PROPERTY_RECONSUME_TIME) == "1"
        assert text(out, PROPERTY_RETRY_TOPIC) == "orders"
        assert text(out, PROPERTY_ORIGIN_MESSAGE_ID) == "orders:1:99"
        assert text(out, PROPERTY_UNIQ_KEY) == "orders:1:99"
        assert text(out, PROPERTY_REAL_TOPIC) == "%RETRY%cg"
        assert text(out, PROPERTY_DELAY_TIME_LEVEL) == "4"
        assert text(out, HEADER_DUE_MS) == "123456"
        assert text(out, HEADER_GROUP) == "cg"
        assert text(out, HEADER_ORIGIN_PARTITION) == "1"
        assert text(out, HEADER_ORIGIN_OFFSET) == "99"
        assert text(out, HEADER_FAILURE_TYPE) == "ValueError"
        assert text(out, HEADER_FAILURE_MESSAGE) == "boom"
        assert d["user"] == b"u"
        assert PROPERTY_REAL_QUEUE_ID not in d
        assert PROPERTY_TIMER_DELIVER_MS not in d
        assert HEADER_MALFORMED not in d
        assert HEADER_DLQ_REASON not in d

    def test_reconsume_time_is_n_plus_one(self) -> None:
        msg = record(
            [(PROPERTY_RECONSUME_TIME, b"5"), (PROPERTY_RETRY_TOPIC, b"orders")],
            kafka_topic=RETRY_KAFKA_TOPIC,
        )
        out = retry(msg)
        assert text(out, PROPERTY_RECONSUME_TIME) == "6"
        assert text(out, PROPERTY_RETRY_TOPIC) == "orders"

    def test_origin_message_id_kept(self) -> None:
        msg = record(
            [(PROPERTY_UNIQ_KEY, b"U2"), (PROPERTY_ORIGIN_MESSAGE_ID, b"FIRST")],
            kafka_topic=RETRY_KAFKA_TOPIC,
        )
        out = retry(msg)
        assert text(out, PROPERTY_ORIGIN_MESSAGE_ID) == "FIRST"
        assert text(out, PROPERTY_UNIQ_KEY) == "U2"

    def test_origin_message_id_is_uniq_key_on_first_retry(self) -> None:
        out = retry(record([(PROPERTY_UNIQ_KEY, b"U9")]))
        assert text(out, PROPERTY_ORIGIN_MESSAGE_ID) == "U9"

    def test_no_failure_no_failure_headers(self) -> None:
        d = as_dict(retry(record(None), failure=None))
        assert HEADER_FAILURE_TYPE not in d
        assert HEADER_FAILURE_MESSAGE not in d

    def test_stale_hop_headers_are_replaced(self) -> None:
        msg = record(
            [
                (PROPERTY_DELAY_TIME_LEVEL, b"17"),
                (PROPERTY_REAL_TOPIC, b"old"),
                (PROPERTY_REAL_QUEUE_ID, b"4"),
                (HEADER_DUE_MS, b"1"),
                (PROPERTY_TIMER_DELIVER_MS, b"2"),
                (HEADER_FAILURE_TYPE, b"Old"),
                (HEADER_DLQ_REASON, b"X"),
                (PROPERTY_RETRY_TOPIC, b"orders"),
            ],
            kafka_topic=RETRY_KAFKA_TOPIC,
        )
        out = retry(msg, level=5, due_ms=77, failure=None)
        d = as_dict(out)
        assert text(out, PROPERTY_DELAY_TIME_LEVEL) == "5"
        assert text(out, PROPERTY_REAL_TOPIC) == "%RETRY%cg"
        assert text(out, HEADER_DUE_MS) == "77"
        for gone in (
            PROPERTY_REAL_QUEUE_ID,
            PROPERTY_TIMER_DELIVER_MS,
            HEADER_FAILURE_TYPE,
            HEADER_DLQ_REASON,
        ):
            assert gone not in d

    def test_malformed_notes_recorded(self) -> None:
        msg = record([(PROPERTY_RECONSUME_TIME, b"nope")])
        note = text(retry(msg), HEADER_MALFORMED)
        assert note is not None
        assert PROPERTY_RECONSUME_TIME in note

    def test_malformed_note_truncated(self) -> None:
        msg = record([(f"h{i}", b"\xff") for i in range(200)])
        note = text(retry(msg), HEADER_MALFORMED)
        assert note is not None
        assert len(note) == FAILURE_MESSAGE_MAX_CHARS

    def test_user_tags_and_keys_kept(self) -> None:
        msg = record([(PROPERTY_TAGS, b"T"), (PROPERTY_KEYS, b"a b"), ("biz", b"1")])
        d = as_dict(retry(msg))
        assert d[PROPERTY_TAGS] == b"T"
        assert d[PROPERTY_KEYS] == b"a b"
        assert d["biz"] == b"1"

    def test_per_message_max_kept(self) -> None:
        msg = record([(PROPERTY_MAX_RECONSUME_TIMES, b"3")])
        assert text(retry(msg), PROPERTY_MAX_RECONSUME_TIMES) == "3"


class TestSixteenHops:
    """A poison message through the whole ladder: headers never pile up."""

    def test_header_count_constant_and_lineage_kept(self) -> None:
        first_headers: list[tuple[str, bytes | None]] = [
            (PROPERTY_TAGS, b"TagA"),
            (PROPERTY_KEYS, b"k1 k2"),
            ("biz", b"42"),
            ("raw", b"\xff\xfe"),  # bad UTF-8: a note on every hop
        ]
        msg = record(first_headers, kafka_topic="orders", partition=0, offset=5)
        origin = msg.msg_id
        assert origin == "orders:0:5"
        counts: list[int] = []
        sizes: list[int] = []
        delays: list[int] = []
        offset = 0
        while True:
            dest = route_failed(
                reconsume_times=msg.reconsume_times,
                max_reconsume_times=16,
                delay_level_when_next_consume=0,
                levels=LEVELS,
                message_max_reconsume_times=msg.max_reconsume_times,
            )
            if isinstance(dest, DeadLetter):
                break
            assert isinstance(dest, RetryLater)
            delays.append(dest.delay_ms)
            parked = retry(msg, level=dest.level, due_ms=offset, failure=Failure("E", "x"))
            counts.append(len(parked))
            sizes.append(sum(len(k) + len(v or b"") for k, v in parked))
            as_dict(parked)
            assert text(parked, PROPERTY_RECONSUME_TIME) == str(dest.reconsume_times)
            # the schedule service forwards it (minus DELAY) to the retry topic
            forwarded = forward_headers(parked)
            assert PROPERTY_DELAY_TIME_LEVEL not in as_dict(forwarded)
            offset += 1
            msg = record(forwarded, kafka_topic=RETRY_KAFKA_TOPIC, partition=0, offset=offset)
            assert msg.topic == "orders"
            assert msg.reconsume_times == dest.reconsume_times
            assert msg.msg_id == origin
            assert msg.origin_message_id == origin
            assert msg.tags == "TagA"
            assert msg.keys == "k1 k2"
            assert msg.properties["biz"] == "42"
        assert len(counts) == 16
        assert len(set(counts)) == 1, counts
        assert max(sizes) - min(sizes) <= 8, sizes  # only the digits of counters grow
        assert delays[0] == 10_000
        assert delays[-1] == 7_200_000
        assert msg.reconsume_times == 16
        assert dest.reconsume_times == 17
        assert dest.reason is DeadLetterReason.MAX_RECONSUME_TIMES

        dead = dlq_headers(msg, group=GROUP, reason=dest.reason.value, now_ms=9, failure=None)
        d = as_dict(dead)
        assert text(dead, PROPERTY_RECONSUME_TIME) == "17"
        assert text(dead, PROPERTY_DLQ_ORIGIN_TOPIC) == "orders"
        assert text(dead, PROPERTY_DLQ_ORIGIN_MESSAGE_ID) == origin
        assert d["raw"] == b"\xff\xfe"
        assert len(dead) <= counts[0] + 4


# --- DLQ hop -------------------------------------------------------------------------------
class TestDlqHeaders:
    def test_says_why_and_from_where(self) -> None:
        msg = record(
            [
                (PROPERTY_UNIQ_KEY, b"U"),
                (PROPERTY_ORIGIN_MESSAGE_ID, b"O"),
                (PROPERTY_RETRY_TOPIC, b"orders"),
                (PROPERTY_RECONSUME_TIME, b"16"),
                (PROPERTY_REAL_TOPIC, b"%RETRY%cg"),
                (PROPERTY_REAL_QUEUE_ID, b"3"),
                (HEADER_DUE_MS, b"5"),
                ("biz", b"1"),
            ],
            kafka_topic=RETRY_KAFKA_TOPIC,
            partition=3,
            offset=8,
        )
        out = dlq_headers(
            msg,
            group=GROUP,
            reason=DeadLetterReason.MAX_RECONSUME_TIMES.value,
            now_ms=1_234,
            failure=Failure.of(KeyError("missing")),
        )
        d = as_dict(out)
        assert text(out, PROPERTY_DLQ_ORIGIN_TOPIC) == "orders"
        assert text(out, PROPERTY_DLQ_ORIGIN_MESSAGE_ID) == "O"
        assert text(out, PROPERTY_ORIGIN_MESSAGE_ID) == "O"
        assert text(out, PROPERTY_RETRY_TOPIC) == "orders"
        assert text(out, HEADER_DLQ_REASON) == "MAX_RECONSUME_TIMES"
        assert text(out, HEADER_DLQ_TIME_MS) == "1234"
        assert text(out, HEADER_GROUP) == "cg"
        assert text(out, PROPERTY_RECONSUME_TIME) == "17"
        assert text(out, HEADER_ORIGIN_PARTITION) == "3"
        assert text(out, HEADER_ORIGIN_OFFSET) == "8"
        assert text(out, HEADER_FAILURE_TYPE) == "KeyError"
        assert text(out, HEADER_FAILURE_MESSAGE) == "'missing'"
        assert text(out, PROPERTY_UNIQ_KEY) == "U"
        assert d["biz"] == b"1"
        # its last hop, kept as RocketMQ's dead letter keeps it
        assert text(out, PROPERTY_REAL_TOPIC) == "%RETRY%cg"
        assert text(out, PROPERTY_REAL_QUEUE_ID) == "3"
        assert PROPERTY_MAX_RECONSUME_TIMES not in d
        for gone in (PROPERTY_DELAY_TIME_LEVEL, HEADER_DUE_MS):
            assert gone not in d

    def test_an_orderly_dead_letter_is_its_own_last_hop(self) -> None:
        """RocketMQ's orderly send-back: ``RECONSUME_TIME`` of the last delivery, the
        consumer's maximum, ``REAL_TOPIC`` the DLQ (no queue: the partitioner picks it)."""
        msg = record(
            [(PROPERTY_REAL_TOPIC, b"orders"), (PROPERTY_REAL_QUEUE_ID, b"2")], offset=4
        ).redelivered()  # a scheduled send, suspended once: reconsume_times 1 ...
        msg = msg.redelivered().redelivered()  # ... then 3
        dest = DeadLetter(
            DeadLetterReason.MAX_RECONSUME_TIMES, 3, orderly=True, max_reconsume_times=3
        )
        topics = hops.GroupTopics(GROUP, LEVELS)
        out = hops.send_back(msg, dest, topics, now_ms=1, failure=None)
        assert out.topic == to_kafka(dlq_topic(GROUP))
        assert text(out.headers, PROPERTY_RECONSUME_TIME) == "3"
        assert text(out.headers, PROPERTY_MAX_RECONSUME_TIMES) == "3"
        assert text(out.headers, PROPERTY_REAL_TOPIC) == "%DLQ%cg"
        assert PROPERTY_REAL_QUEUE_ID not in as_dict(out.headers)
        assert record(out.headers).reconsume_times == 3

    def test_an_orderly_dead_letter_keeps_the_messages_own_maximum(self) -> None:
        msg = record([(PROPERTY_MAX_RECONSUME_TIMES, b"1")]).redelivered()
        dest = DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 1, orderly=True)
        out = hops.send_back(msg, dest, hops.GroupTopics(GROUP, LEVELS), now_ms=1, failure=None)
        assert text(out.headers, PROPERTY_MAX_RECONSUME_TIMES) == "1"
        assert text(out.headers, PROPERTY_RECONSUME_TIME) == "1"

    def test_a_concurrent_dead_letter_counts_one_more(self) -> None:
        msg = record([(PROPERTY_RECONSUME_TIME, b"3"), (PROPERTY_REAL_TOPIC, b"%RETRY%cg")])
        dest = route_failed(
            reconsume_times=3, max_reconsume_times=3, delay_level_when_next_consume=0, levels=LEVELS
        )
        out = hops.send_back(msg, dest, hops.GroupTopics(GROUP, LEVELS), now_ms=1, failure=None)
        assert text(out.headers, PROPERTY_RECONSUME_TIME) == "4"
        assert text(out.headers, PROPERTY_REAL_TOPIC) == "%RETRY%cg"
        assert PROPERTY_MAX_RECONSUME_TIMES not in as_dict(out.headers)

    def test_from_plain_record(self) -> None:
        msg = record(None, partition=0, offset=1)
        out = dlq_headers(msg, group=GROUP, reason="LISTENER_REQUESTED", now_ms=0, failure=None)
        assert text(out, PROPERTY_DLQ_ORIGIN_MESSAGE_ID) == "orders:0:1"
        assert text(out, PROPERTY_DLQ_ORIGIN_TOPIC) == "orders"
        assert text(out, HEADER_DLQ_REASON) == "LISTENER_REQUESTED"
        assert text(out, PROPERTY_RECONSUME_TIME) == "1"
        assert HEADER_FAILURE_TYPE not in as_dict(out)

    def test_failure_message_truncated(self) -> None:
        msg = record(None)
        failure = Failure("RuntimeError", "x" * 10_000)
        out = dlq_headers(msg, group=GROUP, reason="R", now_ms=0, failure=failure)
        message = text(out, HEADER_FAILURE_MESSAGE)
        assert message is not None
        assert len(message) == FAILURE_MESSAGE_MAX_CHARS
        assert message.endswith("…")
        assert message.startswith("xxx")


class TestFailure:
    def test_of_exception(self) -> None:
        class Boom(Exception):
            pass

        failure = Failure.of(Boom("bad thing"))
        assert failure.type.endswith("Boom")
        assert failure.message == "bad thing"

    def test_default_message_empty(self) -> None:
        assert Failure("TIMEOUT").truncated() == ""

    @pytest.mark.parametrize(
        ("length", "expected"),
        [
            (0, 0),
            (FAILURE_MESSAGE_MAX_CHARS - 1, FAILURE_MESSAGE_MAX_CHARS - 1),
            (FAILURE_MESSAGE_MAX_CHARS, FAILURE_MESSAGE_MAX_CHARS),
            (FAILURE_MESSAGE_MAX_CHARS + 1, FAILURE_MESSAGE_MAX_CHARS),
            (100_000, FAILURE_MESSAGE_MAX_CHARS),
        ],
    )
    def test_truncation(self, length: int, expected: int) -> None:
        out = Failure("E", "é" * length).truncated()
        assert len(out) == expected
        assert out.endswith("…") == (length > FAILURE_MESSAGE_MAX_CHARS)


# --- other header builders --------------------------------------------------------------------
class TestForwardHeaders:
    def test_drops_delay_and_collapses_duplicates(self) -> None:
        raw = [
            ("a", b"1"),
            (PROPERTY_DELAY_TIME_LEVEL, b"3"),
            ("b", b"2"),
            ("a", b"3"),
            (PROPERTY_DELAY_TIME_LEVEL, b"4"),
            (PROPERTY_REAL_TOPIC, b"orders"),
        ]
        assert forward_headers(raw) == [("b", b"2"), ("a", b"3"), (PROPERTY_REAL_TOPIC, b"orders")]

    def test_keeps_everything_else(self) -> None:
        raw = [(HEADER_DUE_MS, b"5"), ("n", None), ("bad", b"\xff")]
        assert forward_headers(raw) == raw

    def test_empty(self) -> None:
        assert forward_headers([]) == []


class TestEncodeMessageHeaders:
    def test_tags_keys_uniq_key_and_properties(self) -> None:
        msg = Message(
            topic="orders",
            body=b"b",
            tags="TagA",
            keys=["k1", "k2", "k3"],
            properties={"biz": "1", "ünï": "çødé"},
        )
        out = encode_message_headers(msg, "MSGID")
        assert as_dict(out) == {
            "biz": b"1",
            "ünï": "çødé".encode(),
            PROPERTY_TAGS: b"TagA",
            PROPERTY_KEYS: b"k1 k2 k3",
            PROPERTY_UNIQ_KEY: b"MSGID",
        }

    def test_keys_as_string(self) -> None:
        out = encode_message_headers(Message(topic="t", body=b"", keys="a b"), "id")
        assert as_dict(out)[PROPERTY_KEYS] == b"a b"

    def test_no_tags_no_keys(self) -> None:
        out = encode_message_headers(Message(topic="t", body=b""), "id")
        assert out == [(PROPERTY_UNIQ_KEY, b"id")]

    def test_system_properties_cannot_be_spoofed(self) -> None:
        props = {name: "spoof" for name in SYSTEM_HEADERS}
        props["user"] = "u"
        out = encode_message_headers(Message(topic="t", body=b"", properties=props), "real")
        d = as_dict(out)
        assert d[PROPERTY_UNIQ_KEY] == b"real"
        assert set(d) == {"user", PROPERTY_UNIQ_KEY}

    def test_max_reconsume_times_property_travels(self) -> None:
        msg = Message(topic="t", body=b"", properties={PROPERTY_MAX_RECONSUME_TIMES: "2"})
        out = encode_message_headers(msg, "id")
        assert as_dict(out)[PROPERTY_MAX_RECONSUME_TIMES] == b"2"
        assert record(out).max_reconsume_times == 2

    def test_round_trip_through_decode(self) -> None:
        msg = Message(topic="orders", body=b"x", tags="T", keys=["a", "b"], properties={"p": "v"})
        ext = record(encode_message_headers(msg, "ID1"))
        assert ext.msg_id == "ID1"
        assert ext.tags == "T"
        assert ext.keys == "a b"
        assert ext.properties["p"] == "v"
        assert ext.header_errors == ()


class TestScheduleAndReplaceHeaders:
    def test_schedule_headers(self) -> None:
        base = {"u": b"1", PROPERTY_DELAY_TIME_LEVEL: b"9"}
        out = schedule_headers(
            base, real_topic="orders", real_queue_id=2, level=4, due_ms=100, deliver_time_ms=555
        )
        d = as_dict(out)
        assert d == {
            "u": b"1",
            PROPERTY_DELAY_TIME_LEVEL: b"4",
            PROPERTY_REAL_TOPIC: b"orders",
            PROPERTY_REAL_QUEUE_ID: b"2",
            HEADER_DUE_MS: b"100",
            PROPERTY_TIMER_DELIVER_MS: b"555",
        }
        assert base == {"u": b"1", PROPERTY_DELAY_TIME_LEVEL: b"9"}  # input not mutated

    def test_schedule_headers_optional_fields_removed(self) -> None:
        base = {PROPERTY_REAL_QUEUE_ID: b"7", PROPERTY_TIMER_DELIVER_MS: b"1"}
        d = as_dict(schedule_headers(base, real_topic="t", real_queue_id=None, level=1, due_ms=0))
        assert PROPERTY_REAL_QUEUE_ID not in d
        assert PROPERTY_TIMER_DELIVER_MS not in d

    def test_schedule_headers_keep_the_born_time_for_the_forwarded_copy(self) -> None:
        """Issue 11 #11: a scheduled message reported its forward time as born_timestamp;
        the entry now carries the send time, and an older born time is never replaced."""
        d = as_dict(
            schedule_headers(
                {}, real_topic="t", real_queue_id=None, level=1, due_ms=9, born_ms=1234
            )
        )
        assert d[HEADER_ORIGIN_BORN_MS] == b"1234"
        kept = {HEADER_ORIGIN_BORN_MS: b"77"}
        d = as_dict(
            schedule_headers(
                kept, real_topic="t", real_queue_id=None, level=1, due_ms=9, born_ms=1234
            )
        )
        assert d[HEADER_ORIGIN_BORN_MS] == b"77"

    def test_a_forward_records_the_partition_it_went_to(self) -> None:
        """Issue 11 #15: RocketMQ keeps REAL_QID on a delivered scheduled message; a forward
        without one records the partition it chose (the key's partition, stable per key)."""
        raw = [(PROPERTY_DELAY_TIME_LEVEL, b"3"), (PROPERTY_UNIQ_KEY, b"ID")]
        chosen = hops.forward(raw, b"v", b"k", real_topic="t", real_queue_id=None, partitions=5)
        again = hops.forward(raw, b"v", b"k", real_topic="t", real_queue_id=None, partitions=5)
        assert chosen.partition == again.partition and 0 <= chosen.partition < 5
        d = as_dict(chosen.headers)
        assert d[PROPERTY_REAL_QUEUE_ID] == str(chosen.partition).encode()
        assert PROPERTY_DELAY_TIME_LEVEL not in d
        pinned = hops.forward(raw, b"v", None, real_topic="t", real_queue_id=4, partitions=5)
        assert pinned.partition == 4 and as_dict(pinned.headers)[PROPERTY_REAL_QUEUE_ID] == b"4"

    def test_replace_headers(self) -> None:
        raw = [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"\xff")]
        out = replace_headers(raw, {"b": None, "d": 4, "a": "x"})
        assert out == [("a", b"x"), ("c", b"\xff"), ("d", b"4")]


class TestOmittedBody:
    """``RMQ_BODY_OMITTED``: where a dead letter's body stays when the DLQ refused it."""

    @given(
        st.integers(min_value=0, max_value=2**40),
        st.text("abcXYZ019._-", min_size=1, max_size=249),
        st.integers(min_value=0, max_value=2**31 - 1),
        st.integers(min_value=0, max_value=2**62),
    )
    def test_round_trip(self, size: int, topic: str, partition: int, offset: int) -> None:
        body = OmittedBody(size, topic, partition, offset)
        key, value = body.header()
        assert key == HEADER_BODY_OMITTED
        assert OmittedBody.of({key: value.decode()}) == body

    def test_reads_the_documented_format(self) -> None:
        text = "5120 bytes; body at orders.v1[3]@42"
        assert OmittedBody.of({HEADER_BODY_OMITTED: text}) == OmittedBody(5120, "orders.v1", 3, 42)

    def test_absent_means_the_body_is_there(self) -> None:
        assert OmittedBody.of({"u": "1"}) is None

    @pytest.mark.parametrize(
        "bad",
        [
            "",
            "5120 bytes",
            "x bytes; body at t[0]@1",
            "1 bytes; body at t[0]@-1",
            "1 bytes; body at t/x[0]@1",
            "1 bytes; body at t[0]@1\n",
            "1 bytes; body at t[2147483648]@1",
            "1" * 5000 + " bytes; body at t[0]@1",
        ],
    )
    def test_malformed_names_the_header_and_value(self, bad: str) -> None:
        with pytest.raises(MalformedHeaderError) as info:
            OmittedBody.of({HEADER_BODY_OMITTED: bad})
        assert info.value.field == HEADER_BODY_OMITTED
        assert info.value.value == bad


class TestRedriveHeaders:
    def test_a_redriven_dead_letter_starts_a_new_life(self) -> None:
        msg = record(
            [
                ("u", b"1"),
                (PROPERTY_UNIQ_KEY, b"id-1"),
                (PROPERTY_REAL_TOPIC, b"%RETRY%cg"),
                (PROPERTY_REAL_QUEUE_ID, b"0"),
            ],
            kafka_topic="orders",
        )
        dead = dlq_headers(
            msg, group=GROUP, reason="MAX_RECONSUME_TIMES", now_ms=5, failure=Failure("E", "x")
        )
        omitted = OmittedBody(9, "orders", 2, 7).header()
        out = as_dict(redrive_headers([*dead, omitted], "orders"))
        assert out[PROPERTY_RECONSUME_TIME] == b"0"
        assert out[PROPERTY_RETRY_TOPIC] == b"orders"
        assert out["u"] == b"1" and out[PROPERTY_UNIQ_KEY] == b"id-1"  # identity and user kept
        for gone in (
            PROPERTY_DLQ_ORIGIN_TOPIC,
            HEADER_DLQ_REASON,
            HEADER_DLQ_TIME_MS,
            HEADER_FAILURE_TYPE,
            HEADER_FAILURE_MESSAGE,
            HEADER_BODY_OMITTED,
            PROPERTY_REAL_TOPIC,  # where its former life's last hop went
            PROPERTY_REAL_QUEUE_ID,
        ):
            assert gone not in out, gone


# --- the hot path against its plain definition -----------------------------------------------


def _spec_retry_headers(
    msg: MessageExt, *, group: str, level: int, due_ms: int, failure: Failure | None
) -> list[tuple[str, bytes | None]]:
    """What a retry copy's headers are, written plainly: the user headers (last value per
    key, system ones dropped), the lineage, then the delay-topic entry's own."""
    out = dict(HeaderView.read(msg.raw_headers).last_raw())
    for key in SYSTEM_HEADERS:
        out.pop(key, None)

    def put(key: str, value: object) -> None:
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value).encode("utf-8")

    put(PROPERTY_UNIQ_KEY, msg.msg_id)
    put(PROPERTY_ORIGIN_MESSAGE_ID, msg.origin_message_id)
    put(PROPERTY_RETRY_TOPIC, msg.topic)
    put(PROPERTY_RECONSUME_TIME, msg.reconsume_times + 1)
    put(HEADER_GROUP, group)
    put(HEADER_ORIGIN_PARTITION, msg.queue_id)
    put(HEADER_ORIGIN_OFFSET, msg.queue_offset)
    if HEADER_ORIGIN_BORN_MS not in out:
        put(HEADER_ORIGIN_BORN_MS, msg.born_timestamp)
    if failure is not None:
        put(HEADER_FAILURE_TYPE, failure.type)
        put(HEADER_FAILURE_MESSAGE, failure.truncated())
    if msg.header_errors:
        put(HEADER_MALFORMED, "; ".join(msg.header_errors)[:FAILURE_MESSAGE_MAX_CHARS])
    put(PROPERTY_REAL_TOPIC, retry_topic(group))
    put(PROPERTY_REAL_QUEUE_ID, None)
    put(PROPERTY_DELAY_TIME_LEVEL, level)
    put(HEADER_DUE_MS, due_ms)
    put(PROPERTY_TIMER_DELIVER_MS, None)
    return list(out.items())


_header_names = st.sampled_from(
    [
        "user",
        "other",
        PROPERTY_UNIQ_KEY,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_REAL_QUEUE_ID,
        HEADER_ORIGIN_BORN_MS,
        PROPERTY_MAX_RECONSUME_TIMES,
        HEADER_FAILURE_TYPE,
    ]
)
_header_values = st.none() | st.sampled_from([b"1", b"12", b" 3", b"x", b"\xff", b"", b"-1"])


@given(
    headers=st.lists(st.tuples(_header_names, _header_values), max_size=8),
    failure=st.none() | st.builds(Failure, st.sampled_from(["E", ""]), st.text(max_size=3)),
    retry_record=st.booleans(),
)
def test_retry_headers_are_their_plain_definition(
    headers: list[tuple[str, bytes | None]], failure: Failure | None, retry_record: bool
) -> None:
    """The send-back headers are built straight into one dict on the hot path; whatever the
    headers of the message, they equal the plain definition, in the same order."""
    kafka_topic = RETRY_KAFKA_TOPIC if retry_record else "orders"
    if retry_record:
        headers = [(PROPERTY_RETRY_TOPIC, b"orders"), *headers]
    msg = record(headers, kafka_topic=kafka_topic)
    got = retry(msg, failure=failure, level=4, due_ms=1_234)
    spec = record(headers, kafka_topic=kafka_topic)
    assert got == _spec_retry_headers(spec, group=GROUP, level=4, due_ms=1_234, failure=failure)


# --- the fused retry copy (the consumer's common send-back) ----------------------------------


def _copier() -> Any:
    return hops.retry_copier(hops.GroupTopics(GROUP, LEVELS))


@given(
    headers=st.lists(st.tuples(_header_names, _header_values), max_size=8),
    failure=st.none() | st.builds(Failure, st.sampled_from(["E", ""]), st.text(max_size=3)),
    retry_record=st.booleans(),
    level=st.integers(1, 4),
    key=st.none() | st.just(b"k"),
)
def test_the_fused_retry_copy_is_the_general_one(
    headers: list[tuple[str, bytes | None]],
    failure: Failure | None,
    retry_record: bool,
    level: int,
    key: bytes | None,
) -> None:
    """What a consumer of the delay and retry topics sees does not depend on which path
    built the copy: topic, body, key, headers (values and order) and partition are those of
    :func:`hops.send_back`; a message with malformed headers is left to the general path."""
    kafka_topic = RETRY_KAFKA_TOPIC if retry_record else "orders"
    if retry_record:
        headers = [(PROPERTY_RETRY_TOPIC, b"orders"), *headers]
    topics = hops.GroupTopics(GROUP, LEVELS)
    dest = RetryLater(level, LEVELS.delay_ms(level), 0)
    copier = hops.retry_copier(topics)
    for due in (1_000, 1_000, 2_000):  # a due time again, then another one
        got = copier.copy(record(headers, kafka_topic=kafka_topic, key=key), level, due, failure)
        msg = record(headers, kafka_topic=kafka_topic, key=key)
        general = hops.send_back(msg, dest, topics, now_ms=due - dest.delay_ms, failure=failure)
        if msg.header_errors:
            assert got is None
        else:
            assert got == tuple(general)


@pytest.mark.parametrize("headers", [None, [("u", b"1"), (PROPERTY_UNIQ_KEY, b"id-9")]])
def test_the_fused_retry_copy_of_a_confluent_kafka_record(headers: Headers | None) -> None:
    """Records as the consumer reads them (confluent-kafka's, viewed lazily), with and
    without headers, and read as they come: the copy is the general one."""
    from confluent_kafka import Message as KafkaMessage

    from adapter.io.records import TopicNames

    def view() -> MessageExt:
        kmsg = KafkaMessage(
            topic="orders",
            partition=1,
            offset=5,
            value=b"v",
            key=None,
            headers=list(headers) if headers else None,
            timestamp=(1, 1_700_000_000_123),
        )
        return TopicNames(GROUP).view(kmsg)

    topics = hops.GroupTopics(GROUP, LEVELS)
    dest = RetryLater(3, LEVELS.delay_ms(3), 0)
    failure = Failure("NotAcknowledged", "x")
    got = hops.retry_copier(topics).copy(view(), 3, 10_000 + dest.delay_ms, failure)
    assert got == tuple(hops.send_back(view(), dest, topics, now_ms=10_000, failure=failure))


def test_the_fused_retry_copy_keeps_a_keyword_messages_origin() -> None:
    """A message built by hand (no raw headers) whose properties name its origin."""
    msg = MessageExt(
        topic="orders",
        body=b"b",
        msg_id="id-2",
        queue_id=0,
        queue_offset=3,
        kafka_topic="orders",
        properties={PROPERTY_ORIGIN_MESSAGE_ID: "id-1"},
    )
    got = _copier().copy(msg, 2, 5, None)
    assert got is not None
    assert as_dict(got[3])[PROPERTY_ORIGIN_MESSAGE_ID] == b"id-1"
    topics = hops.GroupTopics(GROUP, LEVELS)
    dest = RetryLater(2, LEVELS.delay_ms(2), 0)
    assert got == tuple(hops.send_back(msg, dest, topics, now_ms=5 - dest.delay_ms, failure=None))


def test_an_unknown_level_is_left_to_the_general_path() -> None:
    assert _copier().copy(record(), LEVELS.max_level + 1, 5, None) is None
    assert _copier().copy(record(), 0, 5, None) is None


@pytest.mark.parametrize("timestamp", [(0, 0), (1, 1_700_000_000_123), (2, 1_700_000_000_456)])
@pytest.mark.parametrize("key", [None, b"k", "text-key"])
@pytest.mark.parametrize("failure", [None, Failure("NotAcknowledged", "x")])
def test_the_fused_copy_of_a_plain_record_is_the_general_one(
    timestamp: tuple[int, int], key: bytes | str | None, failure: Failure | None
) -> None:
    """A record without headers, read from a topic that is not a retry topic, is copied
    without decoding it (its id is its position): with any timestamp type (create time
    keeps the born time, log-append time and none do not), with or without a key, with or
    without a failure, the copy is the general one; and the message reads the same after."""
    from confluent_kafka import Message as KafkaMessage

    from adapter.io.records import TopicNames

    def view() -> MessageExt:
        kmsg = KafkaMessage(
            topic="orders", partition=1, offset=5, value=b"v", key=key, timestamp=timestamp
        )
        return TopicNames(GROUP).view(kmsg)

    topics = hops.GroupTopics(GROUP, LEVELS)
    dest = RetryLater(2, LEVELS.delay_ms(2), 0)
    msg = view()
    assert msg.retry_fields() == (0, None, 5, 1)
    got = hops.retry_copier(topics).copy(msg, 2, 10_000 + dest.delay_ms, failure)
    assert got == tuple(hops.send_back(view(), dest, topics, now_ms=10_000, failure=failure))
    assert got is not None and as_dict(got[3])[PROPERTY_UNIQ_KEY] == b"orders:1:5"
    assert (msg.msg_id, msg.reconsume_times, msg.raw_headers) == ("orders:1:5", 0, ())


# --- what the mutation run found untested (2026-11-28) ---------------------------------------


_LONG_GROUP = "G" * 245  # its retry and DLQ names are digest-shortened on Kafka


@pytest.mark.parametrize("logical_of", [retry_topic, dlq_topic])
def test_a_shortened_topic_is_named_by_the_group_that_wrote_it(logical_of: Any) -> None:
    kafka_topic = to_kafka(logical_of(_LONG_GROUP))
    assert logical_topic(kafka_topic, _LONG_GROUP) == logical_of(_LONG_GROUP)
    assert logical_topic(kafka_topic, "other-group") == kafka_topic
    assert logical_topic(kafka_topic) == kafka_topic
    # a record of it names its group in RMQ_GROUP
    msg = record([(HEADER_GROUP, _LONG_GROUP.encode())], kafka_topic=kafka_topic)
    assert msg.topic == logical_of(_LONG_GROUP)


def test_a_shortened_retry_name_is_not_taken_for_another_groups_dlq() -> None:
    kafka_topic = to_kafka(retry_topic(_LONG_GROUP))
    assert logical_topic(kafka_topic, _LONG_GROUP + "x") == kafka_topic


@pytest.mark.parametrize(
    ("timestamp_ms", "log_append_time", "born", "store"),
    [
        (1_700_000_000_000, False, 1_700_000_000_000, 1_700_000_000_000),
        (0, False, 0, 0),  # the epoch is a time, not "none"
        (1_700_000_000_000, True, None, 1_700_000_000_000),
        (None, False, None, None),
    ],
)
def test_a_records_timestamp_is_its_born_time_unless_the_log_appended_it(
    timestamp_ms: int | None, log_append_time: bool, born: int | None, store: int | None
) -> None:
    msg = decode_record(
        kafka_topic="orders", partition=0, offset=0, value=b"", key=None, headers=None,
        timestamp_ms=timestamp_ms, **({"log_append_time": True} if log_append_time else {}),
    )  # fmt: skip
    assert (msg.born_timestamp, msg.store_timestamp) == (born, store)


def test_a_dead_letter_keeps_the_first_born_time_and_notes_malformed_headers() -> None:
    kept = record(
        [
            (HEADER_ORIGIN_BORN_MS, b"42"),
            (PROPERTY_RECONSUME_TIME, b"x"),
            (PROPERTY_MAX_RECONSUME_TIMES, b"y"),
        ]
    )
    out = dlq_headers(kept, group=GROUP, reason="R", now_ms=0, failure=None)
    assert text(out, HEADER_ORIGIN_BORN_MS) == "42"
    assert text(out, HEADER_MALFORMED) == (
        "RECONSUME_TIME='x' is not a count: read as 0; "
        "MAX_RECONSUME_TIMES='y' is not valid: group maximum used"
    )
    plain = record(timestamp_ms=1_700_000_000_000)
    out = dlq_headers(plain, group=GROUP, reason="R", now_ms=0, failure=None)
    assert text(out, HEADER_ORIGIN_BORN_MS) == "1700000000000"
    assert HEADER_MALFORMED not in as_dict(out)
    unborn = record(timestamp_ms=None)
    assert HEADER_ORIGIN_BORN_MS not in as_dict(
        dlq_headers(unborn, group=GROUP, reason="R", now_ms=0, failure=None)
    )


def test_a_repeated_user_header_goes_where_its_last_value_was() -> None:
    msg = record([("a", b"1"), ("b", b"2"), ("a", b"3")])
    out = dlq_headers(msg, group=GROUP, reason="R", now_ms=0, failure=None)
    assert [(k, v) for k, v in out if k in ("a", "b")] == [("b", b"2"), ("a", b"3")]
    assert replace_headers([("a", b"1"), ("b", b"2"), ("a", b"3")], {}) == [
        ("b", b"2"),
        ("a", b"3"),
    ]


def test_copies_of_one_due_time_to_two_levels_go_to_each_level() -> None:
    """The copier keeps the last level and due time; either changing is a new destination."""
    topics = hops.GroupTopics(GROUP, LEVELS)
    copier = hops.retry_copier(topics)
    for due in (5_000, 2):  # 2: a due time equal to the next level's number
        first = copier.copy(record(), 1, due, None)
        second = copier.copy(record(), 2, due, None)
        assert first is not None and second is not None
        assert (first[0], second[0]) == (topics.level_topic(1), topics.level_topic(2))
        assert text(second[3], PROPERTY_DELAY_TIME_LEVEL) == "2"
