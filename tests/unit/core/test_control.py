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


# -- the clients on a fake clock (adapter.io.control) -------------------------------------


class _Clock:
    """A fake clock: wall time ``ms``, monotonic seconds ``s`` (moved by the fake reader)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms
        self.s = 1000.0

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.s


class _Reader:
    """The control topic's reader: ``records`` once, then nothing; each ``poll`` takes its
    timeout on the clock."""

    def __init__(self, clock: _Clock, records: list[Any]) -> None:
        self.clock, self.records, self.polls = clock, records, 0

    def assign(self, _partitions: Any) -> None:
        pass

    def consume(self, _n: int, _timeout: float) -> list[Any]:
        out, self.records = self.records, []
        return out

    def poll(self, timeout: float) -> None:
        self.polls += 1
        self.clock.s += timeout

    def close(self) -> None:
        pass


class _Producer:
    def produce(self, *_: Any, **__: Any) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0


def _fake_clients(monkeypatch: pytest.MonkeyPatch, reader: _Reader) -> None:
    """The admin session and the producer of adapter.io.control, without a broker."""
    from adapter.io import control
    from adapter.io.admin import Ends

    class Session:
        def __init__(self, config: Any, **_: Any) -> None:
            self.config = dict(config)

        def partitions(self, *_: Any) -> list[int]:
            return [0]

        def watermarks(self, tps: Any, *_: Any) -> dict[Any, Ends]:
            return {tp: Ends(0, 0) for tp in tps}

        def reader(self, **_: Any) -> _Reader:
            return reader

        def check(self, _what: str) -> None:
            pass

    monkeypatch.setattr(control, "AdminSession", Session)
    monkeypatch.setattr(control, "make_client", lambda *_, **__: _Producer())


def test_a_member_ignores_a_request_expired_on_its_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from confluent_kafka import Message

    from adapter.core.control import CONTROL_TOPIC
    from adapter.io.control import ControlChannel

    issued = time.time_ns() // 1_000_000
    req = request(issued_ms=issued, expires_ms=issued + 3_600_000)  # valid for the system
    clock = _Clock(ms=req.expires_ms + 1_000)  # the member's clock: a second past it
    record = Message(topic=CONTROL_TOPIC, partition=0, offset=0, key=b"G", value=encode(req))
    _fake_clients(monkeypatch, _Reader(clock, [record]))
    channel = ControlChannel({"bootstrap.servers": "127.0.0.1:1"}, "G", "m-1", clock=clock)
    assert channel.poll() == []


def test_publish_reset_waits_for_acks_until_its_clock_passes_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapter.io.control import publish_reset

    clock = _Clock(ms=1_795_448_000_000)
    reader = _Reader(clock, [])
    _fake_clients(monkeypatch, reader)
    acks = publish_reset(
        {"bootstrap.servers": "127.0.0.1:1"}, request(), {"m-1": [0]}, timeout_s=5.0, clock=clock
    )
    assert acks == {}  # nobody answered
    assert reader.polls in (25, 26)  # 5 s of the fake clock in polls of 0.2 s


def test_a_forced_reset_is_issued_and_expires_on_the_injected_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``group reset-offset --force``: the request's issue and expiry times come from the
    clock given to :func:`adapter.ops.admin.reset_group_offsets`, which also bounds the
    wait for the members' acknowledgements."""
    from adapter.core.cluster import GroupInfo, Member
    from adapter.errors import AdapterError
    from adapter.io.admin import Ends
    from adapter.ops import admin

    class Session:
        def __init__(self, config: Any, **_: Any) -> None:
            self.config = dict(config)

        def partitions(self, *_: Any) -> list[int]:
            return [0]

        def describe_group(self, group: str) -> GroupInfo:
            return GroupInfo(group, "Stable", (Member("m-1", "c1", "h", None, (("orders", 0),)),))

        def committed(self, _group: str) -> dict[Any, int]:
            return {("orders", 0): 3}

        def watermarks(self, tps: Any, *_: Any) -> dict[Any, Ends]:
            return {tp: Ends(0, 10) for tp in tps}

    published: list[tuple[ResetRequest, Any]] = []

    def publish(_config: Any, req: ResetRequest, _owners: Any, **kw: Any) -> dict[str, Any]:
        published.append((req, kw.get("clock")))
        return {}  # no member acknowledged

    monkeypatch.setattr(admin, "AdminSession", Session)
    monkeypatch.setattr(admin, "publish_reset", publish)
    clock = _Clock(ms=1_795_448_000_000)  # not the system's time
    with pytest.raises(AdapterError):
        admin.reset_group_offsets(
            {"bootstrap.servers": "127.0.0.1:1"},
            "G",
            "orders",
            ResetTarget.earliest(),
            force=True,
            timeout_s=30.0,
            clock=clock,
        )
    [(req, clock_used)] = published
    assert (req.issued_ms, req.expires_ms) == (1_795_448_000_000, 1_795_448_030_000)
    assert clock_used is clock
