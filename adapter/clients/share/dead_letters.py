"""Writing a share group's dead letters: records that used up ``max_delivery_attempts``
go to ``%DLQ%<group>`` with the usual headers (docs/semantics.md §3.3), and the broker's
answer for each is waited for, since the record is REJECTed (gone for good) only once its
copy is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import confluent_kafka

from adapter.clients.share.share_view import ShareMessageView
from adapter.core.codec import Failure, dlq_headers
from adapter.core.engine.pull import EXPIRED_FAILURE_TYPE
from adapter.core.routing import DeadLetterReason
from adapter.telemetry import state as telemetry

__all__ = ["write_dead_letters"]


def write_dead_letters(
    producer: confluent_kafka.Producer,
    views: Sequence[ShareMessageView],
    *,
    dlq_kafka_topic: str,
    group: str,
    max_delivery_attempts: int,
    now_ms: int,
    timeout: float,
    tracing: bool = True,
) -> list[BaseException | None]:
    """Write a copy of each of ``views`` to ``dlq_kafka_topic`` and wait up to ``timeout``
    seconds for the broker: per view, ``None`` when written, else the error (a
    :class:`TimeoutError` when no delivery report came).  ``tracing``: the consumer's option
    (``False``: no dead-letter span)."""
    results: list[BaseException | None] = [TimeoutError("no delivery report")] * len(views)
    for i, view in enumerate(views):
        msg = view.message
        failure = Failure(
            EXPIRED_FAILURE_TYPE,
            f"not acknowledged within its invisible duration of {view.duration:g} s "
            f"(delivery attempt {msg.reconsume_times + 1} of {max_delivery_attempts})",
        )
        headers: list[Any] = dlq_headers(
            msg,
            group=group,
            reason=DeadLetterReason.MAX_DELIVERY_ATTEMPTS.value,
            now_ms=now_ms,
            failure=failure,
        )

        hooks = telemetry.active if tracing else None
        if hooks is not None:  # the dead letter's ``send`` span, in the message's trace
            attributes = {
                "messaging.consumer.group.name": group,
                "rocketmq.reconsume_times": msg.reconsume_times + 1,
                "rocketmq.dead_letter.reason": DeadLetterReason.MAX_DELIVERY_ATTEMPTS.value,
                "rocketmq.failure.type": failure.type,
            }
            hooks.copy("dead-letter", msg.properties, dlq_kafka_topic, msg.msg_id, attributes)

        def done(err: Any, _rec: Any, i: int = i) -> None:
            results[i] = None if err is None else confluent_kafka.KafkaException(err)

        try:
            producer.produce(
                dlq_kafka_topic,
                value=msg.body,
                key=view.record.key(),
                headers=headers,
                on_delivery=done,
            )
        except (confluent_kafka.KafkaException, BufferError) as exc:
            results[i] = exc
    producer.flush(timeout)
    return results
