"""What a newcomer meets in the first hour: each case was reproduced by following the README,
and each test failed before its fix."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable
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
    ScheduleService,
    SimpleConsumer,
)

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kafka_cli(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``rmq-kafka kafka ARGS --name NAME`` in a child process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "adapter.cli", "kafka", *args, "--name", name],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _push_consumer_start(address: str) -> None:
    consumer = PushConsumer({"bootstrap.servers": address, "group.id": "g"})
    consumer.subscribe("orders")
    consumer.register_message_listener(lambda msgs, ctx: None)
    consumer.start()


def _schedule_service_start(address: str) -> None:
    ScheduleService({"bootstrap.servers": address}, namespace="nobroker").start()


def _producer_send(address: str) -> None:
    with Producer({"bootstrap.servers": address}) as producer:
        producer.send(Message(topic="orders", body=b"x"))


@pytest.mark.parametrize(
    "use",
    [_push_consumer_start, _schedule_service_start, _producer_send],
    ids=["push_consumer", "schedule_service", "producer"],
)
def test_a_client_with_no_broker_to_reach_names_the_address(
    use: Callable[[str], None], caplog: Any
) -> None:
    """The consumer and the ScheduleService used to wait and raise a bare KafkaClientError
    about creating a delay-level topic after some 60 ``Connect ... refused`` lines; the
    Producer said "metadata for topic 'orders': ... Broker transport failure" without the
    address."""
    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, "adapter.librdkafka"),
        pytest.raises(BrokerUnavailableError, match=f"cannot reach any broker at {address}"),
    ):
        use(address)
    # no broker answered at all: said within seconds (it was 30 s for the consumer and the
    # ScheduleService, which asked for the cluster's brokers for the whole topic timeout)
    assert time.monotonic() - started < 10
    repeated = [r for r in caplog.records if r.name == "adapter.librdkafka"]
    assert len(repeated) <= 5, [r.getMessage() for r in repeated]


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

    service = ScheduleService(conf, namespace=f"closed{kafka_group_id[-8:]}", delay_levels="1s")
    service.start()
    service.shutdown()
    with pytest.raises(ClientClosedError, match="shut down"):
        service.start()
    with pytest.raises(ClientClosedError, match="shut down"):
        service.__enter__()


def test_the_schedule_service_logs_its_assignment_in_one_short_line(
    kafka_bootstrap_servers: str, kafka_group_id: str, caplog: Any
) -> None:
    """Start-up at INFO printed one line listing every delay-level partition (54 with the
    default table); the summary is at INFO, the list at DEBUG."""
    namespace = f"asg{kafka_group_id[-8:]}"
    service = ScheduleService(
        {"bootstrap.servers": kafka_bootstrap_servers},
        namespace=namespace,
        delay_levels="1s 2s 3s",
        partitions=2,
    )
    with caplog.at_level(logging.INFO, "adapter.schedule"), service:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            "assigned" in r.getMessage() for r in caplog.records
        ):
            service.check_alive()
            time.sleep(0.1)
    lines = [r.getMessage() for r in caplog.records if "assigned" in r.getMessage()]
    assert lines, "no assignment logged within 30 s"
    assert all("rmq.schedule." not in line for line in lines), lines  # no topic at INFO
    assert "assigned 6 partition(s) of 3 delay-level topic(s)" in lines[0], lines


def test_kafka_start_takes_the_port_the_readme_uses() -> None:
    """The README's examples talk to 127.0.0.1:9092-style fixed addresses; ``kafka start``
    only picked free ports."""
    port = _free_port()
    name = f"port-{port}"

    try:
        started = _kafka_cli(name, "start", "--port", str(port))
        assert started.returncode == 0, started.stderr[-2000:]
        assert started.stdout.strip() == f"127.0.0.1:{port}"
    finally:
        _kafka_cli(name, "stop")


def test_creating_topics_is_one_info_line_and_each_topic_at_debug(
    kafka_bootstrap_servers: str, kafka_group_id: str, caplog: Any
) -> None:
    """Start-up at INFO printed a line per created topic (20 for the default delay table and
    one group); one summary at INFO, each topic at DEBUG."""
    from adapter.core.delay import DelayLevels
    from adapter.io.topics import ensure_topics, plan_topics

    namespace = f"cr{kafka_group_id[-8:]}"
    plans = plan_topics(
        groups=[kafka_group_id],
        delay_levels=DelayLevels.parse("1s 2s 3s 4s 5s"),
        namespace=namespace,
        partitions=1,
    )
    with caplog.at_level(logging.DEBUG, "adapter.topics"):
        created = ensure_topics({"bootstrap.servers": kafka_bootstrap_servers}, plans)
    assert sum(created.values()) == 7
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    each = [r for r in caplog.records if r.getMessage().startswith("created topic ")]
    assert len(info) == 1 and info[0].startswith("created 7 topic(s): "), info
    assert info[0].endswith(" and 4 more"), info
    assert len(each) == 7 and {r.levelno for r in each} == {logging.DEBUG}


def test_kafka_start_on_a_port_another_broker_holds_is_refused(
    kafka_bootstrap_servers: str,
) -> None:
    """``kafka start --port P`` where another broker already listens printed ``127.0.0.1:P``
    and exited 0: the new node's readiness check met the other broker (its node 1 too),
    while the new JVM died on "Address already in use". Clients then used the other one."""
    port = kafka_bootstrap_servers.split(",", maxsplit=1)[0].rsplit(":", 1)[1]
    name = f"taken-{port}-{_free_port()}"

    try:
        started = _kafka_cli(name, "start", "--port", port)
        assert started.returncode != 0, (started.stdout, started.stderr[-2000:])
        assert started.stdout == ""
        assert f"port {port} is already in use" in started.stderr, started.stderr[-2000:]
    finally:
        _kafka_cli(name, "stop")
