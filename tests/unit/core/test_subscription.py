"""SubscriptionWatch: the pace of the unassigned-topic check, on a fake clock."""

from __future__ import annotations

import pytest

from adapter.core.subscription import SubscriptionWatch
from adapter.errors import ConfigError


def test_first_call_starts_the_interval() -> None:
    watch = SubscriptionWatch(10.0)
    assert watch.due(100.0, ["a", "r"], []) == []
    assert watch.due(109.9, ["a", "r"], []) == []
    assert watch.due(110.0, ["r", "a"], []) == ["a", "r"]


def test_only_topics_without_a_held_partition() -> None:
    watch = SubscriptionWatch(5.0)
    watch.due(0.0, [], [])
    assert watch.due(5.0, ["a", "r", "b"], [("a", 0), ("a", 2), ("b", 1)]) == ["r"]


def test_at_most_once_per_interval() -> None:
    watch = SubscriptionWatch(5.0)
    watch.due(0.0, [], [])
    assert watch.due(6.0, ["r"], []) == ["r"]
    assert watch.due(10.9, ["r"], []) == []  # the next interval runs from the last check
    assert watch.due(11.0, ["r"], []) == ["r"]


def test_everything_held_means_nothing_to_do() -> None:
    watch = SubscriptionWatch(1.0)
    watch.due(0.0, [], [])
    assert watch.due(2.0, ["a"], [("a", 0)]) == []


@pytest.mark.parametrize("every", [0.0, -1.0])
def test_interval_must_be_positive(every: float) -> None:
    with pytest.raises(ConfigError, match="every_s"):
        SubscriptionWatch(every)


def test_pending_says_when_due_would_act() -> None:
    watch = SubscriptionWatch(5.0)
    assert watch.pending(0.0)  # not started: the first call starts the interval
    watch.due(0.0, ["r"], [])
    assert not watch.pending(4.9)
    assert watch.pending(5.0)
    assert watch.due(5.0, ["r"], []) == ["r"]
    assert not watch.pending(5.0)


def test_repeated_names_the_topics_unheld_at_two_checks_in_a_row() -> None:
    watch = SubscriptionWatch(5.0)
    watch.due(0.0, [], [])
    assert watch.due(5.0, ["a", "r"], [("a", 0)]) == ["r"]
    assert watch.repeated == []  # the first time: a refresh may be enough
    assert watch.due(10.0, ["a", "r"], [("a", 0)]) == ["r"]
    assert watch.repeated == ["r"]
    assert watch.due(15.0, ["a", "r"], [("a", 0), ("r", 1)]) == []
    assert watch.repeated == []  # taken meanwhile
    assert watch.due(20.0, ["a", "r"], [("a", 0)]) == ["r"]
    assert watch.repeated == []  # unheld again: counted from the start
    assert watch.due(22.0, ["a", "r"], [("a", 0)]) == []  # not due: repeated stays
    assert watch.repeated == []


@pytest.mark.parametrize("every_s", [0, -1.5])
def test_a_pace_that_is_not_positive_is_refused_by_name(every_s: float) -> None:
    with pytest.raises(ConfigError) as info:
        SubscriptionWatch(every_s)
    assert str(info.value) == f"every_s={every_s!r}: must be positive"


def test_nothing_is_repeated_before_the_first_check() -> None:
    assert SubscriptionWatch(5.0).repeated == []
