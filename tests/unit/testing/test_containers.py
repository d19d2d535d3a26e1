"""The retry stack's and container mode's pure parts (image choice, broker settings, what a
Docker tier lacks), and the loud failures when Docker is asked for and missing: checked by
running pytest as a user would, against an engine socket that does not exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from adapter.errors import AdapterError, InvalidInputError
from adapter.testing.container_images import (
    ImageChoice,
    choose_image,
    kafka_image_candidates,
    service_image_candidates,
)
from adapter.testing.containers import ContainerStackError, RetryStack
from adapter.testing.docker_engine import INSTALL_COMPOSE, INSTALL_ENGINE, docker_problems
from adapter.testing.kafka_container import broker_jvm_opts, kafka_env, new_cluster_id

ROOT = Path(__file__).resolve().parents[3]


def test_kafka_candidates_official_then_the_projects_own() -> None:
    assert kafka_image_candidates("4.4.0") == ["apache/kafka:4.4.0", "rmq-kafka/kafka:4.4.0"]
    assert kafka_image_candidates("4.2.0", "my/kafka:x") == ["my/kafka:x"]
    # detecting the mode (not forced): the project's own image does not count
    assert kafka_image_candidates("4.4.0", project_image=False) == ["apache/kafka:4.4.0"]


def test_service_candidates_this_version_then_latest() -> None:
    assert service_image_candidates("1.2.3") == ["rmq-kafka/app:1.2.3", "rmq-kafka/app:latest"]
    assert service_image_candidates("1.2.3", "me/app:1") == ["me/app:1"]


def test_choose_image_takes_the_first_present_and_says_why() -> None:
    cands = ["apache/kafka:4.4.0", "rmq-kafka/kafka:4.4.0"]
    assert choose_image(cands, lambda image: True) == ImageChoice(
        "apache/kafka:4.4.0", "present locally"
    )
    fallback = choose_image(cands, lambda image: image.startswith("rmq-kafka/"))
    assert fallback == ImageChoice(
        "rmq-kafka/kafka:4.4.0", "present locally; apache/kafka:4.4.0 not"
    )
    assert choose_image(cands, lambda image: False) is None
    assert choose_image(["x:1"], lambda image: True, configured=True) == ImageChoice(
        "x:1", "configured"
    )


def test_kafka_env_host_listener_only() -> None:
    env = kafka_env(40001)
    assert env["KAFKA_LISTENERS"] == "PLAINTEXT://:40001,CONTROLLER://:9093"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:40001"
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_HEAP_OPTS"] == "-Xmx512m"
    assert "KAFKA_CLUSTER_ID" not in env


def test_kafka_env_cluster_id_and_jvm_options() -> None:
    cluster_id = new_cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    assert new_cluster_id() != cluster_id
    env = kafka_env(40001, cluster_id=cluster_id, jvm_opts=" -XX:TieredStopAtLevel=1 ")
    assert env["KAFKA_CLUSTER_ID"] == cluster_id
    assert env["KAFKA_HEAP_OPTS"] == "-Xmx512m -XX:TieredStopAtLevel=1"


def test_broker_jvm_options_follow_the_suite_s_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RMQ_KAFKA_JVM_OPTS", raising=False)
    assert broker_jvm_opts() == "-XX:TieredStopAtLevel=1"
    monkeypatch.setenv("RMQ_KAFKA_JVM_OPTS", "")
    assert broker_jvm_opts() == ""


def test_kafka_env_with_a_listener_for_the_network() -> None:
    env = kafka_env(40001, internal_host="kafka", internal_port=19092)
    assert env["KAFKA_LISTENERS"] == ("PLAINTEXT://:40001,INTERNAL://:19092,CONTROLLER://:9093")
    assert env["KAFKA_ADVERTISED_LISTENERS"] == (
        "PLAINTEXT://127.0.0.1:40001,INTERNAL://kafka:19092"
    )
    assert "INTERNAL:PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"


def test_docker_problems_name_the_part_and_how_to_install_it() -> None:
    assert docker_problems(cli=True, engine_problem=None, compose=True) == []
    assert docker_problems(cli=True, engine_problem=None) == []  # compose not needed
    problems = docker_problems(
        cli=False, engine_problem="/var/run/docker.sock: gone", compose=False
    )
    assert len(problems) == 3
    assert problems[0].startswith("no docker CLI on PATH")
    assert "apt-get install docker.io" in problems[0]
    assert problems[1] == (
        f"no Docker engine reachable (/var/run/docker.sock: gone): {INSTALL_ENGINE}"
    )
    assert problems[2].endswith(INSTALL_COMPOSE)


def test_a_bad_delay_table_fails_at_construction_naming_it() -> None:
    with pytest.raises(InvalidInputError) as info:
        RetryStack(delay_levels="1s soon")
    assert "soon" in str(info.value)


def test_addresses_before_start_are_an_adapter_error() -> None:
    stack = RetryStack()
    with pytest.raises(ContainerStackError, match="not started"):
        _ = stack.bootstrap_servers
    assert issubclass(ContainerStackError, AdapterError)
    assert stack.internal_bootstrap_servers == "kafka:19092"
    stack.stop()  # idempotent, nothing to remove


def test_start_without_an_engine_names_it_and_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(ContainerStackError) as info:
        RetryStack().start()
    message = str(info.value)
    assert "no Docker engine reachable" in message
    assert "no-docker.sock" in message
    assert "apt-get install docker.io" in message


def _pytest(tmp_path: Path, test_file: str, env: dict[str, str], body: str) -> str:
    """Run pytest on one file in a child process, as a user would; its whole output."""
    path = tmp_path / test_file
    path.write_text(body)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n0", "-q", str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={**os.environ, **env},
        check=False,
    )
    assert res.returncode != 0, res.stdout + res.stderr
    return res.stdout + res.stderr


def test_forced_container_mode_without_an_engine_fails_loudly(tmp_path: Path) -> None:
    out = _pytest(
        tmp_path,
        "test_needs_kafka.py",
        {
            "RMQ_KAFKA_MODE": "container",
            "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
            "PYTHONPATH": str(ROOT),
        },
        "def test_broker(kafka_bootstrap_servers):\n    assert kafka_bootstrap_servers\n",
    )
    assert "RMQ_KAFKA_MODE=container: no Docker engine reachable" in out
    assert "apt-get install docker.io" in out


def test_the_retry_stack_fixture_without_an_engine_fails_loudly(tmp_path: Path) -> None:
    out = _pytest(
        tmp_path,
        "test_needs_stack.py",
        {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "PYTHONPATH": str(ROOT)},
        "def test_stack(retry_stack):\n    assert retry_stack.bootstrap_servers\n",
    )
    assert "retry_stack: no Docker engine reachable" in out
    assert "1 error" in out


def test_the_docker_tier_asked_for_without_an_engine_fails_naming_it(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n0",
            "-q",
            "tests/docker/test_docker_available.py::test_the_docker_tier_has_an_engine_and_compose",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={
            **os.environ,
            "RMQ_DOCKER_TESTS": "1",
            "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
            "PYTHONPATH": str(ROOT),
        },
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "1 failed" in out
    assert "RMQ_DOCKER_TESTS=1 but the Docker tier cannot run" in out
    assert "no Docker engine reachable" in out and "apt-get install docker.io" in out


def test_the_docker_tier_not_asked_for_is_skipped() -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n0",
            "-q",
            "tests/docker/test_docker_available.py::test_the_docker_tier_has_an_engine_and_compose",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "RMQ_DOCKER_TESTS"}
        | {"PYTHONPATH": str(ROOT)},
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "1 skipped" in out
