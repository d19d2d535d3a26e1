"""A TLS connection that cannot be made is reported by every client within seconds, as a
:class:`TlsError` that names the cause (TLS handshake, certificate verification, a listener
that does not speak TLS, a missing client certificate) and the setting to check
(``ssl.ca.location``), instead of "Broker transport failure" after 30 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter import (
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
    SimpleConsumer,
    TlsError,
)
from adapter.aio import AsyncPushConsumer
from adapter.clients.push.push_consumer import ConsumeOrderlyStatus
from adapter.embedded import EmbeddedKafka
from adapter.embedded.tls import make_certificates
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.kafka import Consumer as DropInConsumer
from adapter.services.dlq import read_dlq
from tests.tls.helpers import cli, new_topic, properties, send, uid

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: what the issue asks: a clear error within this many seconds
LIMIT_S = 15.0


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that signed nothing the broker has."""
    return make_certificates(tmp_path_factory.mktemp("other-ca")).ca


def _push(conf: dict[str, Any], orderly: bool = False) -> None:
    consumer = PushConsumer({**conf, "group.id": f"g-{uid()}"}, partitions=1)
    consumer.subscribe(f"t-{uid()}")
    if orderly:
        consumer.register_message_listener_orderly(lambda msgs, ctx: ConsumeOrderlyStatus.SUCCESS)
    else:
        consumer.register_message_listener(
            lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        )
    try:
        consumer.start()
    finally:
        consumer.shutdown()


def _simple(conf: dict[str, Any], backend: str) -> None:
    sc = SimpleConsumer(conf, f"g-{uid()}", {f"t-{uid()}": "*"}, backend=backend, partitions=1)
    try:
        sc.start()
    finally:
        sc.shutdown()


def _dropin(conf: dict[str, Any]) -> None:
    c = DropInConsumer({**conf, "group.id": f"g-{uid()}"}, partitions=1)
    try:
        c.subscribe([f"t-{uid()}"])
    finally:
        c.close()


def _aio(conf: dict[str, Any]) -> None:
    async def main() -> None:
        consumer = AsyncPushConsumer({**conf, "group.id": f"g-{uid()}"}, partitions=1)
        consumer.subscribe(f"t-{uid()}")
        consumer.register_message_listener(
            lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        )
        try:
            await consumer.start()
        finally:
            await consumer.shutdown()

    asyncio.run(main())


def _service(conf: dict[str, Any]) -> None:
    with ScheduleService(conf, namespace=f"ns{uid()}", partitions=1):
        pass


def _producer(conf: dict[str, Any]) -> None:
    with Producer(conf) as producer:
        producer.send(Message(topic=f"t-{uid()}", body=b"x"))


#: every client, by name: a call that connects
CLIENTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "producer": _producer,
    "push-consumer": _push,
    "orderly-consumer": lambda conf: _push(conf, orderly=True),
    "simple-consumer-classic": lambda conf: _simple(conf, "classic"),
    "simple-consumer-share": lambda conf: _simple(conf, "share"),
    "drop-in": _dropin,
    "asyncio": _aio,
    "schedule-service": _service,
    "ensure-topics": lambda conf: ensure_topics(conf, [TopicPlan("t", f"t-{uid()}", 1)]),
    "dlq-reader": lambda conf: read_dlq(conf, f"g-{uid()}"),
}

CLI_COMMANDS = [
    ("topics", "ensure", "--group", "g"),
    ("group", "progress", "--group", "g"),
    ("dlq", "list", "--group", "g"),
    ("schedule", "status"),
    ("msg", "show", "--id", "x"),
]


