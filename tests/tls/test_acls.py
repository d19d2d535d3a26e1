"""Least-privilege ACLs on a SASL_SSL broker with an authorizer (StandardAuthorizer, deny
when no ACL matches): each component runs as a principal that has exactly the set
``rmq-kafka acl print --role ... --apply`` gives it, and with one ACL of it removed the
user gets an error naming the missing permission."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter import (
    AuthenticationError,
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
    SimpleConsumer,
)
from adapter.clients.push.push_consumer import ConsumeOrderlyStatus
from adapter.embedded import EmbeddedKafka
from adapter.io.admin import AdminSession
from adapter.kafka import Consumer as DropInConsumer
from adapter.ops.acls import AclSpec, apply_acls, role_acls
from adapter.services.dlq import read_dlq
from tests.tls.helpers import LEVELS, cli, new_topic, properties, send, uid, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROLES = ("consumer", "service", "producer", "console")
#: the super user, and per role a user with its set and one with its set less one ACL
USERS = {
    "admin": "admin-secret",
    **{f"{r}{suffix}": f"{r}{suffix}-secret" for r in ROLES for suffix in ("", "-less")},
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    instance = EmbeddedKafka(
        f"acl-{uid()}",
        tls=True,
        scram_users=USERS,
        authorizer=True,
        instances_dir=tmp_path_factory.mktemp("acl"),
    )
    instance.start(fresh=True)
    try:
        yield instance
    finally:
        instance.stop()


def _as(broker: EmbeddedKafka, user: str, **extra: Any) -> dict[str, Any]:
    return {**broker.client_config("SASL_SSL", user), **extra}


def _apply(broker: EmbeddedKafka, tmp_path: Path, user: str, *args: str) -> None:
    """``rmq-kafka acl print ... --principal User:<user> --apply`` as the super user."""
    props = properties(tmp_path / "admin.properties", _as(broker, "admin"))
    out = cli(props, "acl", "print", *args, "--principal", f"User:{user}", "--apply")
    assert out.returncode == 0, out.stderr
    assert f"ALLOW User:{user}" in out.stdout and "applied" in out.stdout


def _apply_less(
    broker: EmbeddedKafka, user: str, specs: list[AclSpec], drop: Callable[[AclSpec], bool]
) -> AclSpec:
    """``specs`` less the one ``drop`` picks, for ``user``; the one left out."""
    [removed] = [s for s in specs if drop(s)]
    kept = [s for s in specs if s != removed]
    apply_acls(AdminSession(_as(broker, "admin")), kept, f"User:{user}")
    return removed


def test_consumer_service_and_producer_with_exactly_their_acls(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-orders")
    group, pull_group, ns = f"g-{uid()}", f"g-{uid()}", f"ns{uid()}"
    _apply(broker, tmp_path, "consumer", "--role", "consumer", "--group", group,
           "--topic", topic, "--namespace", ns)  # fmt: skip
    _apply(broker, tmp_path, "consumer", "--role", "consumer", "--group", pull_group,
           "--topic", topic, "--namespace", ns)  # fmt: skip
    _apply(broker, tmp_path, "service", "--role", "schedule-service", "--namespace", ns)
    _apply(broker, tmp_path, "producer", "--role", "producer", "--topic", topic,
           "--namespace", ns)  # fmt: skip

    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        m = msgs[0]
        with lock:
            seen.append((m.body.decode(), m.reconsume_times))
        if m.body == b"poison" or m.reconsume_times == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        _as(broker, "consumer", **{"group.id": group, "auto.offset.reset": "earliest"}),
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        max_reconsume_times=2,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    bodies = [f"m{i}" for i in range(10)]
    service = ScheduleService(
        _as(broker, "service"), delay_levels=LEVELS, namespace=ns, partitions=1
    )  # exactly-once: its transactional id
    with service, consumer:
        with Producer(_as(broker, "producer"), delay_levels=LEVELS, namespace=ns) as producer:
            for body in bodies:
                producer.send(Message(topic=topic, body=body.encode()))
            delayed = Message(topic=topic, body=b"delayed")
            delayed.delay_time_level = 2
            producer.send(delayed)
            producer.send(Message(topic=topic, body=b"poison"))
        wait_until(lambda: len(read_dlq(admin, group)) == 1, 90, "the dead letter")
        wait_until(lambda: len(seen) >= 2 * 11 + 3, 60, "every retry")
        consumer.check_alive()
        service.check_alive()
    times: dict[str, list[int]] = defaultdict(list)
    for body, n in seen:
        times[body].append(n)
    assert {b: times[b] for b in [*bodies, "delayed"]} == {b: [0, 1] for b in [*bodies, "delayed"]}
    assert times["poison"] == [0, 1, 2]
    assert [e.message.body for e in read_dlq(admin, group)] == [b"poison"]

    # a SimpleConsumer of another group, same role
    acked: list[str] = []
    conf = _as(broker, "consumer", **{"auto.offset.reset": "earliest"})
    with SimpleConsumer(conf, pull_group, {topic: "*"}, partitions=1, await_duration=1.0) as sc:

        def pull() -> bool:
            for view in sc.receive(16, 10):
                sc.ack(view)
                acked.append(view.body.decode())
            return len(acked) >= 12

        wait_until(pull, 60, "every message pulled")
    assert sorted(acked) == sorted([*bodies, "delayed", "poison"])


def test_console_with_exactly_its_acls(broker: EmbeddedKafka, tmp_path: Path) -> None:
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-console")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    send(admin, topic, ["to the dlq"])
    with DropInConsumer(
        {**admin, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    ) as c:
        c.subscribe([topic])

        handed: list[Any] = []

        def step() -> bool:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                c.reconsume_later(msg, delay_level=-1)
                c.commit(message=msg)
                handed.append(msg)
            return bool(handed)

        wait_until(step, 60, "the message")
    wait_until(lambda: len(read_dlq(admin, group)) == 1, 60, "the dead letter")
    [entry] = read_dlq(admin, group)
    _apply(broker, tmp_path, "console", "--role", "console", "--group", group, "--namespace", ns)
    props = properties(tmp_path / "console.properties", _as(broker, "console"))

    out = cli(props, "group", "progress", "--group", group, "--json")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["partitions"] if r["topic"] == topic]
    assert [(r["committed"], r["end"]) for r in rows] == [(1, 1)]
    out = cli(props, "dlq", "list", "--group", group)
    assert out.returncode == 0 and entry.message.msg_id in out.stdout, out.stderr
    out = cli(props, "msg", "show", "--id", entry.message.msg_id)
    assert out.returncode == 0 and f"%DLQ%{group}" in out.stdout, out.stderr
    with ScheduleService(admin, delay_levels=LEVELS, namespace=ns, partitions=1):
        out = cli(props, "schedule", "status", "--namespace", ns, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["waiting"] == 0
    out = cli(props, "dlq", "redrive", "--group", group)
    assert out.returncode == 0 and "redrove 1 of 1 message(s)" in out.stdout, out.stderr


# --- one ACL removed -------------------------------------------------------------------------
def _within(seconds: float, call: Callable[[], Any]) -> AuthenticationError:
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        call()
    assert time.monotonic() - started < seconds
    return info.value


def test_a_consumer_without_read_on_its_group_is_told(broker: EmbeddedKafka) -> None:
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-less")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    specs = role_acls("consumer", group=group, topics=[topic], namespace=ns)
    removed = _apply_less(broker, "consumer-less", specs, lambda s: s.resource == "GROUP"
                          and s.name == group)  # fmt: skip
    assert (removed.operation, removed.resource) == ("READ", "GROUP")
    send(admin, topic, ["kept"])
    consumer = PushConsumer(
        _as(broker, "consumer-less", **{"group.id": group, "auto.offset.reset": "earliest"}),
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(lambda m, c: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    try:

        def alive() -> None:
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:  # then: DID NOT RAISE
                consumer.check_alive()
                time.sleep(0.2)

        error = _within(20, alive)
    finally:
        consumer.shutdown()
    assert f"missing permission: READ on GROUP {group!r}" in str(error), error


def test_a_schedule_service_without_its_transactional_id_is_told(broker: EmbeddedKafka) -> None:
    ns = f"ns{uid()}"
    specs = role_acls("schedule-service", namespace=ns)
    _apply_less(broker, "service-less", specs, lambda s: s.resource == "TRANSACTIONAL_ID")
    service = ScheduleService(
        _as(broker, "service-less"), delay_levels=LEVELS, namespace=ns, partitions=1
    )
    try:
        error = _within(20, service.start)
    finally:
        service.shutdown()
    assert "missing permission: WRITE on TRANSACTIONAL_ID" in str(error), error


def test_a_producer_without_write_on_its_topic_is_told(broker: EmbeddedKafka) -> None:
    topic = new_topic(_as(broker, "admin"), "acl-less")
    specs = role_acls("producer", topics=[topic])
    _apply_less(broker, "producer-less", specs, lambda s: s.name == topic)

    def send_one() -> None:
        with Producer(_as(broker, "producer-less")) as producer:
            producer.send(Message(topic=topic, body=b"x"))

    error = _within(20, send_one)
    assert f"missing permission: WRITE on TOPIC {topic!r}" in str(error), error


def test_the_console_without_read_on_the_group_is_told(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    group = f"g-{uid()}"
    specs = role_acls("console", group=group)
    _apply_less(broker, "console-less", specs, lambda s: s.resource == "GROUP" and s.name == group)
    props = properties(tmp_path / "less.properties", _as(broker, "console-less"))
    out = cli(props, "group", "progress", "--group", group)
    assert out.returncode == 2, out
    line = out.stderr.strip().splitlines()[-1]
    assert "user 'console-less'" in line and "missing permission" in line and "GROUP" in line
    assert USERS["console-less"] not in out.stderr


# --- the orderly, drop-in and share consumers with exactly the consumer role's set ------------
def _consumer_role(
    broker: EmbeddedKafka, tmp_path: Path, group: str, topic: str, ns: str, *more: str
) -> None:
    _apply(broker, tmp_path, "consumer", "--role", "consumer", "--group", group,
           "--topic", topic, "--namespace", ns, *more)  # fmt: skip


def test_an_orderly_consumer_with_exactly_its_acls(broker: EmbeddedKafka, tmp_path: Path) -> None:
    """Consumes in order, retries in place, dead-letters what keeps failing."""
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-orderly")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    _consumer_role(broker, tmp_path, group, topic, ns)
    send(admin, topic, ["a", "flaky", "poison", "b"])
    seen: list[tuple[str, int]] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        m = msgs[0]
        seen.append((m.body.decode(), m.reconsume_times))
        if m.body == b"poison" or (m.body == b"flaky" and m.reconsume_times == 0):
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(
        _as(broker, "consumer", **{"group.id": group, "auto.offset.reset": "earliest"}),
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        max_reconsume_times=2,
        consume_message_batch_max_size=1,
        suspend_current_queue_time_millis=100,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener_orderly(listener)
    with consumer:
        wait_until(lambda: ("b", 0) in seen, 60, "every message")
        wait_until(lambda: len(read_dlq(admin, group)) == 1, 60, "the dead letter")
        consumer.check_alive()
    assert [e.message.body for e in read_dlq(admin, group)] == [b"poison"]
    assert seen == [("a", 0), ("flaky", 0), ("flaky", 1), ("poison", 0), ("poison", 1),
                    ("poison", 2), ("b", 0)]  # fmt: skip


def _service_and_dropin(
    broker: EmbeddedKafka, user: str, group: str, ns: str
) -> tuple[ScheduleService, DropInConsumer]:
    """A ScheduleService as ``service`` and a drop-in consumer of ``group`` as ``user``, on
    the namespace's short ladder (not started: the ``with`` block starts them)."""
    return (
        ScheduleService(_as(broker, "service"), delay_levels=LEVELS, namespace=ns, partitions=1),
        DropInConsumer(
            _as(broker, user, **{"group.id": group, "auto.offset.reset": "earliest"}),
            delay_levels=LEVELS,
            namespace=ns,
            partitions=1,
        ),
    )


