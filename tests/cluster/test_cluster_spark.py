"""The analytics path on a cluster: a Spark standalone cluster (a master and a worker started
with pyspark's own ``bin/spark-class``) runs the DLQ report job (``--master spark://...``)
against the three-node Kafka cluster. Opt-in cluster tier (two more JVMs, about a minute).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from adapter.embedded import EmbeddedKafka

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.cluster_tier]

pyspark = pytest.importorskip("pyspark")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _master_state(ui_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as resp:
        state: dict[str, Any] = json.load(resp)
        return state


@pytest.fixture(scope="module")
def spark_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``(spark://127.0.0.1:port, web UI port)`` of a standalone master with one worker."""
    home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(logs),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with (logs / "master.log").open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                     "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                    env=env, stdout=out, stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        master = f"spark://127.0.0.1:{port}"
        with (logs / "worker.log").open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", "--host",
                     "127.0.0.1", "--cores", "1", "--memory", "1536m", "--webui-port",
                     str(worker_ui), master],
                    env=env, stdout=out, stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            for proc in procs:
                assert proc.poll() is None, (logs / "master.log").read_text()[-3000:]
            with contextlib.suppress(OSError, ValueError):
                if [w for w in _master_state(ui).get("workers", []) if w["state"] == "ALIVE"]:
                    break
            assert time.monotonic() < deadline, "no Spark worker registered in 120 s"
            time.sleep(0.5)
        yield master, ui
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_dlq_report_on_a_spark_standalone_cluster_against_three_brokers(
    kafka_cluster: EmbeddedKafka, spark_master: tuple[str, int], tmp_path: Path
) -> None:
    master, ui = spark_master
    bootstrap = kafka_cluster.bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    stamp = time.time_ns()
    group, topic = f"g-spark-{stamp}", f"spark-{stamp}"
    from adapter.io.topics import TopicPlan, ensure_topics

    ensure_topics(conf, [TopicPlan(topic, topic, 3)])
    rejected: set[bytes] = set()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        if msgs[0].tags == "TagB":  # straight to the DLQ
            ctx.delay_level_when_next_consume = -1
            rejected.add(msgs[0].body)
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels="1s 2s",
        namespace=f"spark{stamp}",
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with consumer, Producer(conf) as producer:
        for i in range(12):
            tags = "TagB" if i % 4 == 0 else "TagA"
            producer.send(Message(topic=topic, body=b"m%d" % i, tags=tags, keys=[f"k{i}"]))
        deadline = time.monotonic() + 60
        while len(rejected) < 3 and time.monotonic() < deadline:
            consumer.check_alive()
            time.sleep(0.1)
    assert len(rejected) == 3
    out = tmp_path / "report"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "adapter.cli", "analytics", "dlq-report", "-b", bootstrap,
         "--group", group, "--output", str(out), "--master", master],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    print(f"\nSPARK STANDALONE dlq-report on 3 brokers: {took:.1f} s, {summary}")
    lines = (out / "dlq_summary.csv").read_text().splitlines()
    assert len(lines) == 2 and topic in lines[1] and "TagB" in lines[1], lines
    assert (out / "dlq_report.png").stat().st_size > 10_000
    apps = _master_state(ui)
    names = [a["name"] for a in apps.get("completedapps", []) + apps.get("activeapps", [])]
    assert "rmq-kafka dlq-report" in names, names  # it ran on the standalone cluster
