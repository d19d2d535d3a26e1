"""One message's trace drawn as a timeline (the picture on docs/tracing.md), from the spans a
test recorded with the OpenTelemetry SDK."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

#: set to write the picture into the docs (``docs/assets/images/``) as well
WRITE_DOCS_ENV = "RMQ_KAFKA_WRITE_DOC_IMAGES"
DOCS_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "assets" / "images" / "tracing.png"

_COLOURS = {
    "send": "#4C72B0",
    "send-back": "#DD8452",
    "forward": "#8172B3",
    "dead-letter": "#C44E52",
    "redrive": "#937860",
}


def _kind(span: ReadableSpan) -> str:
    attrs = span.attributes or {}
    return str(attrs.get("rocketmq.hop") or attrs.get("messaging.operation.type"))


def render(spans: Sequence[ReadableSpan], out: Path) -> Path:
    """Draw ``spans`` (one trace) on a time axis from the first span's start: a bar per
    span (a listener call green on success, red otherwise), a label with what it was."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    t0 = ordered[0].start_time or 0
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(ordered) + 1.2), dpi=110)
    end_ms = max(((s.end_time or 0) - t0) / 1e6 for s in ordered)
    for row, span in enumerate(ordered):
        start = ((span.start_time or 0) - t0) / 1e6
        length = max(((span.end_time or 0) - (span.start_time or 0)) / 1e6, end_ms / 300)
        kind = _kind(span)
        attrs = span.attributes or {}
        if kind == "process":
            ok = span.status.status_code is not StatusCode.ERROR
            colour = "#55A868" if ok else "#C44E52"
            label = (
                f"process (attempt {attrs.get('rocketmq.reconsume_times', '?')}): "
                f"{attrs.get('rocketmq.result', '')}"
            )
        else:
            colour = _COLOURS.get(kind, "#777777")
            label = f"{kind} → {attrs.get('messaging.destination.name', '')}"
            if "rocketmq.lateness_ms" in attrs:
                label += f" ({attrs['rocketmq.lateness_ms']} ms late)"
        ax.barh(row, length, left=start, color=colour, height=0.6)
        ax.text(start + length + end_ms / 100, row, label, va="center", fontsize=8)
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlim(0, end_ms * 1.6)
    ax.set_xlabel("ms since the producer's send")
    trace_id = ordered[0].context.trace_id if ordered[0].context is not None else 0
    ax.set_title(f"one message, one trace ({trace_id:032x})", fontsize=9)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    if os.environ.get(WRITE_DOCS_ENV):
        DOCS_IMAGE.write_bytes(out.read_bytes())
    return out
