"""The order service end to end, in containers: an order the gateway rejects reaches the
dead-letter queue after its retries; one that fails once is paid on its retry."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest
from conftest import eventually
from orders_service import OrderRejectedError, OrdersService

from adapter import Message, Producer
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.dlq import read_dlq
from adapter.testing.containers import RetryStack


class FlakyGateway:
    """Rejects ``reject-*`` orders for good; times out once on ``flaky-*`` ones."""

    def __init__(self) -> None:
        self.calls: Counter[bytes] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: bytes) -> None:
        with self._lock:
            self.calls[body] += 1
            calls = self.calls[body]
        if body.startswith(b"reject"):
            raise OrderRejectedError(f"order {body!r} rejected")
        if body.startswith(b"flaky") and calls == 1:
            raise TimeoutError("payment gateway timed out")


@pytest.fixture
def gateway() -> FlakyGateway:
    return FlakyGateway()


@pytest.fixture
def service(retry_stack: RetryStack, gateway: FlakyGateway) -> OrdersService:
    run = uuid.uuid4().hex[:8]
    topic = f"orders-{run}"
    ensure_topics(retry_stack.kafka_config(), [TopicPlan(topic, topic, 1)])
    return OrdersService(
        retry_stack.kafka_config(),
        gateway,
        topic=topic,
        group=f"orders-service-{run}",
        delay_levels=retry_stack.delay_levels,
        max_reconsume_times=2,
    )


def test_a_rejected_order_reaches_the_dlq(
    retry_stack: RetryStack, service: OrdersService, gateway: FlakyGateway
) -> None:
    with service, Producer(retry_stack.kafka_config()) as producer:
        producer.send(Message(topic=service.topic, body=b"reject-1"))
        producer.send(Message(topic=service.topic, body=b"order-1"))
        dead = eventually(
            "reject-1 in the DLQ", lambda: read_dlq(retry_stack.kafka_config(), service.group)
        )
    assert [entry.message.body for entry in dead] == [b"reject-1"]
    assert dead[0].reason == "MAX_RECONSUME_TIMES"
    assert gateway.calls[b"reject-1"] == 3  # the first delivery and max_reconsume_times=2 retries
    assert service.paid == [b"order-1"]


def test_a_flaky_order_is_paid_on_its_retry(
    retry_stack: RetryStack, service: OrdersService, gateway: FlakyGateway
) -> None:
    with service, Producer(retry_stack.kafka_config()) as producer:
        producer.send(Message(topic=service.topic, body=b"flaky-1"))
        eventually("flaky-1 paid", lambda: b"flaky-1" in service.paid)
    assert gateway.calls[b"flaky-1"] == 2  # timed out once, paid on the retry
    assert read_dlq(retry_stack.kafka_config(), service.group) == []