def test_a_dropin_consumer_with_exactly_its_acls(broker: EmbeddedKafka, tmp_path: Path) -> None:
    """Consumes, sends a retry through the delay levels (a ScheduleService with exactly its
    own set forwards it) and a dead letter."""
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-dropin")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    _consumer_role(broker, tmp_path, group, topic, ns)
    _apply(broker, tmp_path, "service", "--role", "schedule-service", "--namespace", ns)
    send(admin, topic, ["ok", "flaky", "dead"])
    got: list[tuple[str, int]] = []
    service, dropin = _service_and_dropin(broker, "consumer", group, ns)
    with service, dropin as c:
        c.subscribe([topic])

        def step() -> bool:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                body, times = msg.value().decode(), c.reconsume_times(msg)
                got.append((body, times))
                if body == "flaky" and times == 0:
                    c.reconsume_later(msg)
                elif body == "dead":
                    c.reconsume_later(msg, delay_level=-1)
                c.commit(message=msg)
            return ("flaky", 1) in got and ("dead", 0) in got

        wait_until(step, 90, "the retry and the dead letter")
        wait_until(lambda: len(read_dlq(admin, group)) == 1, 60, "the dead letter")
    assert sorted(got) == [("dead", 0), ("flaky", 0), ("flaky", 1), ("ok", 0)]
    assert [e.message.body for e in read_dlq(admin, group)] == [b"dead"]


