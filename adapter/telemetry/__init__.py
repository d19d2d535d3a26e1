"""OpenTelemetry tracing across the retry ladder (the optional ``otel`` extra).

>>> from adapter import telemetry
>>> telemetry.instrument()        # doctest: +SKIP - the global tracer provider
>>> telemetry.uninstrument()      # doctest: +SKIP

Once instrumented, the producer writes the W3C ``traceparent``/``tracestate`` headers
through OpenTelemetry's global propagator, every listener call is a ``process`` span, and
every copy the adapter makes (a send-back to a delay level or the retry topic, a dead
letter, a ScheduleService forward, a redrive) is a ``send`` span in the trace of the
message's first send.  The copies carry the first send's context unchanged: one header
per key, replaced, never appended.  See ``docs/tracing.md``.
"""

from __future__ import annotations

from adapter.telemetry.switch import instrument, is_instrumented, uninstrument

__all__ = ["instrument", "is_instrumented", "uninstrument"]
