"""Unit tests for :mod:`adapter.core.message` (``Message`` and ``MessageExt``)."""

from __future__ import annotations

import pytest

from adapter.constants import (
    HEADER_ORIGIN_BORN_MS,
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    SYSTEM_HEADERS,
)
from adapter.core.filter import TagFilter
from adapter.core.message import (
    Message,
    MessageExt,
    body_bytes,
    plain_records,
    split_fetch,
    start_consuming,
    view_of,
)

pytestmark = pytest.mark.unit


def ext(**kw: object) -> MessageExt:
    args: dict[str, object] = {
        "topic": "orders",
        "body": b"b",
        "msg_id": "orders:0:1",
        "queue_id": 0,
        "queue_offset": 1,
        "kafka_topic": "orders",
    }
    args.update(kw)
    return MessageExt(**args)  # type: ignore[arg-type]


class TestMessage:
    def test_defaults(self) -> None:
        m = Message(topic="t", body=b"x")
        assert m.tags is None
        assert m.keys is None
        assert m.keys_text is None
        assert m.properties == {}
        assert m.delay_time_level == 0
        assert m.deliver_time_ms is None
        assert m.partition is None
        assert m.sharding_key is None

    def test_keyword_only(self) -> None:
        with pytest.raises(TypeError):
            Message("t", b"x")  # type: ignore[call-arg]

    def test_properties_not_shared(self) -> None:
        a, b = Message(topic="t", body=b""), Message(topic="t", body=b"")
        a.put_user_property("k", "v")
        assert b.properties == {}

    @pytest.mark.parametrize(
        ("keys", "text"),
        [
            (None, None),
            ("a", "a"),
            ("a b", "a b"),
            (["a", "b", "c"], "a b c"),
            (("x",), "x"),
            ([], ""),
        ],
    )
    def test_keys_text(self, keys: object, text: str | None) -> None:
        assert Message(topic="t", body=b"", keys=keys).keys_text == text  # type: ignore[arg-type]

    def test_get_property(self) -> None:
        m = Message(topic="t", body=b"", tags="T", keys=["k1", "k2"])
        m.put_user_property("color", "red")
        assert m.get_property(PROPERTY_TAGS) == "T"
        assert m.get_property(PROPERTY_KEYS) == "k1 k2"
        assert m.get_property("color") == "red"
        assert m.get_property("missing") is None


class TestMessageExt:
    def test_origin_message_id_falls_back_to_msg_id(self) -> None:
        assert ext().origin_message_id == "orders:0:1"
        assert ext(properties={PROPERTY_ORIGIN_MESSAGE_ID: ""}).origin_message_id == "orders:0:1"
        assert ext(properties={PROPERTY_ORIGIN_MESSAGE_ID: "O"}).origin_message_id == "O"

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (None, None),
            ("16", 16),
            ("0", 0),
            ("-1", -1),
            ("-2", None),
            ("abc", None),
            ("", None),
            ("1.5", None),
        ],
    )
    def test_max_reconsume_times(self, raw: str | None, expected: int | None) -> None:
        props = {} if raw is None else {PROPERTY_MAX_RECONSUME_TIMES: raw}
        assert ext(properties=props).max_reconsume_times == expected

    def test_get_property_and_user_properties(self) -> None:
        m = ext(properties={"UNIQ_KEY": "u", "RECONSUME_TIME": "2", "biz": "1", "TAGS": "t"})
        assert m.get_property("biz") == "1"
        assert m.get_property("nope") is None
        assert m.get_user_properties(SYSTEM_HEADERS) == {"biz": "1", "TAGS": "t"}
        assert m.get_user_properties({"biz": 1}) == {
            "UNIQ_KEY": "u",
            "RECONSUME_TIME": "2",
            "TAGS": "t",
        }

    def test_defaults(self) -> None:
        m = ext()
        assert m.reconsume_times == 0
        assert m.raw_headers == ()
        assert m.header_errors == ()
        assert m.tags is None
        assert m.born_timestamp is None


