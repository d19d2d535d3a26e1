"""The delay-level topics a ScheduleService serves: which ones (a subscription pattern)
and what a level topic's name says (its level and delay)."""

from __future__ import annotations

import re

from adapter.constants import KAFKA_SCHEDULE_PREFIX
from adapter.core import naming
from adapter.core.delay import UNIT_MS

__all__ = ["level_delay_ms", "level_topics_pattern"]

_LEVEL_PATTERN = r"L[0-9]{2,}-[0-9]+(ms|s|m|h|d)$"


def level_delay_ms(kafka_topic: str) -> tuple[int, int] | None:
    """``(level, delay in ms)`` of a delay-level topic, read from its name."""
    parsed = naming.schedule_level_of(kafka_topic)
    if parsed is None:
        return None
    level, token = parsed
    for unit in ("ms", "s", "m", "h", "d"):
        if token.endswith(unit) and token[: -len(unit)].isdigit():
            return level, int(token[: -len(unit)]) * UNIT_MS[unit]
    return None


def level_topics_pattern(namespace: str | None) -> str:
    """The subscription pattern of every delay-level topic of ``namespace``: the service
    serves every delay table's topics, not only its own table's."""
    prefix = re.escape(KAFKA_SCHEDULE_PREFIX)
    if namespace:
        return f"^{prefix}{naming.escape(namespace)}\\.{_LEVEL_PATTERN}"
    return f"^{prefix}{_LEVEL_PATTERN}"
