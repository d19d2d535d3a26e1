"""Every component over TLS on a real broker (the plugin's ``kafka_tls``: ``SSL`` and
``SASL_SSL`` listeners, certificates from a throw-away CA): the Producer, the PushConsumer
(concurrent and orderly), the SimpleConsumer (classic and share), the drop-in, asyncio, the
ScheduleService in both delivery modes and the CLI.  Each run delivers, retries and
dead-letters every message it sent: none lost, none done twice."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from adapter import (
    ConsumeConcurrentlyStatus,
    DeliveryGuarantee,
    PushConsumer,
    ScheduleService,
    SimpleConsumer,
)
from adapter.aio import AsyncPushConsumer
from adapter.clients.push.push_consumer import ConsumeOrderlyStatus
from adapter.embedded import EmbeddedKafka
from adapter.kafka import Consumer as DropInConsumer
from adapter.services.dlq import read_dlq
from tests.support.simple_backends import BACKENDS
from tests.tls.helpers import LEVELS, cli, new_topic, properties, send, uid, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def _conf(tls: EmbeddedKafka, protocol: str, **extra: Any) -> dict[str, Any]:
    return {**tls.client_config(protocol), **extra}


def test_the_listeners_hand_out_what_a_client_needs(kafka_tls: EmbeddedKafka) -> None:
    ssl = kafka_tls.client_config("SSL")
    sasl = kafka_tls.client_config("SASL_SSL")
    assert ssl["security.protocol"] == "SSL" and sasl["security.protocol"] == "SASL_SSL"
    assert ssl["ssl.ca.location"] == str(kafka_tls.ca_location) == sasl["ssl.ca.location"]
    assert kafka_tls.ca_location.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert sasl["sasl.mechanism"] == "SCRAM-SHA-256" and sasl["sasl.username"] == "admin"
    ports = {
        ssl["bootstrap.servers"],
        sasl["bootstrap.servers"],
        kafka_tls.bootstrap_servers,
    }
    assert len(ports) == 3  # three listeners


@pytest.mark.parametrize(
    ("protocol", "delivery"),
    [
        ("SSL", DeliveryGuarantee.EXACTLY_ONCE),
        ("SASL_SSL", DeliveryGuarantee.AT_LEAST_ONCE),
    ],
)
def test_push_consumer_and_schedule_service_retry_and_dead_letter_every_message(
    kafka_tls: EmbeddedKafka, protocol: str, delivery: DeliveryGuarantee
) -> None:
    """Each message fails once and comes back through the ScheduleService; one always
    fails and ends in the DLQ after its three deliveries."""
    conf = _conf(kafka_tls, protocol)
    topic = new_topic(conf, "tls-push")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    bodies = [f"m{i:03d}" for i in range(40)]
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        m = msgs[0]
        with lock:
            seen.append((m.body.decode(), m.reconsume_times))
        return LATER if m.body == b"poison" or m.reconsume_times == 0 else OK

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        max_reconsume_times=2,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    service = ScheduleService(
        conf, delay_levels=LEVELS, namespace=ns, partitions=1, delivery=delivery
    )
    with service, consumer:
        send(conf, topic, [*bodies, "poison"])
        wait_until(lambda: len(read_dlq(conf, group)) == 1, 90, "the poison message's DLQ entry")
        wait_until(lambda: len(seen) >= 2 * len(bodies) + 3, 60, "every retry")
    times = defaultdict(list)
    for body, n in seen:
        times[body].append(n)
    assert {b: times[b] for b in bodies} == {b: [0, 1] for b in bodies}  # once each, no more
    assert times["poison"] == [0, 1, 2]
    [entry] = read_dlq(conf, group)
    assert entry.message.body == b"poison" and entry.reason == "MAX_RECONSUME_TIMES"


def test_orderly_consumer_keeps_order_and_loses_nothing(kafka_tls: EmbeddedKafka) -> None:
    conf = _conf(kafka_tls, "SASL_SSL")
    topic = new_topic(conf, "tls-orderly")
    bodies = [f"o{i:03d}" for i in range(30)]
    done: list[str] = []
    suspended: set[str] = set()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        body = msgs[0].body.decode()
        if int(body[1:]) % 7 == 0 and body not in suspended:
            suspended.add(body)
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        done.append(body)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(
        {**conf, "group.id": f"g-{uid()}", "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=f"ns{uid()}",
        partitions=1,
        consume_message_batch_max_size=1,
        suspend_current_queue_time_millis=100,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener_orderly(listener)
    with consumer:
        send(conf, topic, bodies)
        wait_until(lambda: len(done) >= len(bodies), 60, "every message")
    assert done == bodies  # in order, each once, the suspended ones too
    assert len(suspended) == 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_simple_consumer_receives_redelivers_and_acks(
    kafka_tls: EmbeddedKafka, backend: str
) -> None:
    conf = _conf(kafka_tls, "SSL")
    topic = new_topic(conf, f"tls-simple-{backend}")
    bodies = [f"s{i:02d}" for i in range(10)]
    send(conf, topic, bodies)
    options: dict[str, Any] = {"partitions": 1, "await_duration": 2.0}
    if backend == "share":
        options.update(lock_duration=3.0, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        client_conf = dict(conf)
    else:
        client_conf = {**conf, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 100}
    acked: Counter[str] = Counter()
    attempts: dict[str, list[int]] = defaultdict(list)
    with SimpleConsumer(client_conf, f"g-{uid()}", {topic: "*"}, backend=backend, **options) as sc:
        wait_until(
            lambda: _receive(sc, acked, attempts) or len(acked) == len(bodies),
            90,
            "every message acknowledged",
        )
    assert acked == Counter(bodies)  # each once
    assert attempts["s03"] == [1, 2]  # left unacknowledged once: delivered again
    assert all(attempts[b] == [1] for b in bodies if b != "s03")


def _receive(sc: Any, acked: Counter[str], attempts: dict[str, list[int]]) -> bool:
    for view in sc.receive(16, 1.0):
        body = view.body.decode()
        attempts[body].append(view.delivery_attempt)
        if body == "s03" and view.delivery_attempt == 1:
            continue  # its invisible duration (or lock) runs out: it comes back
        sc.ack(view)
        acked[body] += 1
    return False


def test_dropin_consumer_retries_and_dead_letters(kafka_tls: EmbeddedKafka) -> None:
    conf = _conf(kafka_tls, "SASL_SSL")
    topic = new_topic(conf, "tls-dropin")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    send(conf, topic, ["ok", "flaky", "dead"])
    got: list[tuple[str, int]] = []
    with (
        ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1),
        DropInConsumer(
            {**conf, "group.id": group, "auto.offset.reset": "earliest"},
            delay_levels=LEVELS,
            namespace=ns,
            partitions=1,
        ) as c,
    ):
        c.subscribe([topic])

        def step() -> bool:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                body, times = msg.value().decode(), c.reconsume_times(msg)
                got.append((body, times))
                if body == "flaky" and times == 0:
                    c.reconsume_later(msg)
                elif body == "dead":
                    c.reconsume_later(msg, delay_level=-1)  # straight to the DLQ
                c.commit(message=msg)
            return ("flaky", 1) in got and ("dead", 0) in got

        wait_until(step, 90, "the retry and the dead letter")
        wait_until(lambda: len(read_dlq(conf, group)) == 1, 60, "the dead letter")
    assert sorted(got) == [("dead", 0), ("flaky", 0), ("flaky", 1), ("ok", 0)]
    assert [e.message.body for e in read_dlq(conf, group)] == [b"dead"]


def test_asyncio_push_consumer_retries(kafka_tls: EmbeddedKafka) -> None:
    conf = _conf(kafka_tls, "SSL")
    topic = new_topic(conf, "tls-aio")
    ns = f"ns{uid()}"
    send(conf, topic, ["a", "b", "c"])

    async def main() -> list[tuple[str, int]]:
        seen: list[tuple[str, int]] = []
        done = asyncio.Event()

        async def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            m = msgs[0]
            seen.append((m.body.decode(), m.reconsume_times))
            if len(seen) >= 4:
                done.set()
            return LATER if m.body == b"b" and m.reconsume_times == 0 else OK

        consumer = AsyncPushConsumer(
            {**conf, "group.id": f"g-{uid()}", "auto.offset.reset": "earliest"},
            delay_levels=LEVELS,
            namespace=ns,
            partitions=1,
        )
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)
        with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1):
            async with consumer:
                await asyncio.wait_for(done.wait(), 60)
        return seen

    seen = asyncio.run(main())
    assert sorted(seen) == [("a", 0), ("b", 0), ("b", 1), ("c", 0)]


def test_cli_commands_over_sasl_ssl(kafka_tls: EmbeddedKafka, tmp_path: Path) -> None:
    """topics ensure, group progress, dlq list and redrive, schedule status and msg show,
    each with the settings of ``--config-file`` (bootstrap, SASL_SSL, ssl.ca.location)."""
    conf = _conf(kafka_tls, "SASL_SSL")
    props = properties(tmp_path / "client.properties", conf)
    group, ns = f"g-{uid()}", f"ns{uid()}"
    out = cli(props, "topics", "ensure", "--group", group, "--namespace", ns,
              "--delay-levels", LEVELS, "--partitions", "1")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"%DLQ%{group}" in out.stdout and f"%RETRY%{group}" in out.stdout

    topic = new_topic(conf, "tls-cli")
    deliveries: list[int] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        deliveries.append(msgs[0].reconsume_times)
        return LATER

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        max_reconsume_times=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1), consumer:
        send(conf, topic, ["to the dlq"], keys=["k-cli"])
        wait_until(lambda: len(read_dlq(conf, group)) == 1, 60, "the dead letter")
    [entry] = read_dlq(conf, group)
    msg_id = entry.message.msg_id

    out = cli(props, "group", "progress", "--group", group, "--json")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["partitions"] if r["topic"] == topic]
    assert [(r["committed"], r["end"]) for r in rows] == [(1, 1)]
    out = cli(props, "dlq", "list", "--group", group)
    assert out.returncode == 0, out.stderr
    assert msg_id in out.stdout
    out = cli(props, "msg", "show", "--id", msg_id)
    assert out.returncode == 0, out.stderr
    assert f"%DLQ%{group}" in out.stdout
    out = cli(props, "schedule", "status", "--namespace", ns, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["waiting"] == 0
    out = cli(props, "dlq", "redrive", "--group", group)
    assert out.returncode == 0, out.stderr
    assert "redrove 1 of 1 message(s)" in out.stdout
    out = cli(props, "dlq", "redrive", "--group", group)  # each once
    assert "redrove 0 of 1 message(s)" in out.stdout, out