class _Record:
    def __init__(
        self,
        headers: list[tuple[str, bytes]] | None,
        value: bytes | None = b"v",
        where: tuple[str, int, int] = ("orders", 0, 9),
        error: object = None,
        *,
        key: bytes | str | None = None,
        timestamp: tuple[int, int] = (1, 1_700_000_000_000),
    ) -> None:
        self._headers = headers
        self._value = value
        self._where = where
        self._error = error
        self._key = key
        self._timestamp = timestamp

    def error(self) -> object:
        return self._error

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | str | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


class TestLazyView:
    def test_headers_are_decoded_only_when_asked(self) -> None:
        rec = _Record([("UNIQ_KEY", b"U1"), ("RECONSUME_TIME", b"2"), ("TAGS", b"T")],
                      where=("orders", 1, 5))  # fmt: skip
        m = MessageExt.of_record(rec, kafka_topic="orders", topic="orders", partition=1, offset=5)
        assert (m.body, m.queue_id, m.queue_offset) == (b"v", 1, 5)
        assert (m.msg_id, m.reconsume_times, m.tags) == ("U1", 2, "T")
        assert m.store_timestamp == m.born_timestamp == 1_700_000_000_000

    def test_a_retry_record_reports_its_original_topic(self) -> None:
        rec = _Record([("RETRY_TOPIC", b"orders"), ("RMQ_ORIGIN_BORN_MS", b"1600000000000")])
        m = MessageExt.of_record(rec, kafka_topic="rmq.retry.g", topic="%RETRY%g", partition=0,
                                 offset=1, retry=True)  # fmt: skip
        assert m.topic == "orders"
        assert m.born_timestamp == 1_600_000_000_000  # kept across hops
        assert m.store_timestamp == 1_700_000_000_000

    @pytest.mark.parametrize("decoded_first", [False, True])
    def test_redelivered_counts_one_more_and_keeps_the_rest(self, decoded_first: bool) -> None:
        rec = _Record([("UNIQ_KEY", b"U1"), ("RECONSUME_TIME", b"2")])
        m = MessageExt.of_record(rec, kafka_topic="orders", topic="orders", partition=0, offset=9)
        if decoded_first:
            assert m.properties["UNIQ_KEY"] == "U1"
        again = m.redelivered()
        assert (again.reconsume_times, again.msg_id, again.queue_offset) == (3, "U1", 9)
        assert m.reconsume_times == 2
        again.properties["x"] = "y"
        assert "x" not in m.properties

    def test_a_plain_record_needs_no_headers(self) -> None:
        rec = _Record(None, where=("t", 2, 3))
        m = MessageExt.of_record(rec, kafka_topic="t", topic="t", partition=2, offset=3)
        assert (m.msg_id, m.reconsume_times, m.properties, m.tags) == ("t:2:3", 0, {}, None)
        assert m.redelivered().reconsume_times == 1


def _rec(topic: str, partition: int, offset: int, tags: str | None = None) -> _Record:
    headers = [(PROPERTY_TAGS, tags.encode())] if tags else None
    return _Record(headers, where=(topic, partition, offset))


def _resolve(kafka_topic: str) -> tuple[str, bool]:
    return ("%RETRY%g", True) if kafka_topic == "rmq.retry.g" else (kafka_topic, False)


