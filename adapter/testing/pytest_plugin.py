"""pytest plugin: a real Kafka broker for the test session, plus topic/group factories.

Broker selection (session fixture ``kafka_mode``), first match wins:

1. ``env``       -- ``KAFKA_BOOTSTRAP_SERVERS`` is set: use that cluster as is.
2. ``container`` -- a Docker engine is reachable and ``$RMQ_KAFKA_IMAGE`` (when set) or
                    ``apache/kafka:<version>`` is present locally (never pulled).  Forced
                    (``RMQ_KAFKA_MODE=container``), the project's own
                    ``rmq-kafka/kafka:<version>`` (``docker/build.sh kafka``) is taken when
                    the official image is absent.  The image taken and why is logged and
                    shown in the run's header and summary (fixture ``kafka_container_image``).
3. ``embedded``  -- an :class:`~adapter.embedded.EmbeddedKafka` JVM unique to this session
                    (fresh data, stopped at session end).

``RMQ_KAFKA_MODE=env|container|embedded`` forces a mode; a forced ``container`` without an
engine or an image is an error naming what is missing and how to get it.

A retry stack (fixture ``retry_stack``, session scope): a Kafka container and a
ScheduleService container on one Docker network (:class:`adapter.testing.containers.
RetryStack`), for a service's own tests of its retries and dead letters; its delay table is
the fixture ``retry_stack_delay_levels`` (override it in a ``conftest.py``).  A failing test
that used it gets both containers' logs in its report; the containers are removed at the end
of the session whatever the tests did.

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
import logging
import os
import socket
import uuid
from collections.abc import Generator, Iterator, Mapping
from typing import Any, Protocol

import pytest
import tenacity
from confluent_kafka.admin import AdminClient

from adapter.embedded.broker import EmbeddedKafka, EmbeddedKafkaError
from adapter.embedded.process_instance import process_instance
from adapter.io.topics import TopicPlan, ensure_with
from adapter.testing import container_images, containers, docker_engine, kafka_container

__all__ = [
    "DEFAULT_IMAGE",
    "TopicFactory",
    "create_topic",
    "detect_kafka_mode",
    "embedded_kafka",
    "kafka_bootstrap_servers",
    "kafka_cluster",
    "kafka_cluster_bootstrap_servers",
    "kafka_container_image",
    "kafka_group_id",
    "kafka_mode",
    "kafka_tls",
    "kafka_topic",
    "kafka_topic_factory",
    "retry_stack",
    "retry_stack_delay_levels",
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
#: a container's broker: three JVM starts at most, on a machine that may be busy
_CONTAINER_READY_TIMEOUT_S = 300.0
log = logging.getLogger("adapter.testing")
#: the broker image this process's container mode runs (for the end-of-run summary)
_IMAGE_KEY = pytest.StashKey[container_images.ImageChoice]()
_TOPIC_TIMEOUT_S = 30.0


class TopicFactory(Protocol):
    def __call__(
        self, prefix: str = "t", partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> str: ...


# --------------------------------------------------------------------------------------------
# mode detection
# --------------------------------------------------------------------------------------------


def _docker_image_present(image: str) -> bool:
    """Docker engine reachable AND ``image`` present locally. Never pulls."""
    return docker_engine.image_present(image)


def kafka_container_candidates(*, forced: bool = True) -> list[str]:
    """The broker images container mode tries, in order (see the module docstring).  Not
    ``forced`` (the mode is being detected), the project's own image does not count: a
    machine that built it for the Docker tier keeps running the default suite on the
    embedded broker, whose fault-injection tests need it."""
    from adapter.embedded.jars import kafka_version

    return container_images.kafka_image_candidates(
        kafka_version(), os.environ.get(IMAGE_ENV) or None, project_image=forced
    )


def _container_image(*, forced: bool = True) -> container_images.ImageChoice | None:
    candidates = kafka_container_candidates(forced=forced)
    return container_images.choose_image(
        candidates, _docker_image_present, configured=bool(os.environ.get(IMAGE_ENV))
    )


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
    if _container_image(forced=False) is not None:
        return "container"
    return "embedded"


def _require_container_image() -> container_images.ImageChoice:
    """The image container mode runs, or a usage error naming what is missing."""
    problem = docker_engine.docker_engine_problem()
    if problem:
        raise pytest.UsageError(
            f"{MODE_ENV}=container: no Docker engine reachable ({problem}): "
            f"{docker_engine.INSTALL_ENGINE}"
        )
    choice = _container_image()
    if choice is None:
        raise pytest.UsageError(
            f"{MODE_ENV}=container: none of {kafka_container_candidates()} is present locally "
            "(images are never pulled): build the project's own with docker/build.sh kafka, "
            f"or name one with {IMAGE_ENV}"
        )
    return choice


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


def _start_container(image: str) -> tuple[Any, str]:
    """Start a single-node KRaft broker container; return (container, bootstrap)."""
    return kafka_container.start_kafka_container(image, timeout_s=_CONTAINER_READY_TIMEOUT_S)


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


@pytest.fixture(scope="session")
def _rmq_kafka_embedded() -> Iterator[EmbeddedKafka]:
    with process_instance("pytest") as instance:
        yield instance


@pytest.fixture(scope="session")
def kafka_container_image(
    kafka_mode: str, request: pytest.FixtureRequest
) -> container_images.ImageChoice:
    """The broker image of container mode and why it was taken (skips in other modes)."""
    if kafka_mode != "container":
        pytest.skip(f"needs container mode (kafka_mode is {kafka_mode!r})")
    choice = _require_container_image()
    request.config.stash[_IMAGE_KEY] = choice
    return choice


@pytest.fixture(scope="session")
def _rmq_kafka_container(kafka_container_image: container_images.ImageChoice) -> Iterator[str]:
    image = kafka_container_image.image
    container, bootstrap = _start_container(image)
    log.info(
        "container mode: Kafka from image %s (%s) on %s",
        image,
        kafka_container_image.reason,
        bootstrap,
    )
    try:
        try:
            _wait_until_serving(bootstrap, _CONTAINER_READY_TIMEOUT_S)
        except EmbeddedKafkaError as exc:
            stdout, stderr = container.get_logs()
            logs = (stdout + stderr).decode("utf-8", "replace").splitlines()[-60:]
            raise EmbeddedKafkaError(
                f"{exc} (container of {image}; its last lines:)\n" + "\n".join(logs)
            ) from exc
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
    with process_instance("pytest", "cluster", brokers=CLUSTER_BROKERS) as instance:
        yield instance


@pytest.fixture(scope="session")
def kafka_tls() -> Iterator[EmbeddedKafka]:
    """An embedded broker of this session with TLS (started on first use): its plaintext
    listener, an ``SSL`` and a ``SASL_SSL`` (SCRAM-SHA-256, user ``admin``) listener, with
    certificates from a throw-away CA. ``kafka_tls.client_config("SSL")`` is a client's
    settings (``bootstrap.servers``, ``security.protocol``, ``ssl.ca.location``, ...);
    ``kafka_tls.ca_location`` the CA file."""
    with process_instance("pytest", "tls", tls=True) as instance:
        yield instance


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


@pytest.fixture(scope="session")
def retry_stack_delay_levels() -> str:
    """The retry stack's delay table (override in a ``conftest.py``); every consumer under
    test passes the same to ``PushConsumer(delay_levels=...)``."""
    return containers.DEFAULT_DELAY_LEVELS


@pytest.fixture(scope="session")
def retry_stack(retry_stack_delay_levels: str) -> Iterator[containers.RetryStack]:
    """A Kafka container and a ScheduleService container on one network, started once per
    session (per xdist worker) and removed at its end, whatever the tests did.  Containers
    that sessions killed before their teardown left behind are removed first."""
    problem = docker_engine.docker_engine_problem()
    if problem:
        pytest.fail(
            f"retry_stack: no Docker engine reachable ({problem}): {docker_engine.INSTALL_ENGINE}",
            pytrace=False,
        )
    containers.remove_stale()
    stack = containers.RetryStack(delay_levels=retry_stack_delay_levels)
    try:
        stack.start()
    except containers.ContainerStackError as exc:
        pytest.fail(f"retry_stack: {exc}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test that used ``retry_stack`` gets both containers' logs in its report."""
    report = yield
    if report.failed and call.when == "call":
        funcargs: dict[str, Any] = getattr(item, "funcargs", {})
        stack = funcargs.get("retry_stack")
        if isinstance(stack, containers.RetryStack):
            report.sections.append((f"retry stack logs ({stack.describe()})", stack.logs_text()))
    return report


def pytest_report_header(config: pytest.Config) -> str | None:
    """With ``RMQ_KAFKA_MODE=container``: the image the session's broker(s) will run, in the
    header (also under xdist, whose workers' own summary lines are not shown)."""
    if os.environ.get(MODE_ENV, "").strip().lower() != "container":
        return None
    choice = _container_image()
    if choice is None:
        return f"rmq-kafka container mode: no broker image present ({kafka_container_candidates()})"
    return f"rmq-kafka container mode: Kafka image {choice.image} ({choice.reason})"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    choice = config.stash.get(_IMAGE_KEY, None)
    if choice is not None:
        terminalreporter.write_line(
            f"rmq-kafka container mode: Kafka image {choice.image} ({choice.reason})"
        )


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
