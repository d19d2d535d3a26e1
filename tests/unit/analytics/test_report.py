"""The DLQ report's CSV table and PNG chart (plain Python: matplotlib Agg, no Spark)."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from adapter.analytics.report import (
    CSV_COLUMNS,
    build_chart,
    dlq_title,
    format_top_keys,
    render_chart,
    write_csv,
)

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


# --------------------------------------------------------------------------------------------
# the chart fits its page whatever the count and length of names
# --------------------------------------------------------------------------------------------


def _outside(fig: Any) -> list[str]:
    """Every piece of text (titles, legend, tick labels, table cells) drawn outside the
    figure, after a draw."""
    from matplotlib.table import Table
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    hidden = set()  # tick labels of ticks outside the axis's view: not drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if not lo - 1e-9 <= tick.get_loc() <= hi + 1e-9:
                    hidden |= {id(tick.label1), id(tick.label2)}
    texts = [
        t for t in fig.findobj(Text) if t.get_visible() and t.get_text() and id(t) not in hidden
    ]
    for table in fig.findobj(Table):
        texts += [c.get_text() for c in table.get_celld().values() if c.get_text().get_text()]
    out = []
    for t in texts:
        box = t.get_window_extent(renderer)
        if (
            box.x0 < page.x0 - 1
            or box.x1 > page.x1 + 1
            or box.y0 < page.y0 - 1
            or (box.y1 > page.y1 + 1)
        ):
            out.append(t.get_text()[:60])
    for table in fig.findobj(Table):
        box = table.get_window_extent(renderer)
        if box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1:
            out.append(f"table {box}")
    return out


def _crowded(n: int) -> list[dict[str, Any]]:
    """``n`` DLQ topics and groups with long names, reasons and failure types, over many
    hours."""
    hours = [H1 + dt.timedelta(hours=h) for h in range(30)]
    return [
        {
            **_row(
                hours[i % len(hours)],
                f"orders-service-eu-west-{i}-with-a-rather-long-topic-name",
                "MAX_RECONSUME_TIMES" if i % 2 else "LISTENER_REQUESTED",
                1 + i,
                failure_type=f"com.example.payments.PaymentDeclinedBecauseOfReason{i}Exception",
                tags=f"TagWithALongName{i}",
                top_keys=[
                    {"key": f"customer-{i}-order-{k}-" + "x" * 30, "count": 3} for k in range(3)
                ],
            ),
            "groups": [f"consumer-group-number-{i}-of-the-payments-team"],
        }
        for i in range(n)
    ]


def test_dlq_title_summarises_many_topics() -> None:
    assert dlq_title([]) == "Dead letters (no DLQ topics)"
    assert dlq_title(["%DLQ%b", "%DLQ%a"]) == "Dead letters (%DLQ%a, %DLQ%b)"
    many = [f"%DLQ%group-{i}" for i in range(12)]
    assert dlq_title(many) == "Dead letters (12 DLQ topics)"


@pytest.mark.parametrize("n", [1, 3, 30])
def test_the_chart_text_stays_inside_the_figure(n: int) -> None:
    """30 groups / DLQ topics with long names: titles and legends wrap or summarise, tick
    labels and table cells are shortened; every text is inside the image."""
    rows = _crowded(n)
    title = f"Dead letters ({', '.join(f'%DLQ%consumer-group-number-{i}' for i in range(n))})"
    fig = build_chart(rows, title=title)
    assert _outside(fig) == []


def test_a_summarised_title_and_the_crowded_chart_render(tmp_path: Path) -> None:
    rows = _crowded(30)
    png = render_chart(rows, tmp_path / "c.png", title=dlq_title([f"%DLQ%g{i}" for i in range(30)]))
    assert png.read_bytes()[:8] == PNG_MAGIC