class TestSplitFetch:
    def test_a_run_ends_where_the_topic_or_the_partition_changes(self) -> None:
        records = [_rec("a", 0, 1), _rec("a", 0, 2), _rec("b", 0, 1), _rec("a", 0, 3),
                   _rec("a", 1, 1)]  # fmt: skip
        runs, errors = split_fetch(records, _resolve, {})
        assert [(r.tp, [m.queue_offset for m in r.msgs], r.last.offset()) for r in runs] == [
            (("a", 0), [1, 2], 2),
            (("b", 0), [1], 1),  # same partition number, other topic: a run of its own
            (("a", 0), [3], 3),
            (("a", 1), [1], 1),
        ]
        assert errors == []
        assert [m.kafka_topic for r in runs for m in r.msgs] == ["a", "a", "b", "a", "a"]

    def test_filtered_records_are_left_out_but_settle_with_the_run(self) -> None:
        records = [_rec("a", 0, 1, "x"), _rec("a", 0, 2, "y"), _rec("a", 0, 3, "y")]
        runs, _ = split_fetch(records, _resolve, {"a": TagFilter.parse("x")})
        assert [(r.tp, [m.queue_offset for m in r.msgs], r.last.offset()) for r in runs] == [
            (("a", 0), [1], 3)  # offset 3 is settled once offset 1 is
        ]
        runs, _ = split_fetch(records[1:], _resolve, {"a": TagFilter.parse("x")})
        assert [(r.tp, r.msgs, r.last.offset()) for r in runs] == [(("a", 0), [], 3)]

    def test_error_records_are_handed_back_and_do_not_cut_a_run(self) -> None:
        bad = _Record(None, where=("a", 0, -1), error="broker down")
        runs, errors = split_fetch([_rec("a", 0, 1), bad, _rec("a", 0, 2)], _resolve, {})
        assert errors == [bad]
        assert [(r.tp, [m.queue_offset for m in r.msgs]) for r in runs] == [(("a", 0), [1, 2])]

    def test_a_run_without_holes_carries_its_records_for_the_bodies_size(self) -> None:
        """A run none of whose records was filtered out or an error carries those records
        one for one (its bodies' size is read over them); any other run carries none, and
        the size is the same either way."""
        bad = _Record(None, where=("a", 0, -1), error="broker down")
        records = [bad, _Record(None, b"abc", ("a", 0, 1)), _Record(None, b"", ("a", 0, 2)),
                   _Record(None, b"hello", ("b", 0, 1)), bad, _Record(None, b"z", ("b", 0, 2)),
                   _Record([(PROPERTY_TAGS, b"x")], b"12", ("c", 0, 1)),
                   _Record([(PROPERTY_TAGS, b"y")], b"1234", ("c", 0, 2)),
                   _Record(None, b"last", ("d", 3, 9))]  # fmt: skip
        runs, errors = split_fetch(records, _resolve, {"c": TagFilter.parse("x")})
        assert errors == [bad, bad]
        viewed = [
            None if r.source is None else list(r.source[r.start : r.start + len(r.msgs)])
            for r in runs
        ]
        assert viewed == [records[1:3], None, None, records[8:]]
        for run, recs in zip(runs, viewed, strict=True):
            if recs is not None:
                assert [r.offset() for r in recs] == [m.queue_offset for m in run.msgs]
        assert [body_bytes(r) for r in runs] == [3, 6, 2, 4]
        assert [body_bytes(r) for r in runs] == [sum(len(m.body) for m in r.msgs) for r in runs]

    def test_views_of_a_retry_topic_and_one_consume_start_per_run(self) -> None:
        retry = _Record([("RETRY_TOPIC", b"orders")], where=("rmq.retry.g", 0, 4))
        runs, _ = split_fetch([retry, _rec("rmq.retry.g", 0, 5), _rec("orders", 0, 7)],
                              _resolve, {})  # fmt: skip
        first, second = runs
        assert first.msgs[0].topic == "orders"  # the original topic, read from the header
        start_consuming(first.msgs, 1234, shared=True)
        assert [m.properties.get("CONSUME_START_TIME") for m in first.msgs] == ["1234", "1234"]
        assert [m.consume_start_time for m in first.msgs] == [1234, 1234]
        assert second.msgs[0].properties.get("CONSUME_START_TIME") is None

    @pytest.mark.parametrize("shared", [True, False])
    def test_an_unlisted_consume_start_is_kept_out_of_the_properties(self, shared: bool) -> None:
        """Orderly deliveries: RocketMQ 4.9.7 sets ``CONSUME_START_TIME`` only on concurrent
        ones; the time is still known (traces read ``consume_start_time``)."""
        [run], _ = split_fetch([_rec("orders", 0, 1), _rec("orders", 0, 2)], _resolve, {})
        start_consuming(run.msgs, 1234, shared=shared, listed=False)
        assert [m.consume_start_time for m in run.msgs] == [1234, 1234]
        assert ["CONSUME_START_TIME" in m.properties for m in run.msgs] == [False, False]
        again = [m.redelivered() for m in run.msgs]
        start_consuming(again, 1300, shared=False, listed=False)
        assert [m.consume_start_time for m in again] == [1300, 1300]
        assert "CONSUME_START_TIME" not in again[0].properties


