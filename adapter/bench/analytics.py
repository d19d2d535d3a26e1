"""The analytics benchmark rows of ``rmq-kafka bench`` (every figure a ratio in one run).

1. **Streaming job vs. a plain Kafka-source count** (:func:`spark_scenario`).  A trace
   topic is pre-filled with ``rows`` Avro trace events (a realistic mix of outcomes over 10
   minutes of event time).  The baseline ("raw") is a plain Spark Kafka-source batch
   ``count()`` over the topic; "ours" is the streaming consume-metrics job
   (``availableNow``, Avro decode, windowed aggregation, Parquet sink, checkpoint) over the
   same topic.  Ratio = job rows/s / plain rows/s.  CPU is the driver JVM's plus this
   process's, per row.
2. **What trace emission costs the consumer** (:func:`trace_overhead_scenario`, two rows:
   batch 1 and batch 32).  The PushConsumer (all-success listener, 100-byte bodies) drains a
   pre-filled topic without ("raw") and with ``trace_topic`` ("ours": packed trace records,
   the default), alternately.  Ratio = traced msgs/s / untraced msgs/s; overhead = 1 -
   ratio; CPU is this process's per message.

Both run against the bench's broker, ``repeats`` times each, medians reported; Spark is
``local[2]`` in this process.  Only the first needs pyspark.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka import Producer as RawProducer

from adapter.analytics.jars import SPARK_VERSION, AnalyticsError, check_pyspark
from adapter.bench.harness import Bench, Run, Scenario
from adapter.core.codec import encode_message_headers
from adapter.core.message import Message
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.errors import AdapterError
from adapter.io.avro import TRACE_SCHEMA_HEADER, encode_trace, trace_schema
from adapter.io.topics import TopicPlan, ensure_topics

__all__ = [
    "analytics_scenarios",
    "fill_trace_topic",
    "main",
    "plain_count",
    "pyspark_missing",
    "run_analytics_bench",
    "spark_scenario",
    "stream_job",
    "timed_run",
    "trace_overhead_scenario",
    "trace_scenarios",
]

log = logging.getLogger("adapter.analytics.bench")

_STATUSES = (
    [TraceStatus.SUCCESS] * 14 + [TraceStatus.RETRY] * 3 + [TraceStatus.DLQ, TraceStatus.FORWARDED]
)
_SPAN_MS = 10 * 60_000


def _event(i: int, t0: int, rows: int) -> TraceEvent:
    status = _STATUSES[i % len(_STATUSES)]
    service = status is TraceStatus.FORWARDED
    return TraceEvent(
        event_time_ms=t0 + i * _SPAN_MS // max(rows, 1),
        source="schedule-service" if service else "consumer",
        group="rmq-schedule-service" if service else f"group-{i % 4}",
        topic="%RETRY%group-0" if service else f"orders-{i % 8}",
        partition=i % 3,
        offset=i,
        msg_id=f"{i:032X}",
        origin_msg_id=f"{i:032X}",
        status=status,
        reconsume_times=i % 5 if status is not TraceStatus.SUCCESS else i % 2,
        tags="TagA",
        keys=f"order-{i % 1000}",
        consume_rt_ms=0.5,
        born_timestamp_ms=t0 - 5_000,
        origin_born_timestamp_ms=t0 - 5_000,
        store_timestamp_ms=t0 - 4_000,
        consume_timestamp_ms=t0,
        delay_level=3 if status in (TraceStatus.RETRY, TraceStatus.FORWARDED) else None,
        lateness_ms=12 if service else None,
        failure_type="ValueError" if status in (TraceStatus.RETRY, TraceStatus.DLQ) else None,
        failure_message="boom" if status in (TraceStatus.RETRY, TraceStatus.DLQ) else None,
    )


def fill_trace_topic(config: dict[str, Any], logical: str, rows: int, partitions: int = 2) -> str:
    """Create ``logical`` and write ``rows`` encoded trace events to it; its Kafka name."""
    from adapter.core import naming

    kafka_topic = naming.to_kafka(logical)
    ensure_topics(config, [TopicPlan(logical, kafka_topic, partitions)])
    producer = RawProducer(
        {**config, "linger.ms": 20, "enable.idempotence": True, "compression.type": "lz4"}
    )
    headers: list[tuple[str, str | bytes | None]] = [
        (TRACE_SCHEMA_HEADER, trace_schema().tag.encode())
    ]
    t0 = int(time.time() * 1000) - _SPAN_MS
    for i in range(rows):
        event = _event(i, t0, rows)
        while True:
            try:
                producer.produce(
                    kafka_topic, encode_trace(event), key=event.msg_id.encode(), headers=headers
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise AdapterError("pre-filling the trace topic did not finish")
    return kafka_topic


def _jvm_cpu_s(spark: Any) -> float:
    """CPU seconds the local driver JVM has used (0 when it is not a child we can see)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    pid = getattr(proc, "pid", None)
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def timed_run(spark: Any, rows: int, work: Any) -> tuple[int, Run]:
    """``work()`` timed: the rows it returns, and ``rows`` over its seconds with the CPU
    (driver JVM and this process) per row."""
    cpu0, jvm0 = time.process_time(), _jvm_cpu_s(spark)
    t0 = time.perf_counter()
    n = int(work())
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0 + _jvm_cpu_s(spark) - jvm0
    return n, Run(rows / max(elapsed, 1e-9), cpu / max(rows, 1) * 1e6)


def plain_count(spark: Any, config: dict[str, Any], logical: str) -> int:
    """The baseline: a batch Kafka-source ``count()`` of the topic."""
    from adapter.analytics.jobs import trace_source

    return int(trace_source(spark, config, logical, streaming=False).count())


