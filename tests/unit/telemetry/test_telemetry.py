"""The tracing hooks' pure parts, with the real OpenTelemetry SDK: the context written into
headers (replaced, never appended; the user's propagator), a result on a span, the switch."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from adapter import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, telemetry
from adapter.errors import AdapterError, ConfigError
from adapter.telemetry import state
from adapter.telemetry.hooks import Hooks, header_carrier, outcome

pytestmark = pytest.mark.unit


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    out = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(out))
    telemetry.instrument(tracer_provider=provider)
    try:
        yield out
    finally:
        telemetry.uninstrument()
        provider.shutdown()


def hooks() -> Hooks:
    active = state.active
    assert active is not None
    return active


def test_a_send_replaces_a_stale_traceparent_and_tracestate(exporter: InMemorySpanExporter) -> None:
    stale = [
        ("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"),
        ("KEYS", b"k"),
        ("tracestate", b"old=1"),
        ("traceparent", b"00-" + b"3" * 32 + b"-" + b"4" * 16 + b"-01"),
    ]
    out = hooks().send(stale, "orders", "id-1", None)
    (span,) = exporter.get_finished_spans()
    assert span.context is not None
    names = [k for k, _ in out]
    assert names.count("traceparent") == 1 and "tracestate" not in names
    assert ("KEYS", b"k") in out
    (value,) = [v for k, v in out if k == "traceparent"]
    assert value is not None  # version, trace id, span id, flags (sampled)
    assert value.startswith(
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-".encode()
    )
    attrs = span.attributes or {}
    assert (attrs["messaging.system"], attrs["messaging.operation.type"]) == ("kafka", "send")
    assert attrs["messaging.destination.name"] == "orders"
    assert attrs["messaging.message.id"] == "id-1"


def test_a_send_inside_a_span_continues_its_trace(exporter: InMemorySpanExporter) -> None:
    tracer = hooks().tracer
    with tracer.start_as_current_span("the caller") as caller:
        hooks().send([], "orders", "id-2", 3)
    send = next(s for s in exporter.get_finished_spans() if s.name == "send orders")
    assert send.parent is not None and send.parent.span_id == caller.get_span_context().span_id
    assert (send.attributes or {})["messaging.destination.partition.id"] == "3"


class _OwnPropagator(TextMapPropagator):
    """A user's propagator: the trace id in a header of its own."""

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[Any] = default_setter,
    ) -> None:
        from opentelemetry import trace

        span_ctx = trace.get_current_span(context).get_span_context()
        if span_ctx.is_valid:
            setter.set(carrier, "x-own-trace", f"{span_ctx.trace_id:032x}")

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[Any] = default_getter,
    ) -> Context:
        return context or Context()

    @property
    def fields(self) -> set[str]:
        return {"x-own-trace"}


def test_the_user_s_global_propagator_writes_the_headers(exporter: InMemorySpanExporter) -> None:
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(_OwnPropagator())
    try:
        out = hooks().send([("x-own-trace", b"stale")], "orders", "id-3", None)
    finally:
        propagate.set_global_textmap(before)
    (span,) = exporter.get_finished_spans()
    assert span.context is not None
    assert out == [("x-own-trace", f"{span.context.trace_id:032x}".encode())]


def test_header_carrier_reads_the_last_value_and_drops_nulls() -> None:
    carrier = header_carrier([("a", b"1"), ("b", None), ("a", b"2"), ("c", "x"), ("c", None)])
    assert carrier == {"a": "2"}
    assert header_carrier(None) == {}


@pytest.mark.parametrize(
    ("result", "elapsed", "name", "code"),
    [
        (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, 0.1, "CONSUME_SUCCESS", StatusCode.UNSET),
        (ConsumeConcurrentlyStatus.RECONSUME_LATER, 0.1, "RECONSUME_LATER", StatusCode.ERROR),
        (ConsumeOrderlyStatus.SUCCESS, 0.1, "SUCCESS", StatusCode.UNSET),
        (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, 9.0, "timeout", StatusCode.ERROR),
        (None, 0.1, "None", StatusCode.ERROR),
    ],
)
def test_a_listener_result_on_its_span(
    exporter: InMemorySpanExporter, result: Any, elapsed: float, name: str, code: StatusCode
) -> None:
    with hooks().tracer.start_as_current_span("process") as span:
        outcome(span, result, elapsed, 5.0)
    (done,) = exporter.get_finished_spans()
    assert (done.attributes or {})["rocketmq.result"] == name
    assert done.status.status_code is code


def test_a_listener_call_is_timed_on_the_consumer_s_clock(exporter: InMemorySpanExporter) -> None:
    """The ``process`` span says ``timeout`` when the call ran past ``consume_timeout`` on
    the clock the consumer was given (here a fake one: the call takes no real time)."""
    from adapter.core.message import MessageExt
    from tests.unit.kafka_fakes import FakeClock

    clock = FakeClock()

    def slow(msgs: list[Any], ctx: Any) -> Any:
        clock.advance(6.0)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    traced = hooks().wrap_listener(slow, "G", 5.0, clock=clock)
    msg = MessageExt(
        topic="orders", body=b"x", msg_id="m-1", queue_id=0, queue_offset=3, kafka_topic="orders"
    )
    traced([msg], None)
    (done,) = exporter.get_finished_spans()
    assert (done.attributes or {})["rocketmq.result"] == "timeout"
    assert done.status.status_code is StatusCode.ERROR


