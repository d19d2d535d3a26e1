"""pytest plugin: a real Kafka broker for the test session, plus topic/group factories.

Broker selection (session fixture ``kafka_mode``), first match wins:

1. ``env``       -- ``KAFKA_BOOTSTRAP_SERVERS`` is set: use that cluster as is.
2. ``container`` -- a Docker engine is reachable and the image ``$RMQ_KAFKA_IMAGE``
                    (default ``apache/kafka:4.4.0``) is already present locally (never pulled).
3. ``embedded``  -- an :class:`~adapter.embedded.EmbeddedKafka` JVM unique to this session
                    (fresh data, stopped at session end).

``RMQ_KAFKA_MODE=env|container|embedded`` forces a mode.

A cluster (fixture ``kafka_cluster``): a three-node embedded KRaft cluster (replication
factor 3, ``min.insync.replicas=2``) whose nodes a test can stop, kill, freeze and restart;
started on first use, one per session (per xdist worker), every node brought back after each
test that used it. ``kafka_cluster_bootstrap_servers`` is ``$KAFKA_CLUSTER_BOOTSTRAP_SERVERS``
(an external cluster) when set, else that cluster's.

A TLS broker (fixture ``kafka_tls``): an embedded node with ``SSL`` and ``SASL_SSL`` listeners
beside its plaintext one, certificates from a throw-away CA; started on first use, one per
session (per xdist worker); ``kafka_tls.client_config("SSL")`` gives a client's settings.

Registered as the ``rmq_kafka`` pytest11 entry point; without the package installed use
``-p adapter.testing.pytest_plugin`` (not both: pytest refuses one module under two names).
Importing this module has no side effects.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import socket
import uuid
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest
import tenacity
from confluent_kafka.admin import AdminClient

from adapter.embedded.broker import EmbeddedKafka, EmbeddedKafkaError, pid_alive
from adapter.io.topics import TopicPlan, ensure_with

__all__ = [
    "DEFAULT_IMAGE",
    "TopicFactory",
    "create_topic",
    "detect_kafka_mode",
    "embedded_kafka",
    "kafka_bootstrap_servers",
    "kafka_cluster",
    "kafka_cluster_bootstrap_servers",
    "kafka_group_id",
    "kafka_mode",
    "kafka_tls",
    "kafka_topic",
    "kafka_topic_factory",
]

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
CLUSTER_BOOTSTRAP_ENV = "KAFKA_CLUSTER_BOOTSTRAP_SERVERS"
#: nodes of the ``kafka_cluster`` fixture
CLUSTER_BROKERS = 3
IMAGE_ENV = "RMQ_KAFKA_IMAGE"
MODE_ENV = "RMQ_KAFKA_MODE"
DEFAULT_IMAGE = "apache/kafka:4.4.0"
MODES = ("env", "container", "embedded")

_READY_TIMEOUT_S = 60.0
_TOPIC_TIMEOUT_S = 30.0


class TopicFactory(Protocol):
    def __call__(
        self, prefix: str = "t", partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> str: ...


# --------------------------------------------------------------------------------------------
# mode detection
# --------------------------------------------------------------------------------------------


def _kafka_image() -> str:
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def _docker_socket_reachable() -> bool:
    """Cheap pre-check (the docker SDK leaks a socket when the engine is down)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return True  # tcp:// / ssh:// etc.: let the SDK decide
    path = host.removeprefix("unix://") or "/var/run/docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def _docker_image_present(image: str) -> bool:
    """Docker engine reachable AND ``image`` present locally. Never pulls."""
    if not _docker_socket_reachable():
        return False
    try:
        docker: Any = importlib.import_module("docker")
        client = docker.from_env(timeout=5)
    except Exception:
        return False
    try:
        client.ping()
        client.images.get(image)
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return True


