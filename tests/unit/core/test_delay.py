"""Unit tests for :mod:`adapter.core.delay` (delay table, level rules, max reconsume times)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.constants import DEFAULT_MESSAGE_DELAY_LEVEL
from adapter.core.delay import (
    UNIT_MS,
    DelayLevels,
    format_duration_ms,
    resolve_max_reconsume_times,
)
from adapter.errors import ConfigError, InvalidDelayLevelError, InvalidInputError

pytestmark = pytest.mark.unit

DEFAULT = DelayLevels.DEFAULT

EXPECTED_DEFAULT_SECONDS = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
]  # fmt: skip


# --- the default table ------------------------------------------------------------------------
class TestDefaultTable:
    def test_has_18_levels(self) -> None:
        assert len(DEFAULT) == 18
        assert DEFAULT.max_level == 18
        assert list(DEFAULT.levels()) == list(range(1, 19))

    def test_every_level_matches_rocketmq(self) -> None:
        assert [DEFAULT[level] for level in DEFAULT.levels()] == [
            timedelta(seconds=s) for s in EXPECTED_DEFAULT_SECONDS
        ]
        assert DEFAULT.delays_ms == tuple(s * 1000 for s in EXPECTED_DEFAULT_SECONDS)

    def test_named_levels(self) -> None:
        assert DEFAULT[1] == timedelta(seconds=1)
        assert DEFAULT[3] == timedelta(seconds=10)
        assert DEFAULT[18] == timedelta(hours=2)
        assert DEFAULT.delay_ms(1) == 1_000
        assert DEFAULT.delay_ms(3) == 10_000
        assert DEFAULT.delay_ms(18) == 7_200_000

    def test_iteration_is_in_level_order(self) -> None:
        assert list(DEFAULT) == [timedelta(seconds=s) for s in EXPECTED_DEFAULT_SECONDS]

    def test_default_is_parse_of_the_constant(self) -> None:
        assert DelayLevels.parse(DEFAULT_MESSAGE_DELAY_LEVEL) == DEFAULT

    def test_str_is_the_rocketmq_text(self) -> None:
        assert str(DEFAULT) == DEFAULT_MESSAGE_DELAY_LEVEL

    def test_tokens(self) -> None:
        assert DEFAULT.token(1) == "1s"
        assert DEFAULT.token(5) == "1m"
        assert DEFAULT.token(17) == "1h"
        assert DEFAULT.token(18) == "2h"

    def test_is_immutable(self) -> None:
        with pytest.raises(AttributeError):
            DEFAULT.delays_ms = (1,)  # type: ignore[misc]


# --- parse --------------------------------------------------------------------------------
class TestParse:
    @pytest.mark.parametrize(
        ("text", "expected_ms"),
        [
            ("250ms", (250,)),
            ("1s", (1_000,)),
            ("2m", (120_000,)),
            ("3h", (10_800_000,)),
            ("1d", (86_400_000,)),
            ("1ms 1s 1m 1h 1d", (1, 1_000, 60_000, 3_600_000, 86_400_000)),
            ("  10s\t20s\n30s  ", (10_000, 20_000, 30_000)),
            ("007s", (7_000,)),
            ("5s 1s", (5_000, 1_000)),  # not required to be sorted
        ],
    )
    def test_units(self, text: str, expected_ms: tuple[int, ...]) -> None:
        assert DelayLevels.parse(text).delays_ms == expected_ms

    def test_unit_table(self) -> None:
        assert UNIT_MS == {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

    @pytest.mark.parametrize(
        "token", ["5x", "s", "-1s", "0s", "1.5s", "0ms", "1S", "s1", "1sec", "+1s", "1", "1e3s"]
    )
    def test_bad_token_names_the_token(self, token: str) -> None:
        # the bad token sits in the middle of an otherwise good table
        text = f"1s {token} 10s"
        with pytest.raises(InvalidDelayLevelError) as info:
            DelayLevels.parse(text)
        assert repr(token) in str(info.value)
        assert info.value.value == token
        assert "token 2" in info.value.field

    @pytest.mark.parametrize("token", ["5x", "s", "-1s", "0s", "1.5s"])
    def test_bad_single_token(self, token: str) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            DelayLevels.parse(token)
        assert info.value.value == token
        assert repr(token) in str(info.value)

    @pytest.mark.parametrize("text", ["", "   ", "\n\t"])
    def test_empty_text(self, text: str) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            DelayLevels.parse(text)
        assert info.value.value == text
        assert "messageDelayLevel" in str(info.value)

    def test_not_a_string(self) -> None:
        with pytest.raises(InvalidDelayLevelError):
            DelayLevels.parse(["1s"])  # type: ignore[arg-type]

    def test_error_is_a_value_error(self) -> None:
        with pytest.raises(ValueError):
            DelayLevels.parse("oops")
        with pytest.raises(InvalidInputError):
            DelayLevels.parse("oops")


# --- construction and coerce --------------------------------------------------------------
class TestConstructAndCoerce:
    @pytest.mark.parametrize("bad", [(), (1000, 0), (-5,), (1.5,), (True,), ("1s",)])
    def test_invalid_tables(self, bad: tuple[object, ...]) -> None:
        with pytest.raises(InvalidDelayLevelError):
            DelayLevels(bad)  # type: ignore[arg-type]

    def test_invalid_entry_names_its_position(self) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            DelayLevels((1000, 2000, 0))
        assert info.value.field == "messageDelayLevel[3]"
        assert info.value.value == 0

    def test_coerce_none_is_default(self) -> None:
        assert DelayLevels.coerce(None) is DEFAULT

    def test_coerce_table_is_identity(self) -> None:
        table = DelayLevels((5, 6))
        assert DelayLevels.coerce(table) is table

    def test_coerce_text(self) -> None:
        assert DelayLevels.coerce("100ms 1s") == DelayLevels((100, 1000))

    def test_coerce_sequence_of_ms(self) -> None:
        assert DelayLevels.coerce([100, 200]) == DelayLevels((100, 200))
        assert DelayLevels.coerce((100, 200)).delays_ms == (100, 200)

    def test_coerce_bad_values(self) -> None:
        with pytest.raises(InvalidDelayLevelError):
            DelayLevels.coerce("1s nope")
        with pytest.raises(InvalidDelayLevelError):
            DelayLevels.coerce([100, -1])
        with pytest.raises(InvalidDelayLevelError):
            DelayLevels.coerce([])


# --- indexing and check -------------------------------------------------------------------
class TestIndexing:
    @pytest.mark.parametrize("level", [0, 19, -1, 100])
    def test_out_of_range_names_the_level(self, level: int) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            DEFAULT[level]
        assert info.value.value == level
        assert f"={level}" in str(info.value)
        assert "1..18" in str(info.value)

    @pytest.mark.parametrize("level", [0, 19])
    def test_delay_ms_and_token_reject_the_level(self, level: int) -> None:
        with pytest.raises(InvalidDelayLevelError):
            DEFAULT.delay_ms(level)
        with pytest.raises(InvalidDelayLevelError):
            DEFAULT.token(level)

    @pytest.mark.parametrize("level", [True, 1.0, "3", None])
    def test_check_rejects_non_ints(self, level: object) -> None:
        with pytest.raises(InvalidDelayLevelError):
            DEFAULT.check(level)  # type: ignore[arg-type]

    def test_check_returns_level_and_uses_field(self) -> None:
        assert DEFAULT.check(7) == 7
        with pytest.raises(InvalidDelayLevelError) as info:
            DEFAULT.check(42, field="DELAY")
        assert info.value.field == "DELAY"


# --- clamp and retry_level ------------------------------------------------------------------
class TestClampAndRetryLevel:
    @pytest.mark.parametrize(("level", "expected"), [(1, 1), (3, 3), (18, 18), (19, 18), (99, 18)])
    def test_clamp(self, level: int, expected: int) -> None:
        assert DEFAULT.clamp(level) == expected

    @pytest.mark.parametrize("level", [0, -1, -100])
    def test_clamp_rejects_below_one(self, level: int) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            DEFAULT.clamp(level)
        assert info.value.value == level

    @pytest.mark.parametrize("level", [True, 2.0, "2"])
    def test_clamp_rejects_non_ints(self, level: object) -> None:
        with pytest.raises(InvalidDelayLevelError):
            DEFAULT.clamp(level)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("reconsume_times", "expected"),
        [(0, 3), (1, 4), (5, 8), (14, 17), (15, 18), (16, 18), (17, 18), (100, 18)],
    )
    def test_retry_level_is_three_plus_n_clamped(self, reconsume_times: int, expected: int) -> None:
        assert DEFAULT.retry_level(reconsume_times) == expected

    def test_first_retry_waits_10s_and_late_retries_2h(self) -> None:
        assert DEFAULT[DEFAULT.retry_level(0)] == timedelta(seconds=10)
        assert DEFAULT[DEFAULT.retry_level(16)] == timedelta(hours=2)

    def test_retry_level_negative_count_is_treated_as_zero(self) -> None:
        assert DEFAULT.retry_level(-5) == 3

    def test_retry_level_short_table_clamps(self) -> None:
        short = DelayLevels.parse("10ms 20ms")
        assert short.retry_level(0) == 2
        assert short.retry_level(50) == 2

    @given(st.integers(min_value=0, max_value=10_000))
    def test_retry_level_always_valid(self, n: int) -> None:
        level = DEFAULT.retry_level(n)
        assert 1 <= level <= 18
        assert level == min(3 + n, 18)


# --- largest_level_within -----------------------------------------------------------------
class TestLargestLevelWithin:
    @pytest.mark.parametrize(
        ("remaining_ms", "expected"),
        [
            (0, None),
            (999, None),
            (1_000, 1),
            (4_999, 1),
            (5_000, 2),
            (10_000, 3),
            (59_999, 4),
            (7_200_000, 18),
            (10**12, 18),
            (-5, None),
        ],
    )
    def test_default_table(self, remaining_ms: int, expected: int | None) -> None:
        assert DEFAULT.largest_level_within(remaining_ms) == expected

    def test_unsorted_table_and_ties_pick_higher_level(self) -> None:
        table = DelayLevels((5_000, 1_000, 5_000, 3_000))
        assert table.largest_level_within(5_000) == 3
        assert table.largest_level_within(4_000) == 4
        assert table.largest_level_within(1_000) == 2
        assert table.largest_level_within(999) is None

    @given(
        st.lists(st.integers(min_value=1, max_value=10**6), min_size=1, max_size=20),
        st.integers(min_value=-10, max_value=2 * 10**6),
    )
    def test_property(self, delays: list[int], remaining: int) -> None:
        table = DelayLevels(tuple(delays))
        level = table.largest_level_within(remaining)
        fitting = [ms for ms in delays if ms <= remaining]
        if not fitting:
            assert level is None
        else:
            assert level is not None
            assert table.delay_ms(level) == max(fitting)
            # ties: the highest level with that delay
            assert level == max(i for i, ms in enumerate(delays, 1) if ms == max(fitting))


# --- str round trip, format_duration_ms -----------------------------------------------------
class TestFormat:
    @pytest.mark.parametrize(
        ("ms", "token"),
        [
            (1, "1ms"),
            (250, "250ms"),
            (1_000, "1s"),
            (1_500, "1500ms"),
            (90_000, "90s"),
            (60_000, "1m"),
            (3_600_000, "1h"),
            (5_400_000, "90m"),
            (86_400_000, "1d"),
            (172_800_000, "2d"),
        ],
    )
    def test_shortest_exact_token(self, ms: int, token: str) -> None:
        assert format_duration_ms(ms) == token

    def test_custom_table_str(self) -> None:
        assert str(DelayLevels((250, 1_500, 60_000))) == "250ms 1500ms 1m"

    @given(st.lists(st.integers(min_value=1, max_value=10**10), min_size=1, max_size=30))
    def test_str_round_trips_through_parse(self, delays: list[int]) -> None:
        table = DelayLevels(tuple(delays))
        assert DelayLevels.parse(str(table)) == table


# --- resolve_max_reconsume_times ------------------------------------------------------------
class TestResolveMaxReconsumeTimes:
    def test_minus_one_is_sixteen(self) -> None:
        assert resolve_max_reconsume_times(-1) == 16

    @pytest.mark.parametrize("value", [0, 1, 16, 17, 1000])
    def test_non_negative_kept(self, value: int) -> None:
        assert resolve_max_reconsume_times(value) == value

    @pytest.mark.parametrize("value", [-2, -100])
    def test_other_negatives_are_config_errors(self, value: int) -> None:
        with pytest.raises(ConfigError) as info:
            resolve_max_reconsume_times(value)
        assert info.value.field == "max_reconsume_times"
        assert info.value.value == value
        assert f"max_reconsume_times={value}" in str(info.value)

    @pytest.mark.parametrize("value", [True, 1.0, "16", None])
    def test_non_ints_are_config_errors(self, value: object) -> None:
        with pytest.raises(ConfigError):
            resolve_max_reconsume_times(value)  # type: ignore[arg-type]


# --- errors name the field, the value and the cause --------------------------------------------
@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda: DelayLevels(()), "messageDelayLevel=(): needs at least one level"),
        (
            lambda: DelayLevels((1000, 0)),
            "messageDelayLevel[2]=0: delay must be a positive whole number of ms",
        ),
        (
            lambda: DelayLevels.parse(5),  # type: ignore[arg-type]
            "messageDelayLevel=5: must be a string like '1s 5s 10s'",
        ),
        (lambda: DelayLevels.parse(" \t"), "messageDelayLevel=' \\t': needs at least one level"),
        (
            lambda: DelayLevels.parse("1s 5x"),
            "messageDelayLevel token 2='5x': expected a whole number followed by one of the "
            "units ms, s, m, h, d",
        ),
        (
            lambda: DelayLevels.parse("1s 5s 0m"),
            "messageDelayLevel token 3='0m': a delay must be greater than zero",
        ),
        (lambda: DEFAULT.check("3"), "delayLevel='3': must be an int"),  # type: ignore[arg-type]
        (lambda: DEFAULT.check(True), "delayLevel=True: must be an int"),
        (lambda: DEFAULT.check(19), "delayLevel=19: levels of this table are 1..18"),
        (lambda: DEFAULT.check(2.0, "level"), "level=2.0: must be an int"),  # type: ignore[arg-type]
        (lambda: DEFAULT.clamp("3"), "delayLevel='3': must be an int"),  # type: ignore[arg-type]
        (lambda: DEFAULT.clamp(0), "delayLevel=0: must be at least 1 to clamp"),
        (
            lambda: DEFAULT.index(timedelta(seconds=2)),
            "delay=datetime.timedelta(seconds=2): is not a delay of this table",
        ),
    ],
)
def test_delay_errors_name_field_value_and_cause(make: object, text: str) -> None:
    with pytest.raises(InvalidDelayLevelError) as raised:
        make()  # type: ignore[operator]
    assert str(raised.value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("3", "max_reconsume_times='3': must be an int"),
        (False, "max_reconsume_times=False: must be an int"),
        (-2, "max_reconsume_times=-2: must be >= 0, or -1 for the default (16)"),
    ],
)
def test_max_reconsume_times_errors_name_field_value_and_cause(value: object, text: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve_max_reconsume_times(value)  # type: ignore[arg-type]
    assert str(raised.value) == text


# --- the Sequence protocol, 1-based -------------------------------------------------------------
LADDER = DelayLevels.parse("1s 5s 1s 10s 5s")


def test_reversed_iterates_from_the_highest_level() -> None:
    assert list(reversed(LADDER)) == [timedelta(seconds=s) for s in (5, 10, 1, 5, 1)]


def test_contains_only_the_tables_delays_as_timedeltas() -> None:
    assert timedelta(seconds=10) in LADDER
    assert timedelta(seconds=2) not in LADDER
    assert 10_000 not in LADDER  # the delay in ms is not a timedelta
    assert "10s" not in LADDER


def test_count_counts_the_levels_with_a_delay() -> None:
    assert LADDER.count(timedelta(seconds=1)) == 2
    assert LADDER.count(timedelta(seconds=10)) == 1
    assert LADDER.count(timedelta(seconds=2)) == 0


@pytest.mark.parametrize(
    ("seconds", "start", "stop", "level"),
    [
        (1, None, None, 1),
        (5, None, None, 2),
        (10, None, None, 4),
        (1, 1, None, 1),  # start is inclusive
        (1, 2, None, 3),
        (5, 3, None, 5),
        (1, 1, 2, 1),
        (5, 2, 3, 2),  # stop is exclusive
    ],
)
def test_index_gives_the_first_level_from_start_up_to_stop(
    seconds: int, start: int | None, stop: int | None, level: int
) -> None:
    value = timedelta(seconds=seconds)
    if start is None:
        assert LADDER.index(value) == level
    else:
        assert LADDER.index(value, start, stop) == level


@pytest.mark.parametrize(("seconds", "start", "stop"), [(1, 4, None), (10, 1, 4), (5, 3, 5)])
def test_index_outside_start_and_stop_is_an_error(
    seconds: int, start: int, stop: int | None
) -> None:
    with pytest.raises(InvalidDelayLevelError):
        LADDER.index(timedelta(seconds=seconds), start, stop)
