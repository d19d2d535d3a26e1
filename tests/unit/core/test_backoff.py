"""Unit tests for :mod:`adapter.core.backoff` (producer flow-control back-off)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.core.backoff import ExponentialBackoff
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit


class TestBase:
    def test_defaults(self) -> None:
        b = ExponentialBackoff()
        assert (b.initial_s, b.multiplier, b.jitter, b.max_s) == (1.0, 1.6, 0.2, 120.0)

    @pytest.mark.parametrize(
        ("attempt", "expected"),
        [(1, 1.0), (2, 1.6), (3, 2.56), (4, 4.096), (5, 6.5536), (10, 1.6**9), (11, 1.6**10)],
    )
    def test_grows_by_multiplier(self, attempt: int, expected: float) -> None:
        assert ExponentialBackoff().base(attempt) == pytest.approx(expected)

    @pytest.mark.parametrize("attempt", [12, 13, 50, 10_000])
    def test_capped_at_max(self, attempt: int) -> None:
        assert ExponentialBackoff().base(attempt) == 120.0

    def test_eleventh_retry_is_last_under_cap(self) -> None:
        b = ExponentialBackoff()
        assert b.base(11) < 120.0
        assert b.base(12) == 120.0

    @pytest.mark.parametrize("attempt", [0, -1])
    def test_attempts_from_one(self, attempt: int) -> None:
        with pytest.raises(ConfigError) as info:
            ExponentialBackoff().base(attempt)
        assert info.value.field == "attempt"
        assert info.value.value == attempt
        assert str(info.value) == f"attempt={attempt}: attempts are counted from 1"

    def test_multiplier_one_is_constant(self) -> None:
        b = ExponentialBackoff(initial_s=2.0, multiplier=1.0, max_s=10.0)
        assert [b.base(n) for n in range(1, 5)] == [2.0, 2.0, 2.0, 2.0]

    def test_custom_cap(self) -> None:
        b = ExponentialBackoff(initial_s=1.0, multiplier=2.0, max_s=5.0)
        assert [b.base(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]

    @given(st.integers(min_value=1, max_value=500))
    def test_monotonic_and_bounded(self, attempt: int) -> None:
        b = ExponentialBackoff()
        assert 1.0 <= b.base(attempt) <= 120.0
        assert b.base(attempt) <= b.base(attempt + 1)


class TestDelay:
    @pytest.mark.parametrize("attempt", [1, 2, 3, 8, 20])
    def test_lower_and_upper_bounds(self, attempt: int) -> None:
        b = ExponentialBackoff()
        base = b.base(attempt)
        seen: list[tuple[float, float]] = []

        def low(a: float, c: float) -> float:
            seen.append((a, c))
            return a

        def high(a: float, c: float) -> float:
            return c

        assert b.delay(attempt, low) == pytest.approx(base * 0.8)
        assert b.delay(attempt, high) == pytest.approx(base * 1.2)
        assert len(seen) == 1
        assert seen[0][0] == pytest.approx(-0.2 * base)
        assert seen[0][1] == pytest.approx(0.2 * base)

    def test_jitter_is_proportional_not_additive(self) -> None:
        b = ExponentialBackoff()
        # at the cap the spread is ±24 s, not ±0.2 s
        assert b.delay(30, lambda a, c: c) == pytest.approx(144.0)
        assert b.delay(30, lambda a, c: a) == pytest.approx(96.0)

    def test_zero_jitter(self) -> None:
        b = ExponentialBackoff(jitter=0.0)
        bounds: list[tuple[float, float]] = []

        def uniform(a: float, c: float) -> float:
            bounds.append((a, c))
            return c

        assert b.delay(3, uniform) == pytest.approx(2.56)
        assert bounds == [(0.0, 0.0)]

    @given(st.integers(min_value=1, max_value=60), st.integers(min_value=0, max_value=2**32))
    def test_random_uniform_stays_within_twenty_percent(self, attempt: int, seed: int) -> None:
        b = ExponentialBackoff()
        rng = random.Random(seed)
        base = b.base(attempt)
        d = b.delay(attempt, rng.uniform)
        assert base * 0.8 - 1e-9 <= d <= base * 1.2 + 1e-9


class TestValidation:
    @pytest.mark.parametrize(
        ("kwargs", "field", "message"),
        [
            ({"initial_s": float("inf")}, "initial_s", "initial_s=inf: must be a finite number"),
            ({"multiplier": float("nan")}, "multiplier", "multiplier=nan: must be a finite number"),
            ({"jitter": float("-inf")}, "jitter", "jitter=-inf: must be a finite number"),
            ({"max_s": float("inf")}, "max_s", "max_s=inf: must be a finite number"),
            ({"initial_s": 0}, "initial_s", "initial_s=0: must be > 0"),
            ({"initial_s": -1.0}, "initial_s", "initial_s=-1.0: must be > 0"),
            ({"multiplier": 0.99}, "multiplier", "multiplier=0.99: must be >= 1"),
            ({"multiplier": 0}, "multiplier", "multiplier=0: must be >= 1"),
            ({"jitter": -0.1}, "jitter", "jitter=-0.1: must be in [0, 1)"),
            ({"jitter": 1.0}, "jitter", "jitter=1.0: must be in [0, 1)"),
            ({"jitter": 2.0}, "jitter", "jitter=2.0: must be in [0, 1)"),
            ({"max_s": 0.5}, "max_s", "max_s=0.5: must be >= initial_s"),
            ({"initial_s": 10.0, "max_s": 5.0}, "max_s", "max_s=5.0: must be >= initial_s"),
        ],
    )
    def test_invalid_parameters(self, kwargs: dict[str, float], field: str, message: str) -> None:
        with pytest.raises(ConfigError) as info:
            ExponentialBackoff(**kwargs)
        assert info.value.field == field
        assert info.value.value is kwargs[field]
        assert str(info.value) == message

    def test_edge_values_accepted(self) -> None:
        b = ExponentialBackoff(initial_s=0.001, multiplier=1.0, jitter=0.0, max_s=0.001)
        assert b.base(5) == 0.001