def test_a_share_consumer_with_exactly_its_acls(broker: EmbeddedKafka, tmp_path: Path) -> None:
    """Receives, gets an unacknowledged message again and dead-letters one that is never
    acknowledged."""
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-share")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    _consumer_role(broker, tmp_path, group, topic, ns, "--share")
    send(admin, topic, ["ok", "flaky", "poison"])
    attempts: dict[str, list[int]] = defaultdict(list)
    acked: list[str] = []
    with SimpleConsumer(
        _as(broker, "consumer"),
        group,
        {topic: "*"},
        backend="share",
        partitions=1,
        await_duration=1.0,
        lock_duration=3.0,
        max_delivery_attempts=2,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    ) as sc:

        def pull() -> bool:
            for view in sc.receive(16, 2.0):
                body = view.body.decode()
                attempts[body].append(view.delivery_attempt)
                if body == "poison" or (body == "flaky" and view.delivery_attempt == 1):
                    continue  # its lock runs out: it comes back (the poison: to the DLQ)
                sc.ack(view)
                acked.append(body)
            return len(acked) == 2 and len(read_dlq(admin, group)) == 1

        wait_until(pull, 90, "the retry and the dead letter")
        sc.check_alive()
    assert sorted(acked) == ["flaky", "ok"]
    assert attempts["flaky"] == [1, 2] and attempts["poison"] == [1, 2]
    assert [e.message.body for e in read_dlq(admin, group)] == [b"poison"]


