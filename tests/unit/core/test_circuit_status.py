"""A member's circuit status on the control topic: the exact JSON it publishes, the strict
decoding (every error names the field, the value and the cause), when it publishes again,
and what ``group progress`` shows of the latest status per live member."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter.core.breaker import CircuitState
from adapter.core.circuit_status import (
    LOOKBACK_S,
    REFRESH_CLOSED_S,
    REFRESH_OPEN_S,
    CircuitStatus,
    MemberCircuit,
    StatusSchedule,
    decode_status,
    encode_status,
    latest_statuses,
)
from adapter.core.control import ControlMessageError

pytestmark = pytest.mark.unit

SINCE = 1_795_448_000_000
GOOD: dict[str, Any] = {
    "v": 1,
    "type": "circuit",
    "group": "G",
    "member_id": "m-1",
    "state": "open",
    "since_ms": SINCE,
    "held_messages": 37,
    "open_seconds": 12.5,
    "opened": 2,
    "published_ms": SINCE + 10_000,
}


def record(**over: Any) -> bytes:
    data = {**GOOD, **over}
    return json.dumps({k: v for k, v in data.items() if v is not _DROP}).encode()


_DROP = object()


def status(
    member: str = "m-1",
    state: CircuitState = CircuitState.OPEN,
    published: int = SINCE,
    *,
    group: str = "G",
    held: int = 7,
) -> CircuitStatus:
    return CircuitStatus(group, member, state, SINCE, held, 1.5, 1, published)


# --- encoding ------------------------------------------------------------------------------
def test_a_status_is_encoded_as_compact_json_with_every_field() -> None:
    s = CircuitStatus("G", "m-1", CircuitState.HALF_OPEN, SINCE, 37, 12.34567, 2, SINCE + 1)
    assert encode_status(s) == (
        b'{"v":1,"type":"circuit","group":"G","member_id":"m-1","state":"half_open",'
        b'"since_ms":1795448000000,"held_messages":37,"open_seconds":12.346,"opened":2,'
        b'"published_ms":1795448000001}'
    )


@pytest.mark.parametrize("state", list(CircuitState))
def test_decoding_reads_back_every_field(state: CircuitState) -> None:
    decoded = decode_status(bytearray(record(state=state.value, open_seconds=3)))
    assert decoded == CircuitStatus("G", "m-1", state, SINCE, 37, 3.0, 2, SINCE + 10_000)
    assert type(decoded.open_seconds) is float


@pytest.mark.parametrize(
    "over",
    [
        {"since_ms": 0},
        {"held_messages": 0},
        {"opened": 0},
        {"published_ms": 0},
        {"open_seconds": 0},
    ],
)
def test_zero_is_a_valid_count_and_time(over: dict[str, Any]) -> None:
    (name, value), *_ = over.items()
    assert getattr(decode_status(record(**over)), name) == value


# --- strict decoding -----------------------------------------------------------------------
LONG = b"[" + b" " * 300 + b"1"  # not JSON, longer than what an error quotes

BAD: list[tuple[Any, str]] = [
    (None, "value=None: a status record needs a JSON value"),
    ("{}", "value='{}': a status record needs a JSON value"),
    (
        b"\xff{}",
        "value=b'\\xff{}': not UTF-8 JSON: 'utf-8' codec can't decode byte 0xff in position 0:"
        " invalid start byte",
    ),
    (
        b"{",
        "value=b'{': not UTF-8 JSON: Expecting property name enclosed in double quotes:"
        " line 1 column 2 (char 1)",
    ),
    (
        LONG,
        f"value={LONG[:200]!r}: not UTF-8 JSON: "
        "Expecting ',' delimiter: line 1 column 303 (char 302)",
    ),
    (b"[1]", "value=b'[1]': must be a JSON object"),
    (b"[" + b"1," * 150 + b"1]", f"value={(b'[' + b'1,' * 150)[:200]!r}: must be a JSON object"),
    (record(type=_DROP), "type=None: expected 'circuit'"),
    (record(type="reset"), "type='reset': expected 'circuit'"),
    (record(v=_DROP), "v=None: unsupported (this reads 1)"),
    (record(v=2), "v=2: unsupported (this reads 1)"),
    (record(opened=_DROP), "circuit.opened=None: unknown or missing field"),
    (record(extra=5), "circuit.extra=5: unknown or missing field"),
    (record(held_messages=_DROP, zzz=1), "circuit.held_messages=None: unknown or missing field"),
    (record(aaa=1, since_ms=_DROP), "circuit.aaa=1: unknown or missing field"),
    (
        record(state="ajar"),
        "circuit.state='ajar': expected one of ['closed', 'open', 'half_open']",
    ),
    (record(state=1), "circuit.state=1: expected one of ['closed', 'open', 'half_open']"),
    (record(state=None), "circuit.state=None: expected one of ['closed', 'open', 'half_open']"),
    (
        record(state=["open"]),
        "circuit.state=['open']: expected one of ['closed', 'open', 'half_open']",
    ),
    (record(state={}), "circuit.state={}: expected one of ['closed', 'open', 'half_open']"),
    (record(group=""), "circuit.group='': must be a non-empty string"),
    (record(group=5), "circuit.group=5: must be a non-empty string"),
    (record(member_id=""), "circuit.member_id='': must be a non-empty string"),
    (record(member_id=["m"]), "circuit.member_id=['m']: must be a non-empty string"),
    *[
        (record(**{name: value}), f"circuit.{name}={value!r}: must be a whole number >= 0")
        for name in ("since_ms", "held_messages", "opened", "published_ms")
        for value in (-1, True, False, 1.0, "3", None)
    ],
    *[
        (record(open_seconds=value), f"circuit.open_seconds={value!r}: must be a number >= 0")
        for value in (-0.001, -1, True, False, "1.5", None)
    ],
]


@pytest.mark.parametrize(("value", "message"), BAD)
def test_a_bad_status_names_the_field_the_value_and_the_cause(value: Any, message: str) -> None:
    with pytest.raises(ControlMessageError) as caught:
        decode_status(value)
    assert str(caught.value) == message


# --- when a member publishes ---------------------------------------------------------------
def test_a_new_schedule_is_due_at_once_whatever_the_clock_says() -> None:
    assert StatusSchedule().due(-1_000.0)


@pytest.mark.parametrize(
    ("state", "refresh"),
    [
        (CircuitState.CLOSED, REFRESH_CLOSED_S),
        (CircuitState.OPEN, REFRESH_OPEN_S),
        (CircuitState.HALF_OPEN, REFRESH_OPEN_S),
    ],
)
def test_after_a_publish_the_next_one_is_due_one_refresh_of_the_state_later(
    state: CircuitState, refresh: float
) -> None:
    schedule = StatusSchedule()
    schedule.published(100.0, state)
    assert not schedule.due(100.0)
    assert not schedule.due(100.0 + refresh - 0.001)
    assert schedule.due(100.0 + refresh)
    schedule.changed()
    assert schedule.due(100.0)


def test_the_refresh_intervals_and_the_lookback() -> None:
    assert (REFRESH_OPEN_S, REFRESH_CLOSED_S, LOOKBACK_S) == (5.0, 60.0, 180.0)


# --- what group progress shows -------------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "held", "stale", "text"),
    [
        (CircuitState.CLOSED, 0, False, "circuit closed since 2026-11-23T15:33:20.000Z (13 s)"),
        (
            CircuitState.CLOSED,
            2,
            False,
            "circuit closed since 2026-11-23T15:33:20.000Z (13 s), 2 message(s) held",
        ),
        (
            CircuitState.OPEN,
            0,
            True,
            "circuit open since 2026-11-23T15:33:20.000Z (13 s), 0 message(s) held"
            "  [stale: last report 17 s ago]",
        ),
        (
            CircuitState.HALF_OPEN,
            5,
            False,
            "circuit half_open since 2026-11-23T15:33:20.000Z (13 s), 5 message(s) held",
        ),
    ],
)
def test_a_member_circuit_as_text(state: CircuitState, held: int, stale: bool, text: str) -> None:
    s = CircuitStatus("G", "m", state, SINCE, held, 1.5, 1, SINCE)
    assert MemberCircuit(s, stale=stale, age_s=16.6, read_ms=SINCE + 12_600).text() == text


def test_a_since_after_the_read_shows_zero_seconds() -> None:
    s = CircuitStatus("G", "m", CircuitState.CLOSED, SINCE, 0, 0.0, 0, SINCE)
    text = MemberCircuit(s, stale=False, age_s=0.0, read_ms=SINCE - 5_000).text()
    assert text == "circuit closed since 2026-11-23T15:33:20.000Z (0 s)"


def test_a_long_open_circuit_counts_whole_seconds() -> None:
    s = CircuitStatus("G", "m", CircuitState.OPEN, SINCE, 2, 1.5, 1, SINCE)
    text = MemberCircuit(s, stale=False, age_s=0.0, read_ms=SINCE + 1_000_000).text()
    assert text == "circuit open since 2026-11-23T15:33:20.000Z (1000 s), 2 message(s) held"


def test_a_member_circuit_as_json() -> None:
    s = CircuitStatus("G", "m", CircuitState.OPEN, SINCE + 24, 3, 2.5, 4, SINCE + 99)
    assert MemberCircuit(s, stale=True, age_s=1.0, read_ms=SINCE + 100).to_json() == {
        "state": "open",
        "since_ms": SINCE + 24,
        "since": "2026-11-23T15:33:20.024Z",
        "held_messages": 3,
        "open_seconds": 2.5,
        "opened": 4,
        "published_ms": SINCE + 99,
        "stale": True,
    }


def test_progress_keeps_the_latest_status_per_live_member_of_the_group() -> None:
    a = status("m-1", CircuitState.OPEN, SINCE + 1_000)
    b = status("m-1", CircuitState.HALF_OPEN, SINCE + 1_000)  # same time: the later record wins
    older = status("m-1", CircuitState.CLOSED, SINCE)
    other_group = status("m-1", CircuitState.CLOSED, SINCE + 5_000, group="G2")
    out = latest_statuses([a, older, b, older, other_group], iter(["m-1"]), "G", SINCE + 2_000)
    assert out == {
        "m-1": MemberCircuit(b, stale=False, age_s=1.0, read_ms=SINCE + 2_000),
    }


def test_records_of_other_groups_and_members_are_skipped_wherever_they_come() -> None:
    live = status("m-1", CircuitState.OPEN, SINCE + 1_000)
    gone = status("m-0", CircuitState.OPEN, SINCE + 1_500)  # a member that left
    other_group = status("m-1", CircuitState.CLOSED, SINCE + 5_000, group="G2")
    out = latest_statuses([other_group, gone, live], ["m-1"], "G", SINCE + 2_000)
    assert out == {"m-1": MemberCircuit(live, stale=False, age_s=1.0, read_ms=SINCE + 2_000)}


@pytest.mark.parametrize(
    ("state", "age_ms", "stale"),
    [
        (CircuitState.OPEN, 15_000, False),
        (CircuitState.OPEN, 15_001, True),
        (CircuitState.HALF_OPEN, 15_001, True),
        (CircuitState.CLOSED, 180_000, False),
        (CircuitState.CLOSED, 180_001, True),
    ],
)
def test_a_status_older_than_three_refresh_intervals_is_stale(
    state: CircuitState, age_ms: int, stale: bool
) -> None:
    s = status("m", state, SINCE)
    out = latest_statuses([s], ["m"], "G", SINCE + age_ms)
    assert out == {"m": MemberCircuit(s, stale=stale, age_s=age_ms / 1000, read_ms=SINCE + age_ms)}


def test_a_status_published_after_the_read_has_age_zero() -> None:
    s = status("m", CircuitState.OPEN, SINCE + 5_000)
    assert latest_statuses([s], ["m"], "G", SINCE)["m"].age_s == 0.0
