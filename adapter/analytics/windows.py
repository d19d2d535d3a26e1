"""What each micro-batch of the consume-metrics job writes: pure Python, no Spark.

The streaming job aggregates in Spark's *update* mode: every micro-batch hands over the
windows its events changed, each with its running totals (Spark's state holds them), and
the largest event time each window has seen.  :func:`merge_batch` turns that into the rows
the batch appends to the metrics table:

* every changed window, with its running totals;
* every window that was open and that this batch's watermark closed without changing it
  (its last totals, now final);

each marked ``provisional`` while the watermark has not passed the window's end.  The
watermark is Spark's own rule (the largest event time seen minus the ``--watermark``
delay; it never goes back), so a window marked final here is one Spark will no longer
change: later events for it are dropped as late.  A window therefore gets exactly one
final row, and the row with the largest ``batch_id`` of a window is its latest state
(:func:`adapter.analytics.jobs.read_metrics`).

Rows are plain dicts; times are epoch milliseconds (``window_start_ms``,
``window_end_ms``, ``max_event_time_ms``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from adapter.errors import ConfigError

__all__ = [
    "KEY_COLUMNS",
    "BatchOutcome",
    "BatchProgress",
    "interval_ms",
    "merge_batch",
    "window_key",
]

#: What identifies a window of the metrics table.
KEY_COLUMNS: Final = ("window_start_ms", "window_end_ms", "group", "topic")
Key = tuple[Any, ...]
Row = Mapping[str, Any]

_UNITS_MS: Final[dict[str, int]] = {
    "millisecond": 1,
    "ms": 1,
    "second": 1_000,
    "sec": 1_000,
    "s": 1_000,
    "minute": 60_000,
    "min": 60_000,
    "m": 60_000,
    "hour": 3_600_000,
    "h": 3_600_000,
    "day": 86_400_000,
    "d": 86_400_000,
    "week": 7 * 86_400_000,
}
_PART: Final = re.compile(r"\s*(\d+)\s*([a-z]+)\s*")


def interval_ms(text: str, what: str = "watermark") -> int:
    """``"2 minutes"``, ``"30 seconds"``, ``"1 hour 30 minutes"`` -> milliseconds (the
    fixed-length units Spark's ``withWatermark`` accepts; months and years have no fixed
    length and are refused)."""
    s = text.strip().lower()
    s = s[len("interval") :].strip() if s.startswith("interval") else s
    total, pos = 0, 0
    while pos < len(s):
        m = _PART.match(s, pos)
        unit = m.group(2) if m else ""
        if unit not in _UNITS_MS and unit.endswith("s") and unit[:-1] in _UNITS_MS:
            unit = unit[:-1]  # plural
        if m is None or unit not in _UNITS_MS:
            raise ConfigError(
                what, text, "expected a duration such as '2 minutes' or '30 seconds' "
                "(units: milliseconds, seconds, minutes, hours, days, weeks)"
            )  # fmt: skip
        total += int(m.group(1)) * _UNITS_MS[unit]
        pos = m.end()
    if pos == 0:
        raise ConfigError(what, text, "expected a duration such as '2 minutes'")
    return total


def window_key(row: Row) -> Key:
    return tuple(row[c] for c in KEY_COLUMNS)


@dataclass(frozen=True)
class BatchOutcome:
    """What one micro-batch writes and the state it leaves."""

    rows: list[dict[str, Any]]
    """Rows to append (the metric columns, ``provisional`` and ``watermark_ms``)."""
    open_windows: dict[Key, dict[str, Any]]
    """Windows the watermark has not passed yet, with their latest totals."""
    watermark_ms: int | None
    """The watermark after this batch (``None``: no event seen yet)."""

    @property
    def final(self) -> int:
        return sum(1 for r in self.rows if not r["provisional"])

    @property
    def provisional(self) -> int:
        return sum(1 for r in self.rows if r["provisional"])


def merge_batch(
    open_windows: Mapping[Key, Row],
    changed: Sequence[Row],
    watermark_ms: int | None,
    delay_ms: int,
) -> BatchOutcome:
    """One micro-batch: the windows it ``changed`` (running totals and
    ``max_event_time_ms``) merged into the ``open_windows`` the previous batch left, under
    the previous ``watermark_ms`` and the watermark ``delay_ms``."""
    newest = max((int(r["max_event_time_ms"]) for r in changed if r.get("max_event_time_ms")
                  is not None), default=None)  # fmt: skip
    watermark = watermark_ms
    if newest is not None:
        candidate = newest - delay_ms
        watermark = candidate if watermark is None else max(watermark, candidate)

    def is_open(row: Row) -> bool:
        return watermark is None or int(row["window_end_ms"]) > watermark

    rows: list[dict[str, Any]] = []
    still_open: dict[Key, dict[str, Any]] = {}
    changed_keys: set[Key] = set()
    for r in changed:
        key = window_key(r)
        changed_keys.add(key)
        out = {k: v for k, v in r.items() if k != "max_event_time_ms"}
        out["provisional"] = is_open(r)
        out["watermark_ms"] = watermark
        rows.append(out)
        if out["provisional"]:
            still_open[key] = out
    for key, r in open_windows.items():
        if key in changed_keys:
            continue
        if is_open(r):
            still_open[key] = dict(r)
        else:  # closed by this batch's watermark without a change: its last totals, final
            rows.append({**r, "provisional": False, "watermark_ms": watermark})
    return BatchOutcome(rows, still_open, watermark)


@dataclass
class BatchProgress:
    """One micro-batch as the job reports it."""

    batch_id: int
    input_rows: int = 0
    """Kafka records (trace records) read."""
    windows_written: int = 0
    final: int = 0
    provisional: int = 0
    watermark_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        from datetime import UTC, datetime

        wm = (
            datetime.fromtimestamp(self.watermark_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if self.watermark_ms is not None
            else "none yet"
        )
        return (
            f"batch {self.batch_id}: {self.input_rows} trace record(s) read, "
            f"{self.windows_written} window(s) written ({self.final} final, "
            f"{self.provisional} provisional), watermark {wm}"
        )
