"""A tiny order service: a ``PushConsumer`` on the ``orders`` topic hands each order to a
payment gateway.

* the gateway raises ``OrderRejectedError`` for an order it will never take: the order is
  retried ``max_reconsume_times`` times (each retry waits on a delay level, forwarded back by
  the ScheduleService) and then lands in the dead-letter queue ``%DLQ%<group>``;
* any other error (a timeout, say) is retried the same way, and an order that goes through
  on a retry is done.

The service knows nothing about tests: the broker address, the delay table and the gateway
are given to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from adapter import ConsumeConcurrentlyStatus, PushConsumer

log = logging.getLogger("orders_service")

Gateway = Callable[[bytes], None]
"""Takes one order's body; raises when it cannot take it now (or ever)."""


class OrderRejectedError(Exception):
    """The gateway will never take this order."""


class OrdersService:
    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        gateway: Gateway,
        *,
        topic: str = "orders",
        group: str = "orders-service",
        delay_levels: str | None = None,
        max_reconsume_times: int = 3,
    ) -> None:
        self.topic = topic
        self.group = group
        self._gateway = gateway
        self._lock = threading.Lock()
        self._paid: list[bytes] = []
        options: dict[str, Any] = {
            "max_reconsume_times": max_reconsume_times,
            "consume_message_batch_max_size": 1,
        }
        if delay_levels is not None:  # else RocketMQ's 18 levels (1 s .. 2 h)
            options["delay_levels"] = delay_levels
        self._consumer = PushConsumer(
            {**kafka_config, "group.id": group, "auto.offset.reset": "earliest"}, **options
        )
        self._consumer.subscribe(topic, "*")
        self._consumer.register_message_listener(self._on_messages)

    def _on_messages(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        msg = msgs[0]
        try:
            self._gateway(msg.body)
        except Exception as exc:
            log.warning("order %r failed (delivery %d): %s", msg.body, msg.reconsume_times + 1, exc)
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        with self._lock:
            self._paid.append(msg.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    @property
    def paid(self) -> list[bytes]:
        """The orders the gateway took, in the order it took them."""
        with self._lock:
            return list(self._paid)

    def start(self) -> OrdersService:
        self._consumer.start()
        return self

    def shutdown(self) -> None:
        self._consumer.shutdown()

    def __enter__(self) -> OrdersService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()
