"""What a newcomer meets in the first hour: each case was reproduced by following the README,
and each test failed before its fix."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import pytest

from adapter import (
    BrokerUnavailableError,
    ClientClosedError,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

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


def test_a_failing_listener_is_logged_once_with_its_traceback_and_a_clamp_is_named(
    kafka_bootstrap_servers: str, kafka_topic: str, kafka_group_id: str, caplog: Any
) -> None:
    """It used to log every failure as one line without a traceback, and to clamp an
    ack_index past the batch without a word."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    calls = []

    def listener(msgs: list[Any], ctx: Any) -> Any:
        calls.append(len(msgs))
        if msgs[0].body.startswith(b"boom"):
            raise ValueError("downstream said no")
        ctx.ack_index = 5  # past a batch of one
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with Producer(conf) as producer:
        for i in range(20):
            producer.send(Message(topic=kafka_topic, body=b"boom-%d" % i if i % 2 else b"ok"))
    consumer = PushConsumer(
        {**conf, "group.id": kafka_group_id},
        consume_message_batch_max_size=1,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(kafka_topic)
    consumer.register_message_listener(listener)
    with caplog.at_level(logging.WARNING, "adapter.consumer"), consumer:
        deadline = time.monotonic() + 60
        while len(calls) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        consumer.check_alive()
    assert len(calls) >= 20
    raised = [r for r in caplog.records if "listener raised ValueError" in r.getMessage()]
    assert len(raised) == 1, [r.getMessage() for r in raised]
    assert raised[0].exc_info is not None and raised[0].exc_info[0] is ValueError
    clamps = [r for r in caplog.records if "ack_index=5 is outside -1..0" in r.getMessage()]
    assert len(clamps) == 1


def test_a_client_used_after_shutdown_says_so(
    kafka_bootstrap_servers: str, kafka_topic: str, kafka_group_id: str
) -> None:
    """``start()``, ``with``, ``subscribe`` after ``shutdown()`` did nothing or said
    "subscribe before start()"; ``Producer.send`` after ``shutdown`` silently reopened."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    consumer = PushConsumer({**conf, "group.id": kafka_group_id})
    consumer.subscribe(kafka_topic)
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    consumer.shutdown()
    with pytest.raises(ClientClosedError, match="shut down"):
        consumer.start()
    with pytest.raises(ClientClosedError, match="shut down"):
        consumer.__enter__()
    with pytest.raises(ClientClosedError, match="shut down"):
        consumer.subscribe(kafka_topic)

    simple = SimpleConsumer({**conf, "group.id": f"{kafka_group_id}-s"})
    simple.subscribe(kafka_topic)
    simple.start()
    simple.shutdown()
    with pytest.raises(ClientClosedError, match="shut down"):
        simple.start()

    producer = Producer(conf)
    producer.send(Message(topic=kafka_topic, body=b"one"))
    producer.shutdown()
    with pytest.raises(ClientClosedError, match="shut down"):
        producer.send(Message(topic=kafka_topic, body=b"two"))


def test_kafka_start_takes_the_port_the_readme_uses() -> None:
    """The README's examples talk to 127.0.0.1:9092-style fixed addresses; ``kafka start``
    only picked free ports."""
    import subprocess
    import sys

    port = _free_port()
    name = f"port-{port}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "adapter.cli", "kafka", *args, "--name", name],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    try:
        started = cli("start", "--port", str(port))
        assert started.returncode == 0, started.stderr[-2000:]
        assert started.stdout.strip() == f"127.0.0.1:{port}"
    finally:
        cli("stop")
