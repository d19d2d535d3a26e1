"""The text of the admin reports: durations for people, numbers that may be unknown, and
tables padded to their widest cell.  No data of its own."""

from __future__ import annotations

from collections.abc import Sequence


def format_span_ms(ms: int | None) -> str:
    """A duration for people: ``850ms``, ``12.3s``, ``5m02s``, ``2h03m``, ``3d04h``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600:02d}h"


def num_text(value: int | None) -> str:
    """A number that may be unknown: ``-`` for ``None``."""
    return "-" if value is None else str(value)


def text_table(
    header: tuple[str, ...] | None, rows: Sequence[tuple[str, ...]], align: str
) -> list[str]:
    """Columns padded to their widest cell; ``align`` per column: ``l``, ``r`` or ``c``."""
    everything = ([header] if header else []) + list(rows)
    if not everything:
        return []
    widths = [max(len(row[i]) for row in everything) for i in range(len(everything[0]))]
    out = []
    for row in everything:
        cells = []
        for cell, width, how in zip(row, widths, align, strict=True):
            if how == "r":
                cells.append(cell.rjust(width))
            elif how == "c":
                cells.append(cell.center(width))
            else:
                cells.append(cell.ljust(width))
        out.append("  ".join(cells).rstrip())
    return out
