"""Unit tests for :mod:`adapter.core.message` (``Message`` and ``MessageExt``)."""

from __future__ import annotations

import pytest

from adapter.constants import (
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_TAGS,
    SYSTEM_HEADERS,
)
from adapter.core.message import Message, MessageExt

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
