"""The embedded KRaft broker and the pytest plugin, against real brokers (no mocks)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from adapter.embedded import EmbeddedKafka, EmbeddedKafkaError, lib_dir
from adapter.embedded.classes import ensure_class_archive
from adapter.testing import TopicFactory, create_topic

pytestmark = pytest.mark.integration

HEADERS: list[tuple[str, str | bytes | None]] = [
    ("rmq-retry-times", b"3"),
    ("trace", b"\x00\xffbinary"),
    ("trace", b"dup-key"),
]


def _produce(bootstrap: str, topic: str, value: bytes, key: bytes = b"k") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, value=value, key=key, headers=HEADERS, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "message not delivered within 30s"
    assert errors == []


def _consume(
    bootstrap: str, topic: str, group: str, count: int = 1, timeout: float = 30.0
) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        assert len(got) == count, f"{len(got)}/{count} messages on {topic} within {timeout}s"
        return got
    finally:
        consumer.close()


def _metadata_answers(bootstrap: str, timeout: float) -> bool:
    try:
        return bool(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout))
    except Exception:
        return False


# --------------------------------------------------------------------------------------------
# through the plugin's session broker (env / container / embedded, whichever is selected)
# --------------------------------------------------------------------------------------------


def test_produce_and_consume_with_headers(
    kafka_bootstrap_servers: str, kafka_topic: str, kafka_group_id: str
) -> None:
    _produce(kafka_bootstrap_servers, kafka_topic, b"hello")
    [msg] = _consume(kafka_bootstrap_servers, kafka_topic, kafka_group_id)
    assert msg.topic() == kafka_topic
    assert msg.key() == b"k"
    assert msg.value() == b"hello"
    assert msg.headers() == HEADERS


def test_topic_factory_partitions_and_config(
    kafka_bootstrap_servers: str, kafka_topic_factory: TopicFactory
) -> None:
    name = kafka_topic_factory("retry", partitions=3, config={"retention.ms": "3600000"})
    assert name.startswith("retry-")
    md = AdminClient({"bootstrap.servers": kafka_bootstrap_servers}).list_topics(name, timeout=10)
    assert len(md.topics[name].partitions) == 3


def test_kafka_mode_matches_environment(kafka_mode: str) -> None:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and not os.environ.get("RMQ_KAFKA_MODE"):
        assert kafka_mode == "env"
    assert kafka_mode in ("env", "container", "embedded")


def test_session_broker_pause_resume_and_kill(
    embedded_kafka: EmbeddedKafka, kafka_bootstrap_servers: str
) -> None:
    status = embedded_kafka.status()
    assert status is not None and status.running
    assert status.bootstrap_servers == kafka_bootstrap_servers

    embedded_kafka.pause()
    assert not _metadata_answers(kafka_bootstrap_servers, timeout=1.0)
    embedded_kafka.resume()
    assert _metadata_answers(kafka_bootstrap_servers, timeout=10.0)

    # leave it dead: the plugin restarts it (same ports, same data) before teardown
    embedded_kafka.kill()
    after_kill = embedded_kafka.status()
    assert after_kill is not None and not after_kill.running


def test_session_broker_was_healed(
    kafka_bootstrap_servers: str, kafka_topic: str, kafka_group_id: str
) -> None:
    _produce(kafka_bootstrap_servers, kafka_topic, b"after-heal")
    [msg] = _consume(kafka_bootstrap_servers, kafka_topic, kafka_group_id)
    assert msg.value() == b"after-heal"


# --------------------------------------------------------------------------------------------
# a separate EmbeddedKafka instance (own dir under tmp, shared jar cache)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    if shutil.which("java") is None:
        pytest.skip("no `java` on PATH")
    if shutil.which("mvn") is None and not lib_dir().is_dir():
        pytest.skip("no `mvn` on PATH and no cached Kafka jars")
    broker = EmbeddedKafka("it-own", instances_dir=tmp_path_factory.mktemp("instances"))
    try:
        yield broker
    finally:
        broker.stop()


def test_start_is_idempotent(own_broker: EmbeddedKafka) -> None:
    bootstrap = own_broker.start(fresh=True)
    host, _, port = bootstrap.partition(":")
    assert host == "127.0.0.1" and int(port) > 0
    pid = own_broker.pid
    assert pid is not None

    assert own_broker.start() == bootstrap
    assert own_broker.pid == pid

    # another object for the same instance (what a CLI call sees) reuses it via state.json ...
    twin = EmbeddedKafka(own_broker.name, instances_dir=own_broker.instance_dir.parent)
    assert twin.start() == bootstrap
    assert twin.pid == pid

    # ... and so does another process
    code = (
        "import sys; from adapter.embedded import EmbeddedKafka; "
        "print(EmbeddedKafka(sys.argv[1], instances_dir=sys.argv[2]).start())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, own_broker.name, str(own_broker.instance_dir.parent)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.stdout.strip() == bootstrap
    assert own_broker.pid == pid


def test_status_and_stop(own_broker: EmbeddedKafka) -> None:
    bootstrap = own_broker.start()
    status = own_broker.status()
    assert status is not None
    assert status.name == "it-own"
    assert status.running
    assert status.bootstrap_servers == bootstrap
    assert status.data_dir == own_broker.data_dir
    assert (status.data_dir / "meta.properties").is_file()
    pid = status.pid

    assert own_broker.stop() is True
    assert own_broker.status() is None
    assert not own_broker.state_file.exists()
    assert not Path(f"/proc/{pid}").exists() or not _metadata_answers(bootstrap, 1.0)
    assert own_broker.stop() is False  # already stopped
    with pytest.raises(EmbeddedKafkaError):
        own_broker.pause()


def test_restart_keeps_bootstrap_and_data(own_broker: EmbeddedKafka) -> None:
    bootstrap = own_broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = create_topic(admin, "restart", partitions=2)
    _produce(bootstrap, topic, b"before-restart")
    pid = own_broker.pid

    assert own_broker.restart() == bootstrap
    assert own_broker.pid != pid
    [msg] = _consume(bootstrap, topic, "g-restart-1")
    assert msg.value() == b"before-restart"
    assert msg.headers() == HEADERS

    # unclean: SIGKILL, then start() comes back on the same ports with the same data
    _produce(bootstrap, topic, b"before-kill", key=b"k")
    own_broker.kill()
    status = own_broker.status()
    assert status is not None and not status.running
    assert own_broker.start() == bootstrap
    values = sorted(m.value() or b"" for m in _consume(bootstrap, topic, "g-restart-2", 2))
    assert values == [b"before-kill", b"before-restart"]

    # hard restart (SIGKILL + start) in one call
    assert own_broker.restart(hard=True) == bootstrap
    assert _metadata_answers(bootstrap, 10.0)


def test_fresh_start_wipes_data(own_broker: EmbeddedKafka) -> None:
    bootstrap = own_broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = create_topic(admin, "wipe")
    new_bootstrap = own_broker.start(fresh=True)
    md = AdminClient({"bootstrap.servers": new_bootstrap}).list_topics(timeout=10)
    assert topic not in md.topics


def test_port_taken_while_stopped(own_broker: EmbeddedKafka) -> None:
    bootstrap = own_broker.start()
    port = int(bootstrap.rsplit(":", 1)[1])
    own_broker.stop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        # restart() insists on the same ports: it fails before launching, naming the port
        with pytest.raises(EmbeddedKafkaError) as excinfo:
            own_broker.restart(timeout=30)
        assert f"port {port} is already in use" in str(excinfo.value)
        # start() only prefers the old ports: it moves to new ones
        moved = own_broker.start()
    assert moved != bootstrap
    assert _metadata_answers(moved, 10.0)


def test_bad_config_is_reported(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no `java` on PATH")
    broker = EmbeddedKafka(
        "it-broken",
        instances_dir=tmp_path,
        extra_properties={"node.id": "not-a-number"},
    )
    with pytest.raises(EmbeddedKafkaError) as excinfo:
        broker.start()
    assert "not-a-number" in str(excinfo.value)
    assert broker.status() is None


def test_a_node_maps_the_class_archive_the_set_up_made(tmp_path: Path) -> None:
    """``./run.sh setup`` makes the archive (``ensure_class_archive``); every node then loads
    the broker's classes from it instead of from the jars: a start on about half the CPU."""
    if shutil.which("java") is None:
        pytest.skip("no `java` on PATH")
    archive = ensure_class_archive()
    assert archive is not None and archive.stat().st_size > 0
    loaded = tmp_path / "classes.txt"
    broker = EmbeddedKafka(
        "it-cds",
        instances_dir=tmp_path,
        jvm_options=[f"-Xlog:class+load=info:file={loaded}"],
    )
    try:
        _metadata_answers(broker.start(), 10.0)
    finally:
        broker.stop()
    lines = loaded.read_text(encoding="utf-8").splitlines()
    assert any(" kafka.Kafka source: shared objects file (top)" in ln for ln in lines)
    from_jars = [ln for ln in lines if "source: file:" in ln]
    from_archive = [ln for ln in lines if "source: shared objects file" in ln]
    assert len(from_archive) > 4 * len(from_jars), (len(from_archive), len(from_jars))
