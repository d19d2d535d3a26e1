"""Benchmark rows of the PushConsumer's no-op listener traced with OpenTelemetry, against
the same consumer untraced in the same run (the ``raw`` columns of these rows): with the
API's no-op tracer provider, and with the SDK's batch span processor and an exporter that
drops what it is given (the cost of making the spans, not of shipping them).

Beside them, a plain ``poll()`` loop traced the way confluent-kafka users trace one today
(``opentelemetry-instrumentation-confluent-kafka``, a span per ``poll``), against the same
raw loop untraced, and the drop-in's ``poll()`` loop traced by the adapter against the
drop-in untraced: both with the SDK's batch span processor, in the same run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from confluent_kafka import Consumer as RawConsumer

from adapter import telemetry
from adapter.bench.harness import Bench, Scenario, measure
from adapter.bench.pull import poll_loop
from adapter.kafka import Consumer as DropInConsumer

__all__ = ["tracing_scenarios"]

log = logging.getLogger("adapter.bench")


#: The row label of the SDK set-up (the batch span processor, an exporter that drops).
SDK_LABEL = "SDK batch span processor"


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

    return [("no-op tracer provider", NoOpTracerProvider), (SDK_LABEL, sdk)]


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
    sdk = dict(providers)[SDK_LABEL]
    out.append(_dropin_poll_traced(bench, sdk))
    contrib = _contrib_poll_traced(bench, sdk)
    if contrib is not None:
        out.append(contrib)
    return out


def _dropin_poll_traced(bench: Bench, sdk: Callable[[], Any]) -> Scenario:
    """The drop-in's ``poll()`` loop traced by the adapter (a ``receive`` span per poll)
    against the drop-in untraced."""
    n = bench.n
    topic = bench.topic()
    bench.fill(topic, n, 100)
    sc = Scenario(f"drop-in poll() loop traced ({SDK_LABEL}) vs untraced (the raw columns)")
    for _ in range(bench.repeats):
        sc.raw.append(measure(partial(poll_loop, bench, DropInConsumer, topic, n)))
        provider = sdk()
        telemetry.instrument(tracer_provider=provider)
        try:
            sc.ours.append(measure(partial(poll_loop, bench, DropInConsumer, topic, n)))
        finally:
            telemetry.uninstrument()
            provider.shutdown()
    return sc


def _contrib_poll_traced(bench: Bench, sdk: Callable[[], Any]) -> Scenario | None:
    """A raw confluent-kafka ``poll()`` loop traced by
    ``opentelemetry-instrumentation-confluent-kafka`` against the same loop untraced;
    ``None`` (with a warning) when that package is not installed."""
    try:
        from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor
    except ImportError:
        log.warning(
            "the opentelemetry-instrumentation-confluent-kafka row skipped: not installed "
            "(it is in the test extra)"
        )
        return None
    n = bench.n
    topic = bench.topic()
    bench.fill(topic, n, 100)
    sc = Scenario(
        "raw poll() loop traced by opentelemetry-instrumentation-confluent-kafka "
        f"({SDK_LABEL}) vs untraced (the raw columns)"
    )
    for _ in range(bench.repeats):
        sc.raw.append(measure(partial(poll_loop, bench, RawConsumer, topic, n)))
        provider = sdk()

        def traced(config: dict[str, Any], _provider: Any = provider) -> Any:
            return ConfluentKafkaInstrumentor.instrument_consumer(
                RawConsumer(config), tracer_provider=_provider
            )

        try:
            sc.ours.append(measure(partial(poll_loop, bench, traced, topic, n)))
        finally:
            provider.shutdown()
    return sc
