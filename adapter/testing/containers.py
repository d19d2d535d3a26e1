"""A retry stack for a service's own integration tests, in Docker containers.

A service built on the adapter needs two things running beside it before a retry can come
back: a Kafka broker and a :class:`~adapter.ScheduleService` (it forwards the send-backs
that wait on the delay-level topics).  :class:`RetryStack` starts both as containers on one
Docker network, with testcontainers:

* ``kafka``: a single-node KRaft broker (``apache/kafka:<version>`` when present locally,
  else the project's own ``rmq-kafka/kafka:<version>``, built by ``docker/build.sh kafka``);
  two listeners: one for the host (:attr:`RetryStack.bootstrap_servers`, ``127.0.0.1:<port>``)
  and one for other containers on the stack's network
  (:attr:`RetryStack.internal_bootstrap_servers`, ``kafka:19092``);
* ``schedule-service``: ``rmq-kafka schedule-service run`` in the project's service image
  (``rmq-kafka/app:<adapter version>``, else ``rmq-kafka/app:latest``; ``docker/build.sh
  app``), serving the stack's delay table (:attr:`RetryStack.delay_levels`, short by
  default: ``1s 2s 3s 4s 5s 6s``; every consumer under test must use the same table).

``start()`` returns once the broker answers on the host listener and the ScheduleService's
consumer group is stable; when that fails, the error carries the tail of both containers'
logs and the containers are removed.  ``stop()`` removes both containers and the network;
the stack is a context manager, so a plain script or a ``unittest`` ``setUpClass`` can use
it as well as the pytest fixture ``retry_stack`` (``adapter.testing.pytest_plugin``).
Testcontainers' reaper container is not needed: every container and network carries the
label :data:`LABEL` with the owning process id, and :func:`remove_stale` removes what a
process that died without ``stop()`` left behind (the fixture calls it first).

No image is ever pulled: an image that is not present locally is an error naming the images
tried and how to build them.  Beside the stack: which images are tried
(:mod:`adapter.testing.container_images`), what the Docker engine lacks
(:mod:`adapter.testing.docker_engine`) and one broker container's settings
(:mod:`adapter.testing.kafka_container`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import tenacity

from adapter.core.delay import DelayLevels
from adapter.embedded.jars import kafka_version
from adapter.errors import AdapterError
from adapter.io.clock import SYSTEM_CLOCK, SystemClock
from adapter.testing.container_images import (
    KAFKA_IMAGE_ENV,
    SERVICE_IMAGE_ENV,
    ImageChoice,
    choose_image,
    kafka_image_candidates,
    service_image_candidates,
)
from adapter.testing.docker_engine import (
    INSTALL_ENGINE,
    docker_client,
    docker_engine_problem,
    image_present,
)
from adapter.testing.kafka_container import (
    INTERNAL_PORT,
    broker_jvm_opts,
    free_port,
    kafka_env,
    new_cluster_id,
)

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "KAFKA_ALIAS",
    "LABEL",
    "ContainerStackError",
    "RetryStack",
    "remove_stale",
    "resolve_kafka_image",
    "resolve_service_image",
]

log = logging.getLogger("adapter.testing.containers")

#: a short delay table for tests (levels 1..6: 1 s .. 6 s); RocketMQ's default starts at 1 s
#: too but reaches 2 h, which no test waits for
DEFAULT_DELAY_LEVELS = "1s 2s 3s 4s 5s 6s"
#: the broker's name on the stack's network (its listener there: ``INTERNAL_PORT``)
KAFKA_ALIAS = "kafka"
SCHEDULE_ALIAS = "schedule-service"
SCHEDULE_GROUP = "rmq-schedule-service"
#: every container and network of a stack carries it; the value is the owning process id
LABEL = "io.rmq-kafka.retry-stack"
#: the stack's own id (one per RetryStack), to find exactly its containers
STACK_LABEL = "io.rmq-kafka.retry-stack.id"
#: the owning process's host name: pids are judged only on the host that owns them (an engine
#: may serve several hosts or containers, each with pids of its own)
HOST_LABEL = "io.rmq-kafka.retry-stack.host"
_LOG_TAIL_LINES = 80


class ContainerStackError(AdapterError):
    """A container of the stack could not be found, started or made ready; the message names
    the part and the cause (with the containers' logs when they ran)."""


def _pick(what: str, candidates: list[str], configured: str | None, build: str) -> ImageChoice:
    choice = choose_image(candidates, image_present, configured=bool(configured))
    if choice is None:
        how = f"set {configured!r} right" if configured else build
        raise ContainerStackError(
            f"{what} image: none of {candidates} is present locally (images are never "
            f"pulled); {how}"
        )
    log.info("%s image %s (%s)", what, choice.image, choice.reason)
    return choice


def resolve_kafka_image() -> ImageChoice:
    """The broker image to run (see :func:`kafka_image_candidates`); an error naming the
    images tried and how to build the project's own when none is present."""
    configured = os.environ.get(KAFKA_IMAGE_ENV) or None
    return _pick(
        "Kafka",
        kafka_image_candidates(kafka_version(), configured),
        configured and KAFKA_IMAGE_ENV,
        "build the project's own with docker/build.sh kafka (in the adapter's checkout), "
        f"or name one with {KAFKA_IMAGE_ENV}",
    )


def adapter_version() -> str:
    try:
        return importlib.metadata.version("rmq-kafka-adapter")
    except importlib.metadata.PackageNotFoundError:
        return "latest"


def resolve_service_image() -> ImageChoice:
    """The ScheduleService image to run (see :func:`service_image_candidates`)."""
    configured = os.environ.get(SERVICE_IMAGE_ENV) or None
    return _pick(
        "ScheduleService",
        service_image_candidates(adapter_version(), configured),
        configured and SERVICE_IMAGE_ENV,
        "build the project's own with docker/build.sh app (in the adapter's checkout), "
        f"or name one with {SERVICE_IMAGE_ENV}",
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> int:
    """Remove the containers and networks of stacks whose process is gone (it died without
    ``stop()``); returns how many containers went.  Only stacks of this host (label
    :data:`HOST_LABEL`) are judged."""
    client = docker_client()
    removed = 0
    mine = [f"{LABEL}", f"{HOST_LABEL}={socket.gethostname()}"]
    try:
        for container in client.containers.list(all=True, filters={"label": mine}):
            owner = str(container.labels.get(LABEL, ""))
            if owner.isdigit() and not _pid_alive(int(owner)):
                with contextlib.suppress(Exception):
                    container.remove(force=True, v=True)
                    removed += 1
        for network in client.networks.list(filters={"label": mine}):
            owner = str((network.attrs.get("Labels") or {}).get(LABEL, ""))
            if owner.isdigit() and not _pid_alive(int(owner)):
                with contextlib.suppress(Exception):
                    network.remove()
    finally:
        with contextlib.suppress(Exception):
            client.close()
    if removed:
        log.info("removed %d container(s) of retry stacks whose process is gone", removed)
    return removed


def _tail(data: bytes, lines: int) -> str:
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class RetryStack:
    """A Kafka broker and a ScheduleService in containers on one network (module docstring).

    ``delay_levels``: the ScheduleService's table (every consumer under test passes the same
    to ``PushConsumer(delay_levels=...)``); ``kafka_image`` / ``service_image``: force an
    image (else :func:`resolve_kafka_image` / :func:`resolve_service_image`);
    ``timeout_s``: how long ``start()`` waits for both to be ready.
    """

    def __init__(
        self,
        *,
        delay_levels: str = DEFAULT_DELAY_LEVELS,
        kafka_image: str | None = None,
        service_image: str | None = None,
        timeout_s: float = 300.0,
        clock: SystemClock = SYSTEM_CLOCK,
    ) -> None:
        DelayLevels.parse(delay_levels)  # a bad table fails here, naming the field
        self.delay_levels = delay_levels
        self.id = uuid.uuid4().hex[:12]
        self._kafka_image = kafka_image
        self._service_image = service_image
        self._timeout_s = timeout_s
        self._clock = clock
        self._host_port = 0
        self._network: Any = None
        self._kafka: Any = None
        self._service: Any = None
        self._probe: Any = None
        self.kafka_image: ImageChoice | None = None
        self.service_image: ImageChoice | None = None
        #: seconds ``start()`` took (images resolved to both ready); ``None`` before
        self.startup_seconds: float | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """The broker for clients on the host (the tests' own process)."""
        self._require_started()
        return f"127.0.0.1:{self._host_port}"

    @property
    def internal_bootstrap_servers(self) -> str:
        """The broker for other containers on :attr:`network_name`."""
        return f"{KAFKA_ALIAS}:{INTERNAL_PORT}"

    @property
    def network_name(self) -> str:
        """The stack's Docker network (attach a service container under test to it)."""
        self._require_started()
        return str(self._network.name)

    def kafka_config(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``{"bootstrap.servers": <host bootstrap>}`` with ``extra`` (confluent-kafka
        settings) over it."""
        return {"bootstrap.servers": self.bootstrap_servers, **(extra or {})}

    @property
    def labels(self) -> dict[str, str]:
        """The labels on every container and on the network of this stack."""
        return {LABEL: str(os.getpid()), STACK_LABEL: self.id, HOST_LABEL: socket.gethostname()}

    def _require_started(self) -> None:
        if self._kafka is None:
            raise ContainerStackError("the retry stack is not started: call start() first")

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> RetryStack:
        """Start the network, the broker and the ScheduleService; return once both serve."""
        if self._kafka is not None:
            return self
        problem = docker_engine_problem()
        if problem:
            raise ContainerStackError(f"no Docker engine reachable ({problem}): {INSTALL_ENGINE}")
        self._disable_reaper()
        kafka_choice = (
            ImageChoice(self._kafka_image, "given") if self._kafka_image else resolve_kafka_image()
        )
        service_choice = (
            ImageChoice(self._service_image, "given")
            if self._service_image
            else resolve_service_image()
        )
        self.kafka_image, self.service_image = kafka_choice, service_choice
        started = self._clock.monotonic()
        try:
            self._start_kafka(kafka_choice.image)
            deadline = started + self._timeout_s
            self._open_probe()
            try:
                self._wait("the broker", self._broker_serving, deadline)
                # the service only once the broker serves: started beside it, it found no
                # broker and exited within seconds (it says so at once to a user who runs it
                # against a wrong address)
                self._start_service(service_choice.image)
                self._wait("the ScheduleService", self._service_serving, deadline)
            finally:
                self._close_probe()
        except BaseException as exc:
            logs = self.logs_text()
            self.stop()
            if isinstance(exc, ContainerStackError):
                raise ContainerStackError(f"{exc}\n{logs}") from exc.__cause__
            if isinstance(exc, Exception):
                raise ContainerStackError(f"the retry stack did not start: {exc}\n{logs}") from exc
            raise
        self.startup_seconds = self._clock.monotonic() - started
        log.info(
            "retry stack %s: Kafka %s on %s (%s), ScheduleService %s, delay levels %r; "
            "ready in %.1fs",
            self.id,
            kafka_choice.image,
            self.bootstrap_servers,
            self.internal_bootstrap_servers,
            service_choice.image,
            self.delay_levels,
            self.startup_seconds,
        )
        return self

    @staticmethod
    def _disable_reaper() -> None:
        """Testcontainers' reaper is an image of its own, pulled on first use: this stack
        labels and removes its containers itself instead."""
        from testcontainers.core.config import testcontainers_config

        testcontainers_config.ryuk_disabled = True

    def _start_kafka(self, kafka_image: str) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network

        labels = self.labels
        self._network = Network(docker_network_kw={"labels": labels}).create()
        self._host_port = free_port()
        self._kafka = (
            DockerContainer(kafka_image, labels=labels)
            .with_network(self._network)
            .with_network_aliases(KAFKA_ALIAS)
            .with_bind_ports(self._host_port, self._host_port)
            .with_envs(
                **kafka_env(
                    self._host_port,
                    internal_host=KAFKA_ALIAS,
                    cluster_id=new_cluster_id(),
                    jvm_opts=broker_jvm_opts(),
                )
            )
            .with_name(f"rmq-retry-stack-{self.id}-kafka")
        )
        self._kafka.start()

    def _start_service(self, service_image: str) -> None:
        from testcontainers.core.container import DockerContainer

        self._service = (
            DockerContainer(service_image, labels=self.labels)
            .with_network(self._network)
            .with_network_aliases(SCHEDULE_ALIAS)
            .with_env("KAFKA_BOOTSTRAP_SERVERS", self.internal_bootstrap_servers)
            .with_command(
                [
                    "rmq-kafka",
                    "schedule-service",
                    "run",
                    "-b",
                    self.internal_bootstrap_servers,
                    "--delay-levels",
                    self.delay_levels,
                    "--partitions",
                    "1",
                ]
            )
            .with_name(f"rmq-retry-stack-{self.id}-schedule-service")
        )
        self._service.start()

    def _open_probe(self) -> None:
        """The admin client that probes readiness; held by this object alone, so that
        :meth:`_close_probe` destroys it then and there (a client left to the garbage
        collector at interpreter exit can hang it: its threads call back into Python)."""
        from confluent_kafka.admin import AdminClient

        from adapter.io.errors import make_client

        conf = {"bootstrap.servers": self.bootstrap_servers}
        self._probe = make_client(AdminClient, conf, what="retry stack readiness probe")

    def _close_probe(self) -> None:
        self._probe = None

    def _exited(self) -> str | None:
        for name, container in (("kafka", self._kafka), ("schedule-service", self._service)):
            if container is None:
                continue
            container.reload()
            if container.status in ("exited", "dead"):
                return f"the {name} container {container.status}"
        return None

    def _broker_serving(self) -> None:
        if not self._probe.list_topics(timeout=2.0).brokers:
            raise ContainerStackError(f"Kafka at {self.bootstrap_servers} lists no broker yet")

    def _service_serving(self) -> None:
        from confluent_kafka import ConsumerGroupState

        futures = self._probe.describe_consumer_groups([SCHEDULE_GROUP], request_timeout=5)
        desc = futures[SCHEDULE_GROUP].result(timeout=10)
        if desc.state != ConsumerGroupState.STABLE or not desc.members:
            raise ContainerStackError(
                f"the ScheduleService's group {SCHEDULE_GROUP} is {desc.state.name}, "
                f"{len(desc.members)} member(s)"
            )

    def _wait(self, what: str, probe: Callable[[], None], deadline: float) -> None:
        def attempt() -> None:
            exited = self._exited()
            if exited:
                raise _Exited(exited)
            probe()

        remaining = max(1.0, deadline - self._clock.monotonic())
        try:
            for step in tenacity.Retrying(
                stop=tenacity.stop_after_delay(remaining),
                wait=tenacity.wait_exponential(multiplier=0.1, max=2.0),
                retry=tenacity.retry_if_not_exception_type(_Exited),
                reraise=True,
            ):
                with step:
                    attempt()
        except _Exited as exc:
            raise ContainerStackError(f"{what} did not start: {exc}") from None
        except Exception as exc:
            raise ContainerStackError(
                f"{what} not ready after {self._timeout_s:.0f}s: {exc}"
            ) from exc

    def logs(self, lines: int = _LOG_TAIL_LINES) -> dict[str, str]:
        """The last ``lines`` lines of each container's output (stdout and stderr), by name."""
        out: dict[str, str] = {}
        for name, container in (("kafka", self._kafka), ("schedule-service", self._service)):
            if container is None:
                continue
            try:
                stdout, stderr = container.get_logs()
                out[name] = _tail(stdout + stderr, lines)
            except Exception as exc:
                out[name] = f"(no logs: {exc})"
        return out

    def logs_text(self, lines: int = _LOG_TAIL_LINES) -> str:
        """:meth:`logs` as one text, one section per container."""
        return "\n".join(
            f"----- {name} (last {lines} lines) -----\n{text}"
            for name, text in self.logs(lines).items()
        )

    def stop(self) -> None:
        """Remove both containers (and their volumes) and the network; idempotent."""
        for container in (self._service, self._kafka):
            if container is not None:
                try:
                    container.stop()
                except Exception as exc:
                    log.warning("retry stack %s: removing a container failed: %s", self.id, exc)
        self._service = self._kafka = None
        if self._network is not None:
            try:
                self._network.remove()
            except Exception as exc:
                log.warning("retry stack %s: removing the network failed: %s", self.id, exc)
            self._network = None

    def __enter__(self) -> RetryStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def describe(self) -> str:
        """One line: the images (and why), the addresses and the delay table."""
        kafka = self.kafka_image or ImageChoice("?", "not started")
        service = self.service_image or ImageChoice("?", "not started")
        return (
            f"retry stack {self.id}: Kafka {kafka.image} ({kafka.reason}), ScheduleService "
            f"{service.image} ({service.reason}), delay levels {self.delay_levels!r}"
        )


class _Exited(Exception):
    """A container of the stack stopped while the stack was waiting for it."""
