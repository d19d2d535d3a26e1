"""What a newcomer meets in the first hour: each case was reproduced by following the README,
and each test failed before its fix."""

from __future__ import annotations

import socket
import time

import pytest

from adapter import BrokerUnavailableError, PushConsumer

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_client_with_no_broker_to_reach_names_the_address() -> None:
    """It used to wait and raise a bare KafkaClientError about creating a delay-level topic."""
    address = f"127.0.0.1:{_free_port()}"
    consumer = PushConsumer({"bootstrap.servers": address, "group.id": "g"})
    consumer.subscribe("orders")
    consumer.register_message_listener(lambda msgs, ctx: None)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=f"cannot reach any broker at {address}"):
        consumer.start()
    assert time.monotonic() - started < 45