def test_the_switch() -> None:
    assert not telemetry.is_instrumented() and state.active is None
    telemetry.instrument()
    try:
        assert telemetry.is_instrumented()
    finally:
        telemetry.uninstrument()
    assert state.active is None


def test_instrument_without_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "opentelemetry" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError, match=r"rmq-kafka-adapter\[otel\]") as err:
        telemetry.instrument()
    assert isinstance(err.value, AdapterError) and err.value.field == "tracer_provider"
    assert not telemetry.is_instrumented()


def test_the_api_s_no_op_provider_costs_nothing() -> None:
    """Instrumented with OpenTelemetry's no-op tracer provider: listeners are not wrapped
    and no header is written (nothing would be recorded or carried anyway)."""
    from opentelemetry.trace import NoOpTracerProvider

    def listener(msgs: list[Any], ctx: Any) -> None:
        del msgs, ctx

    telemetry.instrument(tracer_provider=NoOpTracerProvider())
    try:
        assert hooks().wrap_listener(listener, "g", None) is listener
        headers = [("KEYS", b"k")]
        assert hooks().send(headers, "orders", "id", None) == [("KEYS", b"k")]
    finally:
        telemetry.uninstrument()


def _sent(reader: Any) -> dict[tuple[tuple[str, Any], ...], float]:
    """The ``rmq_producer_messages_sent`` points a collection reads, by attributes."""
    data = reader.get_metrics_data()
    out: dict[tuple[tuple[str, Any], ...], float] = {}
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "rmq_producer_messages_sent":
                    for point in metric.data.data_points:
                        out[tuple(sorted(point.attributes.items()))] = point.value
    return out


def test_a_collector_s_counters_reach_the_meter_summed_and_stop_when_removed() -> None:
    """Two producers' stats on one topic are one point (the sum), read at collection time;
    a removed collector is no longer read; instrumenting again with the same provider keeps
    the instruments."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from adapter.core.stats import ProducerStats
    from adapter.io.metrics import ProducerCollector

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry.instrument(meter_provider=provider)
    try:
        bridge = hooks().metrics
        assert bridge is not None and state.metered()
        one, two = ProducerStats(), ProducerStats()
        stop_one = state.observe(ProducerCollector(one))
        stop_two = state.observe(ProducerCollector(two))
        assert stop_one is not None and stop_two is not None
        one.sent["orders"], two.sent["orders"], two.sent["refunds"] = 2, 3, 1
        assert _sent(reader) == {(("topic", "orders"),): 5, (("topic", "refunds"),): 1}
        one.sent["orders"] = 4  # read anew at each collection
        assert _sent(reader)[(("topic", "orders"),)] == 7
        stop_two()
        assert _sent(reader) == {(("topic", "orders"),): 4}
        telemetry.instrument(meter_provider=provider)
        assert hooks().metrics is bridge
        assert _sent(reader) == {(("topic", "orders"),): 4}
    finally:
        telemetry.uninstrument()
        provider.shutdown()
    assert not state.metered() and state.observe(ProducerCollector(ProducerStats())) is None


def test_no_meter_unless_one_is_given_or_set_globally() -> None:
    """The API's no-op provider, or no global provider set: nothing is read for a meter."""
    from opentelemetry.metrics import NoOpMeterProvider

    from adapter.telemetry.meters import wanted

    assert wanted(NoOpMeterProvider()) is None
    assert wanted(None) is None  # the tests never set a global meter provider
    telemetry.instrument(meter_provider=NoOpMeterProvider())
    try:
        assert telemetry.is_instrumented() and not state.metered()
    finally:
        telemetry.uninstrument()


class _Lateness:
    """A collector with one histogram family, as the ScheduleService's."""

    def __init__(self) -> None:
        self.buckets = [("0.1", 2.0), ("1.0", 5.0), ("+Inf", 6.0)]
        self.total = 3.5

    def collect(self) -> Any:
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily("rmq_schedule_lateness_seconds", "late", labels=["level"])
        family.add_metric(["3"], self.buckets, self.total)
        yield family


def test_a_histogram_reaches_the_meter_as_its_buckets_count_and_sum() -> None:
    """No observable histogram in OpenTelemetry: the histogram goes as Prometheus exposes
    it, cumulative ``_bucket`` (with ``le``), ``_count`` and ``_sum`` counters, read at
    collection time."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry.instrument(meter_provider=provider)
    lateness = _Lateness()
    try:
        stop = state.observe(lateness)
        assert stop is not None

        def read() -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
            data = reader.get_metrics_data()
            return {
                (m.name, tuple(sorted(p.attributes.items()))): p.value
                for r in data.resource_metrics
                for s in r.scope_metrics
                for m in s.metrics
                for p in m.data.data_points
            }

        got = read()
        name = "rmq_schedule_lateness_seconds"
        level = (("level", "3"),)
        assert got[(f"{name}_bucket", (("le", "0.1"), *level))] == 2.0
        assert got[(f"{name}_bucket", (("le", "+Inf"), *level))] == 6.0
        assert got[(f"{name}_count", level)] == 6.0 and got[(f"{name}_sum", level)] == 3.5
        assert not any(k[0] in (name, f"{name}_created") for k in got)
        lateness.buckets[-1], lateness.total = ("+Inf", 7.0), 4.0
        got = read()
        assert got[(f"{name}_count", level)] == 7.0 and got[(f"{name}_sum", level)] == 4.0
        stop()
    finally:
        telemetry.uninstrument()
        provider.shutdown()
