"""When a group member looks again for subscribed topics it holds nothing of.  Pure.

librdkafka leaves a subscribed topic out of the group's assignment while its metadata says
the topic is missing, and adds it when a later metadata refresh finds it.  On a cluster that
refresh can fail to come: a retry topic created a moment before the consumer subscribed,
reported missing by a broker that had not seen it yet, stayed unassigned for minutes while
its retries piled up (seen under broker bounces).  So the member checks on its own, at a
fixed pace that does not depend on ``topic.metadata.refresh.interval.ms``: the topics of
its subscription of which it holds no partition are looked up, and when one exists, the
consumer's full metadata is refreshed, which makes librdkafka compare the subscription with
the cluster again and rejoin if the group's view was out of date (when it was not, nothing
happens).  A member of a group with more members than a topic has partitions holds none of
it by design: the check then costs one metadata request per interval, no rebalance.

The refresh is not always enough: under broker bounces a cooperative member was seen to
know the topic and still leave it out of the group's assignment for minutes (every check's
refresh found nothing new to compare).  So a topic found unheld at two checks in a row
(:attr:`SubscriptionWatch.repeated`) is asked about at the group: when no member holds any
partition of it, the member leaves the group and joins it again (``unsubscribe`` then
``subscribe``: a ``subscribe`` with the same topics is no rejoin in librdkafka), which makes
the group rebalance with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from adapter.core.types import TP
from adapter.errors import ConfigError

__all__ = ["SubscriptionWatch"]


class SubscriptionWatch:
    """Paces the check: :meth:`due` answers, at most once per ``every_s``, the subscribed
    topics of which ``assignment`` holds no partition (the first interval starts at the
    first call, so a member that has just joined is left alone)."""

    __slots__ = ("_last", "every_s", "next_at", "repeated")

    def __init__(self, every_s: float) -> None:
        if every_s <= 0:
            raise ConfigError("every_s", every_s, "must be positive")
        self.every_s = every_s
        self.next_at: float | None = None
        #: the topics the last check found unheld that the check before found unheld too
        self.repeated: list[str] = []
        self._last: set[str] = set()

    def pending(self, now: float) -> bool:
        """Whether :meth:`due` would do anything at ``now`` (cheap: no assignment needed)."""
        return self.next_at is None or now >= self.next_at

    def due(self, now: float, subscribed: Iterable[str], assignment: Iterable[TP]) -> list[str]:
        """The subscribed topics to look up now (sorted; empty when the check is not due)."""
        if self.next_at is None:
            self.next_at = now + self.every_s
            return []
        if now < self.next_at:
            return []
        self.next_at = now + self.every_s
        held = {topic for topic, _ in assignment}
        unheld = sorted(t for t in set(subscribed) if t not in held)
        self.repeated = [t for t in unheld if t in self._last]
        self._last = set(unheld)
        return unheld
