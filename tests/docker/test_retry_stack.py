"""The retry stack (``adapter.testing.containers.RetryStack``, fixture ``retry_stack``) end
to end: a Kafka container and a ScheduleService container on one network, the images the
project builds itself (``docker/build.sh kafka app``).

* it starts, says which images it took, and its broker answers on both addresses: the host's
  and the network's (from another container on the stack's network);
* a consumer in this process on the stack's delay table: a message that always fails is
  delivered ``max_reconsume_times + 1`` times (the retries come back through the
  ScheduleService container) and then is in the DLQ; one that fails once succeeds on its
  retry;
* a session whose test fails gets both containers' logs in the report and leaves no
  container and no network behind; neither does a session killed with SIGKILL once the
  next one starts.

Opt-in (``RMQ_DOCKER_TESTS=1``): skipped otherwise, failing naming what is missing when
asked for without a Docker engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.dlq import read_dlq
from adapter.testing.containers import LABEL, STACK_LABEL, RetryStack
from tests.docker.harness import ROOT, require_docker, run, tail, wait_for

pytestmark = pytest.mark.docker

MAX_RECONSUME_TIMES = 2


def ensure_images() -> None:
    """The broker's and the ScheduleService's images, built once (``docker/build.sh``) when
    either is missing."""
    missing = [
        image
        for image in ("rmq-kafka/kafka:4.4.0", "rmq-kafka/app:latest")
        if run(["docker", "image", "inspect", image], timeout=60).returncode != 0
    ]
    if missing:
        build = run([str(ROOT / "docker" / "build.sh"), "kafka", "app"], timeout=1800)
        if build.returncode != 0:
            pytest.fail(f"docker/build.sh kafka app failed:\n{tail(build.stdout + build.stderr)}")


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> RetryStack:
    require_docker(compose=False)
    ensure_images()
    started: RetryStack = request.getfixturevalue("retry_stack")
    print(started.describe(), f"started in {started.startup_seconds:.1f}s")
    return started


def docker_ids(kind: str, label: str) -> list[str]:
    res = run(
        [
            "docker",
            kind,
            "ls",
            "-q",
            *(["-a"] if kind == "container" else []),
            "--filter",
            f"label={label}",
        ],
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_the_stack_starts_and_serves_the_host_and_the_network(stack: RetryStack) -> None:
    assert stack.kafka_image is not None and stack.service_image is not None
    assert stack.startup_seconds is not None and stack.startup_seconds > 0
    assert stack.bootstrap_servers.startswith("127.0.0.1:")
    assert stack.internal_bootstrap_servers == "kafka:19092"
    ids = docker_ids("container", f"{STACK_LABEL}={stack.id}")
    assert len(ids) == 2, ids
    # another container on the stack's network reaches the broker by its network address
    probe = (
        "from confluent_kafka.admin import AdminClient; "
        f"md = AdminClient({{'bootstrap.servers': '{stack.internal_bootstrap_servers}'}})"
        ".list_topics(timeout=30); print('brokers', len(md.brokers))"
    )
    res = run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            stack.network_name,
            stack.service_image.image,
            "python",
            "-c",
            probe,
        ],
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "brokers 1" in res.stdout


class Recorder:
    """Deliveries by body; bodies starting with ``fail`` always fail, ``flaky`` ones fail on
    their first delivery."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: Counter[bytes] = Counter()
        self.reconsume_times: dict[bytes, list[int]] = {}
        self.done: set[bytes] = set()

    def __call__(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        msg = msgs[0]  # batch size 1
        with self.lock:
            self.deliveries[msg.body] += 1
            self.reconsume_times.setdefault(msg.body, []).append(msg.reconsume_times)
        if msg.body.startswith(b"fail") or (
            msg.body.startswith(b"flaky") and msg.reconsume_times == 0
        ):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        with self.lock:
            self.done.add(msg.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


@pytest.fixture
def consumer(stack: RetryStack) -> Iterator[tuple[Recorder, str, str]]:
    run_id = uuid.uuid4().hex[:8]
    topic, group = f"orders-{run_id}", f"orders-service-{run_id}"
    config = stack.kafka_config()
    ensure_topics(config, [TopicPlan(topic, topic, 1)])
    recorder = Recorder()
    push = PushConsumer(
        stack.kafka_config({"group.id": group, "auto.offset.reset": "earliest"}),
        delay_levels=stack.delay_levels,
        max_reconsume_times=MAX_RECONSUME_TIMES,
        consume_message_batch_max_size=1,
    )
    push.subscribe(topic, "*")
    push.register_message_listener(recorder)
    with push:
        yield recorder, topic, group


def test_a_failing_message_is_retried_then_dead_lettered(
    stack: RetryStack, consumer: tuple[Recorder, str, str]
) -> None:
    recorder, topic, group = consumer
    with Producer(stack.kafka_config()) as producer:
        producer.send(Message(topic=topic, body=b"fail-1"))
        producer.send(Message(topic=topic, body=b"ok-1"))
    config = stack.kafka_config()
    dead = wait_for("fail-1 in the DLQ", lambda: read_dlq(config, group), timeout=120, interval=1.0)
    assert [entry.message.body for entry in dead] == [b"fail-1"]
    assert dead[0].reason == "MAX_RECONSUME_TIMES"
    # the copy counts the last failed delivery too
    assert dead[0].message.reconsume_times == MAX_RECONSUME_TIMES + 1
    assert recorder.reconsume_times[b"fail-1"] == [0, 1, 2]
    assert recorder.deliveries[b"ok-1"] == 1 and b"ok-1" in recorder.done


def test_a_flaky_message_succeeds_on_retry(
    stack: RetryStack, consumer: tuple[Recorder, str, str]
) -> None:
    recorder, topic, group = consumer
    with Producer(stack.kafka_config()) as producer:
        producer.send(Message(topic=topic, body=b"flaky-1"))
    wait_for("flaky-1 done", lambda: b"flaky-1" in recorder.done, timeout=120, interval=0.5)
    assert recorder.reconsume_times[b"flaky-1"] == [0, 1]
    assert read_dlq(stack.kafka_config(), group) == []


FAILING_SESSION = """
from pathlib import Path


def test_fails_with_the_stack_up(retry_stack):
    Path({id_file!r}).write_text(retry_stack.id)
    assert retry_stack.bootstrap_servers == "nowhere", "failing on purpose"
"""


def test_a_failing_test_gets_the_logs_and_leaves_no_container(
    stack: RetryStack, tmp_path: Path
) -> None:
    id_file = tmp_path / "stack-id"
    (tmp_path / "test_inner.py").write_text(FAILING_SESSION.format(id_file=str(id_file)))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n0", "-q", "test_inner.py"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "1 failed" in out and "failing on purpose" in out
    assert "retry stack logs" in out, out
    assert "----- kafka (last" in out and "----- schedule-service (last" in out
    inner_id = id_file.read_text()
    assert docker_ids("container", f"{STACK_LABEL}={inner_id}") == []
    assert docker_ids("network", f"{STACK_LABEL}={inner_id}") == []


KILLED_SESSION = """
import sys, time
from adapter.testing.containers import RetryStack

stack = RetryStack().start()
print(stack.id, flush=True)
time.sleep(600)
"""


def test_a_killed_session_s_containers_go_when_the_next_one_starts(
    stack: RetryStack, tmp_path: Path
) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED_SESSION)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        killed_id = proc.stdout.readline().strip()
        assert killed_id, "the script started no stack"
        assert len(docker_ids("container", f"{STACK_LABEL}={killed_id}")) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    from adapter.testing.containers import remove_stale

    assert remove_stale() >= 2
    assert docker_ids("container", f"{STACK_LABEL}={killed_id}") == []
    assert docker_ids("network", f"{STACK_LABEL}={killed_id}") == []
    # this session's own stack is untouched
    assert len(docker_ids("container", f"{LABEL}={os.getpid()}")) == 2