def stream_job(spark: Any, config: dict[str, Any], logical: str) -> int:
    """The consume-metrics job draining the topic into a throw-away table; rows read."""
    from adapter.analytics.jobs import StreamJobOptions, run_consume_metrics

    with tempfile.TemporaryDirectory(prefix="rmq-analytics-bench-") as out:
        opts = StreamJobOptions(output=out, trace_topic=logical, available_now=True)
        progress = run_consume_metrics(spark, config, opts)
    return int(progress[0]["input_rows"])


def spark_scenario(bench: Bench, rows: int, *, spark: Any = None) -> Scenario:
    """Row 1: the streaming job's rows/s over the plain Kafka-source count's, same topic."""
    from adapter.analytics.session import build_spark_session

    sc = Scenario(f"analytics: Spark consume-metrics job vs plain Kafka-source count ({rows} rows)")
    config = dict(bench.config)
    uid = uuid.uuid4().hex[:8]
    logical = f"bench-trace-{uid}"
    t0 = time.perf_counter()
    fill_trace_topic(config, logical, rows)
    fill_s = time.perf_counter() - t0
    spark = spark or build_spark_session("rmq-kafka analytics bench")
    if bench.warm_up:
        # warm-up on a small topic: JIT, codegen and connector class loading stay out of the runs
        warm = f"bench-trace-warm-{uid}"
        fill_trace_topic(config, warm, min(rows, 5_000))
        plain_count(spark, config, warm)
        stream_job(spark, config, warm)
    for _ in range(bench.repeats):
        n, run = timed_run(spark, rows, lambda: plain_count(spark, config, logical))
        if n != rows:
            raise AdapterError(f"the plain count read {n} rows, expected {rows}")
        sc.raw.append(run)
        n, run = timed_run(spark, rows, lambda: stream_job(spark, config, logical))
        if n != rows:
            raise AdapterError(f"the streaming job read {n} rows, expected {rows}")
        sc.ours.append(run)
    sc.extra = {"spark_version": SPARK_VERSION, "trace_rows": rows, "fill_s": round(fill_s, 2)}
    return sc


def trace_overhead_scenario(
    bench: Bench, messages: int | None = None, *, batch: int = 1, rocketmq_headers: bool = False
) -> Scenario:
    """Row 2: the consumer with tracing on (ours) vs off (raw), 100-byte bodies: plain Kafka
    records (what a Kafka shop's producers write), or with ``rocketmq_headers`` records as
    the adapter's own Producer writes them (a message id, tags and keys in headers), which
    trace event by event."""
    n = messages or bench.n
    kind = " records with RocketMQ headers" if rocketmq_headers else ""
    sc = Scenario(
        f"trace emission: consumer traced vs untraced batch={batch} body=100B{kind} ({n} msgs)"
    )
    topic = bench.topic()
    headers = None
    if rocketmq_headers:

        def headers(i: int) -> list[Any]:
            msg = Message(topic=topic, body=b"", tags="TagA", keys=[f"k{i}"])
            return encode_message_headers(msg, uuid.uuid4().hex.upper())

    bench.fill(topic, n, 100, headers=headers)
    trace_topic = f"bench-consumer-trace-{uuid.uuid4().hex[:8]}"
    bench.ours_consume(topic, min(n, 5_000), batch, trace_topic=trace_topic)  # warm-up
    for _ in range(bench.repeats):
        sc.raw.append(bench.ours_consume(topic, n, batch))
        sc.ours.append(bench.ours_consume(topic, n, batch, trace_topic=trace_topic))
    traced = statistics.median(r.rate for r in sc.ours)
    untraced = statistics.median(r.rate for r in sc.raw)
    sc.extra = {"trace_overhead_pct": round(100 * (1 - traced / untraced), 1)}
    return sc


def run_analytics_bench(
    bootstrap: str,
    rows: int = 200_000,
    *,
    repeats: int = 3,
    consumer_messages: int | None = None,
    spark: Any = None,
    with_spark: bool = True,
) -> list[dict[str, Any]]:
    """Both rows on their own (``python -m adapter.bench.analytics <bootstrap> [rows]``)."""
    bench = Bench(bootstrap, consumer_messages or min(rows, 50_000), repeats)
    out = []
    if with_spark:
        out.append(spark_scenario(bench, rows, spark=spark).summary())
    out.extend(sc.summary() for sc in trace_scenarios(bench))
    return out


def pyspark_missing() -> str | None:
    """Why the Spark analytics row cannot run here (``None``: it can)."""
    try:
        check_pyspark()
    except AnalyticsError as exc:
        return str(exc)
    return None


def analytics_scenarios(bench: Bench, *, spark: Any = None) -> list[Scenario]:
    """The Spark analytics row (needs pyspark): streaming job vs plain Kafka-source count."""
    return [spark_scenario(bench, bench.n, spark=spark)]


def trace_scenarios(bench: Bench) -> list[Scenario]:
    """The trace-emission rows: the consumer with and without ``trace_topic``, batch 1 and
    batch 32 on plain records, and batch 32 on records with RocketMQ headers."""
    return [
        trace_overhead_scenario(bench),
        trace_overhead_scenario(bench, batch=32),
        trace_overhead_scenario(bench, batch=32, rocketmq_headers=True),
    ]


def main(argv: list[str]) -> None:
    """``python -m adapter.bench.analytics <bootstrap> [rows]``: both rows, as JSON."""
    import json

    logging.basicConfig(level=logging.INFO)
    print(
        json.dumps(
            run_analytics_bench(argv[0], int(argv[1]) if len(argv) > 1 else 200_000),
            indent=2,
        )
    )


if __name__ == "__main__":  # pragma: no cover - manual run
    import sys

    main(sys.argv[1:])
