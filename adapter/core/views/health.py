"""A partition's replication health (ok, under-replicated, leaderless), as the reports show
it: a JSON block, a table marker and the footnote listing the unhealthy partitions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from adapter.core.cluster import PartitionHealth
from adapter.core.views.text import text_table

#: The health fields of a partition that has no metadata (its topic does not exist).
_NO_HEALTH: Final[dict[str, Any]] = {"leader": None, "replicas": None, "isr": None, "status": None}


def health_json(health: PartitionHealth | None) -> dict[str, Any]:
    """A partition's health fields for its JSON row (all ``None`` without metadata)."""
    return dict(_NO_HEALTH) if health is None else health.to_json()


def health_marker(health: PartitionHealth | None) -> str:
    """The table's marker cell: empty for a healthy partition (or one without metadata)."""
    return "" if health is None or health.ok else health.status


def health_notes(unhealthy: Iterable[tuple[str, PartitionHealth]]) -> list[str]:
    """The footnote of a table: one line per unhealthy partition (``topic[partition]``,
    logical name), after a heading; nothing when every partition is healthy."""
    rows = [
        (
            name,
            health.describe() + ("" if health.readable else "; end offset unknown"),
        )
        for name, health in unhealthy
        if not health.ok
    ]
    if not rows:
        return []
    return [f"unhealthy partitions ({len(rows)}):"] + [
        "  " + line for line in text_table(None, rows, "ll")
    ]