@pytest.mark.parametrize(
    ("max_raw", "expected_max"), [(None, None), ("3", 3), ("-1", -1), ("x", None), ("-2", None)]
)
def test_retry_fields_read_what_the_attributes_say(
    max_raw: str | None, expected_max: int | None
) -> None:
    """The engine's one-call read of a failed message agrees with the attributes."""
    props = {} if max_raw is None else {PROPERTY_MAX_RECONSUME_TIMES: max_raw}
    for msg in (
        ext(properties=props, reconsume_times=2, body=b"abcd", queue_offset=9),
        ext(properties=props).redelivered(),
        ext(properties=props, body=b""),
    ):
        assert msg.retry_fields() == (
            msg.reconsume_times,
            msg.max_reconsume_times,
            msg.queue_offset,
            len(msg.body),
        )
        assert msg.retry_fields()[1] == expected_max


def test_retry_fields_of_a_confluent_kafka_record_without_a_value() -> None:
    from confluent_kafka import Message as KafkaMessage

    from adapter.io.records import TopicNames

    view = TopicNames("cg").view(KafkaMessage(topic="orders", partition=0, offset=4, value=None))
    assert view.retry_fields() == (0, None, 4, 0)


# --- a message built field by field -----------------------------------------------------------
def test_a_built_message_reads_back_its_fields_and_its_record_carries_them() -> None:
    raw = (("UNIQ_KEY", b"U1"), ("biz", b"\xff"))
    m = ext(kafka_topic="rmq.orders", body=b"abc", sharding_key=b"k1", raw_headers=raw)
    assert (m.kafka_topic, m.body, m.sharding_key, m.raw_headers) == (
        "rmq.orders",
        b"abc",
        b"k1",
        raw,
    )
    [record] = plain_records([m])  # what a trace sink reads: the record says the same
    assert (record.topic(), record.value(), record.key(), record.headers()) == (
        "rmq.orders",
        b"abc",
        b"k1",
        raw,
    )


@pytest.mark.parametrize(
    ("born", "stored", "want_born", "want_stored", "origin"),
    [
        (None, None, None, None, None),
        (None, 5, None, 5, None),  # a log-append time says nothing of when it was born
        (5, None, 5, 5, None),
        (0, None, 0, 0, None),  # the epoch is a time, not "no time"
        (7, 7, 7, 7, None),
        (3, 9, 3, 9, "3"),  # born before this delivery was stored: kept in the header
    ],
)
def test_a_built_message_keeps_its_born_and_store_times(
    born: int | None,
    stored: int | None,
    want_born: int | None,
    want_stored: int | None,
    origin: str | None,
) -> None:
    m = ext(born_timestamp=born, store_timestamp=stored)
    assert (m.born_timestamp, m.store_timestamp) == (want_born, want_stored)
    assert m.properties.get(HEADER_ORIGIN_BORN_MS) == origin


def test_equal_messages_are_the_same_delivery_of_the_same_body() -> None:
    m = ext()
    assert m == ext()
    assert m == ext(msg_id="other id", tags="t")  # the same record, read again
    assert m != ext(body=b"other")
    assert m != ext(queue_offset=2)
    assert m != ext(kafka_topic="rmq.orders")
    assert m != ext(reconsume_times=1)
    assert m != m.redelivered()
    assert m != "orders:0:1"
    assert m.__eq__("orders:0:1") is NotImplemented


# --- a view over a record ------------------------------------------------------------------------
def test_a_view_is_not_of_a_retry_topic_unless_told() -> None:
    rec = _Record([(PROPERTY_RETRY_TOPIC, b"orders")], where=("payments", 0, 1))
    m = MessageExt.of_record(rec, kafka_topic="payments", topic="payments", partition=0, offset=1)
    assert m.topic == "payments"
    assert m.header_errors == ()
    assert m.decoded().topic is None


