"""The spans and the context carried in headers (imports OpenTelemetry: used once instrumented).

Names and attributes follow OpenTelemetry's semantic conventions for messaging
(``messaging.system`` ``kafka``, ``messaging.operation.type`` ``send``/``process``, the
destination, the consumer group, partition, offset and message id) plus the adapter's own
``rocketmq.*`` attributes.  The context travels in the headers its propagator names (W3C
``traceparent``/``tracestate`` by default, or the user's global propagator's).

Every span of a message's life is in the trace of its first send: the producer's ``send``
span writes its context into the record, every copy keeps those headers unchanged, and the
``process`` span of each attempt and the ``send`` span of each copy (send-back, dead
letter, forward, redrive) are children of that context (and link to it, as the conventions
ask of a consumer).  A batch's ``process`` span links to each message's context instead.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from adapter.constants import PROPERTY_RECONSUME_TIME, PROPERTY_UNIQ_KEY
from adapter.core.clock import Clock
from adapter.core.routing import DeadLetter, RetryLater, RetryNow
from adapter.io.clock import SYSTEM_CLOCK
from adapter.telemetry.meters import MetricBridge, bridge

Headers = list[tuple[str, bytes | None]]

SYSTEM = "kafka"
#: what a copy is, in ``rocketmq.hop``
SEND_BACK, RETRY_NOW, DEAD_LETTER, FORWARD, REDRIVE = (
    "send-back",
    "retry",
    "dead-letter",
    "forward",
    "redrive",
)


def header_carrier(headers: Iterable[tuple[str, bytes | str | None]] | None) -> dict[str, str]:
    """Kafka headers as a propagator's carrier: text values, the last of a repeated key."""
    out: dict[str, str] = {}
    for key, value in headers or ():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, bytes):
            out[key] = value.decode("utf-8", "replace")
        else:
            out[key] = value
    return out


