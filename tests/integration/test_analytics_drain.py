"""Drain runs (``rmq-kafka analytics stream --available-now``) on a real local Spark and the
real broker, after traffic a real PushConsumer handled with tracing on: a few hundred
messages, retries through the ScheduleService and dead letters.

Each drain run counts everything it read -- the windows the watermark has not passed are
written as provisional -- and the next run completes them: across two runs with traffic
in between, every consumption, retry, forward and DLQ arrival is counted exactly once.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from adapter.analytics.jobs import read_metrics
from adapter.analytics.testing import shared_spark
from adapter.cli import main as cli_main
from adapter.clients.producer import Producer
from adapter.clients.push.push_consumer import ConsumeConcurrentlyContext, PushConsumer
from adapter.core.message import Message, MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.schedule import ScheduleService
from tests.support.consumer_helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"
POISON_MAX = 2  # the poison messages' own MAX_RECONSUME_TIMES


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return shared_spark()


@dataclass(frozen=True)
class Traffic:
    """How many messages of each kind one phase sends."""

    ok: int
    once: int  # fail once, then succeed
    twice: int  # fail twice, then succeed
    poison: int  # always fail: POISON_MAX retries, then the DLQ
    reject: int  # the listener asks for the DLQ at once (delay level -1)

    @property
    def messages(self) -> int:
        return self.ok + self.once + self.twice + self.poison + self.reject

    def expected(self) -> Counter[str]:
        """What the metrics must count for this phase."""
        retried = self.once + 2 * self.twice + POISON_MAX * self.poison
        dlq = self.poison + self.reject
        succeeded = self.ok + self.once + self.twice
        return Counter(
            succeeded=succeeded,
            retried=retried,
            dlq_arrivals=dlq,
            consumed=succeeded + retried + dlq,
            forwarded=retried,  # the ScheduleService forwards every retry once
        )


class Listener:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: Counter[str] = Counter()
        self.succeeded: set[str] = set()

    def __call__(
        self, msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus:
        (msg,) = msgs
        body = msg.body.decode()
        with self.lock:
            self.deliveries[body] += 1
        kind, rc = body.split("-")[1], msg.reconsume_times
        if kind == "reject":
            ctx.delay_level_when_next_consume = -1
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if kind == "poison" or (kind == "once" and rc < 1) or (kind == "twice" and rc < 2):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        with self.lock:
            self.succeeded.add(body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _run_phase(
    bootstrap: str, uid: str, phase: int, traffic: Traffic, trace_topic: str
) -> Counter[str]:
    """Send the phase's messages and let a traced PushConsumer (and a traced
    ScheduleService) handle them all; returns the listener's deliveries by outcome kind."""
    config = {"bootstrap.servers": bootstrap}
    topic, group = f"orders-{uid}", f"g-{uid}"
    listener = Listener()
    service = ScheduleService(
        config, delay_levels=LEVELS, namespace=f"ns{uid}", group=f"svc-{uid}", partitions=1,
        trace_topic=trace_topic,
    )  # fmt: skip
    consumer = PushConsumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS, namespace=f"ns{uid}", partitions=1, trace_topic=trace_topic,
    )  # fmt: skip
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    kinds = {"ok": traffic.ok, "once": traffic.once, "twice": traffic.twice,
             "poison": traffic.poison, "reject": traffic.reject}  # fmt: skip
    bodies = [f"p{phase}-{kind}-{i}" for kind, n in kinds.items() for i in range(n)]
    with service, consumer, Producer(config) as producer:
        for body in bodies:
            props = {"MAX_RECONSUME_TIMES": str(POISON_MAX)} if "-poison-" in body else {}
            producer.send(Message(topic=topic, body=body.encode(), tags="T", keys=[body],
                                  properties=props))  # fmt: skip
        good = {b for b in bodies if b.split("-")[1] in ("ok", "once", "twice")}
        wait_until(
            lambda: (
                good <= listener.succeeded
                and sum(s.dead_lettered for s in consumer.stats().values())
                >= traffic.poison + traffic.reject
            ),
            timeout=240,
            what=f"phase {phase}'s {traffic.messages} messages handled",
        )
    # (leaving the context flushed both trace sinks)
    return listener.deliveries


