"""The control protocol (forced offset resets): request/ack JSON, strict decoding, settling."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.core.control import (
    ControlMessageError,
    ResetAck,
    ResetRequest,
    ResetTarget,
    decode,
    encode,
    format_epoch_ms,
    settle,
)
from adapter.errors import InvalidInputError

pytestmark = pytest.mark.unit


def request(**over: Any) -> ResetRequest:
    fields: dict[str, Any] = {
        "request_id": "r1",
        "group": "G",
        "topic": "orders",
        "kafka_topic": "orders",
        "target": ResetTarget.at(1_795_400_000_000),
        "offsets": {0: 17, 1: 5},
        "issued_ms": 1_795_448_000_000,
        "expires_ms": 1_795_448_030_000,
    }
    fields.update(over)
    return ResetRequest(**fields)


def test_request_round_trips_and_has_the_documented_shape() -> None:
    req = request()
    raw = encode(req)
    assert json.loads(raw) == {
        "v": 1,
        "type": "reset",
        "request_id": "r1",
        "group": "G",
        "topic": "orders",
        "kafka_topic": "orders",
        "target": {"kind": "time", "time_ms": 1_795_400_000_000},
        "offsets": [{"partition": 0, "offset": 17}, {"partition": 1, "offset": 5}],
        "issued_ms": 1_795_448_000_000,
        "expires_ms": 1_795_448_030_000,
    }
    assert decode(raw) == req


def test_ack_round_trips_and_has_the_documented_shape() -> None:
    ack = ResetAck("r1", "G", "m-1", {("orders", 1): 5, ("orders", 0): 17})
    raw = encode(ack)
    assert json.loads(raw) == {
        "v": 1,
        "type": "ack",
        "request_id": "r1",
        "group": "G",
        "member_id": "m-1",
        "applied": [
            {"kafka_topic": "orders", "partition": 0, "offset": 17},
            {"kafka_topic": "orders", "partition": 1, "offset": 5},
        ],
    }
    assert decode(raw) == ack
    assert decode(encode(ResetAck("r1", "G", "m-2"))) == ResetAck("r1", "G", "m-2", {})


def test_non_ascii_group_round_trips() -> None:
    req = request(group="组 %|/", topic="%RETRY%组", kafka_topic="rmq.retry.x")
    assert decode(encode(req)) == req


@pytest.mark.parametrize(
    ("mutate", "field", "value"),
    [
        (lambda d: d.update(v=2), "v", 2),
        (lambda d: d.update(v=True), "v", True),
        (lambda d: d.update(type="nudge"), "type", "nudge"),
        (lambda d: d.pop("group"), "reset.group", None),
        (lambda d: d.update(extra=1), "reset.extra", 1),
        (lambda d: d.update(group=""), "reset.group", ""),
        (lambda d: d.update(group=7), "reset.group", 7),
        (lambda d: d.update(offsets=[]), "reset.offsets", []),
        (
            lambda d: d["offsets"].append({"partition": 0, "offset": 3}),
            "reset.offsets[2].partition",
            0,
        ),
        (lambda d: d["offsets"][0].update(offset=-1), "reset.offsets[0].offset", -1),
        (lambda d: d["offsets"][0].update(offset="17"), "reset.offsets[0].offset", "17"),
        (lambda d: d["offsets"][1].update(partition=True), "reset.offsets[1].partition", True),
        (lambda d: d["offsets"][1].pop("offset"), "reset.offsets[1].offset", None),
        (lambda d: d.update(target={"kind": "yesterday"}), "target.kind", "yesterday"),
        (lambda d: d.update(target={"kind": "time"}), "target.time_ms", None),
        (lambda d: d.update(target={"kind": "latest", "time_ms": 5}), "target.time_ms", 5),
        (lambda d: d.update(target="latest"), "reset.target", "latest"),
        (lambda d: d.update(issued_ms=1.5), "reset.issued_ms", 1.5),
        (lambda d: d.update(expires_ms=1), "expires_ms", 1),
    ],
)
def test_decoding_is_strict_and_names_the_field_and_value(
    mutate: Any, field: str, value: object
) -> None:
    data = json.loads(encode(request()))
    mutate(data)
    with pytest.raises(ControlMessageError) as info:
        decode(json.dumps(data).encode())
    assert isinstance(info.value, InvalidInputError)
    assert (info.value.field, info.value.value) == (field, value)
    assert field in str(info.value) and repr(value) in str(info.value)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(applied={}), "ack.applied"),
        (lambda d: d.update(member_id=""), "ack.member_id"),
        (
            lambda d: d["applied"].append({"kafka_topic": "orders", "partition": 0, "offset": 1}),
            "ack.applied[1]",
        ),
        (lambda d: d["applied"][0].update(kafka_topic=""), "ack.applied[0].kafka_topic"),
        (lambda d: d["applied"][0].update(topic="orders"), "ack.applied[0].topic"),
    ],
)
def test_ack_decoding_is_strict(mutate: Any, field: str) -> None:
    data = json.loads(encode(ResetAck("r1", "G", "m", {("orders", 0): 1})))
    mutate(data)
    with pytest.raises(ControlMessageError) as info:
        decode(json.dumps(data).encode())
    assert info.value.field == field


@pytest.mark.parametrize("raw", [None, b"", b"\xff\xfe", b"[1]", b'"reset"', b"{", "text"])
def test_garbage_is_refused_by_name(raw: Any) -> None:
    with pytest.raises(ControlMessageError) as info:
        decode(raw)
    assert info.value.field == "value"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_FIELDS = [
    "v",
    "type",
    "request_id",
    "group",
    "topic",
    "kafka_topic",
    "target",
    "offsets",
    "issued_ms",
    "expires_ms",
    "member_id",
    "applied",
]


@given(st.binary(max_size=200))
def test_decode_never_raises_anything_but_control_errors_on_bytes(raw: bytes) -> None:
    with contextlib.suppress(ControlMessageError):
        decode(raw)


@given(
    st.dictionaries(st.sampled_from(_FIELDS), _json),
    st.sampled_from(["reset", "ack"]),
)
def test_decode_never_raises_anything_but_control_errors_on_json(
    data: dict[str, Any], kind: str
) -> None:
    data = {"v": 1, "type": kind, **data}
    with contextlib.suppress(ControlMessageError):
        decode(json.dumps(data).encode())


def test_constructors_check_their_input() -> None:
    with pytest.raises(ControlMessageError):
        ResetTarget("time")
    with pytest.raises(ControlMessageError):
        ResetTarget("time", -5)
    with pytest.raises(ControlMessageError):
        request(offsets={})
    with pytest.raises(ControlMessageError):
        request(offsets={0: -2})
    with pytest.raises(ControlMessageError):
        ResetAck("r1", "G", "m", {("orders",): 1})  # type: ignore[dict-item]


def test_offsets_for_picks_the_owned_partitions_of_the_topic() -> None:
    req = request(offsets={0: 17, 1: 5, 2: 9})
    owned = [("orders", 1), ("orders", 2), ("orders", 7), ("other", 0)]
    assert req.offsets_for(owned) == {("orders", 1): 5, ("orders", 2): 9}
    assert req.offsets_for([]) == {}


def test_expiry() -> None:
    req = request()
    assert not req.expired(req.expires_ms)
    assert req.expired(req.expires_ms + 1)


def test_targets_describe_themselves() -> None:
    assert ResetTarget.earliest().describe() == "earliest"
    assert ResetTarget.latest().describe() == "latest"
    assert ResetTarget.at(1_795_428_000_250).describe() == "2026-11-23T10:00:00.250Z"
    assert format_epoch_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_epoch_ms(999) == "1970-01-01T00:00:00.999Z"


class TestSettle:
    req = request(offsets={0: 1, 1: 2, 2: 3, 3: 4})

    def ack(self, member: str, *parts: int, request_id: str = "r1") -> ResetAck:
        return ResetAck(request_id, "G", member, {("orders", p): p + 1 for p in parts})

    def test_all_owners_acknowledged(self) -> None:
        out = settle(
            self.req,
            {"a": [0, 1], "b": [2, 3]},
            {"a": self.ack("a", 0, 1), "b": self.ack("b", 2, 3)},
        )
        assert out.complete
        assert out.applied == {0: ("a", 1), 1: ("a", 2), 2: ("b", 3), 3: ("b", 4)}

    def test_a_silent_member_and_an_unowned_partition(self) -> None:
        out = settle(self.req, {"a": [0, 1], "b": [2], "c": []}, {"a": self.ack("a", 0, 1)})
        assert not out.complete
        assert out.silent == {"b": (2,)}
        assert out.unowned == (3,)
        assert set(out.applied) == {0, 1}

    def test_an_ack_that_leaves_out_an_owned_partition(self) -> None:
        out = settle(self.req, {"a": [0, 1, 2, 3]}, {"a": self.ack("a", 0, 1, 3)})
        assert out.left_out == {"a": (2,)}
        assert not out.complete

    def test_acks_of_another_request_do_not_count(self) -> None:
        out = settle(
            self.req, {"a": [0, 1, 2, 3]}, {"a": self.ack("a", 0, 1, 2, 3, request_id="r0")}
        )
        assert out.silent == {"a": (0, 1, 2, 3)}

    def test_owners_of_other_partitions_are_not_waited_for(self) -> None:
        req = request(offsets={0: 1})
        out = settle(req, {"a": [0], "b": [5]}, {"a": self.ack("a", 0)})
        assert out.complete and out.applied == {0: ("a", 1)}


_MAX_EPOCH_MS = 253_402_300_799_999
_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ResetTarget("yesterday"),
            "target.kind='yesterday': expected one of ('earliest', 'latest', 'time')",
        ),
        (
            lambda: ResetTarget("latest", 5),
            "target.time_ms=5: only a 'time' target has a time, not latest",
        ),
        (lambda: ResetTarget("time", 1.5), "target.time_ms=1.5: must be a whole number"),
        (lambda: ResetTarget("time", -1), "target.time_ms=-1: must be in 0..253402300799999"),
        (lambda: request(request_id=""), "request_id='': must be a non-empty string"),
        (lambda: request(group=""), "group='': must be a non-empty string"),
        (lambda: request(topic=None), "topic=None: must be a non-empty string"),
        (lambda: request(kafka_topic=""), "kafka_topic='': must be a non-empty string"),
        (lambda: request(target="latest"), "target='latest': must be a ResetTarget"),
        (lambda: request(offsets={}), "offsets={}: needs at least one partition"),
        (lambda: request(offsets=[(0, 1)]), "offsets=[(0, 1)]: needs at least one partition"),
        (lambda: request(offsets={-1: 0}), "offsets.partition=-1: must be in 0..2147483647"),
        (lambda: request(offsets={0: -2}), "offsets[0]=-2: must be in 0..9223372036854775807"),
        (lambda: request(issued_ms=-1), "issued_ms=-1: must be in 0..253402300799999"),
        (
            lambda: request(expires_ms=1),
            "expires_ms=1: must be in 1795448000000..253402300799999",
        ),
        (lambda: ResetAck("", "G", "m"), "request_id='': must be a non-empty string"),
        (lambda: ResetAck("r", "", "m"), "group='': must be a non-empty string"),
        (lambda: ResetAck("r", "G", ""), "member_id='': must be a non-empty string"),
        (lambda: ResetAck("r", "G", "m", []), "applied=[]: must be a dict"),
        (
            lambda: ResetAck("r", "G", "m", {("", 0): 1}),
            "applied=('', 0): keys are (kafka topic, partition) pairs",
        ),
        (
            lambda: ResetAck("r", "G", "m", {("orders",): 1}),
            "applied=('orders',): keys are (kafka topic, partition) pairs",
        ),
        (
            lambda: ResetAck("r", "G", "m", {("orders", -1): 1}),
            "applied.partition=-1: must be in 0..2147483647",
        ),
        (
            lambda: ResetAck("r", "G", "m", {("orders", 0): -1}),
            "applied[orders:0]=-1: must be in 0..9223372036854775807",
        ),
        (
            lambda: ResetAck("r", "G", "m", {("orders", 0): True}),
            "applied[orders:0]=True: must be a whole number",
        ),
    ],
)
def test_constructor_errors_read_field_value_cause(build: Any, message: str) -> None:
    with pytest.raises(ControlMessageError) as info:
        build()
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "value=None: a control record needs a JSON value"),
        ("text", "value='text': a control record needs a JSON value"),
        (b"[1]", "value=b'[1]': must be a JSON object"),
        (b"{", "value=b'{': not UTF-8 JSON: "),
        (b"\xff", "value=b'\\xff': not UTF-8 JSON: "),
        (b"[" * 200, "value=b'" + "[" * 200 + "': not UTF-8 JSON: "),
        (b"[" * 201, "value=b'" + "[" * 200 + "...': not UTF-8 JSON: "),
        (b"1" * 201, "value=b'" + "1" * 200 + "...': must be a JSON object"),
    ],
)
def test_unreadable_values_are_named_and_clipped(raw: Any, message: str) -> None:
    """The refused value is quoted, cut to 200 bytes and ``...`` when longer."""
    with pytest.raises(ControlMessageError) as info:
        decode(raw)
    if message.endswith(": "):
        assert str(info.value).startswith(message)
        assert len(str(info.value)) > len(message)
    else:
        assert str(info.value) == message


def _ack_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(encode(ResetAck("r1", "G", "m", {("orders", 0): 1})))
    return data


def _request_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(encode(request()))
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**_request_data(), "v": 2}, "v=2: unsupported version (this reads 1)"),
        ({**_request_data(), "type": "nudge"}, "type='nudge': expected 'reset' or 'ack'"),
        ({**_request_data(), "extra": 1}, "reset.extra=1: unknown field"),
        ({**_request_data(), "request_id": ""}, "reset.request_id='': must be a non-empty string"),
        ({**_request_data(), "group": 7}, "reset.group=7: must be a non-empty string"),
        ({**_request_data(), "topic": ""}, "reset.topic='': must be a non-empty string"),
        (
            {**_request_data(), "kafka_topic": ""},
            "reset.kafka_topic='': must be a non-empty string",
        ),
        ({**_request_data(), "target": "latest"}, "reset.target='latest': must be an object"),
        ({**_request_data(), "target": {}}, "reset.target.kind=None: missing"),
        (
            {**_request_data(), "target": {"kind": "latest", "at": 1}},
            "reset.target.at=1: unknown field",
        ),
        (
            {**_request_data(), "target": {"kind": 5}},
            "reset.target.kind=5: expected one of ('earliest', 'latest', 'time')",
        ),
        ({**_request_data(), "offsets": {}}, "reset.offsets={}: must be a non-empty list"),
        ({**_request_data(), "offsets": [7]}, "reset.offsets[0]=7: must be an object"),
        (
            {**_request_data(), "offsets": [{"partition": 3, "offset": 1}] * 2},
            "reset.offsets[1].partition=3: listed twice",
        ),
        (
            {**_request_data(), "offsets": [{"partition": 3, "offset": 0.5}]},
            "reset.offsets[0].offset=0.5: must be a whole number",
        ),
        (
            {**_request_data(), "issued_ms": -1},
            "reset.issued_ms=-1: must be in 0..253402300799999",
        ),
        (
            {**_request_data(), "expires_ms": -1},
            "reset.expires_ms=-1: must be in 0..253402300799999",
        ),
        ({**_ack_data(), "extra": 1}, "ack.extra=1: unknown field"),
        ({k: v for k, v in _ack_data().items() if k != "group"}, "ack.group=None: missing"),
        ({**_ack_data(), "request_id": ""}, "ack.request_id='': must be a non-empty string"),
        ({**_ack_data(), "group": ""}, "ack.group='': must be a non-empty string"),
        ({**_ack_data(), "member_id": 3}, "ack.member_id=3: must be a non-empty string"),
        ({**_ack_data(), "applied": {}}, "ack.applied={}: must be a list"),
        ({**_ack_data(), "applied": ["x"]}, "ack.applied[0]='x': must be an object"),
        (
            {**_ack_data(), "applied": [{"kafka_topic": "o", "partition": -1, "offset": 0}]},
            "ack.applied[0].partition=-1: must be in 0..2147483647",
        ),
        (
            {**_ack_data(), "applied": [{"kafka_topic": "o", "partition": 2, "offset": -1}]},
            "ack.applied[0].offset=-1: must be in 0..9223372036854775807",
        ),
        (
            {**_ack_data(), "applied": [{"kafka_topic": "o", "partition": 2, "offset": 1}] * 2},
            "ack.applied[1]='o[2]': listed twice",
        ),
    ],
)
def test_decode_errors_read_field_value_cause(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ControlMessageError) as info:
        decode(json.dumps(data).encode())
    assert str(info.value) == message


def test_the_extremes_of_every_range_are_accepted_and_round_trip() -> None:
    """0 and the largest partition, offset and epoch millisecond are valid values."""
    for target in (ResetTarget.at(0), ResetTarget.at(_MAX_EPOCH_MS)):
        req = request(
            target=target,
            offsets={0: 0, _MAX_PARTITION: _MAX_OFFSET},
            issued_ms=0,
            expires_ms=_MAX_EPOCH_MS,
        )
        assert decode(encode(req)) == req
    ack = ResetAck("r1", "G", "m", {("orders", 0): 0, ("orders", _MAX_PARTITION): _MAX_OFFSET})
    assert decode(encode(ack)) == ack


def test_encoding_is_compact_utf8() -> None:
    raw = encode(ResetAck("r1", "组", "m", {("orders", 0): 1}))
    assert (
        raw
        == (
            '{"v":1,"type":"ack","request_id":"r1","group":"组","member_id":"m",'
            '"applied":[{"kafka_topic":"orders","partition":0,"offset":1}]}'
        ).encode()
    )


def test_settle_goes_on_past_a_silent_member() -> None:
    req = request(offsets={0: 1, 1: 2})
    ack = ResetAck("r1", "G", "b", {("orders", 1): 2})
    out = settle(req, {"a": [0], "b": [1]}, {"b": ack})
    assert out.silent == {"a": (0,)}
    assert out.applied == {1: ("b", 2)}
    assert out.left_out == {} and out.unowned == ()