def detect_kafka_mode() -> str:
    """``env`` / ``container`` / ``embedded`` -- see the module docstring."""
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced:
        if forced not in MODES:
            raise pytest.UsageError(f"{MODE_ENV}={forced!r}: expected one of {MODES}")
        if forced == "env" and not os.environ.get(BOOTSTRAP_ENV):
            raise pytest.UsageError(f"{MODE_ENV}=env needs {BOOTSTRAP_ENV}")
        return forced
    if os.environ.get(BOOTSTRAP_ENV):
        return "env"
    if _docker_image_present(_kafka_image()):
        return "container"
    return "embedded"


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _wait_until_serving(bootstrap: str, timeout: float = _READY_TIMEOUT_S) -> None:
    """Ask for metadata (bounded back-off between attempts) until the cluster answers with at
    least one broker."""
    admin = _admin(bootstrap)

    def serving() -> None:
        if not admin.list_topics(timeout=2.0).brokers:
            raise EmbeddedKafkaError(f"Kafka at {bootstrap} lists no broker yet")

    try:
        for attempt in tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout),
            wait=tenacity.wait_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        ):
            with attempt:
                serving()
    except Exception as exc:
        raise EmbeddedKafkaError(
            f"Kafka at {bootstrap} not serving after {timeout:.0f}s: {exc}"
        ) from exc


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _disable_ryuk_when_absent() -> None:
    """Testcontainers' reaper (ryuk) is itself an image; where it is not present locally
    (no registry to pull from) run without it -- the fixture stops its container itself."""
    from testcontainers.core.config import testcontainers_config  # lazy: container mode only

    if testcontainers_config.ryuk_disabled or _docker_image_present(
        testcontainers_config.ryuk_image
    ):
        return
    testcontainers_config.ryuk_disabled = True


def _start_container(image: str) -> tuple[Any, str]:
    """Start a single-node KRaft broker container; return (container, bootstrap)."""
    _disable_ryuk_when_absent()
    if "confluentinc/" in image:
        from testcontainers.community.kafka import (
            KafkaContainer,
        )  # lazy: heavy, container mode only

        kc = KafkaContainer(image).with_kraft()
        kc.start(timeout=int(_READY_TIMEOUT_S))
        return kc, kc.get_bootstrap_server()

    # apache/kafka image: configured through KAFKA_* env vars. The advertised listener must
    # carry the host-side port, so map a pre-chosen free host port 1:1 to the container.
    from testcontainers.core.container import DockerContainer  # lazy: heavy, container mode only

    port = _free_port()
    container = (
        DockerContainer(image)
        .with_bind_ports(port, port)
        .with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS=f"PLAINTEXT://:{port},CONTROLLER://:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
            KAFKA_INTER_BROKER_LISTENER_NAME="PLAINTEXT",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
            KAFKA_NUM_PARTITIONS="1",
        )
    )
    container.start()
    return container, f"127.0.0.1:{port}"


def create_topic(
    admin: AdminClient,
    prefix: str = "t",
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = _TOPIC_TIMEOUT_S,
) -> str:
    """Create a uuid-named topic and wait until every partition has a leader."""
    name = f"{prefix}-{uuid.uuid4().hex}"
    ensure_with(admin, [TopicPlan(name, name, partitions, dict(config or {}))], timeout_s=timeout)
    return name


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_mode() -> str:
    """How this session gets its broker: ``env``, ``container`` or ``embedded``."""
    return detect_kafka_mode()


def _reap_orphans(instances: Path) -> None:
    """Stop brokers left behind by pytest sessions that died without teardown (kill -9)."""
    for inst in instances.glob("pytest-*"):
        owner = inst.name.removeprefix("pytest-").removesuffix("-cluster").removesuffix("-tls")
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        with contextlib.suppress(Exception):
            EmbeddedKafka.existing(inst.name, instances_dir=instances).stop(timeout=10)
            shutil.rmtree(inst, ignore_errors=True)