def _fails_fast(call: Callable[[], Any]) -> tuple[TlsError, float]:
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        call()
    elapsed = time.monotonic() - started
    assert elapsed < LIMIT_S, elapsed
    return info.value, elapsed


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_wrong_ca_fails_fast_naming_certificate_verification_and_the_ca_file(
    kafka_tls: EmbeddedKafka, other_ca: Path, client: str
) -> None:
    conf = {**kafka_tls.client_config("SASL_SSL"), "ssl.ca.location": str(other_ca)}
    error, elapsed = _fails_fast(lambda: CLIENTS[client](conf))
    text = str(error)
    assert "TLS handshake" in text and "certificate verification failed" in text, text
    assert f"ssl.ca.location={str(other_ca)!r}" in text, text
    assert "admin-secret" not in text
    print(f"{client}: {elapsed:.1f}s {text[:160]}")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_tls_client_on_a_plaintext_port_fails_fast_naming_the_listener(
    kafka_tls: EmbeddedKafka, client: str
) -> None:
    conf = {
        "bootstrap.servers": kafka_tls.bootstrap_servers,  # the PLAINTEXT listener
        "security.protocol": "SSL",
        "ssl.ca.location": str(kafka_tls.ca_location),
    }
    error, _ = _fails_fast(lambda: CLIENTS[client](conf))
    text = str(error)
    assert "TLS handshake" in text and "does not speak TLS" in text, text
    assert "security.protocol=SSL" in text and "ssl.ca.location" in text, text


#: a plaintext client at each TLS listener: (security.protocol given, the listener)
PLAINTEXT_AT_TLS = [(None, "SSL"), ("PLAINTEXT", "SASL_SSL"), ("SASL_PLAINTEXT", "SASL_SSL")]


def _plaintext_at_tls(kafka_tls: EmbeddedKafka, given: str | None, listener: str) -> dict[str, Any]:
    """The settings of a client that forgot TLS: the TLS listener's address and login, no
    ``ssl.*``, ``security.protocol`` as ``given`` (``None``: unset)."""
    conf = {
        k: v
        for k, v in kafka_tls.client_config(listener).items()
        if not k.startswith("ssl.") and k != "security.protocol"
    }
    if given is not None:
        conf["security.protocol"] = given
    if not (given or "").startswith("SASL"):
        conf = {k: v for k, v in conf.items() if not k.startswith("sasl.")}
    return conf


def _names_tls_and_the_protocol(text: str, given: str | None) -> None:
    shown = "PLAINTEXT (the default)" if given is None else given
    assert "speaks TLS" in text, text
    assert f"security.protocol={shown}" in text, text
    want = "SASL_SSL" if (given or "").startswith("SASL") else "SSL"
    assert f"set security.protocol={want}" in text and "ssl.ca.location" in text, text
    assert "admin-secret" not in text, text


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    ("given", "listener"), PLAINTEXT_AT_TLS, ids=lambda v: str(v) if v else "unset"
)
def test_a_plaintext_client_on_a_tls_port_fails_fast_naming_security_protocol(
    kafka_tls: EmbeddedKafka, client: str, given: str | None, listener: str
) -> None:
    """A client without TLS settings at an ``SSL`` or ``SASL_SSL`` listener: the broker
    closes each of its connections before answering; the client says the listener speaks
    TLS and what to set, within seconds (it was "Broker transport failure" after 30 s)."""
    conf = _plaintext_at_tls(kafka_tls, given, listener)
    error, elapsed = _fails_fast(lambda: CLIENTS[client](conf))
    _names_tls_and_the_protocol(str(error), given)
    assert f"the listener at {kafka_tls.listener(listener)} speaks TLS" in str(error)
    print(f"{client}: {elapsed:.1f}s {str(error)[:160]}")


