"""Times the admin commands take and print: parse_time, parse_since, format_time."""

from __future__ import annotations

import pytest

from adapter.core.timespec import InvalidTimeError, format_time, parse_since, parse_time
from adapter.core.views import format_span_ms
from adapter.errors import InvalidInputError

pytestmark = pytest.mark.unit

NOW = 1_795_448_570_000  # 2026-11-23T15:42:50Z


# --- times -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-11-23T10:00:00Z", 1_795_428_000_000),
        ("2026-11-23T12:00:00+02:00", 1_795_428_000_000),
        ("2026-11-23T10:00:00.250Z", 1_795_428_000_250),
        ("2026-11-23T10:00Z", 1_795_428_000_000),
        ("20261123T100000Z", 1_795_428_000_000),
        ("1795428000000", 1_795_428_000_000),
        (" 2026-11-23T10:00:00Z ", 1_795_428_000_000),
    ],
)
def test_parse_time(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2026-11-23T10:00:00", "no UTC offset"),
        ("2026-11-23", "no UTC offset"),
        ("yesterday", "not an ISO-8601 time"),
        ("2026-13-01T00:00Z", "not an ISO-8601 time"),
        ("", "expected an ISO-8601 time"),
        ("1969-12-31T23:59:59Z", "out of range"),
        ("99999999999999999", "out of range"),
    ],
)
def test_parse_time_refuses_naming_the_field_and_value(text: str, why: str) -> None:
    with pytest.raises(InvalidTimeError) as info:
        parse_time(text, "--to-time")
    assert isinstance(info.value, InvalidInputError)
    assert (info.value.field, info.value.value) == ("--to-time", text)
    assert why in str(info.value) and repr(text) in str(info.value)


def test_parse_since() -> None:
    assert parse_since("24h", NOW) == NOW - 86_400_000
    assert parse_since("90m", NOW) == NOW - 5_400_000
    assert parse_since("7d", NOW) == NOW - 7 * 86_400_000
    assert parse_since("500ms", NOW) == NOW - 500
    assert parse_since("2026-11-23T10:00:00Z", NOW) == 1_795_428_000_000
    assert parse_since("99999d", NOW) == 0
    for bad in ("24x", "-1h", "h", "soon"):
        with pytest.raises(InvalidTimeError) as info:
            parse_since(bad, NOW)
        assert info.value.field == "--since" and info.value.value == bad


def test_format_time_and_spans() -> None:
    assert format_time(1_795_428_000_250) == "2026-11-23T10:00:00.250Z"
    assert format_time(None) == "-"
    assert [format_span_ms(v) for v in (None, 850, 12_340, 302_000, 7_380_000, 273_600_000)] == [
        "-",
        "850ms",
        "12.3s",
        "5m02s",
        "2h03m",
        "3d04h",
    ]