def test_a_retry_record_without_headers_notes_the_missing_original_topic() -> None:
    m = view_of(_Record(None, where=("rmq.retry.g", 0, 4)), "%RETRY%g", True, [None])
    assert m.topic == "%RETRY%g"
    assert m.msg_id == "rmq.retry.g:0:4"
    assert m.header_errors == ("RETRY_TOPIC missing on a retry record: topic left as %RETRY%g",)


@pytest.mark.parametrize("headers", [None, [("UNIQ_KEY", b"U1")]])
def test_headers_are_decoded_once_what_a_listener_puts_in_the_properties_stays(
    headers: list[tuple[str, bytes]] | None,
) -> None:
    m = MessageExt.of_record(
        _Record(headers), kafka_topic="orders", topic="orders", partition=0, offset=9
    )
    m.properties["seen"] = "yes"
    assert m.properties is m.properties
    assert m.get_property("seen") == "yes"
    assert m.decoded() is m.decoded()


@pytest.mark.parametrize(
    ("raw", "times", "errors"),
    [
        (b"2", 2, ()),
        (b" 3 ", 3, ()),  # not the common form, still a count
        (b"9" * 19, int("9" * 19), ()),
        (b"1" * 20, 0, (f"RECONSUME_TIME={'1' * 20!r} is not a count: read as 0",)),
        (b"-1", 0, ("RECONSUME_TIME='-1' is not a count: read as 0",)),
    ],
)
def test_reconsume_time_is_read_as_a_count(raw: bytes, times: int, errors: tuple[str, ...]) -> None:
    m = view_of(_Record([(PROPERTY_RECONSUME_TIME, raw)]), "orders", False, [None])
    assert (m.reconsume_times, m.header_errors) == (times, errors)


ORIGIN_BORN_CASES = [
    (b"1600000000000", 1_600_000_000_000),
    (b"9" * 19, int("9" * 19)),  # up to 19 digits are a time
    (b"1" * 20, 1_700_000_000_000),  # more are not: the record's create time
    (b"soon", 1_700_000_000_000),
]


@pytest.mark.parametrize(("raw", "born"), ORIGIN_BORN_CASES)
def test_the_origin_born_header_gives_the_born_time_of_a_view_and_of_its_copy(
    raw: bytes, born: int
) -> None:
    m = view_of(_Record([(HEADER_ORIGIN_BORN_MS, raw)]), "orders", False, [None])
    assert m.born_timestamp == born
    assert m.hop_fields()[4] == born
    assert m.copy_fields()[4] == born


def test_a_copy_is_born_when_the_record_was_created_not_when_it_was_appended() -> None:
    created = _Record([("UNIQ_KEY", b"U1")], timestamp=(1, 5))
    appended = _Record([("UNIQ_KEY", b"U1")], timestamp=(2, 5))
    assert view_of(created, "orders", False, [None]).hop_fields()[4] == 5
    assert view_of(appended, "orders", False, [None]).hop_fields()[4] is None


@pytest.mark.parametrize("headers", [None, [("UNIQ_KEY", b"U1")]])
def test_a_copy_of_a_record_without_a_value_has_an_empty_body_and_an_encoded_key(
    headers: list[tuple[str, bytes]] | None,
) -> None:
    rec = _Record(headers, None, key="k")
    assert view_of(rec, "orders", False, [None]).copy_fields()[5:] == (b"k", b"")
    assert view_of(rec, "orders", False, [None]).hop_fields()[5:] == (b"k", b"")


def test_a_plain_records_first_copy_is_its_encoded_id_even_after_its_retry_fields() -> None:
    """The failure path's most common message (no headers, not from a retry topic) is
    never decoded: its copy carries its id, as ``topic:partition:offset``."""
    m = view_of(_Record(None, b"abc", ("orders", 2, 7), timestamp=(1, 5)), "orders", False, [None])
    assert m.retry_fields() == (0, None, 7, 3)
    assert m.copy_fields() == (b"orders:2:7", "orders", 2, 7, 5, None, b"abc")


def test_a_retry_or_headed_records_copy_is_its_decoded_headers() -> None:
    retry = view_of(_Record(None, where=("rmq.retry.g", 0, 4)), "%RETRY%g", True, [None])
    assert retry.copy_fields() == retry.hop_fields()
    assert retry.copy_fields()[0] == retry.decoded()
    headed = view_of(_Record([("UNIQ_KEY", b"U1")]), "orders", False, [None])
    assert headed.copy_fields()[0] == headed.decoded()


