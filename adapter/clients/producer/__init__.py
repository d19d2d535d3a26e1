"""``Producer``: RocketMQ-style sends on confluent-kafka.

* idempotent producer always on; librdkafka retries what is safe inside
  ``send_msg_timeout_ms`` (``message.timeout.ms``);
* the adapter resends only after a *definite* failure (``retry_times_when_send_failed``),
  at once, or after a gRPC-style back-off when it hit flow control (queue full, throttling);
* an outcome Kafka reports as possibly persisted raises :class:`PossiblyPersistedError`
  and is never resent (``UNIQ_KEY`` lets consumers de-duplicate);
* one poll thread per producer serves delivery reports, runs send callbacks and every
  delayed resend (a heap of due resends: its poll timeout is the next due time).  Nothing
  sleeps there: a resend that meets flow control on that thread is scheduled, not waited
  for.  Only a caller's own thread sleeps, when ``send``/``send_async`` back off from a
  full local queue.  While a thread keeps calling ``send_async``, that thread serves the
  reports that are ready at each call (as a raw confluent-kafka loop calls ``poll(0)``
  after ``produce``) and the poll thread steps aside;
* a topic is looked up before its first send; one that is not there yet is looked up
  again until ``topic.metadata.propagation.max.ms`` (librdkafka's bound, 30 s by default)
  has passed since the producer first met it, and only then is an
  :class:`UnknownTopicError` (Kafka's metadata lags topic creation).

The modules, one job each:

* :mod:`.client` -- the :class:`Producer` facade (lifecycle, the four kinds of send);
* :mod:`.options` -- :class:`ProducerSettings` and the ``TypedDict`` of its keywords;
* :mod:`.results` -- :class:`SendResult`, :class:`SendStatus`, the callback type;
* :mod:`.records` -- a message's Kafka record (checks, headers, delay placement), pure;
* :mod:`.lookup` -- the Kafka topic of a user topic, waited for until it is visible;
* :mod:`.produce` -- the one ``produce()`` call and what its failures mean;
* :mod:`.inflight` -- pooled asynchronous sends, their resends and the resend heap;
* :mod:`.poller` -- the poll thread and who serves delivery reports when.
"""

from __future__ import annotations

from adapter.clients.producer.client import Producer
from adapter.clients.producer.options import ProducerOptions, ProducerOptionsDict, ProducerSettings
from adapter.clients.producer.results import SendCallback, SendResult, SendStatus

__all__ = [
    "Producer",
    "ProducerOptions",
    "ProducerOptionsDict",
    "ProducerSettings",
    "SendCallback",
    "SendResult",
    "SendStatus",
]
