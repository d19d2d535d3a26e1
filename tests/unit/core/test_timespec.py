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


# --- the errors' text and the range's edges ---------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "time='': expected an ISO-8601 time such as 2026-11-23T10:00Z"),
        (
            "soon",
            "time='soon': not an ISO-8601 time; expected e.g. 2026-11-23T10:00:00Z or "
            "2026-11-23T12:00:00+02:00 (or epoch milliseconds)",
        ),
        (
            "2026-11-23T10:00",
            "time='2026-11-23T10:00': no UTC offset: add 'Z' (UTC) or the zone's offset "
            "such as '+02:00'",
        ),
        (
            "1969-12-31T23:59:59.999Z",
            "time='1969-12-31T23:59:59.999Z': out of range (1970 to 9999)",
        ),
        ("253402300800000", "time='253402300800000': out of range (1970 to 9999)"),
    ],
)
def test_parse_time_error_text_with_the_default_field(text: str, message: str) -> None:
    with pytest.raises(InvalidTimeError) as info:
        parse_time(text)
    assert info.value.field == "time"
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T02:00:00+02:00", 0),
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
        ("253402300799999", 253_402_300_799_999),
    ],
)
def test_parse_time_accepts_both_ends_of_the_range(text: str, ms: int) -> None:
    assert parse_time(text) == ms


def test_parse_time_drops_microseconds_to_whole_milliseconds() -> None:
    ms = parse_time("2026-11-23T10:00:00.000999Z")
    assert ms == 1_795_428_000_000 and isinstance(ms, int)
    assert parse_time("2026-11-23T10:00:00.250750+00:00") == 1_795_428_000_250


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "soon",
            "--since='soon': expected a duration such as 24h, 90m, 7d or an ISO-8601 time",
        ),
        (
            "2026-13-01T00:00Z",
            "--since='2026-13-01T00:00Z': not an ISO-8601 time; expected e.g. "
            "2026-11-23T10:00:00Z or 2026-11-23T12:00:00+02:00 (or epoch milliseconds); "
            "or a duration such as 24h, 90m, 7d",
        ),
        (
            "2026-11-23T10:00:00",
            "--since='2026-11-23T10:00:00': no UTC offset: add 'Z' (UTC) or the zone's offset "
            "such as '+02:00'; or a duration such as 24h, 90m, 7d",
        ),
    ],
)
def test_parse_since_error_text(text: str, message: str) -> None:
    with pytest.raises(InvalidTimeError) as info:
        parse_since(text, NOW)
    assert str(info.value) == message


def test_parse_since_names_the_field_it_is_given() -> None:
    with pytest.raises(InvalidTimeError) as info:
        parse_since("later", NOW, "--from")
    assert (info.value.field, str(info.value)) == (
        "--from",
        "--from='later': expected a duration such as 24h, 90m, 7d or an ISO-8601 time",
    )
    with pytest.raises(InvalidTimeError) as info:
        parse_since("2026-11-23", NOW, "--from")
    assert info.value.field == "--from" and str(info.value).startswith("--from='2026-11-23': ")