def _drain(bootstrap: str, trace_topic: str, out: Path, capsys: Any) -> dict[str, Any]:
    rc = cli_main(
        ["analytics", "stream", "-b", bootstrap, "--trace-topic", trace_topic,
         "--output", str(out), "--available-now"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    (result,) = json.loads(captured.out.strip().splitlines()[-1])
    lines = captured.err.splitlines()
    batch_lines = [line for line in lines if " batch " in line and "read" in line]
    assert len(batch_lines) == result["batches"] >= 1, captured.err
    assert any("window row(s) written" in line for line in lines), captured.err
    return dict(result)


def _totals(spark: SparkSession, out: Path, group: str, service: str) -> Counter[str]:
    latest = read_metrics(spark, str(out))
    keys = latest.select("window_start", "group", "topic").collect()
    assert len(keys) == len(set(keys)), "a window read twice"
    mine = latest.where(F.col("group") == group).agg(
        *[F.sum(c).alias(c) for c in ("consumed", "succeeded", "retried", "dlq_arrivals")]
    )
    got = Counter({k: int(v or 0) for k, v in mine.first().asDict().items()})  # type: ignore[union-attr]
    fwd = latest.where(F.col("group") == service).agg(F.sum("forwarded")).first()
    got["forwarded"] = int(fwd[0] or 0) if fwd else 0
    return got


def test_two_drain_runs_count_every_consumption_retry_and_dead_letter_once(
    spark: SparkSession,
    kafka_bootstrap_servers: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    uid = uuid.uuid4().hex[:8]
    trace_topic = f"trace-drain-{uid}"
    ensure_topics({"bootstrap.servers": kafka_bootstrap_servers},
                  [TopicPlan(f"orders-{uid}", f"orders-{uid}", 2)])  # fmt: skip
    out = tmp_path / "metrics"
    group, service = f"g-{uid}", f"svc-{uid}"

    first = Traffic(ok=200, once=40, twice=20, poison=5, reject=5)
    deliveries = _run_phase(kafka_bootstrap_servers, uid, 1, first, trace_topic)
    assert sum(deliveries.values()) == first.expected()["consumed"]  # what the listener saw
    run1 = _drain(kafka_bootstrap_servers, trace_topic, out, capsys)
    assert _totals(spark, out, group, service) == first.expected()
    # the traffic is minutes newer than the watermark allows: its windows are written,
    # provisional (before, a drain run wrote none of them)
    assert run1["latest"]["provisional"] >= 1 and run1["provisional_written"] >= 1
    assert run1["latest"]["consumed"] == first.expected()["consumed"]

    second = Traffic(ok=100, once=20, twice=10, poison=3, reject=2)
    deliveries = _run_phase(kafka_bootstrap_servers, uid, 2, second, trace_topic)
    assert sum(deliveries.values()) == second.expected()["consumed"]
    run2 = _drain(kafka_bootstrap_servers, trace_topic, out, capsys)
    both = first.expected() + second.expected()
    assert _totals(spark, out, group, service) == both
    assert run2["latest"]["consumed"] == both["consumed"]
    assert run2["latest"]["dlq_arrivals"] == both["dlq_arrivals"]
    # the table is append-only: a window the second run changed has more than one row, and
    # read_metrics reads the latest; each window has at most one final row
    raw = spark.read.parquet(str(out))
    finals = raw.where(~F.col("provisional")).groupBy("window_start", "group", "topic").count()
    assert finals.where(F.col("count") > 1).count() == 0

    # a third run with nothing new reads nothing and changes nothing
    run3 = _drain(kafka_bootstrap_servers, trace_topic, out, capsys)
    assert run3["input_rows"] == 0
    assert _totals(spark, out, group, service) == both

    # the DLQ report counts the same dead letters
    report = tmp_path / "report"
    assert cli_main(["analytics", "dlq-report", "-b", kafka_bootstrap_servers,
                     "--group", group, "--output", str(report)]) == 0  # fmt: skip
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["dead_letters"] == both["dlq_arrivals"]
    assert "counted once" in captured.err
