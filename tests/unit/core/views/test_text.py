"""The text helpers of the admin reports: a duration for people at every unit's boundary,
a number that may be unknown, and tables padded to their widest cell per alignment."""

from __future__ import annotations

import pytest

from adapter.core.views.text import format_span_ms, num_text, text_table

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (0, "0ms"),
        (999, "999ms"),
        (1000, "1.0s"),  # a second is shown in seconds, not as 1000ms
        (12_340, "12.3s"),
        (59_000, "59.0s"),
        (60_000, "1m00s"),  # a minute is shown in minutes, not as 60.0s
        (302_000, "5m02s"),
        (3_599_000, "59m59s"),
        (3_600_000, "1h00m"),  # an hour is shown in hours, not as 60m00s
        (18_000_000, "5h00m"),
        (7_380_000, "2h03m"),
        (86_399_000, "23h59m"),
        (86_400_000, "1d00h"),  # a day is shown in days, not as 24h00m
        (259_200_000, "3d00h"),
        (273_600_000, "3d04h"),
    ],
)
def test_format_span_ms_at_each_unit_boundary(ms: int | None, text: str) -> None:
    assert format_span_ms(ms) == text


def test_num_text() -> None:
    assert (num_text(None), num_text(0), num_text(42)) == ("-", "0", "42")


def test_text_table_pads_each_column_to_its_widest_cell_by_its_alignment() -> None:
    rows = [("a", "1", "x", "first"), ("bbbb", "1234", "xyz", "f")]
    assert text_table(("name", "n", "c", "last"), rows, "lrcl") == [
        "name     n   c   last",
        "a        1   x   first",
        "bbbb  1234  xyz  f",
    ]
    # no header: the rows alone, trailing padding trimmed
    assert text_table(None, rows, "rlcl") == [
        "   a  1      x   first",
        "bbbb  1234  xyz  f",
    ]
    assert text_table(None, [], "l") == []


def test_text_table_rejects_a_row_wider_than_its_alignment() -> None:
    """A cell without an alignment is a caller's mistake: it fails loudly instead of being
    dropped from the report."""
    with pytest.raises(ValueError, match="zip"):
        text_table(None, [("a", "b", "c")], "ll")
