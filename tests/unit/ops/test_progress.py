"""The admin commands' progress output: the bar, a redrawn line on a terminal, a line every n
elsewhere."""

from __future__ import annotations

import io

import pytest

from adapter.ops.progress import ProgressReporter, render_bar

pytestmark = pytest.mark.unit


# --- progress --------------------------------------------------------------------------------
def test_render_bar() -> None:
    assert render_bar("scan", 30, 100, width=10) == "scan [###.......]  30% 30/100"
    assert render_bar("scan", 150, 100, width=4) == "scan [####] 100% 100/100"
    assert render_bar("scan", 7, None) == "scan 7"


def test_progress_on_a_terminal_redraws_one_line() -> None:
    out = io.StringIO()
    ticks = iter(range(100))
    reporter = ProgressReporter("scan", out, tty=True, clock=lambda: next(ticks) * 0.05)
    for done in range(1, 11):
        reporter(done, 10)
    reporter.close()
    text = out.getvalue()
    assert text.startswith("\rscan [") and text.endswith("100% 10/10\n")
    assert text.count("\n") == 1
    assert 1 < text.count("\r") < 12  # throttled


def test_progress_elsewhere_writes_a_line_every_n() -> None:
    out = io.StringIO()
    reporter = ProgressReporter("scanning", out, every=100, tty=False)
    for done in (10, 99, 100, 150, 250, 260, 420):
        reporter(done, 500)
    reporter.close()
    assert out.getvalue().splitlines() == [
        "scanning: 100/500",
        "scanning: 250/500",
        "scanning: 420/500",
    ]
