"""A member's circuit-breaker state, published for ``rmq-kafka group progress``.  Pure.

The breaker's state lives in the consumer process.  So that an operator sees it without a
server of its own, each member with a breaker publishes a :class:`CircuitStatus` to the
control topic ``rmq.control`` (compacted; record key ``<group>\\n<member id>``, so that
compaction keeps the latest per member and reset requests, keyed by the group, are apart):
on every change of state, and again every :data:`REFRESH_OPEN_S` while not closed and
every :data:`REFRESH_CLOSED_S` while closed.  A member that leaves cleanly publishes a
tombstone.  ``group progress`` reads the records of the last :data:`LOOKBACK_S` and shows
the latest per *live* member (:func:`latest_statuses`); a record older than three refresh
intervals of its state is shown as stale (the process may be stuck).

The value is a JSON object, version ``1``::

    {"v": 1, "type": "circuit", "group": "G", "member_id": "…", "state": "open",
     "since_ms": 1795448000000, "held_messages": 37, "open_seconds": 12.5,
     "opened": 1, "published_ms": 1795448010000}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from adapter.core.breaker import CircuitState
from adapter.core.control import CONTROL_VERSION, ControlMessageError, format_epoch_ms

__all__ = [
    "LOOKBACK_S",
    "REFRESH_CLOSED_S",
    "REFRESH_OPEN_S",
    "TYPE_CIRCUIT",
    "CircuitStatus",
    "MemberCircuit",
    "StatusSchedule",
    "decode_status",
    "encode_status",
    "latest_statuses",
    "status_key",
]

TYPE_CIRCUIT: Final = "circuit"
#: a member publishes its state again this often while its breaker is open or half-open
REFRESH_OPEN_S: Final = 5.0
#: ... and this often while it is closed (so that a reader needs only a recent window)
REFRESH_CLOSED_S: Final = 60.0
#: how far back ``group progress`` reads: a closed member has published within it
LOOKBACK_S: Final = 3 * REFRESH_CLOSED_S
_FIELDS: Final = frozenset(
    {
        "v",
        "type",
        "group",
        "member_id",
        "state",
        "since_ms",
        "held_messages",
        "open_seconds",
        "opened",
        "published_ms",
    }
)
_STATES: Final = {s.value: s for s in CircuitState}


def status_key(group: str, member_id: str) -> bytes:
    """The record key of a member's status (a group name has no newline)."""
    return f"{group}\n{member_id}".encode()


def is_status_key(key: bytes | None, group: str) -> bool:
    """Whether ``key`` is the key of a status of a member of ``group``."""
    return key is not None and key.startswith(f"{group}\n".encode())


@dataclass(frozen=True, slots=True)
class CircuitStatus:
    """Member ``member_id`` of ``group`` had its breaker in ``state`` since ``since_ms``
    (epoch ms) when it published this at ``published_ms``."""

    group: str
    member_id: str
    state: CircuitState
    since_ms: int
    held_messages: int
    open_seconds: float
    opened: int
    published_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "v": CONTROL_VERSION,
            "type": TYPE_CIRCUIT,
            "group": self.group,
            "member_id": self.member_id,
            "state": self.state.value,
            "since_ms": self.since_ms,
            "held_messages": self.held_messages,
            "open_seconds": round(self.open_seconds, 3),
            "opened": self.opened,
            "published_ms": self.published_ms,
        }


def encode_status(status: CircuitStatus) -> bytes:
    return json.dumps(status.to_json(), separators=(",", ":")).encode()


