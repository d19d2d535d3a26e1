"""The Spark jobs on a real local Spark (``local[2]``) against the real broker.

* a scenario with known outcomes, run by the real PushConsumer and ScheduleService with
  tracing on: the streaming job's metrics equal the known counts exactly, and the DLQ report
  finds exactly the dead letters (table, CSV, PNG, Avro export);
* a restart from the checkpoint neither loses nor double counts;
* the entry points work: ``rmq-kafka analytics stream|dlq-report``, ``spark/dlq_report.py``
  run as a script, ``spark/consume_metrics.py`` under ``spark-submit``.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import fastavro
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from adapter.analytics import transforms
from adapter.analytics.classes import archive_java_option
from adapter.analytics.jars import AnalyticsError, SparkAuthenticationError, spark_jars
from adapter.analytics.jobs import (
    StreamJobOptions,
    read_metrics,
    run_consume_metrics,
    trace_source,
)
from adapter.analytics.session import kafka_options
from adapter.analytics.testing import TEST_DRIVER_JAVA_OPTIONS, shared_spark
from adapter.cli import main as cli_main
from adapter.clients.producer import Producer
from adapter.clients.push.push_consumer import ConsumeConcurrentlyContext, PushConsumer
from adapter.core.message import Message, MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.embedded import EmbeddedKafka
from adapter.errors import AuthenticationError
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.io.trace_sink import KafkaTraceSink
from adapter.services.schedule import ScheduleService

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"
MINUTE = 60_000


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return shared_spark()


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# the known-outcome scenario
# --------------------------------------------------------------------------------------------

# body prefix -> how many such messages, and how they behave
OK, ONCE, TWICE, POISON, REJECT = 6, 3, 2, 1, 1
POISON_MAX = 2  # the poison message's own MAX_RECONSUME_TIMES


@dataclass
class Scenario:
    bootstrap: str
    topic: str
    group: str
    service_group: str
    trace_topic: str
    deliveries: Counter[str] = field(default_factory=Counter)
    submit: tuple[subprocess.Popen[str], Path] | None = None


class Listener:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: Counter[str] = Counter()
        self.succeeded: set[str] = set()

    def __call__(
        self, msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus:
        (msg,) = msgs  # consume_message_batch_max_size = 1
        body = msg.body.decode()
        with self.lock:
            self.deliveries[body] += 1
        rc = msg.reconsume_times
        if body.startswith("reject"):
            ctx.delay_level_when_next_consume = -1
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if (
            body.startswith("poison")
            or (body.startswith("once") and rc < 1)
            or (body.startswith("twice") and rc < 2)
        ):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        with self.lock:
            self.succeeded.add(body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _bodies() -> list[str]:
    out = [f"ok-{i}" for i in range(OK)] + [f"once-{i}" for i in range(ONCE)]
    out += [f"twice-{i}" for i in range(TWICE)] + ["poison"] * POISON + ["reject"] * REJECT
    return out


def _tick(bootstrap: str, trace_topic: str, at_ms: int) -> None:
    """One event far ahead in event time: moves the watermark past every earlier window."""
    with KafkaTraceSink({"bootstrap.servers": bootstrap}, trace_topic) as sink:
        sink(TraceEvent(at_ms, "consumer", "__tick__", "__tick__", 0, 0, "tick", "tick",
                        TraceStatus.SUCCESS, 0))  # fmt: skip


@pytest.fixture(scope="module")
def scenario(
    kafka_bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    uid = _uid()
    sc = Scenario(
        kafka_bootstrap_servers, f"orders-{uid}", f"g-{uid}", f"svc-{uid}", f"trace-{uid}"
    )
    config = {"bootstrap.servers": sc.bootstrap}
    ensure_topics(config, [TopicPlan(sc.topic, sc.topic, 2)])
    listener = Listener()
    service = ScheduleService(
        config,
        delay_levels=LEVELS,
        namespace=f"ns{uid}",
        group=sc.service_group,
        partitions=1,
        trace_topic=sc.trace_topic,
    )
    consumer = PushConsumer(
        {**config, "group.id": sc.group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=f"ns{uid}",
        partitions=1,
        trace_topic=sc.trace_topic,
    )
    consumer.subscribe(sc.topic, "*")
    consumer.register_message_listener(listener)
    bodies = _bodies()
    with service, consumer, Producer(config) as producer:
        for body in bodies:
            props = {"MAX_RECONSUME_TIMES": str(POISON_MAX)} if body == "poison" else {}
            producer.send(
                Message(
                    topic=sc.topic,
                    body=body.encode(),
                    tags="TagA" if body != "reject" else "TagB",
                    keys=[f"key-{body}"],
                    properties=props,
                )
            )
        expected_ok = {b for b in bodies if b.startswith(("ok", "once", "twice"))}
        _wait(
            lambda: (
                expected_ok <= listener.succeeded
                and sum(s.dead_lettered for s in consumer.stats().values()) >= POISON + REJECT
            ),
            90,
            "the scenario to finish",
        )
    sc.deliveries = listener.deliveries
    _tick(sc.bootstrap, sc.trace_topic, int(time.time() * 1000) + 3_600_000)
    sc.submit = _spark_submit(sc, tmp_path_factory.mktemp("submit"))
    try:
        yield sc
    finally:
        if sc.submit[0].poll() is None:
            sc.submit[0].kill()
            sc.submit[0].wait()


#: the test driver's options and the class archive the set-up made (``build_spark_session``
#: adds it to a local driver's; a spark-submit driver is started before any Python runs)
_SUBMIT_JAVA_OPTIONS = (
    f"{TEST_DRIVER_JAVA_OPTIONS} {archive_java_option(TEST_DRIVER_JAVA_OPTIONS)}".strip()
)


def _spark_submit(sc: Scenario, out: Path) -> tuple[subprocess.Popen[str], Path]:
    """``spark-submit spark/consume_metrics.py`` in the background: a driver JVM of its own
    (the test driver's JVM options: it lives seconds).  One script is enough: the two are
    the same three lines around :func:`adapter.cli.analytics.main`, and what spark-submit
    changes (its driver JVM, ``--jars``, the session builder's spark-submit branch) is the
    same for both; ``dlq_report.py`` runs as a script in :func:`test_dlq_report`."""
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    command = [str(submit), "--master", "local[1]", "--driver-memory", "512m",
               "--driver-java-options", _SUBMIT_JAVA_OPTIONS,
               "--conf", "spark.ui.enabled=false", "--jars", spark_jars(),
               str(ROOT / "spark" / "consume_metrics.py"),
               "-b", sc.bootstrap, "--trace-topic", sc.trace_topic, "--output",
               str(out / "metrics"), "--available-now", "--window", "1 minute",
               "--watermark", "30 seconds"]  # fmt: skip
    # output to files, not pipes: nobody drains a pipe while the other tests run
    with (out / "stdout").open("w") as stdout, (out / "stderr").open("w") as stderr:
        proc = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, text=True)
    return proc, out


def test_streaming_metrics_equal_the_known_counts(
    spark: SparkSession, scenario: Scenario, tmp_path: Path
) -> None:
    sc = scenario
    assert sc.deliveries["poison"] == POISON_MAX + 1
    out = tmp_path / "metrics"
    rc = cli_main(
        ["analytics", "stream", "-b", sc.bootstrap, "--trace-topic", sc.trace_topic,
         "--output", str(out), "--available-now", "--window", "1 minute",
         "--watermark", "30 seconds"]
    )  # fmt: skip
    assert rc == 0
    metrics = read_metrics(spark, str(out))
    rows = metrics.where(F.col("group") == sc.group).collect()
    assert rows, "no window of the scenario reached the Parquet sink"
    assert {r.topic for r in rows} == {sc.topic}  # the logical, original topic

    def total(col: str) -> int:
        return sum(int(getattr(r, col)) for r in rows)

    by_rc: Counter[int] = Counter()
    for r in rows:
        by_rc.update(r.retries_by_reconsume_times)
    succeeded = OK + ONCE + TWICE
    retried = {0: ONCE + TWICE + POISON, 1: TWICE + POISON}  # POISON_MAX = 2
    assert total("succeeded") == succeeded
    assert total("retried") == sum(retried.values())
    assert dict(by_rc) == retried
    assert total("dlq_arrivals") == POISON + REJECT
    assert total("dropped") == 0
    assert total("failed") == sum(retried.values()) + POISON + REJECT
    assert total("consumed") == succeeded + sum(retried.values()) + POISON + REJECT
    # deliveries with reconsume_times >= 1: once (1), twice (2), poison (2); successes: 3 + 2
    assert total("redeliveries") == ONCE + 2 * TWICE + 2 * POISON
    assert total("redelivered_succeeded") == ONCE + TWICE
    assert all(r.time_to_success_max_ms is not None for r in rows if r.succeeded)
    assert all(r.time_to_success_max_ms >= 0 for r in rows if r.succeeded)
    # the ScheduleService forwarded every retry once; its lateness is measured
    svc = metrics.where(F.col("group") == sc.service_group).collect()
    assert sum(r.forwarded for r in svc) == sum(retried.values())
    assert {r.topic for r in svc} == {f"%RETRY%{sc.group}"}
    assert all(r.lateness_max_ms is not None and r.lateness_max_ms >= 0 for r in svc)
    assert not any(r.provisional for r in rows)  # the tick moved the watermark past them
    # the tick's window is still open (it is ahead of the watermark): written, provisional
    ticks = metrics.where(F.col("group") == "__tick__").collect()
    assert [(r.consumed, r.provisional) for r in ticks] == [(1, True)]


def test_dlq_report(
    spark: SparkSession,
    scenario: Scenario,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``spark/dlq_report.py`` run as a script (``__main__``, its own argument parsing) in
    this process's Spark session; ``rmq-kafka analytics dlq-report`` is the empty report's
    test."""
    sc = scenario
    out = tmp_path / "report"
    script = ROOT / "spark" / "dlq_report.py"
    monkeypatch.setattr(
        sys, "argv", [str(script), "-b", sc.bootstrap, "--group", sc.group,
                      "--output", str(out), "--export"],
    )  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    assert exited.value.code == 0
    assert '"dead_letters": 2' in capsys.readouterr().out
    table = spark.read.parquet(str(out / "dlq_summary")).collect()
    got = {(r.origin_topic, r.tags, r.reason): (r.dead_letters, r.top_keys) for r in table}
    assert got == {
        (sc.topic, "TagA", "MAX_RECONSUME_TIMES"): (POISON, [("key-poison", POISON)]),
        (sc.topic, "TagB", "LISTENER_REQUESTED"): (REJECT, [("key-reject", REJECT)]),
    }
    assert {r.groups[0] for r in table} == {sc.group}
    png = out / "dlq_report.png"
    assert png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv_lines = (out / "dlq_summary.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 2 and "key-poison (1)" in "".join(csv_lines)
    records = []
    for part in sorted((out / "dlq_export").glob("*.avro")):
        with part.open("rb") as fh:
            records.extend(fastavro.reader(fh))
    assert sorted(r["body"] for r in records) == [b"poison", b"reject"]
    assert {r["dlq_topic"] for r in records} == {f"%DLQ%{sc.group}"}
    assert {r["origin_topic"] for r in records} == {sc.topic}


def test_empty_dlq_report_still_has_a_chart(tmp_path: Path, kafka_bootstrap_servers: str) -> None:
    shared_spark()
    rc = cli_main(
        ["analytics", "dlq-report", "-b", kafka_bootstrap_servers, "--group", f"none-{_uid()}",
         "--output", str(tmp_path)]
    )  # fmt: skip
    assert rc == 0
    assert (tmp_path / "dlq_report.png").stat().st_size > 0
    assert (tmp_path / "dlq_summary.csv").read_text().count("\n") == 1


# --------------------------------------------------------------------------------------------
# restart from the checkpoint
# --------------------------------------------------------------------------------------------


def _send_with(config: dict[str, Any], topic: str, events: list[TraceEvent]) -> None:
    with KafkaTraceSink(config, topic) as sink:
        for e in events:
            sink(e)
        assert sink.flush(10) == 0
    assert sink.delivered == len(events)


def _send(bootstrap: str, topic: str, events: list[TraceEvent]) -> None:
    _send_with({"bootstrap.servers": bootstrap}, topic, events)


def _ev(n: int, at: int, status: TraceStatus, rc: int = 0) -> list[TraceEvent]:
    uid = _uid()
    return [
        TraceEvent(at + i, "consumer", "g", "orders", 0, i, f"{uid}-{i}", f"{uid}-{i}", status, rc)
        for i in range(n)
    ]


def test_restart_from_checkpoint_neither_loses_nor_double_counts(
    spark: SparkSession, kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    """Drain runs on one checkpoint: each writes every window it read, the open ones
    provisional; the next run completes them (one final row per window), a late event is
    dropped by the watermark, and a run with nothing new changes nothing."""
    topic = f"trace-restart-{_uid()}"
    t0 = (int(time.time() * 1000) // MINUTE - 30) * MINUTE  # a minute boundary, in the past
    w1, w2, w4 = t0, t0 + MINUTE, t0 + 3 * MINUTE
    opts = StreamJobOptions(
        output=str(tmp_path / "out"),
        trace_topic=topic,
        window="1 minute",
        watermark="10 seconds",
        available_now=True,
    )
    config = {"bootstrap.servers": kafka_bootstrap_servers}

    def windows() -> dict[int, tuple[int, int, int, bool]]:
        rows = read_metrics(spark, opts.output or "").collect()
        starts = [int(r.window_start.timestamp() * 1000) for r in rows]
        assert len(starts) == len(set(starts)), f"a window read twice: {rows}"
        return {
            s: (r.consumed, r.succeeded, r.retried, r.provisional)
            for s, r in zip(starts, rows, strict=True)
        }

    def final_rows() -> list[int]:
        rows = read_metrics(spark, opts.output or "", final_only=True).collect()
        return sorted(int(r.window_start.timestamp() * 1000) for r in rows)

    # run 1: W1 closed by the watermark (final), W2 open: written, provisional
    _send(kafka_bootstrap_servers, topic, _ev(5, w1 + 1_000, TraceStatus.SUCCESS)
          + _ev(3, w2 + 10_000, TraceStatus.RETRY))  # fmt: skip
    lines: list[str] = []
    result = run_consume_metrics(spark, config, opts, progress=lines.append)
    assert windows() == {w1: (5, 5, 0, False), w2: (3, 0, 3, True)}
    assert final_rows() == [w1]
    assert result[0]["latest"] == {"windows": 2, "provisional": 1, "consumed": 8,
                                   "succeeded": 5, "retried": 3, "dlq_arrivals": 0,
                                   "forwarded": 0}  # fmt: skip
    assert lines and all("trace record(s) read" in line for line in lines), lines

    # run 2 (a new query on the same checkpoint): more W2 events, a late W1 event (dropped by
    # the watermark) and a W4 event that closes W2
    _send(kafka_bootstrap_servers, topic, _ev(2, w2 + 20_000, TraceStatus.SUCCESS, 1)
          + _ev(1, w1 + 5_000, TraceStatus.SUCCESS)
          + _ev(1, w4 + 15_000, TraceStatus.DLQ, 2))  # fmt: skip
    run_consume_metrics(spark, config, opts)
    assert windows() == {w1: (5, 5, 0, False), w2: (5, 2, 3, False), w4: (1, 0, 0, True)}
    assert final_rows() == [w1, w2]  # one final row per window

    # run 3: nothing new -> nothing changes
    run_consume_metrics(spark, config, opts)
    assert windows() == {w1: (5, 5, 0, False), w2: (5, 2, 3, False), w4: (1, 0, 0, True)}
    assert final_rows() == [w1, w2]


def test_a_table_of_the_old_layout_is_refused_by_name(spark: SparkSession, tmp_path: Path) -> None:
    """Append-mode Parquet (no ``batch_id``) in ``--output``: a clear error before any query
    starts; read_metrics still reads it, every row final."""
    old = tmp_path / "old"
    spark.createDataFrame([("g", 3)], "group string, consumed long").write.parquet(str(old))
    opts = StreamJobOptions(output=str(old), trace_topic="t", available_now=True)
    with pytest.raises(AnalyticsError, match="batch_id"):
        run_consume_metrics(spark, {"bootstrap.servers": "127.0.0.1:1"}, opts)
    assert [tuple(r) for r in read_metrics(spark, str(old)).collect()] == [("g", 3, False)]
    assert spark.streams.active == []


# --------------------------------------------------------------------------------------------
# spark-submit
# --------------------------------------------------------------------------------------------


def test_spark_submit_entry_points(spark: SparkSession, scenario: Scenario) -> None:
    """``spark-submit spark/consume_metrics.py --available-now`` with the cached jars, as an
    operator runs it (started in the background when the scenario finished: a second JVM
    takes a while)."""
    assert scenario.submit is not None
    proc, out = scenario.submit
    proc.wait(timeout=400)
    assert proc.returncode == 0, (out / "stderr").read_text()[-3000:]
    assert '"query": "consume-metrics-parquet"' in (out / "stdout").read_text()
    rows = read_metrics(spark, str(out / "metrics")).where(F.col("group") == scenario.group)
    totals = rows.agg(F.sum("succeeded"), F.sum("dlq_arrivals")).first()
    assert totals is not None and tuple(totals) == (OK + ONCE + TWICE, POISON + REJECT)


# --------------------------------------------------------------------------------------------
# security
# --------------------------------------------------------------------------------------------


def test_sasl_settings_reach_the_sink_and_spark(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """A SASL/SCRAM-only broker: the trace sink (librdkafka) and Spark's Kafka source (Java)
    both get in with the project's one config dict, and the streaming job computes its exact
    counts; a wrong password fails the job with a short AuthenticationError, not a hang."""
    broker = EmbeddedKafka(
        f"sasl-{_uid()}",
        scram_users={"admin": "admin-secret"},
        instances_dir=tmp_path_factory.mktemp("sasl"),
    )
    broker.start(fresh=True)
    try:
        config = {"bootstrap.servers": broker.bootstrap_servers, **broker.client_security()}
        assert config["security.protocol"] == "SASL_PLAINTEXT"
        options = kafka_options(config)
        assert "ScramLoginModule" in options["kafka.sasl.jaas.config"]
        assert options["kafka.sasl.mechanism"] == config["sasl.mechanism"].upper()
        topic = f"trace-sasl-{_uid()}"
        t0 = (int(time.time() * 1000) // MINUTE - 10) * MINUTE
        _send_with(
            config,
            topic,
            _ev(7, t0 + 1_000, TraceStatus.SUCCESS)
            + _ev(2, t0 + 2_000, TraceStatus.RETRY)
            + _ev(1, t0 + 5 * MINUTE, TraceStatus.SUCCESS),  # moves the watermark past t0
        )
        raw = trace_source(spark, config, topic, streaming=False)
        assert raw.count() == 1  # the ten events went out packed in one record
        assert transforms.decode_traces(raw).count() == 10
        opts = StreamJobOptions(
            output=str(tmp_path / "out"), trace_topic=topic, watermark="10 seconds",
            available_now=True,
        )  # fmt: skip
        progress = run_consume_metrics(spark, config, opts)
        assert progress[0]["input_rows"] == 1  # Kafka records: one pack
        rows = read_metrics(spark, str(tmp_path / "out"), final_only=True).collect()
        assert [(r.group, r.topic, r.consumed, r.succeeded, r.retried) for r in rows] == [
            ("g", "orders", 9, 7, 2)
        ]

        bad = {**config, "sasl.password": "not-the-password"}
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            run_consume_metrics(
                spark,
                bad,
                StreamJobOptions(trace_topic=topic, sinks=("console",), available_now=True),
            )
        assert isinstance(info.value, SparkAuthenticationError)
        message = str(info.value)
        assert "Authentication failed" in message or "SaslAuthenticationException" in message
        assert "user 'admin'" in message and broker.bootstrap_servers in message
        assert "not-the-password" not in message
        assert len(message) < 1_000  # a sentence, not a JVM stack trace
        assert time.monotonic() - started < 60
    finally:
        broker.stop()


# --------------------------------------------------------------------------------------------
# packed and single trace records
# --------------------------------------------------------------------------------------------


def _mixed_events(t0: int) -> list[TraceEvent]:
    """Outcomes over three one-minute windows, two groups, retries and dead letters."""
    uid = _uid()
    statuses = [TraceStatus.SUCCESS] * 5 + [TraceStatus.RETRY] * 2 + [TraceStatus.DLQ]
    return [
        TraceEvent(t0 + i * 450, "consumer", f"g{i % 2}", f"orders-{i % 3}", i % 2, i,
                   f"{uid}-{i}", f"{uid}-{i // 3}", statuses[i % len(statuses)], i % 3,
                   tags="T", consume_rt_ms=0.5 + i % 4, born_timestamp_ms=t0 - 1_000,
                   consume_timestamp_ms=t0 + i * 450 - 5)
        for i in range(400)
    ]  # fmt: skip


def test_packed_and_single_records_give_the_same_metrics(
    spark: SparkSession, kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    """The same events on a topic of single records (what sinks wrote before packing), one
    of packed records, and one holding both kinds: the consume-metrics job's output is the
    same."""
    config = {"bootstrap.servers": kafka_bootstrap_servers}
    t0 = (int(time.time() * 1000) // MINUTE - 30) * MINUTE
    events = _mixed_events(t0)
    tick = TraceEvent(t0 + 60 * MINUTE, "consumer", "__tick__", "__tick__", 0, 0, "tick",
                      "tick", TraceStatus.SUCCESS, 0)  # fmt: skip
    layouts = {
        "single": [(False, [*events, tick])],
        "packed": [(True, [*events, tick])],
        "both": [(False, events[:150]), (True, [*events[150:], tick])],
    }
    outputs = {}
    for name, parts in layouts.items():
        topic = f"trace-{name}-{_uid()}"
        for packed, chunk in parts:
            # packs of at most 37 events: many packed records, cut mid-window
            with KafkaTraceSink(config, topic, packed=packed, max_events=37) as sink:
                for e in chunk:
                    sink(e)
                assert sink.flush(10) == 0
            assert sink.delivered == len(chunk)
        opts = StreamJobOptions(
            output=str(tmp_path / name),
            trace_topic=topic,
            window="1 minute",
            watermark="10 seconds",
            available_now=True,
        )
        run_consume_metrics(spark, config, opts)
        rows = read_metrics(spark, opts.output or "").drop("batch_id").collect()
        outputs[name] = sorted((r.asDict(recursive=True) for r in rows), key=repr)
    assert len(outputs["single"]) >= 6  # 2 groups x 3 windows at least, per topic
    counted = [r for r in outputs["single"] if r["group"] != "__tick__"]
    assert sum(r["consumed"] for r in counted) == len(events)
    assert not any(r["provisional"] for r in counted)  # the tick moved the watermark past
    assert outputs["packed"] == outputs["single"]
    assert outputs["both"] == outputs["single"]