def _session_instance(instance: EmbeddedKafka) -> Iterator[EmbeddedKafka]:
    """Start ``instance`` fresh (after stopping what dead sessions left), yield it, stop it
    and drop its data (session-local)."""
    _reap_orphans(instance.instance_dir.parent)
    instance.start(fresh=True)
    try:
        yield instance
    finally:
        instance.stop()
        shutil.rmtree(instance.instance_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def _rmq_kafka_embedded() -> Iterator[EmbeddedKafka]:
    yield from _session_instance(EmbeddedKafka(f"pytest-{os.getpid()}"))


@pytest.fixture(scope="session")
def _rmq_kafka_container() -> Iterator[str]:
    container, bootstrap = _start_container(_kafka_image())
    try:
        _wait_until_serving(bootstrap)
        yield bootstrap
    finally:
        with contextlib.suppress(Exception):
            container.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(kafka_mode: str, request: pytest.FixtureRequest) -> str:
    """Bootstrap servers of the session's Kafka broker."""
    if kafka_mode == "env":
        return os.environ[BOOTSTRAP_ENV]
    if kafka_mode == "container":
        return str(request.getfixturevalue("_rmq_kafka_container"))
    broker: EmbeddedKafka = request.getfixturevalue("_rmq_kafka_embedded")
    return broker.bootstrap_servers


@pytest.fixture(scope="session")
def embedded_kafka(kafka_mode: str, request: pytest.FixtureRequest) -> EmbeddedKafka:
    """The session's :class:`EmbeddedKafka` (for kill/pause/restart tests).

    Skips unless ``kafka_mode == "embedded"``. After each test that used it, the broker is
    resumed/restarted (same ports, same data) if the test left it paused, killed or stopped.
    """
    if kafka_mode != "embedded":
        pytest.skip(f"needs the embedded Kafka broker (kafka_mode is {kafka_mode!r})")
    broker: EmbeddedKafka = request.getfixturevalue("_rmq_kafka_embedded")
    return broker


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[EmbeddedKafka]:
    """A three-node embedded KRaft cluster of this session (started on first use): replication
    factor 3 and ``min.insync.replicas=2`` by default; ``kafka_cluster.node(i)`` stops, kills,
    freezes or restarts one node. After each test that used it, every node is running again."""
    yield from _session_instance(
        EmbeddedKafka(f"pytest-{os.getpid()}-cluster", brokers=CLUSTER_BROKERS)
    )


@pytest.fixture(scope="session")
def kafka_tls() -> Iterator[EmbeddedKafka]:
    """An embedded broker of this session with TLS (started on first use): its plaintext
    listener, an ``SSL`` and a ``SASL_SSL`` (SCRAM-SHA-256, user ``admin``) listener, with
    certificates from a throw-away CA. ``kafka_tls.client_config("SSL")`` is a client's
    settings (``bootstrap.servers``, ``security.protocol``, ``ssl.ca.location``, ...);
    ``kafka_tls.ca_location`` the CA file."""
    yield from _session_instance(EmbeddedKafka(f"pytest-{os.getpid()}-tls", tls=True))


@pytest.fixture(scope="session")
def kafka_cluster_bootstrap_servers(request: pytest.FixtureRequest) -> str:
    """``$KAFKA_CLUSTER_BOOTSTRAP_SERVERS`` (an external multi-broker cluster), else the
    bootstrap of :func:`kafka_cluster`."""
    external = os.environ.get(CLUSTER_BOOTSTRAP_ENV)
    if external:
        return external
    cluster: EmbeddedKafka = request.getfixturevalue("kafka_cluster")
    return cluster.bootstrap_servers


def _heal_cluster(item: pytest.Item) -> None:
    """Thaw and restart every node of the session cluster that a test left down."""
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    cluster: EmbeddedKafka | None = funcargs.get("kafka_cluster")
    if cluster is None:
        return
    for node in cluster.nodes:
        with contextlib.suppress(EmbeddedKafkaError):
            node.resume()
    cluster.start()


def _heal_embedded(item: pytest.Item) -> None:
    """Resume/restart the session broker if a test left it paused, killed or stopped -- before
    any fixture teardown (topic deletion etc.) needs it."""
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    broker: EmbeddedKafka | None = funcargs.get("embedded_kafka")
    if broker is None:
        return
    expected = broker.status()
    with contextlib.suppress(EmbeddedKafkaError):
        broker.resume()
    bootstrap = broker.start()
    if expected is not None and bootstrap != expected.bootstrap_servers:
        pytest.fail(f"embedded Kafka came back on {bootstrap}, not {expected.bootstrap_servers}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        _heal_embedded(item)
        _heal_cluster(item)


@pytest.fixture
def kafka_topic_factory(kafka_bootstrap_servers: str) -> Iterator[TopicFactory]:
    """``factory(prefix="t", partitions=1, config=None) -> name``: uuid-named topics, deleted
    (best effort) at teardown."""
    admin = _admin(kafka_bootstrap_servers)
    created: list[str] = []

    def factory(
        prefix: str = "t", partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> str:
        name = create_topic(admin, prefix, partitions, config)
        created.append(name)
        return name

    yield factory
    if created:
        with contextlib.suppress(Exception):
            futures = admin.delete_topics(created, operation_timeout=10, request_timeout=10)
            for fut in futures.values():
                with contextlib.suppress(Exception):
                    fut.result(timeout=15)


@pytest.fixture
def kafka_topic(kafka_topic_factory: TopicFactory) -> str:
    """A fresh single-partition topic."""
    return kafka_topic_factory()


@pytest.fixture
def kafka_group_id() -> str:
    """A fresh consumer group id."""
    return f"g-{uuid.uuid4().hex}"
