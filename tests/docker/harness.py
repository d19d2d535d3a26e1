"""The Docker stack tests' harness: bring a stack up (``docker/up.sh``) under a project,
ports and data directory of its own, drive it, and tear it down.

Shared by ``test_stack.py`` (one broker) and ``test_cluster_stack.py`` (the three-broker
profile, ``docker/compose.cluster.yaml``); both are opt-in (``RMQ_DOCKER_TESTS=1``, see
:func:`require_docker`: skipped unless asked for, failing
when asked for and Docker or Compose is missing).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapter.testing import docker_engine

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
CLUSTER_FILE = DOCKER / "compose.cluster.yaml"

#: the broker services of a three-broker stack, by node id
BROKER_SERVICES = {1: "broker", 2: "broker-2", 3: "broker-3"}


def run(
    args: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; its output captured, its exit status not checked."""
    return subprocess.run(
        args, check=False, capture_output=True, text=True, timeout=timeout, env=env
    )


def compose_command() -> list[str] | None:
    try:
        if run(["docker", "compose", "version"], timeout=30).returncode == 0:
            return ["docker", "compose"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return ["docker-compose"] if shutil.which("docker-compose") else None


def opted_in() -> bool:
    return os.environ.get("RMQ_DOCKER_TESTS") == "1"


def missing_parts(compose: bool = True) -> list[str]:
    """What the Docker tier needs and this machine lacks, each with how to install it."""
    cli = shutil.which("docker") is not None
    return docker_engine.docker_problems(
        cli=cli,
        engine_problem=docker_engine.docker_engine_problem(),
        compose=(compose_command() is not None) if compose else None,
    )


def require_docker(compose: bool = True) -> None:
    """Skip when the tier was not asked for (``RMQ_DOCKER_TESTS`` unset); when it was, fail
    naming every missing part (Docker CLI, engine, Compose) and how to install it: a tier
    asked for by name never passes without running."""
    if not opted_in():
        pytest.skip("opt-in: set RMQ_DOCKER_TESTS=1 (builds the images, runs containers: minutes)")
    problems = missing_parts(compose)
    if problems:
        pytest.fail(
            "RMQ_DOCKER_TESTS=1 but the Docker tier cannot run:\n  " + "\n  ".join(problems),
            pytrace=False,
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def http_json(url: str, token: str | None = None, body: Any = None) -> Any:
    """GET ``url`` (POST with ``body`` as JSON), with ``token`` as a bearer token."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode("utf-8"))


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 2.0) -> Any:
    """``probe()`` until it returns something truthy; fails with its last result or error."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
            if last:
                return last
        except Exception as exc:  # not ready yet
            last = exc
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:.0f}s (last: {last!r})")
        time.sleep(interval)


@dataclass
class Stack:
    project: str
    env: dict[str, str]
    compose_cmd: list[str]
    kafka_ports: list[int]
    prometheus_port: int
    schedule_metrics_port: int
    consumer_metrics_port: int
    data: Path
    console_port: int = 0
    console_token: str = ""

    @property
    def kafka_port(self) -> int:
        """The first broker's host port."""
        return self.kafka_ports[0]

    @property
    def files(self) -> list[Path]:
        """The compose files of this stack (the cluster profile over the base file)."""
        return [COMPOSE_FILE] if len(self.kafka_ports) == 1 else [COMPOSE_FILE, CLUSTER_FILE]

    @property
    def bootstrap(self) -> str:
        """Every broker's host listener."""
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_ports)

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def console(self) -> str:
        """The retry console's address on the host (its token: :attr:`console_token`)."""
        return f"http://127.0.0.1:{self.console_port}"

    def compose_args(self) -> list[str]:
        args = list(self.compose_cmd)
        for path in self.files:
            args += ["-f", str(path)]
        return [*args, "-p", self.project]

    def compose(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        res = run([*self.compose_args(), *args], timeout, self.env)
        if check and res.returncode != 0:
            output = tail(res.stdout + res.stderr)
            pytest.fail(f"{' '.join(args)}: exit {res.returncode}\n{output}")
        return res.stdout

    def exec(self, service: str, *args: str, check: bool = True) -> str:
        return self.compose("exec", "-T", service, *args, check=check)

    def has_file(self, service: str, path: str) -> bool:
        cmd = [*self.compose_args(), "exec", "-T", service, "test", "-f", path]
        return run(cmd, 60, self.env).returncode == 0

    def logs(self, service: str) -> str:
        """The service container's own stdout + stderr (no compose prefixes)."""
        cid = self.compose("ps", "-q", service).strip()
        res = run(["docker", "logs", cid], timeout=60)
        return res.stdout + res.stderr

    def events(self, service: str, event: str) -> list[dict[str, Any]]:
        out = []
        for line in self.logs(service).splitlines():
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("event") == event:
                    out.append(record)
        return out

    def prom_query(self, query: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        body = http_json(url)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def prom_value(self, query: str) -> float:
        result = self.prom_query(query)
        return sum(float(r["value"][1]) for r in result) if result else 0.0


def start_stack(tmp_path_factory: pytest.TempPathFactory, brokers: int = 1) -> Iterator[Stack]:
    """Build the images, bring the stack up with ``docker/up.sh --brokers N`` and yield it;
    ``docker/down.sh --purge`` afterwards (unless ``RMQ_DOCKER_KEEP=1``).  The body of the
    tests' module-scoped ``stack`` fixtures: skips unless opted in, fails naming what is
    missing when opted in (:func:`require_docker`)."""
    require_docker(compose=True)
    cmd = compose_command()
    assert cmd is not None
    build = run([str(DOCKER / "build.sh")], timeout=1500)
    if build.returncode != 0:
        pytest.fail(f"docker/build.sh failed:\n{tail(build.stdout + build.stderr)}")
    kafka_ports = [free_port() for _ in range(brokers)]
    ports = [free_port() for _ in range(4)]
    console_token = uuid.uuid4().hex
    data = tmp_path_factory.mktemp("stack-data")
    project = f"rmq-kafka-test-{os.getpid()}" + ("" if brokers == 1 else f"-b{brokers}")
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": project,
        "COMPOSE_CMD": " ".join(cmd),
        "RMQ_STACK_BROKERS": str(brokers),
        "RMQ_STACK_KAFKA_PORT": str(kafka_ports[0]),
        "RMQ_STACK_PROMETHEUS_PORT": str(ports[0]),
        "RMQ_STACK_SCHEDULE_METRICS_PORT": str(ports[1]),
        "RMQ_STACK_CONSUMER_METRICS_PORT": str(ports[2]),
        "RMQ_STACK_CONSOLE_PORT": str(ports[3]),
        "RMQ_STACK_CONSOLE_TOKEN": console_token,
        "RMQ_STACK_DATA": str(data),
    }
    for i, port in enumerate(kafka_ports[1:], start=2):
        env[f"RMQ_STACK_KAFKA_PORT_{i}"] = str(port)
    s = Stack(
        project,
        env,
        cmd,
        kafka_ports=kafka_ports,
        prometheus_port=ports[0],
        schedule_metrics_port=ports[1],
        consumer_metrics_port=ports[2],
        data=data,
        console_port=ports[3],
        console_token=console_token,
    )
    try:
        started = time.monotonic()
        up = run([str(DOCKER / "up.sh"), "--timeout", "420"], 600, env)
        print(up.stdout)
        print(f"docker/up.sh --brokers {brokers}: {time.monotonic() - started:.0f}s")
        if up.returncode != 0:
            pytest.fail(f"docker/up.sh failed:\n{tail(up.stdout + up.stderr, 80)}")
        assert f"127.0.0.1:{s.kafka_port}" in up.stdout, "up.sh prints the host bootstrap"
        yield s
    finally:
        if os.environ.get("RMQ_DOCKER_KEEP") == "1":
            print(f"RMQ_DOCKER_KEEP=1: stack {project} left running (data in {data})")
        else:
            run([str(DOCKER / "down.sh"), "--purge"], 300, env)


#: the metrics contract (name -> labels); histograms are listed by their family name
CONSUMER_METRICS = {
    "rmq_consumer_messages_total": {"group", "topic", "result"},
    "rmq_consumer_listener_duration_seconds": {"group", "topic"},
    "rmq_consumer_batches_running": {"group"},
    "rmq_consumer_messages_in_flight": {"group", "topic"},
    "rmq_consumer_partitions_paused": {"group"},
    "rmq_consumer_send_backs_total": {"group", "topic", "level"},
    "rmq_consumer_dead_letters_total": {"group", "topic", "reason"},
    "rmq_consumer_send_back_failures_total": {"group", "topic"},
    "rmq_consumer_local_retries_total": {"group", "topic"},
    "rmq_consumer_consume_timeouts_total": {"group", "topic"},
    "rmq_consumer_lag_messages": {"group", "topic", "partition"},
}
SCHEDULE_METRICS = {
    "rmq_schedule_forwarded_total": {"group", "level"},
    "rmq_schedule_lateness_seconds": {"group", "level"},
    "rmq_schedule_entries_waiting": {"group", "level"},
    "rmq_schedule_oldest_due_timestamp_seconds": {"group", "level"},
    "rmq_schedule_transactions_total": {"group", "outcome"},
    "rmq_schedule_dead_letters_total": {"group", "reason"},
}
PRODUCER_METRICS = {
    "rmq_producer_messages_sent_total": {"topic"},
    "rmq_producer_send_failures_total": {"topic", "error"},
    "rmq_producer_retries_total": {"topic"},
    "rmq_producer_flow_control_backoffs_total": {"topic"},
}
#: a consumer's circuit breaker: only with ``circuit_breaker=`` (the stack's consumer has none)
CIRCUIT_METRICS = {
    "rmq_consumer_circuit_state": {"group", "state"},
    "rmq_consumer_circuit_open_seconds_total": {"group"},
    "rmq_consumer_circuit_opened_total": {"group"},
    "rmq_consumer_circuit_held_messages": {"group"},
}
#: a group's backlog (the autoscaling signal): only from a ScheduleService given ``lag_groups``
BACKLOG_METRICS = {
    "rmq_group_backlog": {"group"},
    "rmq_group_backlog_part": {"group", "part"},
}
ALL_METRICS = {
    **CONSUMER_METRICS,
    **SCHEDULE_METRICS,
    **PRODUCER_METRICS,
    **CIRCUIT_METRICS,
    **BACKLOG_METRICS,
}
HISTOGRAMS = {"rmq_consumer_listener_duration_seconds", "rmq_schedule_lateness_seconds"}
