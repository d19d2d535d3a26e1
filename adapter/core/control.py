"""The control protocol between the admin CLI and a group's live members.  Pure.

RocketMQ's ``resetOffsetByTime`` has the broker resolve the new offset of every queue and
push that table to the group's clients, which apply it themselves.  Kafka refuses to alter
the offsets of a group that has members, so ``rmq-kafka group reset-offset --force`` does
the same: it resolves the offsets, publishes a :class:`ResetRequest` to the compacted topic
``rmq.control`` (record key: the group), and every live member that owns partitions of the
topic seeks and commits them and answers there with a :class:`ResetAck`.

Both are JSON objects (UTF-8), version ``1``::

    {"v": 1, "type": "reset", "request_id": "…", "group": "G", "topic": "orders",
     "kafka_topic": "orders", "target": {"kind": "time", "time_ms": 1795400000000},
     "offsets": [{"partition": 0, "offset": 17}, {"partition": 1, "offset": 5}],
     "issued_ms": 1795448000000, "expires_ms": 1795448030000}

    {"v": 1, "type": "ack", "request_id": "…", "group": "G", "member_id": "…",
     "applied": [{"kafka_topic": "orders", "partition": 0, "offset": 17}]}

``target.kind`` is ``earliest``, ``latest`` or ``time`` (then ``time_ms``, epoch ms);
``offsets`` are the offsets the CLI resolved, so every member applies the same table.
Decoding is strict: a missing, unknown or mistyped field raises :class:`ControlMessageError`
naming the field and the value.  No clients, no clock reads (times are passed in).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from adapter.errors import InvalidInputError

#: Kafka name of the control topic (compacted; the record key is the group).
CONTROL_TOPIC: Final = "rmq.control"
#: The protocol version this module writes and reads.
CONTROL_VERSION: Final = 1
RESET_KINDS: Final = ("earliest", "latest", "time")
TYPE_RESET: Final = "reset"
TYPE_ACK: Final = "ack"
#: Epoch milliseconds beyond this are not times (year 9999).
_MAX_EPOCH_MS: Final = 253_402_300_799_999
_MAX_OFFSET: Final = 2**63 - 1
_MAX_PARTITION: Final = 2**31 - 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class ControlMessageError(InvalidInputError):
    """A control record (reset request or acknowledgement) is malformed."""


def format_epoch_ms(ms: int) -> str:
    """``2026-11-23T15:42:50.024Z`` (UTC, milliseconds)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """Where to reset to: the earliest or latest offset, or the first record at or after
    ``time_ms`` (Kafka's ``offsetsForTimes``)."""

    kind: str
    time_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in RESET_KINDS:
            raise ControlMessageError("target.kind", self.kind, f"expected one of {RESET_KINDS}")
        if self.kind == "time":
            _check_int("target.time_ms", self.time_ms, 0, _MAX_EPOCH_MS)
        elif self.time_ms is not None:
            raise ControlMessageError(
                "target.time_ms", self.time_ms, f"only a 'time' target has a time, not {self.kind}"
            )

    @classmethod
    def earliest(cls) -> ResetTarget:
        return cls("earliest")

    @classmethod
    def latest(cls) -> ResetTarget:
        return cls("latest")

    @classmethod
    def at(cls, time_ms: int) -> ResetTarget:
        return cls("time", time_ms)

    def describe(self) -> str:
        if self.time_ms is None:
            return self.kind
        return format_epoch_ms(self.time_ms)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.time_ms is not None:
            out["time_ms"] = self.time_ms
        return out


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """Reset ``group``'s offsets on ``topic`` (logical; ``kafka_topic`` is its Kafka name) to
    ``offsets`` (partition → new offset).  Valid until ``expires_ms``: a member that sees it
    later ignores it (the CLI has given up by then)."""

    request_id: str
    group: str
    topic: str
    kafka_topic: str
    target: ResetTarget
    offsets: dict[int, int]
    issued_ms: int
    expires_ms: int

    def __post_init__(self) -> None:
        _check_text("request_id", self.request_id)
        _check_text("group", self.group)
        _check_text("topic", self.topic)
        _check_text("kafka_topic", self.kafka_topic)
        if not isinstance(self.target, ResetTarget):
            raise ControlMessageError("target", self.target, "must be a ResetTarget")
        if not isinstance(self.offsets, dict) or not self.offsets:
            raise ControlMessageError("offsets", self.offsets, "needs at least one partition")
        for partition, offset in self.offsets.items():
            _check_int("offsets.partition", partition, 0, _MAX_PARTITION)
            _check_int(f"offsets[{partition}]", offset, 0, _MAX_OFFSET)
        _check_int("issued_ms", self.issued_ms, 0, _MAX_EPOCH_MS)
        _check_int("expires_ms", self.expires_ms, self.issued_ms, _MAX_EPOCH_MS)

    def expired(self, now_ms: int) -> bool:
        return now_ms > self.expires_ms

    def offsets_for(self, owned: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The new offsets of those ``owned`` ``(kafka topic, partition)`` this request resets:
        what a member seeks and commits, then passes to ``ControlChannel.acknowledge``."""
        return {
            (topic, partition): self.offsets[partition]
            for topic, partition in owned
            if topic == self.kafka_topic and partition in self.offsets
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "v": CONTROL_VERSION,
            "type": TYPE_RESET,
            "request_id": self.request_id,
            "group": self.group,
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "target": self.target.to_json(),
            "offsets": [{"partition": p, "offset": o} for p, o in sorted(self.offsets.items())],
            "issued_ms": self.issued_ms,
            "expires_ms": self.expires_ms,
        }


@dataclass(frozen=True, slots=True)
class ResetAck:
    """Member ``member_id`` of ``group`` applied request ``request_id``: ``applied`` maps
    ``(kafka topic, partition)`` → the offset it seeked to and committed (empty when it owns
    none of the partitions)."""

    request_id: str
    group: str
    member_id: str
    applied: dict[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_text("request_id", self.request_id)
        _check_text("group", self.group)
        _check_text("member_id", self.member_id)
        if not isinstance(self.applied, dict):
            raise ControlMessageError("applied", self.applied, "must be a dict")
        for key, offset in self.applied.items():
            if (
                not isinstance(key, tuple)
                or len(key) != 2
                or not isinstance(key[0], str)
                or not key[0]
            ):
                raise ControlMessageError("applied", key, "keys are (kafka topic, partition) pairs")
            _check_int("applied.partition", key[1], 0, _MAX_PARTITION)
            _check_int(f"applied[{key[0]}:{key[1]}]", offset, 0, _MAX_OFFSET)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": CONTROL_VERSION,
            "type": TYPE_ACK,
            "request_id": self.request_id,
            "group": self.group,
            "member_id": self.member_id,
            "applied": [
                {"kafka_topic": t, "partition": p, "offset": o}
                for (t, p), o in sorted(self.applied.items())
            ],
        }


ControlMessage = ResetRequest | ResetAck


def encode(message: ControlMessage) -> bytes:
    """The record value of a request or an acknowledgement (compact JSON, UTF-8)."""
    return json.dumps(message.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def decode(value: bytes | None) -> ControlMessage:
    """Parse a control record value strictly; :class:`ControlMessageError` names what is wrong."""
    if not isinstance(value, bytes | bytearray):
        raise ControlMessageError("value", value, "a control record needs a JSON value")
    try:
        data = json.loads(bytes(value).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ControlMessageError("value", _clip(value), f"not UTF-8 JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ControlMessageError("value", _clip(value), "must be a JSON object")
    version = data.get("v")
    if version != CONTROL_VERSION or isinstance(version, bool):
        raise ControlMessageError(
            "v", version, f"unsupported version (this reads {CONTROL_VERSION})"
        )
    kind = data.get("type")
    if kind == TYPE_RESET:
        return _decode_request(data)
    if kind == TYPE_ACK:
        return _decode_ack(data)
    raise ControlMessageError("type", kind, f"expected {TYPE_RESET!r} or {TYPE_ACK!r}")


_REQUEST_FIELDS: Final = frozenset(
    {
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
    }
)
_ACK_FIELDS: Final = frozenset({"v", "type", "request_id", "group", "member_id", "applied"})


def _decode_request(data: dict[str, Any]) -> ResetRequest:
    _exact_fields("reset", data, _REQUEST_FIELDS)
    target = data["target"]
    if not isinstance(target, dict):
        raise ControlMessageError("reset.target", target, "must be an object")
    _exact_fields("reset.target", target, frozenset({"kind", "time_ms"}), optional={"time_ms"})
    offsets: dict[int, int] = {}
    items = data["offsets"]
    if not isinstance(items, list) or not items:
        raise ControlMessageError("reset.offsets", items, "must be a non-empty list")
    for i, item in enumerate(items):
        where = f"reset.offsets[{i}]"
        if not isinstance(item, dict):
            raise ControlMessageError(where, item, "must be an object")
        _exact_fields(where, item, frozenset({"partition", "offset"}))
        partition = _check_int(f"{where}.partition", item["partition"], 0, _MAX_PARTITION)
        if partition in offsets:
            raise ControlMessageError(f"{where}.partition", partition, "listed twice")
        offsets[partition] = _check_int(f"{where}.offset", item["offset"], 0, _MAX_OFFSET)
    kind = target["kind"]
    if not isinstance(kind, str):
        raise ControlMessageError("reset.target.kind", kind, f"expected one of {RESET_KINDS}")
    return ResetRequest(
        request_id=_text_field("reset.request_id", data["request_id"]),
        group=_text_field("reset.group", data["group"]),
        topic=_text_field("reset.topic", data["topic"]),
        kafka_topic=_text_field("reset.kafka_topic", data["kafka_topic"]),
        target=ResetTarget(kind, target.get("time_ms")),
        offsets=offsets,
        issued_ms=_check_int("reset.issued_ms", data["issued_ms"], 0, _MAX_EPOCH_MS),
        expires_ms=_check_int("reset.expires_ms", data["expires_ms"], 0, _MAX_EPOCH_MS),
    )


def _decode_ack(data: dict[str, Any]) -> ResetAck:
    _exact_fields("ack", data, _ACK_FIELDS)
    items = data["applied"]
    if not isinstance(items, list):
        raise ControlMessageError("ack.applied", items, "must be a list")
    applied: dict[tuple[str, int], int] = {}
    for i, item in enumerate(items):
        where = f"ack.applied[{i}]"
        if not isinstance(item, dict):
            raise ControlMessageError(where, item, "must be an object")
        _exact_fields(where, item, frozenset({"kafka_topic", "partition", "offset"}))
        key = (
            _text_field(f"{where}.kafka_topic", item["kafka_topic"]),
            _check_int(f"{where}.partition", item["partition"], 0, _MAX_PARTITION),
        )
        if key in applied:
            raise ControlMessageError(where, f"{key[0]}[{key[1]}]", "listed twice")
        applied[key] = _check_int(f"{where}.offset", item["offset"], 0, _MAX_OFFSET)
    return ResetAck(
        request_id=_text_field("ack.request_id", data["request_id"]),
        group=_text_field("ack.group", data["group"]),
        member_id=_text_field("ack.member_id", data["member_id"]),
        applied=applied,
    )


# --- settling a request ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ResetOutcome:
    """What the acknowledgements of one request say, against who owned which partitions.

    ``applied``: partition → (member id, offset it applied); ``silent``: member id → its
    partitions, for members that did not acknowledge; ``left_out``: member id → partitions it
    owns but did not apply although it acknowledged; ``unowned``: partitions of the request no
    live member owns (nobody could apply them).
    """

    applied: dict[int, tuple[str, int]]
    silent: dict[str, tuple[int, ...]]
    left_out: dict[str, tuple[int, ...]]
    unowned: tuple[int, ...]

    @property
    def complete(self) -> bool:
        return not (self.silent or self.left_out or self.unowned)


def settle(
    request: ResetRequest,
    owners: Mapping[str, Iterable[int]],
    acks: Mapping[str, ResetAck],
) -> ResetOutcome:
    """Match the acknowledgements (by member id) to the members that own partitions of the
    request's topic (``owners``: member id → partitions).  Acknowledgements of other
    requests or groups, and from members that own nothing, are ignored."""
    owned: dict[str, tuple[int, ...]] = {
        m: tuple(sorted(set(ps) & set(request.offsets))) for m, ps in owners.items()
    }
    owned = {m: ps for m, ps in owned.items() if ps}
    applied: dict[int, tuple[str, int]] = {}
    silent: dict[str, tuple[int, ...]] = {}
    left_out: dict[str, tuple[int, ...]] = {}
    for member, partitions in sorted(owned.items()):
        ack = acks.get(member)
        if ack is None or ack.request_id != request.request_id or ack.group != request.group:
            silent[member] = partitions
            continue
        missing = []
        for p in partitions:
            offset = ack.applied.get((request.kafka_topic, p))
            if offset is None:
                missing.append(p)
            else:
                applied[p] = (member, offset)
        if missing:
            left_out[member] = tuple(missing)
    covered = {p for ps in owned.values() for p in ps}
    unowned = tuple(sorted(set(request.offsets) - covered))
    return ResetOutcome(applied, silent, left_out, unowned)


# --- checks ----------------------------------------------------------------------------------
def _clip(value: Any) -> Any:
    if isinstance(value, bytes | bytearray) and len(value) > 200:
        return bytes(value[:200]) + b"..."
    return value


def _exact_fields(
    where: str, data: Mapping[str, Any], expected: frozenset[str], optional: Iterable[str] = ()
) -> None:
    unknown = sorted(set(data) - expected)
    if unknown:
        raise ControlMessageError(f"{where}.{unknown[0]}", data[unknown[0]], "unknown field")
    missing = sorted(expected - set(data) - set(optional))
    if missing:
        raise ControlMessageError(f"{where}.{missing[0]}", None, "missing")


def _check_int(name: str, value: Any, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ControlMessageError(name, value, "must be a whole number")
    if not minimum <= value <= maximum:
        raise ControlMessageError(name, value, f"must be in {minimum}..{maximum}")
    return value


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ControlMessageError(name, value, "must be a non-empty string")
    return value


def _text_field(name: str, value: Any) -> str:
    return _check_text(name, value)
