"""The DLQ report's CSV table and PNG chart (plain Python: matplotlib Agg, no Spark)."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from adapter.analytics.report import CSV_COLUMNS, format_top_keys, render_chart, write_csv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
H1 = dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
H2 = dt.datetime(2024, 5, 1, 11, tzinfo=dt.UTC)


def _row(hour: dt.datetime, topic: str, reason: str, n: int, **kw: Any) -> dict[str, Any]:
    return {
        "hour": hour,
        "origin_topic": topic,
        "tags": kw.get("tags", "A"),
        "reason": reason,
        "failure_type": kw.get("failure_type", "ValueError"),
        "dead_letters": n,
        "groups": ["g1"],
        "min_reconsume_times": 16,
        "max_reconsume_times": 16,
        "top_keys": kw.get("top_keys", [{"key": "k1", "count": n}]),
    }


ROWS = [
    _row(H1, "orders", "MAX_RECONSUME_TIMES", 5),
    _row(H1, "pay", "LISTENER_REQUESTED", 2, failure_type="Rejected", top_keys=[]),
    _row(H2, "orders", "MAX_RECONSUME_TIMES", 7),
    *[_row(H2, f"t{i}", "MAX_RECONSUME_TIMES", 1) for i in range(10)],  # > 8 series: "(other)"
]


def test_chart_is_a_png(tmp_path: Path) -> None:
    png = render_chart(ROWS, tmp_path / "r.png", title="Dead letters")
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000


def test_empty_chart_is_a_png(tmp_path: Path) -> None:
    data = render_chart([], tmp_path / "e.png", title="none").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1_000


def test_csv(tmp_path: Path) -> None:
    path = write_csv(ROWS[:2], tmp_path / "s.csv")
    with path.open() as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert rows[1][:6] == [
        "2024-05-01 10:00",
        "orders",
        "A",
        "MAX_RECONSUME_TIMES",
        "ValueError",
        "5",
    ]
    assert rows[1][-1] == "k1 (5)" and rows[2][-1] == ""


def test_format_top_keys() -> None:
    assert format_top_keys([{"key": "a", "count": 3}, {"key": "b", "count": 1}]) == "a (3), b (1)"
    assert format_top_keys(None) == ""