class Hooks:
    """What an instrumented adapter calls: see the module docstring."""

    def __init__(
        self, tracer_provider: Any, meter_provider: Any, scope: str, version: str | None
    ) -> None:
        self.tracer = trace.get_tracer(scope, version, tracer_provider=tracer_provider)
        self.meter_provider = meter_provider
        #: the Prometheus metrics through the meter (``None``: no meter provider to report to)
        self.metrics: MetricBridge | None = bridge(meter_provider, scope, version)
        provider = tracer_provider or trace.get_tracer_provider()
        #: the API's no-op provider records nothing and carries nothing: no work at all
        self.noop = isinstance(provider, trace.NoOpTracerProvider)

    # -- context ---------------------------------------------------------------------------
    @staticmethod
    def context_of(properties: Mapping[str, str]) -> Context:
        """The context a message carries (its headers as decoded properties)."""
        return propagate.extract(properties)

    @staticmethod
    def _links(contexts: Iterable[Context]) -> list[Link]:
        links = []
        for ctx in contexts:
            span_ctx = trace.get_current_span(ctx).get_span_context()
            if span_ctx.is_valid:
                links.append(Link(span_ctx))
        return links

    @staticmethod
    def inject(headers: Headers, context: Context | None = None) -> Headers:
        """``headers`` carrying ``context`` (the current one): the propagator's keys
        replaced, never added a second time."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=context)
        if not carrier:
            return headers
        names = set(carrier) | set(propagate.get_global_textmap().fields)
        out = [h for h in headers if h[0] not in names]
        out += [(k, v.encode()) for k, v in carrier.items()]
        return out

    # -- the producer ----------------------------------------------------------------------
    def send(self, headers: Headers, topic: str, msg_id: str, partition: int | None) -> Headers:
        """A producer's ``send`` span (a child of the current context), its context written
        into ``headers`` (returned)."""
        if self.noop:
            return headers
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
            "messaging.message.id": msg_id,
        }
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        with self.tracer.start_as_current_span(
            f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            return self.inject(headers)

    # -- consumers -------------------------------------------------------------------------
    def wrap_listener(
        self,
        listener: Callable[..., Any],
        group: str,
        timeout_s: float | None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Callable[..., Any]:
        """``listener`` (``listener(msgs, ctx)``, a plain or an ``async def`` function) with
        a ``process`` span around each call (timed on ``clock``: the consumer's)."""
        if self.noop:
            return listener
        process = self.process
        call = getattr(listener, "__call__", None)  # noqa: B004 - an async __call__
        if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(call):

            @functools.wraps(listener)
            async def traced_async(msgs: list[Any], ctx: Any) -> Any:
                with process(msgs, group, timeout_s, clock=clock) as finish:
                    return finish(await listener(msgs, ctx))

            return traced_async

        @functools.wraps(listener)
        def traced(msgs: list[Any], ctx: Any) -> Any:
            with process(msgs, group, timeout_s, clock=clock) as finish:
                return finish(listener(msgs, ctx))

        return traced

    @contextlib.contextmanager
    def process(
        self,
        msgs: Sequence[Any],
        group: str,
        timeout_s: float | None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Iterator[Callable[[Any], Any]]:
        """The ``process`` span of one listener call on ``msgs`` (current while it runs);
        gives the function the call's result goes through (it records the result, and
        ``timeout`` when the call ran past ``timeout_s`` on ``clock``)."""
        contexts = [self.context_of(m.properties) for m in msgs]
        first = msgs[0]
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": first.topic,
            "messaging.consumer.group.name": group,
            "messaging.destination.partition.id": str(first.queue_id),
        }
        if len(msgs) == 1:
            attributes["messaging.kafka.offset"] = first.queue_offset
            attributes["messaging.message.id"] = first.msg_id
            attributes["rocketmq.reconsume_times"] = first.reconsume_times
            parent: Context | None = contexts[0]
        else:
            attributes["messaging.batch.message_count"] = len(msgs)
            parent = None  # a batch: the conventions' links, one per message
        with self.tracer.start_as_current_span(
            f"process {first.topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=self._links(contexts),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            now = clock.monotonic
            began = now()

            def finish(result: Any) -> Any:
                outcome(span, result, now() - began, timeout_s)
                return result

            try:
                yield finish
            except Exception as exc:
                span.record_exception(exc)
                span.set_attribute("rocketmq.result", "exception")
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise

    def received(self, views: Sequence[Any], group: str) -> None:
        """The ``receive`` span of a SimpleConsumer's ``receive()`` (its messages, each a
        :class:`~adapter.clients.simple.message_view.MessageView`): a child of the one
        message's context, or for several no parent and a link to each message's."""
        if views and not self.noop:
            self.receive([v.message for v in views], group)

    def receive(self, msgs: Sequence[Any], group: str) -> None:
        """The ``receive`` span of messages (each a
        :class:`~adapter.core.message.MessageExt`) a pull call returned: a SimpleConsumer's
        ``receive()``, the drop-in's ``poll()``/``consume()``."""
        if not msgs or self.noop:
            return
        contexts = [self.context_of(m.properties) for m in msgs]
        first = msgs[0]
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "receive",
            "messaging.destination.name": first.topic,
            "messaging.consumer.group.name": group,
            "messaging.batch.message_count": len(msgs),
        }
        parent: Context | None = None
        if len(msgs) == 1:
            attributes["messaging.destination.partition.id"] = str(first.queue_id)
            attributes["messaging.kafka.offset"] = first.queue_offset
            attributes["messaging.message.id"] = first.msg_id
            attributes["rocketmq.reconsume_times"] = first.reconsume_times
            parent = contexts[0]
        span = self.tracer.start_span(
            f"receive {first.topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=self._links(contexts),
        )
        span.end()

    def copies(self, actions: Sequence[Any], group: str, topics: Any) -> None:
        """A ``send`` span for each copy of a consumed message among ``actions`` (the
        engine's :class:`~adapter.core.engine.SendBack` s; other actions are skipped)."""
        if self.noop:
            return
        for action in actions:
            dest = getattr(action, "dest", None)
            if dest is None:
                continue
            msg = action.msg
            attributes: dict[str, Any] = {"messaging.consumer.group.name": group}
            if isinstance(dest, RetryLater):
                hop, topic = SEND_BACK, topics.level_topic(dest.level)
                attributes["rocketmq.delay_level"] = dest.level
                attributes["rocketmq.reconsume_times"] = dest.reconsume_times
            elif isinstance(dest, RetryNow):
                hop, topic = RETRY_NOW, topics.retry_kafka
                attributes["rocketmq.reconsume_times"] = dest.reconsume_times
            elif isinstance(dest, DeadLetter):
                hop, topic = DEAD_LETTER, topics.dlq_kafka
                attributes["rocketmq.reconsume_times"] = dest.reconsume_times
                attributes["rocketmq.dead_letter.reason"] = dest.reason.value
            else:
                continue
            if action.failure is not None:
                attributes["rocketmq.failure.type"] = action.failure.type
            self.copy(hop, msg.properties, topic, msg.msg_id, attributes)

    def copy(
        self,
        hop: str,
        carried: Mapping[str, str],
        topic: str,
        msg_id: str,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """The ``send`` span of one copy (``hop``) of a message whose headers (as text)
        are ``carried``: a child of the context they carry.  The copy itself keeps those
        headers (the first send's context) unchanged."""
        if self.noop:
            return
        parent = self.context_of(carried)
        attrs: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": hop,
            "messaging.destination.name": topic,
            "messaging.message.id": msg_id,
            "rocketmq.hop": hop,
        }
        if attributes:
            attrs.update(attributes)
        span = self.tracer.start_span(
            f"{hop} {topic}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=attrs,
            links=self._links([parent]),
        )
        span.end()

    def forward(
        self,
        raw: Sequence[tuple[str, bytes | None]],
        topic: str,
        partition: int | None,
        *,
        level: int,
        lateness_ms: int,
    ) -> None:
        """The ScheduleService's ``forward`` span of a due delay-topic entry."""
        carried = header_carrier(raw)
        attributes: dict[str, Any] = {
            "rocketmq.delay_level": level,
            "rocketmq.lateness_ms": lateness_ms,
        }
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        reconsume = carried.get(PROPERTY_RECONSUME_TIME)
        if reconsume is not None and reconsume.isdigit():
            attributes["rocketmq.reconsume_times"] = int(reconsume)
        self.copy(FORWARD, carried, topic, carried.get(PROPERTY_UNIQ_KEY, ""), attributes)


def outcome(span: Any, result: Any, elapsed_s: float, timeout_s: float | None) -> None:
    """Record a listener call's result on its span: ``rocketmq.result``, an error status
    for anything but success, and ``timeout`` past the consumer's ``consume_timeout``."""
    name = getattr(result, "value", None) or str(result)
    if timeout_s is not None and elapsed_s > timeout_s:
        span.set_attribute("rocketmq.result", "timeout")
        span.set_status(Status(StatusCode.ERROR, f"ran {elapsed_s:.1f}s, past {timeout_s}s"))
        return
    span.set_attribute("rocketmq.result", name)
    if name not in {"CONSUME_SUCCESS", "SUCCESS", "COMMIT"}:
        span.set_status(Status(StatusCode.ERROR, name))
