"""The DLQ report as a person reads it: a CSV table and a PNG chart (matplotlib, Agg).

Input is the collected :func:`~adapter.analytics.transforms.dlq_summary` (a few rows per
topic, reason and hour), so this module is plain Python: no Spark, no pyplot state.
"""

from __future__ import annotations

import csv
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "build_chart",
    "clip",
    "dlq_title",
    "format_top_keys",
    "render_chart",
    "wrap",
    "write_csv",
]

CSV_COLUMNS = (
    "hour",
    "origin_topic",
    "tags",
    "reason",
    "failure_type",
    "dead_letters",
    "groups",
    "min_reconsume_times",
    "max_reconsume_times",
    "top_keys",
)
_MAX_SERIES = 8
_MAX_TABLE_ROWS = 12
_MAX_TITLE_TOPICS = 3
_MAX_HOUR_LABELS = 12
#: characters per line of the title, a legend entry, a failure type label
_TITLE_WIDTH = 110
_LEGEND_WIDTH = 44
_FAILURE_WIDTH = 34
#: characters per column of the table (hour, origin topic, tags, reason, failure, count,
#: top keys); the columns are as wide as these
_TABLE_WIDTHS = (20, 36, 16, 22, 36, 7, 48)


def format_top_keys(top: Sequence[Any] | None) -> str:
    """``[{key: a, count: 3}, ...]`` -> ``"a (3), b (1)"``."""
    return ", ".join(f"{t['key']} ({t['count']})" for t in top or ())


def _hour(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:00") if isinstance(value, datetime) else str(value)


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            writer.writerow(
                [
                    _hour(r["hour"]),
                    r["origin_topic"],
                    r["tags"],
                    r["reason"],
                    r["failure_type"],
                    r["dead_letters"],
                    " ".join(r["groups"] or ()),
                    r["min_reconsume_times"],
                    r["max_reconsume_times"],
                    format_top_keys(r["top_keys"]),
                ]
            )
    return path


def dlq_title(topics: Sequence[str]) -> str:
    """The chart's title: the DLQ topics by name when there are a few, else their count
    ("Dead letters (12 DLQ topics)")."""
    if not topics:
        return "Dead letters (no DLQ topics)"
    if len(topics) > _MAX_TITLE_TOPICS:
        return f"Dead letters ({len(topics)} DLQ topics)"
    return f"Dead letters ({', '.join(sorted(topics))})"


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def wrap(text: str, width: int, lines: int = 2) -> str:
    """``text`` wrapped at ``width`` characters into at most ``lines`` lines (the last one
    clipped)."""
    parts = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=True) or [""]
    if len(parts) > lines:
        parts = [*parts[: lines - 1], clip(" ".join(parts[lines - 1 :]), width)]
    return "\n".join(parts)


def render_chart(rows: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Dead letters per hour stacked by original topic and reason; totals by failure type;
    and the largest groups with their top keys.  Written as PNG."""
    build_chart(rows, title=title).savefig(path, format="png")
    return path


def build_chart(rows: Sequence[dict[str, Any]], *, title: str) -> Any:
    """The chart's matplotlib ``Figure`` (drawn on an Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

    fig = Figure(figsize=(13, 9), dpi=100)
    FigureCanvasAgg(fig)
    total = sum(int(r["dead_letters"]) for r in rows)
    heading = wrap(f"{title} - {total} dead letter(s)", _TITLE_WIDTH)
    fig.suptitle(heading, fontsize=14)
    top = 0.96 if "\n" not in heading else 0.92
    if not rows:
        ax = fig.add_subplot(1, 1, 1)
        ax.axis("off")
        ax.text(0.5, 0.5, "no dead letters", ha="center", va="center", fontsize=18)
        return fig

    grid = fig.add_gridspec(2, 2, height_ratios=[3, 2], width_ratios=[3, 2])
    # 1. per hour, stacked by (origin topic, reason)
    hours = sorted({r["hour"] for r in rows})
    by_series: dict[str, dict[Any, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        label = wrap(f"{r['origin_topic']} / {r['reason']}", _LEGEND_WIDTH)
        by_series[label][r["hour"]] += int(r["dead_letters"])
    ranked = sorted(by_series, key=lambda s: -sum(by_series[s].values()))
    shown, rest = ranked[:_MAX_SERIES], ranked[_MAX_SERIES:]
    if rest:
        other: dict[Any, int] = defaultdict(int)
        for s in rest:
            for h, n in by_series[s].items():
                other[h] += n
        by_series["(other)"] = other
        shown.append("(other)")
    ax = fig.add_subplot(grid[0, 0])
    x = list(range(len(hours)))
    bottom = [0] * len(hours)
    for series in shown:
        heights = [by_series[series].get(h, 0) for h in hours]
        ax.bar(x, heights, bottom=bottom, label=series)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    step = max(1, -(-len(hours) // _MAX_HOUR_LABELS))  # every hour, or every step-th
    ax.set_xticks(x[::step], [_hour(h) for h in hours][::step], rotation=30, ha="right",
                  fontsize=8)  # fmt: skip
    ax.set_xlabel("hour")
    legend_lines = sum(label.count("\n") + 1 for label in shown)  # room above the bars
    ax.set_ylim(0, max(bottom) * 1.2 + 0.35 * max(bottom) * legend_lines / 6)
    ax.set_ylabel("dead letters")
    ax.set_title("per hour, by original topic / reason")
    ax.legend(fontsize=8, loc="upper left")

    # 2. totals by failure type
    by_failure: dict[str, int] = defaultdict(int)
    for r in rows:
        by_failure[wrap(f"{r['failure_type']} ({r['reason']})", _FAILURE_WIDTH)] += int(
            r["dead_letters"]
        )
    names = sorted(by_failure, key=lambda k: by_failure[k])[-_MAX_SERIES:]
    ax2 = fig.add_subplot(grid[0, 1])
    ax2.barh(range(len(names)), [by_failure[n] for n in names], color="tab:red")
    ax2.set_yticks(range(len(names)), names, fontsize=8)
    ax2.set_xlabel("dead letters")
    ax2.set_title("by failure type (reason)")

    # 3. the largest groups and their top keys
    ax3 = fig.add_subplot(grid[1, :])
    ax3.axis("off")
    top_rows = sorted(rows, key=lambda r: -int(r["dead_letters"]))[:_MAX_TABLE_ROWS]
    cells = [
        [
            clip(str(value), width)
            for value, width in zip(
                (
                    _hour(r["hour"]),
                    r["origin_topic"],
                    r["tags"],
                    r["reason"],
                    r["failure_type"],
                    r["dead_letters"],
                    format_top_keys(r["top_keys"]),
                ),
                _TABLE_WIDTHS,
                strict=True,
            )
        ]
        for r in top_rows
    ]
    table = ax3.table(
        cellText=cells,
        colLabels=["hour", "origin topic", "tags", "reason", "failure", "count", "top keys"],
        cellLoc="left",
        colWidths=[w / sum(_TABLE_WIDTHS) for w in _TABLE_WIDTHS],
        bbox=Bbox.from_bounds(0.0, 0.0, 1.0, 1.0),  # the panel, whatever the number of rows
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    ax3.set_title("largest groups", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, top))
    return fig
