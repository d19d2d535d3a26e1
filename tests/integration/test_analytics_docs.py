"""The analytics commands of the documentation, run as a user copies them, with their
output checked by rows (the Spark jobs take minutes of CPU, so the site's snippet runner
leaves them to this test)."""

from __future__ import annotations

import csv
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "analytics" / "index.md"
DRAIN = ROOT / "docs" / "analytics" / "drain-runs.md"


def _analytics_commands() -> list[str]:
    """The ``rmq-kafka analytics`` commands of the Analytics page, continuation lines
    joined, comments dropped."""
    text = PAGE.read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [
        line.split("  #")[0].strip()
        for line in joined.splitlines()
        if line.startswith("rmq-kafka analytics ")
    ]


def _as_run(command: str, bootstrap: str, data: Path) -> list[str]:
    """A documented command as a test runs it: its optional parts (``[...]``) taken when they
    are literal and left out when they are placeholders (``G ...``), ``HOST:9092`` the
    test's broker and ``/data/`` a temporary directory."""
    command = re.sub(r"\[([^\]]*)\]", lambda m: "" if "..." in m.group(1) else m.group(1), command)
    command = command.replace("HOST:9092", bootstrap).replace("/data/", f"{data}/")
    return shlex.split(command)


@pytest.mark.spark
@pytest.mark.timeout(1800)  # four Spark driver JVMs of their own: minutes on a busy machine
def test_the_analytics_commands_run_as_written_and_count_the_traffic(
    kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    """After a traced PushConsumer handled 50 messages (5 dead-lettered), the Analytics
    page's ``analytics stream`` (a drain run) counts all 50 and ``analytics dlq-report``
    finds the 5 dead letters; the Drain runs page's command and Python block (a second
    drain run on the same table, then its latest state) still count 50; none prints a
    Spark warning."""
    pytest.importorskip("pyspark")
    import json

    import pyarrow.parquet as pq

    from adapter import PushConsumer
    from adapter.clients.producer import Producer
    from adapter.constants import TRACE_TOPIC
    from adapter.core.message import Message
    from adapter.core.routing import ConsumeConcurrentlyStatus
    from tests.support.consumer_helpers import RecordingListener, wait_until

    commands = _analytics_commands()
    assert [c.split()[2] for c in commands] == ["stream", "dlq-report"], commands
    uid = uuid.uuid4().hex[:8]
    topic, group = f"readme-orders-{uid}", f"readme-g-{uid}"
    config = {"bootstrap.servers": kafka_bootstrap_servers}

    def decide(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        if msgs[0].body.startswith(b"bad"):
            ctx.delay_level_when_next_consume = -1  # straight to the DLQ
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    listener = RecordingListener(decide)
    consumer = PushConsumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest"},
        trace_topic=TRACE_TOPIC,  # the commands read the default trace topic
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with consumer, Producer(config) as producer:
        for i in range(50):
            body = f"bad-{i}" if i % 10 == 0 else f"good-{i}"
            producer.send(Message(topic=topic, body=body.encode(), keys=[f"k{i}"]))
        wait_until(
            lambda: (
                sum(s.dead_lettered for s in consumer.stats().values()) >= 5
                and len(listener.seen) >= 50
            ),
            timeout=90,
            what="50 messages handled",
        )

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outputs = []
    for command in commands:
        argv = _as_run(command, kafka_bootstrap_servers, tmp_path)
        binary = Path(sys.executable).parent / argv[0]
        out = subprocess.run(
            [str(binary), *argv[1:]], env=env, capture_output=True, text=True, timeout=400,
            check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        noisy = [line for line in out.stderr.splitlines() if re.search(r"\bWARN(ING)?\b", line)]
        assert noisy == [], out.stderr[-3000:]
        outputs.append(out)

    # the drain run: every consumption of the 50 messages in the table (the Parquet files,
    # read without Spark: each window's latest row), and in the run's summary
    stream = outputs[0]
    assert "trace record(s) read" in stream.stderr, stream.stderr
    table = pq.read_table(tmp_path / "consume-metrics").to_pylist()
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in sorted(table, key=lambda r: r["batch_id"]):
        latest[(row["window_start"], row["group"], row["topic"])] = row
    mine = [r for r in latest.values() if r["group"] == group]
    assert mine and {r["topic"] for r in mine} == {topic}
    assert sum(r["consumed"] for r in mine) == 50
    assert sum(r["succeeded"] for r in mine) == 45
    assert sum(r["dlq_arrivals"] for r in mine) == 5
    summary = json.loads(stream.stdout.strip().splitlines()[-1])
    assert summary[0]["query"] == "consume-metrics-parquet"
    assert summary[0]["latest"]["consumed"] >= 50  # the default topic may hold others' too

    # the report: the 5 dead letters of this topic in its CSV rows
    report = json.loads(outputs[1].stdout)
    assert f"%DLQ%{group}" in report["dlq_topics"]
    with (tmp_path / "dlq-report" / "dlq_summary.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["origin_topic"] == topic]
    assert sum(int(r["dead_letters"]) for r in rows) == 5
    assert {r["reason"] for r in rows} == {"LISTENER_REQUESTED"}
    assert (tmp_path / "dlq-report" / "dlq_export").is_dir()  # --export
    assert (tmp_path / "dlq-report" / "dlq_report.png").stat().st_size > 10_000

    # the Drain runs page: its drain command, run again on the same table ("metrics"), reads
    # only what is new and counts nothing twice; its Python block reads the latest state
    docs = DRAIN.read_text()
    (command,) = [
        line for line in re.findall(r"```bash\n(.*?)```", docs, re.S)[0].splitlines() if line
    ]
    (tmp_path / "metrics").symlink_to(tmp_path / "consume-metrics")
    argv = shlex.split(command.replace("localhost:9092", kafka_bootstrap_servers))
    again = subprocess.run(
        [str(Path(sys.executable).parent / argv[0]), *argv[1:]], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert not re.search(r"\bWARN(ING)?\b", again.stderr), again.stderr[-3000:]
    table = pq.read_table(tmp_path / "consume-metrics").to_pylist()
    latest = {}
    for row in sorted(table, key=lambda r: r["batch_id"]):
        latest[(row["window_start"], row["group"], row["topic"])] = row
    assert sum(r["consumed"] for r in latest.values() if r["group"] == group) == 50
    (code,) = re.findall(r"```python\n(.*?)```", docs, re.S)
    (tmp_path / "read.py").write_text(code)
    shown = subprocess.run(
        [sys.executable, "read.py"], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=400, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    (mine_line,) = [line for line in shown.stdout.splitlines() if group in line]
    assert [int(x) for x in re.findall(r"\b\d+\b", mine_line.split(group)[1])] == [50, 0, 5]
