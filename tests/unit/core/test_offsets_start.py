"""``start_rule``: a new member's start rule and its timestamp, shared by every consumer."""

from __future__ import annotations

import pytest

from adapter.core.offsets import DEFAULT_TIMESTAMP_BACK_MS, ConsumeFromWhere, start_rule
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


def test_without_a_timestamp_it_starts_half_an_hour_back() -> None:
    where, ts = start_rule("CONSUME_FROM_TIMESTAMP", None, None, NOW)
    assert where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    assert ts == NOW - DEFAULT_TIMESTAMP_BACK_MS == NOW - 30 * 60 * 1000


def test_a_given_timestamp_is_kept() -> None:
    assert start_rule(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, None, 5, NOW)[1] == 5


@pytest.mark.parametrize(
    ("value", "reset", "expected"),
    [
        (None, "earliest", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
        (None, "latest", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
        (None, None, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
        ("CONSUME_FROM_LAST_OFFSET", "earliest", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
    ],
)
def test_the_rule_given_wins_over_auto_offset_reset(
    value: str | None, reset: str | None, expected: ConsumeFromWhere
) -> None:
    assert start_rule(value, reset, None, NOW)[0] is expected


def test_an_unknown_rule_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="consume_from_where"):
        start_rule("FROM_NOWHERE", None, None, NOW)


def test_a_given_timestamp_is_read_as_the_user_wrote_it() -> None:
    from datetime import UTC, datetime

    ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    for given in (ms, "20260101000000", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1)):  # noqa: DTZ001 - naive means UTC
        assert start_rule("CONSUME_FROM_TIMESTAMP", None, given, NOW)[1] == ms
    with pytest.raises(ConfigError, match="consume_timestamp"):
        start_rule("CONSUME_FROM_TIMESTAMP", None, "yesterday", NOW)
