"""Unit tests for :mod:`adapter.core.schedule`: ScheduleService decisions and placements."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapter.constants import (
    HEADER_DUE_MS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
)
from adapter.core.delay import DelayLevels
from adapter.core.schedule import (
    EntryInfo,
    Forward,
    Invalid,
    Placement,
    Repark,
    Wait,
    decide,
    place_delay_level,
    place_deliver_time,
    read_entry,
)
from adapter.errors import InvalidDelayLevelError

pytestmark = pytest.mark.unit

LEVELS = DelayLevels.DEFAULT
NOW = 1_700_000_000_000
TEN_S = 10_000


def props(**extra: str) -> dict[str, str]:
    base = {PROPERTY_REAL_TOPIC: "orders", HEADER_DUE_MS: str(NOW)}
    base.update(extra)
    return base


def run(p: dict[str, str], *, level_delay_ms: int = TEN_S, now_ms: int = NOW) -> object:
    return decide(p, level_delay_ms=level_delay_ms, now_ms=now_ms, levels=LEVELS)


# --- placements -----------------------------------------------------------------------------
class TestPlaceDelayLevel:
    @pytest.mark.parametrize(
        ("level", "placed", "delay_ms"),
        [
            (1, 1, 1_000),
            (3, 3, 10_000),
            (18, 18, 7_200_000),
            (19, 18, 7_200_000),
            (99, 18, 7_200_000),
        ],
    )
    def test_levels(self, level: int, placed: int, delay_ms: int) -> None:
        assert place_delay_level(level, NOW, LEVELS) == Placement(placed, NOW + delay_ms)

    @pytest.mark.parametrize("level", [0, -1])
    def test_non_positive_levels_rejected(self, level: int) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            place_delay_level(level, NOW, LEVELS)
        assert info.value.value == level


class TestPlaceDeliverTime:
    @pytest.mark.parametrize("deliver", [NOW, NOW - 1, 0])
    def test_due_now_or_past_delivers_now(self, deliver: int) -> None:
        assert place_deliver_time(deliver, NOW, LEVELS) is None

    @pytest.mark.parametrize(
        ("remaining", "expected"),
        [
            (1_000, Placement(1, NOW + 1_000)),
            (4_999, Placement(1, NOW + 1_000)),
            (5_000, Placement(2, NOW + 5_000)),
            (45_000, Placement(4, NOW + 30_000)),
            (7_200_000, Placement(18, NOW + 7_200_000)),
            (86_400_000, Placement(18, NOW + 7_200_000)),
        ],
    )
    def test_largest_level_that_does_not_overshoot(
        self, remaining: int, expected: Placement
    ) -> None:
        assert place_deliver_time(NOW + remaining, NOW, LEVELS) == expected

    @pytest.mark.parametrize("remaining", [1, 500, 999])
    def test_shorter_than_every_level_uses_exact_time(self, remaining: int) -> None:
        assert place_deliver_time(NOW + remaining, NOW, LEVELS) == Placement(1, NOW + remaining)

    def test_shortest_level_in_unsorted_table(self) -> None:
        table = DelayLevels((5_000, 200, 1_000))
        assert place_deliver_time(NOW + 100, NOW, table) == Placement(2, NOW + 100)
        assert place_deliver_time(NOW + 300, NOW, table) == Placement(2, NOW + 200)


# --- decide ----------------------------------------------------------------------------------
class TestDecide:
    def test_due_forwards(self) -> None:
        assert run(props()) == Forward("orders", None)

    def test_past_due_forwards(self) -> None:
        assert run(props(**{HEADER_DUE_MS: str(NOW - 60_000)})) == Forward("orders", None)
        assert run(props(**{HEADER_DUE_MS: "0"})) == Forward("orders", None)

    def test_real_queue_id(self) -> None:
        assert run(props(**{PROPERTY_REAL_QUEUE_ID: "3"})) == Forward("orders", 3)
        assert run(props(**{PROPERTY_REAL_QUEUE_ID: "0"})) == Forward("orders", 0)

    @pytest.mark.parametrize("ahead", [1, 5_000, TEN_S])
    def test_not_due_waits(self, ahead: int) -> None:
        assert run(props(**{HEADER_DUE_MS: str(NOW + ahead)})) == Wait(NOW + ahead)

    @pytest.mark.parametrize("ahead", [TEN_S + 1, 3_600_000, 10**12])
    def test_too_far_ahead_is_clamped_to_one_level_delay(self, ahead: int) -> None:
        # a sender whose clock runs ahead: the entry still waits one level delay from when
        # the service saw it (it used to go at once: the delay was removed)
        assert run(props(**{HEADER_DUE_MS: str(NOW + ahead)})) == Wait(NOW + TEN_S)

    def test_the_clamp_counts_from_when_the_entry_was_first_seen(self) -> None:
        p = props(**{HEADER_DUE_MS: str(NOW + 600_000)})  # sender 10 min ahead
        seen = NOW - 4_000
        assert decide(p, level_delay_ms=TEN_S, now_ms=NOW, levels=LEVELS, seen_ms=seen) == Wait(
            seen + TEN_S
        )
        later = seen + TEN_S
        assert decide(p, level_delay_ms=TEN_S, now_ms=later, levels=LEVELS, seen_ms=seen) == (
            Forward("orders", None)
        )

    def test_correction_uses_the_level_delay(self) -> None:
        p = props(**{HEADER_DUE_MS: str(NOW + 60_000)})
        assert run(p, level_delay_ms=TEN_S) == Wait(NOW + TEN_S)
        assert run(p, level_delay_ms=120_000) == Wait(NOW + 60_000)

    @pytest.mark.parametrize("real_topic", [None, ""])
    def test_missing_real_topic_invalid(self, real_topic: str | None) -> None:
        p = props()
        if real_topic is None:
            del p[PROPERTY_REAL_TOPIC]
        else:
            p[PROPERTY_REAL_TOPIC] = real_topic
        decision = run(p)
        assert isinstance(decision, Invalid)
        assert PROPERTY_REAL_TOPIC in decision.reason

    @pytest.mark.parametrize("due", [None, "", "soon", "-5", "1.5", "\uff11"])
    def test_unparsable_due_invalid(self, due: str | None) -> None:
        p = props()
        if due is None:
            del p[HEADER_DUE_MS]
        else:
            p[HEADER_DUE_MS] = due
        decision = run(p)
        assert isinstance(decision, Invalid)
        assert HEADER_DUE_MS in decision.reason
        assert repr(due) in decision.reason

    @pytest.mark.parametrize("qid", ["x", "-1", "", "2.0"])
    def test_bad_real_qid_invalid(self, qid: str) -> None:
        decision = run(props(**{PROPERTY_REAL_QUEUE_ID: qid}))
        assert isinstance(decision, Invalid)
        assert PROPERTY_REAL_QUEUE_ID in decision.reason
        assert repr(qid) in decision.reason

    def test_bad_real_qid_invalid_even_when_not_due(self) -> None:
        p = props(**{HEADER_DUE_MS: str(NOW + 5), PROPERTY_REAL_QUEUE_ID: "x"})
        assert isinstance(run(p), Invalid)

    def test_timer_not_reached_reparks(self) -> None:
        deliver = NOW + 45_000
        decision = run(props(**{PROPERTY_TIMER_DELIVER_MS: str(deliver)}))
        assert decision == Repark(Placement(4, NOW + 30_000))

    def test_timer_reached_forwards(self) -> None:
        for deliver in (NOW, NOW - 1):
            p = props(**{PROPERTY_TIMER_DELIVER_MS: str(deliver), PROPERTY_REAL_QUEUE_ID: "1"})
            assert run(p) == Forward("orders", 1)

    def test_timer_short_rest_reparks_at_exact_time(self) -> None:
        decision = run(props(**{PROPERTY_TIMER_DELIVER_MS: str(NOW + 300)}))
        assert decision == Repark(Placement(1, NOW + 300))

    def test_a_bad_timer_is_invalid_before_it_is_due(self) -> None:
        # nothing is gained by parking an entry that can never be scheduled
        p = props(**{HEADER_DUE_MS: str(NOW + 5_000), PROPERTY_TIMER_DELIVER_MS: "garbage"})
        assert isinstance(run(p), Invalid)

    @pytest.mark.parametrize("deliver", ["garbage", "-1", ""])
    def test_bad_timer_invalid(self, deliver: str) -> None:
        decision = run(props(**{PROPERTY_TIMER_DELIVER_MS: deliver}))
        assert isinstance(decision, Invalid)
        assert PROPERTY_TIMER_DELIVER_MS in decision.reason

    def test_extra_properties_ignored(self) -> None:
        assert run(props(TAGS="x", KEYS="a b")) == Forward("orders", None)


# --- the cascade of a timer message ---------------------------------------------------------
def follow_cascade(deliver: int, start: int, levels: DelayLevels) -> tuple[int, int]:
    """Park, advance the clock to each due time, re-decide; return (forward time, hops)."""
    now = start
    placement = place_deliver_time(deliver, now, levels)
    hops = 0
    while placement is not None:
        hops += 1
        assert hops < 10_000, "cascade does not terminate"
        assert placement.due_ms > now
        level_delay = levels.delay_ms(placement.level)
        p = {
            PROPERTY_REAL_TOPIC: "orders",
            HEADER_DUE_MS: str(placement.due_ms),
            PROPERTY_TIMER_DELIVER_MS: str(deliver),
        }
        # not due yet: the service waits (and never treats the entry as too far ahead)
        assert decide(p, level_delay_ms=level_delay, now_ms=now, levels=levels) == Wait(
            placement.due_ms
        )
        now = placement.due_ms
        decision = decide(p, level_delay_ms=level_delay, now_ms=now, levels=levels)
        if isinstance(decision, Forward):
            assert decision == Forward("orders", None)
            break
        assert isinstance(decision, Repark), decision
        placement = decision.placement
    return now, hops


@st.composite
def cascades(draw: st.DrawFn) -> tuple[DelayLevels, int, int]:
    """A table, a start time and how far ahead the delivery time lies.

    Random tables keep delays within a factor of 100 of each other so that a cascade has a
    modest number of hops (a remainder just under a long level is walked in short steps).
    """
    levels = draw(
        st.one_of(
            st.just(LEVELS),
            st.just(DelayLevels.parse("100ms 1s 7s")),
            st.lists(st.integers(min_value=100, max_value=10_000), min_size=1, max_size=8).map(
                lambda ms: DelayLevels(tuple(ms))
            ),
        )
    )
    start = draw(st.integers(min_value=0, max_value=10**13))
    horizon = 3 * 86_400_000 if levels == LEVELS else 20 * max(levels.delays_ms)
    ahead = draw(st.integers(min_value=-(10**6), max_value=horizon))
    return levels, start, ahead


@given(cascades())
@example((LEVELS, NOW, 1))
@example((LEVELS, NOW, 999))
@example((LEVELS, NOW, 1_001))
@example((LEVELS, NOW, 7_200_001))
@example((LEVELS, NOW, 3 * 86_400_000 - 1))
@example((DelayLevels((5_000, 200, 1_000)), NOW, 5_399))
@settings(max_examples=200)
def test_cascade_never_early_never_late(case: tuple[DelayLevels, int, int]) -> None:
    levels, start, ahead = case
    deliver = start + ahead
    forwarded_at, hops = follow_cascade(deliver, start, levels)
    shortest = min(levels.delays_ms)
    if ahead <= 0:
        assert hops == 0
        assert forwarded_at == start
    else:
        assert forwarded_at >= deliver  # never early
        assert forwarded_at - deliver <= shortest  # never late by more than the shortest level
        # every hop but the last advances by at least the shortest level
        assert hops <= ahead // shortest + 1


_SEEN = 1_000


@pytest.mark.parametrize(
    ("headers", "info"),
    [
        ([], EntryInfo(None, None, _SEEN, None, "REAL_TOPIC missing")),
        (
            [("REAL_TOPIC", b"orders")],
            EntryInfo("orders", None, _SEEN, None, "RMQ_DUE_MS=None is not an epoch-ms time"),
        ),
        (
            [("REAL_TOPIC", b"orders"), ("RMQ_DUE_MS", b"soon")],
            EntryInfo("orders", None, _SEEN, None, "RMQ_DUE_MS='soon' is not an epoch-ms time"),
        ),
        (
            [("REAL_TOPIC", b"orders"), ("RMQ_DUE_MS", b"900"), ("REAL_QID", b"-1")],
            EntryInfo("orders", None, _SEEN, None, "REAL_QID='-1' is not a partition number"),
        ),
        (
            [("REAL_TOPIC", b"orders"), ("RMQ_DUE_MS", b"900"), ("REAL_QID", b"3"),
             ("TIMER_DELIVER_MS", b"x")],
            EntryInfo("orders", 3, _SEEN, None, "TIMER_DELIVER_MS='x' is not an epoch-ms time"),
        ),
        (
            # a value that is not UTF-8 is read with U+FFFD, never fails the service
            [("REAL_TOPIC", b"ord\xffers"), ("RMQ_DUE_MS", b"900")],
            EntryInfo("ord\ufffders", None, 900, None),
        ),
    ],
)  # fmt: skip
def test_an_entry_that_cannot_be_scheduled_says_why_and_keeps_what_it_read(
    headers: list[tuple[str, bytes | None]], info: EntryInfo
) -> None:
    """What the service's DLQ record and its log show for an entry it cannot forward."""
    assert read_entry(headers, level_delay_ms=5_000, seen_ms=_SEEN) == info
