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

    __slots__ = ("every_s", "next_at")

    def __init__(self, every_s: float) -> None:
        if every_s <= 0:
            raise ConfigError("every_s", every_s, "must be positive")
        self.every_s = every_s
        self.next_at: float | None = None

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
        return sorted(t for t in set(subscribed) if t not in held)