def test_retry_fields_of_a_plain_topics_record_read_its_headers() -> None:
    """A record of a plain topic can carry retry headers (it came back from a delay)."""
    rec = _Record([(PROPERTY_RECONSUME_TIME, b"2"), (PROPERTY_MAX_RECONSUME_TIMES, b"5")], b"abcd")
    assert view_of(rec, "orders", False, [None]).retry_fields() == (2, 5, 9, 4)


def test_a_retry_records_redelivery_keeps_its_original_topic_and_headers() -> None:
    rec = _Record(
        [(PROPERTY_RETRY_TOPIC, b"orders"), (PROPERTY_TAGS, b"T"), (PROPERTY_KEYS, b"k1 k2"),
         (PROPERTY_RECONSUME_TIME, b"x")],
        where=("rmq.retry.g", 0, 4),
    )  # fmt: skip
    m = view_of(rec, "%RETRY%g", True, [None])
    again = m.redelivered()
    assert (again.topic, again.tags, again.keys, again.header_errors) == (
        "orders",
        "T",
        "k1 k2",
        ("RECONSUME_TIME='x' is not a count: read as 0",),
    )
    assert again.reconsume_times == 1
    assert again.decoded().topic == "orders"


def test_plain_records_are_the_records_unless_one_message_is_a_local_redelivery() -> None:
    ra, rb = _Record([("UNIQ_KEY", b"A")]), _Record(None)
    a = view_of(ra, "orders", False, [None])
    b = view_of(rb, "orders", False, [None])
    assert a.msg_id == "A"  # decoded: it still says what its record says
    records = plain_records([a, b])
    assert records is not None
    assert [r is want for r, want in zip(records, [ra, rb], strict=True)] == [True, True]
    assert plain_records([a, b.redelivered()]) is None


@pytest.mark.parametrize("shared", [True, False])
def test_a_single_message_gets_its_consume_start(shared: bool) -> None:
    [m] = [view_of(_Record(None), "orders", False, [None])]
    start_consuming([m], 1234, shared=shared, listed=False)
    assert m.consume_start_time == 1234
    assert PROPERTY_CONSUME_START_TIMESTAMP not in m.properties
    n = view_of(_Record(None), "orders", False, [None])
    start_consuming([n], 1300, shared=shared)
    assert n.consume_start_time == 1300
    assert n.properties[PROPERTY_CONSUME_START_TIMESTAMP] == "1300"


def test_a_run_after_errors_or_filtered_records_starts_where_its_first_record_is() -> None:
    bad = _Record(None, where=("a", 0, -1), error="broker down")
    records = [_Record([(PROPERTY_TAGS, b"x")], b"a1", ("a", 0, 1)), bad, bad,
               _Record([(PROPERTY_TAGS, b"y")], b"a2", ("a", 0, 2)),
               _Record([(PROPERTY_TAGS, b"y")], b"a3", ("a", 0, 3)),
               _Record(None, b"b1", ("b", 0, 1)), _Record(None, b"b2", ("b", 0, 2))]  # fmt: skip
    runs, errors = split_fetch(records, _resolve, {"a": TagFilter.parse("x")})
    assert errors == [bad, bad]
    first, second = runs
    assert first.source is None
    assert (second.source, second.start) == (records, 5)
    assert body_bytes(second) == 4
    runs, _ = split_fetch(records[5:] + records[:5], _resolve, {"a": TagFilter.parse("x")})
    assert [r.tp for r in runs] == [("b", 0), ("a", 0)]
    assert [r.source is None for r in runs] == [False, True]  # the last run has holes too
    assert [body_bytes(r) for r in runs] == [4, 2]


def test_views_of_a_plain_topic_keep_their_logical_topic() -> None:
    rec = _Record([(PROPERTY_RETRY_TOPIC, b"elsewhere")], where=("orders", 0, 1))
    [run], _ = split_fetch([rec], _resolve, {})
    [m] = run.msgs
    assert (m.topic, m.header_errors) == ("orders", ())
