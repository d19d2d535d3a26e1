"""The one publisher of the adapter's own copies: send-backs, dead letters, forwards.

It owns the producer (created lazily from the client's one config dict, so security
settings pass through), produces :class:`~adapter.core.hops.OutRecord` s and reports each
broker verdict to the client as ``on_result(token, error, local)``: ``error`` is ``None``
when the broker acknowledged the record; ``local`` is true when the client refused it
before sending (so the verdict is about this record alone).  A client that passes
``on_delivered`` gets librdkafka's delivery reports as ``on_delivered(token, error, msg)``
instead (``on_result`` then only hears of records refused before sending), and one that
passes ``on_served`` is called after every ``poll`` and ``flush``.  Delivery
reports run on the thread that calls :meth:`poll` or :meth:`flush` (the client's loop
thread), never on a librdkafka thread.

A record sent *alone* goes through a second producer that puts every record in a batch of
its own (``batch.num.messages=1``): the broker judges whole record batches, so a copy
refused within a batch is sent again alone before it is judged (see
:mod:`adapter.core.publishing`).  Nothing here blocks the loop for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer

from adapter.constants import ANY_PARTITION, HOP_MESSAGE_MAX_BYTES
from adapter.core.hops import OutRecord
from adapter.io.config import producer_config, require_setting
from adapter.io.errors import FatalErrorWatch, make_client
from adapter.io.protocols import ProducerFactory

log = logging.getLogger("adapter.publisher")

#: What :meth:`Publisher.send` produces: an :class:`~adapter.core.hops.OutRecord`, or the
#: plain tuple of the same fields that the retry copies' fast builder makes
#: (:class:`~adapter.core.codec.RetryCopier`).
Record = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]
#: ``on_result(token, error, local)``: see the module docstring.
ResultCallback = Callable[[Any, Any, bool], None]
#: ``on_delivered(token, error, message)``: librdkafka's delivery report, ``token`` first.
DeliveryCallback = Callable[[Any, Any, Any], None]


class Publisher:
    """Produces copies for one client; see the module docstring.  ``producer_factory``
    creates its producers from their config dicts (confluent-kafka's ``Producer`` unless a
    test says)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        what: str,
        on_result: ResultCallback,
        errors: FatalErrorWatch | None = None,
        defaults: Mapping[str, Any] | None = None,
        transactional_id: str | None = None,
        producer_factory: ProducerFactory = KafkaProducer,
        on_delivered: DeliveryCallback | None = None,
        on_served: Callable[[], None] | None = None,
    ) -> None:
        conf = producer_config(config)
        if errors is not None:
            conf["error_cb"] = errors
        require_setting(conf, "enable.idempotence", True, "copies must not duplicate")
        # a copy carries more headers than the record it copies: do not refuse it client-side
        conf.setdefault("message.max.bytes", HOP_MESSAGE_MAX_BYTES)
        # copies go to topics that exist (the adapter creates its own with their retention);
        # a deleted one must be refused, not created again with the broker's defaults, and
        # refused within seconds, not librdkafka's 30 s
        conf.setdefault("allow.auto.create.topics", False)
        conf.setdefault("topic.metadata.propagation.max.ms", 5_000)
        for key, value in (defaults or {}).items():
            conf.setdefault(key, value)
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
        self.config = conf
        self.what = what
        self._on_result = on_result
        #: the delivery callback of each record is this bound to its token (a partial, made
        #: in C: no Python frame between librdkafka and the client), else a closure
        self._on_delivered = on_delivered
        #: called after every :meth:`poll` and :meth:`flush` (the verdicts they served are
        #: all in: a client may settle them together)
        self._on_served = on_served
        self._factory = producer_factory
        self._producer: Any = None
        self._alone: Any = None

    # -- clients ---------------------------------------------------------------------------
    @property
    def producer(self) -> Any:
        """The batching producer (created on first use)."""
        if self._producer is None:
            self._producer = make_client(self._factory, dict(self.config), what=self.what)
        return self._producer

    def replace_producer(self) -> Any:
        """Drop the producer for a fresh one (a wedged or fenced transactional producer);
        what it still held is purged and reported as failed."""
        old, self._producer = self._producer, None
        if old is not None:
            try:
                old.purge()
                old.poll(0)
            except KafkaException as exc:
                log.debug("purging the old %s failed: %s", self.what, exc)
        return self.producer

    def _alone_producer(self) -> Any:
        if self._alone is None:
            conf = {k: v for k, v in self.config.items() if not k.startswith("transaction")}
            conf.update({"batch.num.messages": 1, "linger.ms": 0})
            self._alone = make_client(self._factory, conf, what=f"{self.what} (single records)")
        return self._alone

    # -- producing -------------------------------------------------------------------------
    def send(self, record: OutRecord | Record, token: Any, alone: bool = False) -> None:
        """Produce ``record``; its verdict reaches ``on_result(token, ...)`` later (or now,
        when the client refuses it before sending)."""
        producer = self._producer
        if alone:
            producer = self._alone_producer()
        elif producer is None:  # ``is None``, not truth: a producer's truth is its queue length
            producer = self.producer
        on_result = self._on_result
        on_delivery: Callable[[Any, Any], None]
        if self._on_delivered is not None:
            on_delivery = partial(self._on_delivered, token)
        else:

            def on_delivery(err: Any, _msg: Any) -> None:
                on_result(token, err, False)

        topic, value, key, headers, partition = record
        if partition is None:
            partition = ANY_PARTITION
        try:
            producer.produce(topic, value, key, partition, on_delivery, None, 0, headers)
        except BufferError:
            producer.poll(0)  # serve delivery reports, which frees room, then try once more
            try:
                producer.produce(topic, value, key, partition, on_delivery, None, 0, headers)
            except BufferError as exc:
                full = KafkaError(KafkaError._QUEUE_FULL, f"local producer queue full: {exc}")
                on_result(token, full, False)
        except KafkaException as exc:  # refused before sending: about this record alone
            on_result(token, exc.args[0] if exc.args else exc, True)

    def batching(self) -> Callable[..., None]:
        """The batching producer's ``produce``, for a caller that sends many records in a
        row without a call of :meth:`send` per record (the consumer's failure path sends
        one per failed message): it produces ``produce(topic, value, key, ANY_PARTITION,
        callback, None, 0, headers)`` itself, with a delivery callback of its own, and
        hands a record whose ``produce`` raised to :meth:`send`, which deals with it
        (serves delivery reports for room, or reports the refusal).  Taken again for every
        run of records: a replaced producer is never used."""
        return self.producer.produce  # type: ignore[no-any-return]

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery reports (they run on this thread)."""
        if self._producer is not None:
            self._producer.poll(timeout)
        if self._alone is not None:
            self._alone.poll(0)
        if self._on_served is not None:
            self._on_served()

    def in_flight(self) -> int:
        """Records handed to librdkafka and not yet acknowledged or refused."""
        n = len(self._producer) if self._producer is not None else 0
        return n + (len(self._alone) if self._alone is not None else 0)

    def flush(self, timeout: float) -> int:
        """Wait (bounded) for every record's verdict; how many are still unknown."""
        left = 0
        if self._alone is not None:
            left += int(self._alone.flush(timeout))
        if self._producer is not None:
            left += int(self._producer.flush(timeout))
        if self._on_served is not None:
            self._on_served()
        return left

    def close(self, timeout: float = 30.0) -> int:
        """Flush and let the producers (and their broker connections) go."""
        left = self.flush(timeout)
        if left:
            log.warning("%s closed with %d record(s) unacknowledged", self.what, left)
        self._producer = None
        self._alone = None
        return left