def test_an_orderly_consumer_without_read_on_its_group_is_told(broker: EmbeddedKafka) -> None:
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-less")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    specs = role_acls("consumer", group=group, topics=[topic], namespace=ns)
    _apply_less(broker, "consumer-less", specs, lambda s: s.resource == "GROUP"
                and s.name == group)  # fmt: skip
    send(admin, topic, ["kept"])
    consumer = PushConsumer(
        _as(broker, "consumer-less", **{"group.id": group, "auto.offset.reset": "earliest"}),
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener_orderly(lambda m, c: ConsumeOrderlyStatus.SUCCESS)
    consumer.start()
    try:

        def alive() -> None:
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:  # then: DID NOT RAISE
                consumer.check_alive()
                time.sleep(0.2)

        error = _within(20, alive)
    finally:
        consumer.shutdown()
    assert f"missing permission: READ on GROUP {group!r}" in str(error), error


def test_a_share_consumer_without_alter_configs_on_its_group_is_told(
    broker: EmbeddedKafka,
) -> None:
    """The share group's configuration is set at ``start()``: a refusal names the
    permission (it was a ConfigError naming ``lock_duration``)."""
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-less")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    specs = role_acls("consumer", group=group, topics=[topic], namespace=ns, share=True)
    _apply_less(broker, "consumer-less", specs, lambda s: s.operation == "ALTER_CONFIGS")
    sc = SimpleConsumer(
        _as(broker, "consumer-less"), group, {topic: "*"}, backend="share", partitions=1,
        lock_duration=3.0,
    )  # fmt: skip
    try:
        error = _within(20, sc.start)
    finally:
        sc.shutdown()
    assert f"missing permission: ALTER_CONFIGS on GROUP {group!r}" in str(error), error


def _less_write_on_the_delay_levels(
    broker: EmbeddedKafka, group: str, topic: str, ns: str
) -> AclSpec:
    specs = role_acls("consumer", group=group, topics=[topic], namespace=ns)
    removed = _apply_less(broker, "consumer-less", specs,
                          lambda s: s.operation == "WRITE" and s.pattern == "PREFIXED")  # fmt: skip
    assert removed.name == f"rmq.schedule.{ns}."
    return removed


def test_a_dropin_without_write_on_the_delay_levels_is_told_at_start(
    broker: EmbeddedKafka,
) -> None:
    """The consumer role less ``WRITE`` on the delay-level topics: it may create them but
    not see them (``WRITE`` implied ``DESCRIBE``); the drop-in's construction says so within
    seconds, naming the topic and the permission (it waited 30 s for them to show)."""
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-less")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    _less_write_on_the_delay_levels(broker, group, topic, ns)
    conf = _as(broker, "consumer-less", **{"group.id": group})
    consumer = DropInConsumer(conf, delay_levels=LEVELS, namespace=ns, partitions=1)
    try:
        error = _within(15, lambda: consumer.subscribe([topic]))  # it creates its topics here
    finally:
        consumer.close()
    assert "missing permission: DESCRIBE" in str(error) and f"rmq.schedule.{ns}." in str(error)


def test_a_dropin_without_write_on_the_delay_levels_holds_its_retry_until_it_may(
    broker: EmbeddedKafka, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer role less ``WRITE`` on the delay-level topics, with ``DESCRIBE`` on
    them: the drop-in's ``reconsume_later`` copy is refused, the log names the missing
    permission, and the message's offset is not committed past it (a commit of the next
    message stays behind it); once the ACL is back the copy goes, the ScheduleService
    forwards it and the message comes back with ``reconsume_times`` 1. Nothing is lost."""
    admin = _as(broker, "admin")
    topic = new_topic(admin, "acl-less")
    group, ns = f"g-{uid()}", f"ns{uid()}"
    removed = _less_write_on_the_delay_levels(broker, group, topic, ns)
    describe = AclSpec("TOPIC", removed.name, "PREFIXED", "DESCRIBE", "see the delay levels")
    apply_acls(AdminSession(admin), [describe], "User:consumer-less")
    _apply(broker, tmp_path, "service", "--role", "schedule-service", "--namespace", ns)
    send(admin, topic, ["flaky", "after"])
    got: list[tuple[str, int]] = []
    caplog.set_level("WARNING")
    service, dropin = _service_and_dropin(broker, "consumer-less", group, ns)
    with service, dropin as c:
        c.subscribe([topic])

        def step() -> None:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                body, times = msg.value().decode(), c.reconsume_times(msg)
                got.append((body, times))
                if body == "flaky" and times == 0:
                    c.reconsume_later(msg)
                c.commit(message=msg, asynchronous=False)

        def told() -> bool:
            step()
            return ("after", 0) in got and "missing permission: WRITE on TOPIC" in caplog.text

        wait_until(told, 60, "the refused copy's missing permission in the log")
        session = AdminSession(admin)
        assert session.committed(group).get((topic, 0), 0) == 0, "committed past the held copy"
        assert ("flaky", 1) not in got

        apply_acls(session, [removed], "User:consumer-less")

        def back() -> bool:
            step()
            return ("flaky", 1) in got

        wait_until(back, 90, "the retry once WRITE on the delay levels is back")

        def past_both() -> bool:
            step()
            return session.committed(group).get((topic, 0)) == 2

        wait_until(past_both, 30, "the committed offset past both messages")
    assert sorted(got) == [("after", 0), ("flaky", 0), ("flaky", 1)]
