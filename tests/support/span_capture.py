"""The adapter instrumented with the real OpenTelemetry SDK, its spans kept in memory: the
``spans`` fixture the tracing tests share, and their finished spans in start order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapter import telemetry

__all__ = ["finished", "spans"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The adapter instrumented with a real SDK tracer provider exporting to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        telemetry.uninstrument()
        provider.shutdown()


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
