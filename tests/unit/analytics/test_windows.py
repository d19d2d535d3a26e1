"""What each micro-batch of the consume-metrics job writes (pure Python): every changed
window, the open ones provisional; a window closed by the watermark gets one final row,
changed or not; the watermark follows Spark's rule and never goes back."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.analytics.windows import (
    BatchProgress,
    interval_ms,
    merge_batch,
    window_key,
)
from adapter.errors import AdapterError, ConfigError

MIN = 60_000


def _w(start: int, consumed: int, newest: int | None = None, group: str = "g") -> dict[str, Any]:
    return {
        "window_start_ms": start,
        "window_end_ms": start + MIN,
        "group": group,
        "topic": "orders",
        "consumed": consumed,
        "max_event_time_ms": start + 1_000 if newest is None else newest,
    }


def _summary(rows: list[dict[str, Any]]) -> list[tuple[int, str, int, bool]]:
    return sorted((r["window_start_ms"], r["group"], r["consumed"], r["provisional"]) for r in rows)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2 minutes", 2 * MIN),
        ("30 seconds", 30_000),
        ("1 minute", MIN),
        ("0 seconds", 0),
        ("500 milliseconds", 500),
        ("250 ms", 250),
        ("1 hour 30 minutes", 90 * MIN),
        ("INTERVAL 10 seconds", 10_000),
        ("2 days", 2 * 86_400_000),
    ],
)
def test_interval_ms_reads_spark_durations(text: str, ms: int) -> None:
    assert interval_ms(text) == ms


@pytest.mark.parametrize("text", ["", "soon", "2", "minutes", "1 month", "2 minutes ago"])
def test_interval_ms_names_the_field_and_value(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        interval_ms(text, "watermark")
    assert isinstance(info.value, AdapterError)
    assert f"watermark={text!r}" in str(info.value)


def test_changed_windows_are_written_open_ones_provisional() -> None:
    # newest event at 3:10 with a 30 s delay: the watermark is 2:40; window 0 and 1 end
    # before it (final), window 2 (2:00-3:00) and 3 do not (provisional)
    changed = [_w(0, 5), _w(MIN, 2), _w(2 * MIN, 3), _w(3 * MIN, 1, newest=3 * MIN + 10_000)]
    out = merge_batch({}, changed, None, 30_000)
    assert out.watermark_ms == 3 * MIN + 10_000 - 30_000
    assert _summary(out.rows) == [
        (0, "g", 5, False),
        (MIN, "g", 2, False),
        (2 * MIN, "g", 3, True),
        (3 * MIN, "g", 1, True),
    ]
    assert sorted(k[0] for k in out.open_windows) == [2 * MIN, 3 * MIN]
    assert (out.final, out.provisional) == (2, 2)
    assert all("max_event_time_ms" not in r for r in out.rows)
    assert {r["watermark_ms"] for r in out.rows} == {out.watermark_ms}


def test_a_window_the_watermark_closes_without_a_change_gets_its_final_row() -> None:
    first = merge_batch({}, [_w(0, 4, newest=30_000)], None, 10_000)
    assert _summary(first.rows) == [(0, "g", 4, True)]
    # the next batch changes only a later window; its watermark passes window 0's end
    second = merge_batch(first.open_windows, [_w(2 * MIN, 1)], first.watermark_ms, 10_000)
    assert _summary(second.rows) == [(0, "g", 4, False), (2 * MIN, "g", 1, True)]
    assert list(second.open_windows) == [window_key(_w(2 * MIN, 1))]
    # and a batch after that does not write window 0 again
    third = merge_batch(second.open_windows, [_w(2 * MIN, 2)], second.watermark_ms, 10_000)
    assert _summary(third.rows) == [(2 * MIN, "g", 2, True)]


def test_changed_totals_replace_the_open_ones() -> None:
    first = merge_batch({}, [_w(0, 4), _w(0, 1, group="h")], None, MIN)
    second = merge_batch(first.open_windows, [_w(0, 9)], first.watermark_ms, MIN)
    assert _summary(second.rows) == [(0, "g", 9, True)]
    assert sorted((k[2], r["consumed"]) for k, r in second.open_windows.items()) == [
        ("g", 9),
        ("h", 1),
    ]


def test_the_watermark_never_goes_back_and_an_empty_batch_changes_nothing() -> None:
    first = merge_batch({}, [_w(5 * MIN, 1)], None, 0)
    older = merge_batch(
        first.open_windows, [_w(5 * MIN, 2, newest=5 * MIN + 10)], 5 * MIN + 1_000, 0
    )
    assert older.watermark_ms == 5 * MIN + 1_000
    empty = merge_batch(older.open_windows, [], older.watermark_ms, 0)
    assert empty.rows == [] and empty.watermark_ms == older.watermark_ms
    assert empty.open_windows == older.open_windows


def test_no_event_yet_keeps_everything_open() -> None:
    out = merge_batch({}, [{**_w(0, 1), "max_event_time_ms": None}], None, 0)
    assert out.watermark_ms is None and _summary(out.rows) == [(0, "g", 1, True)]


def test_every_window_has_one_final_row_over_many_batches() -> None:
    """Events arriving over 20 batches: summing each window's latest row gives the totals
    and each window is written final exactly once."""
    open_windows: dict[Any, Any] = {}
    watermark = None
    totals: dict[int, int] = {}
    written: list[dict[str, Any]] = []
    for batch in range(20):
        changed = []
        for start in (batch * 20_000 // MIN * MIN, (batch * 20_000 // MIN - 1) * MIN):
            if start < 0 or (watermark is not None and start + MIN <= watermark):
                continue  # Spark drops events of a window the watermark has passed
            totals[start] = totals.get(start, 0) + 1
            changed.append(_w(start, totals[start], newest=batch * 20_000))
        out = merge_batch(open_windows, changed, watermark, 15_000)
        written += [{**r, "batch": batch} for r in out.rows]
        open_windows, watermark = out.open_windows, out.watermark_ms
    latest: dict[int, dict[str, Any]] = {}
    for r in written:
        latest[r["window_start_ms"]] = r
    assert {s: r["consumed"] for s, r in latest.items()} == totals
    finals = [r["window_start_ms"] for r in written if not r["provisional"]]
    assert len(finals) == len(set(finals))
    assert set(finals) | {k[0] for k in open_windows} == set(totals)


def test_the_progress_line_says_what_was_read_and_written() -> None:
    line = BatchProgress(3, 120, 7, 3, 4, 1_796_000_000_000).line()
    assert line == (
        "batch 3: 120 trace record(s) read, 7 window(s) written (3 final, 4 provisional), "
        "watermark 2026-11-30 00:53:20 UTC"
    )
    assert BatchProgress(0).line().endswith("watermark none yet")
