"""The adapter's metrics through an OpenTelemetry meter (imports OpenTelemetry: used once
instrumented with a meter provider).

The same names, labels and meanings as the Prometheus metrics (:mod:`adapter.io.metrics`):
each Prometheus counter family is an OpenTelemetry *observable counter* of the same name
(``rmq_consumer_messages``, ...; the family's labels are the attributes), each gauge an
*observable gauge*.  They are read from the same collectors, when the meter's reader
collects, so consuming and forwarding pay nothing for them.  OpenTelemetry has no
observable histogram (and recording one on the meter would be work on every listener call),
so a histogram (``rmq_consumer_listener_duration_seconds``,
``rmq_schedule_lateness_seconds``) goes as Prometheus exposes it: the observable counters
``<name>_bucket`` (attribute ``le``: the bucket's upper bound, cumulative), ``<name>_count``
and ``<name>_sum``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

log = logging.getLogger("adapter.telemetry")

#: a reading: family name -> (attributes, value) per sample, summed over equal attributes
Reading = dict[str, dict[tuple[tuple[str, str], ...], float]]


#: meter provider id -> (the provider, its bridge)
_BRIDGES: dict[int, tuple[Any, MetricBridge]] = {}
_BRIDGES_LOCK = threading.Lock()


class Collector(Protocol):
    """A Prometheus collector of :mod:`adapter.io.metrics` (what ``collect()`` yields)."""

    def collect(self) -> Iterable[Any]: ...


def wanted(meter_provider: Any) -> Any:
    """The meter provider to report through, or ``None``: ``meter_provider`` if given, else
    the global one once the application has set it (the API's own no-op and placeholder
    providers record nothing, so the adapter reads nothing for them)."""
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    if type(provider).__module__.startswith("opentelemetry.metrics"):
        return None  # NoOpMeterProvider, or the placeholder before set_meter_provider()
    return provider


def bridge(meter_provider: Any, scope: str, version: str | None) -> MetricBridge | None:
    """The bridge reporting through ``meter_provider`` (see :func:`wanted`), one per
    provider: instrumenting again with the same provider reuses its instruments."""
    provider = wanted(meter_provider)
    if provider is None:
        return None
    with _BRIDGES_LOCK:
        known = _BRIDGES.get(id(provider))
        if known is None or known[0] is not provider:
            known = _BRIDGES[id(provider)] = (provider, MetricBridge(provider, scope, version))
        return known[1]


class MetricBridge:
    """The clients' collectors, read as OpenTelemetry observable instruments.

    A client hands its collector to :meth:`add` when it starts (the instruments of its
    families are made on first sight) and calls what :meth:`add` returned when it stops.
    One collection of the meter's reader reads each collector once: the SDK calls the
    callbacks of one collection in the order the instruments were made, so the first
    instrument's callback reads the collectors and the others use that reading."""

    def __init__(self, meter_provider: Any, scope: str, version: str | None) -> None:
        self.meter = metrics.get_meter(scope, version or "", meter_provider=meter_provider)
        self._lock = threading.Lock()
        self._collectors: list[Collector] = []
        self._instruments: dict[str, Any] = {}
        self._reading: Reading | None = None

    def add(self, collector: Collector) -> Callable[[], None]:
        """Report ``collector``'s counters and gauges; returns what stops reporting it."""
        families = list(collector.collect())
        with self._lock:
            self._collectors.append(collector)
            for family in families:
                self._instrument(family)

        def remove() -> None:
            with self._lock:
                if collector in self._collectors:
                    self._collectors.remove(collector)

        return remove

    def close(self) -> None:
        """Stop reading every collector (:func:`adapter.telemetry.uninstrument`)."""
        with self._lock:
            self._collectors.clear()
            self._reading = None

    def _instrument(self, family: Any) -> None:
        for name, kind in _instruments_of(family):
            if name in self._instruments:
                continue
            callback = functools.partial(self._observe, name, not self._instruments)
            make = (
                self.meter.create_observable_counter
                if kind == "counter"
                else self.meter.create_observable_gauge
            )
            self._instruments[name] = make(
                name, callbacks=[callback], description=family.documentation
            )

    def _observe(self, name: str, first: bool, _options: CallbackOptions) -> list[Observation]:
        """``name``'s samples; the first instrument's callback reads the collectors anew."""
        with self._lock:
            reading = None if first else self._reading
        if reading is None:
            reading = self._read()
        return [Observation(value, dict(attrs)) for attrs, value in reading.get(name, {}).items()]

    def _read(self) -> Reading:
        """Every collector's counter and gauge samples."""
        with self._lock:
            collectors = list(self._collectors)
        out: Reading = {}
        for collector in collectors:
            try:
                families = list(collector.collect())
            except Exception:  # a collector that fails is left out of this reading
                log.warning("metrics of %r not read", collector, exc_info=True)
                continue
            for family in families:
                wanted = _samples_of(family)
                for sample in family.samples:
                    name = wanted.get(sample.name)
                    if name is not None:
                        values = out.setdefault(name, {})
                        attrs = tuple(sorted(sample.labels.items()))
                        values[attrs] = values.get(attrs, 0.0) + sample.value
        with self._lock:
            self._reading = out
        return out


_HISTOGRAM_PARTS = ("_bucket", "_count", "_sum")


def _instruments_of(family: Any) -> list[tuple[str, str]]:
    """The meter's instruments of one Prometheus family: ``(name, "counter"|"gauge")``."""
    if family.type in ("counter", "gauge"):
        return [(family.name, family.type)]
    if family.type == "histogram":
        return [(family.name + part, "counter") for part in _HISTOGRAM_PARTS]
    return []


def _samples_of(family: Any) -> dict[str, str]:
    """Prometheus sample name -> the instrument it is read into (none for ``_created``)."""
    if family.type == "counter":
        return {f"{family.name}_total": family.name}
    if family.type == "gauge":
        return {family.name: family.name}
    if family.type == "histogram":
        return {family.name + part: family.name + part for part in _HISTOGRAM_PARTS}
    return {}