def decode_status(value: bytes | None) -> CircuitStatus:
    """Parse a status record strictly; :class:`ControlMessageError` names what is wrong."""
    if not isinstance(value, bytes | bytearray):
        raise ControlMessageError("value", value, "a status record needs a JSON value")
    try:
        data = json.loads(bytes(value).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ControlMessageError("value", bytes(value[:200]), f"not UTF-8 JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ControlMessageError("value", bytes(value[:200]), "must be a JSON object")
    if data.get("type") != TYPE_CIRCUIT:
        raise ControlMessageError("type", data.get("type"), f"expected {TYPE_CIRCUIT!r}")
    if data.get("v") != CONTROL_VERSION:
        raise ControlMessageError("v", data.get("v"), f"unsupported (this reads {CONTROL_VERSION})")
    if set(data) != _FIELDS:
        odd = sorted(set(data) ^ _FIELDS)[0]
        raise ControlMessageError(f"circuit.{odd}", data.get(odd), "unknown or missing field")
    state = _STATES.get(data["state"]) if isinstance(data["state"], str) else None
    if state is None:
        expected = f"expected one of {list(_STATES)}"
        raise ControlMessageError("circuit.state", data["state"], expected)
    for name in ("group", "member_id"):
        if not isinstance(data[name], str) or not data[name]:
            raise ControlMessageError(f"circuit.{name}", data[name], "must be a non-empty string")
    for name in ("since_ms", "held_messages", "opened", "published_ms"):
        value_ = data[name]
        if isinstance(value_, bool) or not isinstance(value_, int) or value_ < 0:
            raise ControlMessageError(f"circuit.{name}", value_, "must be a whole number >= 0")
    seconds = data["open_seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ControlMessageError("circuit.open_seconds", seconds, "must be a number >= 0")
    return CircuitStatus(
        group=data["group"],
        member_id=data["member_id"],
        state=state,
        since_ms=data["since_ms"],
        held_messages=data["held_messages"],
        open_seconds=float(seconds),
        opened=data["opened"],
        published_ms=data["published_ms"],
    )


class StatusSchedule:
    """When a member publishes its status: at once after a change of state (or the first
    time), then every refresh interval of the state it is in.  ``now`` is the member's
    monotonic clock; after a failed publish it tries again at the next refresh."""

    __slots__ = ("_changed", "_next")

    def __init__(self) -> None:
        self._next = 0.0
        self._changed = True

    def changed(self) -> None:
        self._changed = True

    def due(self, now: float) -> bool:
        return self._changed or now >= self._next

    def published(self, now: float, state: CircuitState) -> None:
        self._changed = False
        self._next = now + (REFRESH_CLOSED_S if state is CircuitState.CLOSED else REFRESH_OPEN_S)


@dataclass(frozen=True, slots=True)
class MemberCircuit:
    """A live member's latest status as ``group progress`` shows it."""

    status: CircuitStatus
    #: the record is older than three refresh intervals of its state
    stale: bool
    #: seconds since it published the record
    age_s: float
    #: when it was read (epoch ms)
    read_ms: int

    def text(self) -> str:
        s = self.status
        since = max(0, self.read_ms - s.since_ms) / 1000
        out = f"circuit {s.state.value} since {format_epoch_ms(s.since_ms)} ({since:.0f} s)"
        if s.state is not CircuitState.CLOSED or s.held_messages:
            out += f", {s.held_messages} message(s) held"
        if self.stale:
            out += f"  [stale: last report {self.age_s:.0f} s ago]"
        return out

    def to_json(self) -> dict[str, Any]:
        s = self.status
        return {
            "state": s.state.value,
            "since_ms": s.since_ms,
            "since": format_epoch_ms(s.since_ms),
            "held_messages": s.held_messages,
            "open_seconds": s.open_seconds,
            "opened": s.opened,
            "published_ms": s.published_ms,
            "stale": self.stale,
        }


def latest_statuses(
    statuses: Iterable[CircuitStatus], live_members: Iterable[str], group: str, now_ms: int
) -> dict[str, MemberCircuit]:
    """Member id → its latest status, for the ``live_members`` of ``group`` only (a member
    that left, or a member id of a previous run, is ignored); ``statuses`` in any order."""
    live = set(live_members)
    latest: dict[str, CircuitStatus] = {}
    for s in statuses:
        if s.group != group or s.member_id not in live:
            continue
        seen = latest.get(s.member_id)
        if seen is None or s.published_ms >= seen.published_ms:
            latest[s.member_id] = s
    out: dict[str, MemberCircuit] = {}
    for member, s in latest.items():
        age_s = max(0, now_ms - s.published_ms) / 1000
        refresh = REFRESH_CLOSED_S if s.state is CircuitState.CLOSED else REFRESH_OPEN_S
        out[member] = MemberCircuit(s, stale=age_s > 3 * refresh, age_s=age_s, read_ms=now_ms)
    return out