@pytest.mark.parametrize("command", CLI_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_cli_commands_report_a_plaintext_client_on_a_tls_port_in_one_line(
    kafka_tls: EmbeddedKafka, tmp_path: Path, command: tuple[str, ...]
) -> None:
    props = properties(tmp_path / "no-tls.properties", _plaintext_at_tls(kafka_tls, None, "SSL"))
    started = time.monotonic()
    out = cli(props, *command)
    elapsed = time.monotonic() - started
    assert out.returncode == 2, out
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("rmq-kafka: error: the listener at "), out.stderr
    _names_tls_and_the_protocol(last, None)
    assert "Traceback" not in out.stderr
    assert elapsed < LIMIT_S, elapsed
    print(f"{' '.join(command[:2])}: {elapsed:.1f}s")


@pytest.mark.parametrize("command", CLI_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_cli_commands_report_a_wrong_ca_in_one_line(
    kafka_tls: EmbeddedKafka, other_ca: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    conf = {**kafka_tls.client_config("SSL"), "ssl.ca.location": str(other_ca)}
    props = properties(tmp_path / "wrong-ca.properties", conf)
    started = time.monotonic()
    out = cli(props, *command)
    elapsed = time.monotonic() - started
    assert out.returncode == 2, out
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("rmq-kafka: error: TLS handshake with "), out.stderr
    assert "certificate verification failed" in last and str(other_ca) in last
    assert "Traceback" not in out.stderr
    assert elapsed < LIMIT_S, elapsed


@pytest.mark.parametrize("client", ["push-consumer", "drop-in"])
def test_the_handshake_failure_is_logged_through_python_logging(
    kafka_tls: EmbeddedKafka,
    other_ca: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    client: str,
) -> None:
    """librdkafka's own line reaches Python logging, from the admin client at a consumer's
    start and from the drop-in's own consumer too (not only from a producer's poll thread),
    and nothing of it is written raw to stderr."""
    conf = {**kafka_tls.client_config("SSL"), "ssl.ca.location": str(other_ca)}
    with caplog.at_level("INFO", logger="adapter.librdkafka"), pytest.raises(TlsError):
        CLIENTS[client](conf)
    assert "|FAIL|rdkafka#" not in capfd.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.name == "adapter.librdkafka"]
    assert any("SSL handshake failed" in line for line in lines), lines


# --- mutual TLS ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka(
        f"mtls-{uid()}", mutual_tls=True, instances_dir=tmp_path_factory.mktemp("mtls")
    )
    broker.start(fresh=True)
    try:
        yield broker
    finally:
        broker.stop()


def test_mutual_tls_takes_the_client_certificate_and_refuses_a_client_without(
    mtls: EmbeddedKafka,
) -> None:
    conf = mtls.client_config("SSL")
    assert conf["ssl.certificate.location"] and conf["ssl.key.location"]
    topic = new_topic(conf, "mtls")
    send(conf, topic, ["with a certificate"])
    assert ensure_topics(conf, [TopicPlan(topic, topic, 1)]) == {topic: False}

    bare = {k: v for k, v in conf.items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    error, _ = _fails_fast(lambda: _producer(bare))
    text = str(error)
    assert "TLS handshake" in text and "ssl.ca.location" in text, text
    assert "ssl.certificate.location" in text, text


def test_an_expired_broker_certificate_is_named(mtls: EmbeddedKafka) -> None:
    """The broker's certificates replaced by expired ones (same folder): a client that
    trusts their CA is told the certificate expired."""
    files = make_certificates(mtls.tls_files.directory, valid_days=-2)
    mtls.restart()
    conf = mtls.client_config("SASL_SSL")
    assert conf["ssl.ca.location"] == str(files.ca)
    error, _ = _fails_fast(lambda: _producer(conf))
    text = str(error)
    assert "TLS handshake" in text and "expired" in text and "ssl.ca.location" in text, text


def test_a_consumer_that_creates_no_topics_fails_its_start_fast_too(
    kafka_tls: EmbeddedKafka, other_ca: Path
) -> None:
    """Without topic creation at ``start()`` the first request is the end offsets of the
    subscribed topics (``CONSUME_FROM_LAST_OFFSET``): it fails fast too (it waited 10 s and
    then started a consumer that could not connect)."""
    conf = {**kafka_tls.client_config("SSL"), "ssl.ca.location": str(other_ca)}
    consumer = PushConsumer({**conf, "group.id": f"g-{uid()}"}, auto_create_topics=False)
    consumer.subscribe(f"t-{uid()}")
    consumer.register_message_listener(lambda m, c: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    try:
        error, elapsed = _fails_fast(consumer.start)
    finally:
        consumer.shutdown()
    assert elapsed < 5, elapsed
    assert "certificate verification failed" in str(error) and str(other_ca) in str(error)
