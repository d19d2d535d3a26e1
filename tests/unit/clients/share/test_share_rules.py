"""The share backend's pure decisions (adapter.clients.share.share_rules)."""

from __future__ import annotations

import pytest

from adapter.clients.share.share_rules import (
    DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS,
    FIRST_REACH_MS,
    NOT_FOR_SHARE_CONSUMER,
    START_SKEW_MS,
    OffsetReset,
    Verdict,
    ack_margin,
    can_hold,
    delivery_limit,
    earliest_acquisition,
    lock_ms,
    max_receive_invisible,
    offset_reset,
    on_arrival,
    on_expiry,
    usable_hold,
)
from adapter.core.offsets import ConsumeFromWhere
from adapter.errors import ConfigError


def test_the_delivery_limit_leaves_one_delivery_for_the_dead_letter() -> None:
    assert delivery_limit(DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS) == 10  # the broker's default max
    assert delivery_limit(3) == 4
    assert delivery_limit(1) == 2  # the broker's minimum


@pytest.mark.parametrize(
    ("attempt", "maximum", "verdict"),
    [(1, 3, Verdict.DELIVER), (3, 3, Verdict.DELIVER), (4, 3, Verdict.DEAD_LETTER)],
)
def test_a_record_past_the_maximum_is_dead_lettered_on_arrival(
    attempt: int, maximum: int, verdict: Verdict
) -> None:
    assert on_arrival(attempt, maximum) is verdict


def test_an_expired_hold_is_released_until_the_last_attempt() -> None:
    assert on_expiry(1, 1, 3, 4) is Verdict.RELEASE
    assert on_expiry(2, 2, 3, 4) is Verdict.RELEASE
    assert on_expiry(3, 3, 3, 4) is Verdict.DEAD_LETTER
    # the broker would archive it on release: dead-letter whatever the attempt
    assert on_expiry(1, 4, 3, 4) is Verdict.DEAD_LETTER


def test_the_hold_stays_inside_the_lock_less_the_margin() -> None:
    assert ack_margin(30.0) == 1.0
    assert ack_margin(2.0) == pytest.approx(0.2)
    assert usable_hold(30.0) == 29.0
    assert max_receive_invisible(30.0) == 28.0
    assert max_receive_invisible(3.0) == pytest.approx(2.4)
    assert can_hold(100.0, 30.0, 100.0, 29.0)
    assert not can_hold(100.0, 30.0, 100.0, 29.5)
    assert can_hold(100.0, 30.0, 110.0, 19.0)
    assert not can_hold(100.0, 30.0, 110.0, 19.5)


def test_the_earliest_acquisition_that_can_still_be_held() -> None:
    # a hold until 110 + 19 inside a 30 s lock (29 s usable): acquired at 100 or later
    assert earliest_acquisition(30.0, 110.0, 19.0) == 100.0
    assert earliest_acquisition(3.0, 50.0, 1.0) == pytest.approx(48.3)
    for acquired in (99.9, 100.0, 100.1):
        assert can_hold(acquired, 30.0, 110.0, 19.0) == (
            acquired >= earliest_acquisition(30.0, 110.0, 19.0)
        )


def test_consume_from_where_becomes_the_groups_offset_reset() -> None:
    start = 10_000_000
    first = offset_reset(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, start, 0, start)
    assert first == OffsetReset("earliest", None)
    # the end at start() (less the clock skew room), reaching 2 s ahead; set again in 1 s
    last = offset_reset(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, start, 0, start)
    assert last == OffsetReset("by_duration:PT4S", start + 1_000)
    ts = start - 90_500
    at = offset_reset(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, start, ts, start)
    assert at.value == "by_duration:PT93S"  # 90.5 s back and 2 s ahead, rounded up
    future = offset_reset(ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, start, start + 5_000, start)
    assert future.value == "by_duration:PT0S"


@pytest.mark.parametrize(
    "where", [ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP]
)
def test_the_offset_reset_always_reaches_back_to_its_moment_and_refreshes_thin_out(
    where: ConsumeFromWhere,
) -> None:
    start = 50_000_000
    ts = start - 600_000
    moment = ts if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP else start - START_SKEW_MS
    now, refreshes = start, 0
    plan = offset_reset(where, start, ts, now)
    while now < start + 86_400_000:
        assert plan.refresh_at_ms is not None and plan.refresh_at_ms > now
        back_ms = int(plan.value.removeprefix("by_duration:PT").removesuffix("S")) * 1000
        # a share-partition first fetched at any time until the next value is set, even
        # one refresh late, starts at or before the moment, and not far before it
        for t in (now, plan.refresh_at_ms, 2 * plan.refresh_at_ms - now):
            assert t - back_ms <= moment
            assert t - back_ms >= moment - 2 * (t - start) - FIRST_REACH_MS - 1_000
        now = plan.refresh_at_ms
        plan = offset_reset(where, start, ts, now)
        refreshes += 1
    assert refreshes < 40  # a day


def test_lock_in_milliseconds() -> None:
    assert lock_ms(1.5) == 1500
    with pytest.raises(ConfigError):
        lock_ms(0.0001)


def test_settings_librdkafka_refuses_on_a_share_consumer_are_listed() -> None:
    assert {"auto.offset.reset", "enable.auto.commit", "session.timeout.ms"} <= (
        NOT_FOR_SHARE_CONSUMER
    )
    assert "bootstrap.servers" not in NOT_FOR_SHARE_CONSUMER
