"""``group reset-offset``: the new offset of every partition for a reset target, and the
report of what was reset (old and new offsets, who applied it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.core.cluster import Member
from adapter.core.control import ResetTarget
from adapter.core.views.text import num_text, text_table


def reset_offsets(
    target: ResetTarget,
    ends: Mapping[int, tuple[int, int]],
    at_time: Mapping[int, int | None] | None = None,
) -> dict[int, int]:
    """The new offset of every partition (``ends``: partition → ``(log start, end)``):
    earliest → log start, latest → end, a time → the first record at or after it (Kafka's
    ``offsetsForTimes``), or the end when no record is that recent."""
    out: dict[int, int] = {}
    for p, (start, end) in sorted(ends.items()):
        if target.kind == "earliest":
            out[p] = start
        elif target.kind == "latest":
            out[p] = end
        else:
            found = (at_time or {}).get(p)
            out[p] = end if found is None else max(start, min(found, end))
    return out


@dataclass(frozen=True, slots=True)
class ResetRow:
    partition: int
    old: int | None
    new: int
    by: Member | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "old": self.old,
            "new": self.new,
            "by": None if self.by is None else self.by.member_id,
            "by_client_id": None if self.by is None else self.by.client_id,
        }


@dataclass(frozen=True, slots=True)
class ResetResult:
    """``group reset-offset``: per partition, the old and the new committed offset.

    ``mode`` is ``admin`` (the group was empty: offsets altered with the AdminClient) or
    ``members`` (``--force``: the live members reset their own partitions).
    """

    group: str
    topic: str
    kafka_topic: str
    target: ResetTarget
    mode: str
    rows: tuple[ResetRow, ...]
    request_id: str | None = None
    not_applied: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "target": self.target.to_json() | {"text": self.target.describe()},
            "mode": self.mode,
            "request_id": self.request_id,
            "partitions": [r.to_json() for r in self.rows],
            "not_applied": list(self.not_applied),
        }

    def render(self) -> list[str]:
        how = (
            "group empty: offsets altered"
            if self.mode == "admin"
            else f"applied by the live members, request {self.request_id}"
        )
        lines = [f"reset group {self.group} on {self.topic} to {self.target.describe()} ({how})"]
        rows = [
            (
                f"{self.topic}[{r.partition}]",
                num_text(r.old),
                "→",
                str(r.new),
                f"by {r.by.label}" if r.by else "",
            )
            for r in self.rows
        ]
        lines.extend("  " + line for line in text_table(None, rows, "lrcll"))
        for p in self.not_applied:
            lines.append(f"  {self.topic}[{p}]  NOT reset")
        return lines
