"""Benchmark rows of the PushConsumer's no-op listener traced with OpenTelemetry, against
the same consumer untraced in the same run (the ``raw`` columns of these rows): with the
API's no-op tracer provider, and with the SDK's batch span processor and an exporter that
drops what it is given (the cost of making the spans, not of shipping them)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from adapter import telemetry
from adapter.bench.harness import Bench, Scenario

__all__ = ["tracing_scenarios"]

log = logging.getLogger("adapter.bench")


def _providers() -> list[tuple[str, Callable[[], Any]]] | None:
    """``(row label, a fresh tracer provider)``; ``None`` without the SDK."""
    try:
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
        from opentelemetry.trace import NoOpTracerProvider
    except ImportError:
        return None

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            del spans
            return SpanExportResult.SUCCESS

    def sdk() -> Any:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
        return provider

    return [("no-op tracer provider", NoOpTracerProvider), ("SDK batch span processor", sdk)]


def tracing_scenarios(bench: Bench, batches: tuple[int, ...] = (1, 32)) -> list[Scenario]:
    """One row per batch size and provider: ``ours`` traced, ``raw`` untraced."""
    providers = _providers()
    if providers is None:
        log.warning("tracing rows skipped: install the otel extra and opentelemetry-sdk")
        return []
    out = []
    n = bench.n
    for batch in batches:
        topic = bench.topic()
        bench.fill(topic, n, 100)
        for label, make in providers:
            sc = Scenario(
                f"consume all-success batch={batch} body=100B traced ({label}) "
                "vs untraced (the raw columns)"
            )
            for _ in range(bench.repeats):
                sc.raw.append(bench.ours_consume(topic, n, batch))
                provider = make()
                telemetry.instrument(tracer_provider=provider)
                try:
                    sc.ours.append(bench.ours_consume(topic, n, batch))
                finally:
                    telemetry.uninstrument()
                    shutdown = getattr(provider, "shutdown", None)
                    if shutdown is not None:
                        shutdown()
            out.append(sc)
    return out
