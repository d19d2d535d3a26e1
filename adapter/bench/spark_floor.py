"""The Spark row taken apart: the consume-metrics job built up stage by stage over one trace
topic, in one Spark session, each stage timed (median of ``repeats``) beside the plain
Kafka-source count of the bench's Spark row (:func:`adapter.bench.analytics.spark_scenario`).

================== ==========================================================================
stage              what it runs
================== ==========================================================================
``count``          the bench's baseline: a batch Kafka-source ``count()``
``stream count``   the same records through a streaming query (``availableNow``, checkpoint,
                   offset and commit logs), each micro-batch counted
``decode``         batch: + the Avro decode (:func:`~adapter.analytics.transforms.decode_traces`),
                   every field read (hashed)
``aggregate``      batch: + the windowed aggregation
                   (:func:`~adapter.analytics.transforms.consume_metrics`), collected
``stream aggregate`` streaming: decode + aggregation with the watermark and its state store,
                   update mode, each micro-batch collected (no table)
``job``            the whole job as the bench runs it
                   (:func:`~adapter.analytics.jobs.run_consume_metrics`: the metrics table's
                   merge, its Parquet and the table summary)
================== ==========================================================================

``python -m adapter.bench.spark_floor [--bootstrap-servers B] [--rows N] [--repeats R]``
prints the table (seconds, rows/s and the ratio to ``count``, all from this run); without
``--bootstrap-servers`` it starts an embedded broker of its own for the run.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapter.bench.analytics import fill_trace_topic, plain_count, stream_job, timed_run
from adapter.errors import AdapterError

__all__ = ["STAGES", "StageResult", "main", "measure_stages", "render"]

log = logging.getLogger("adapter.analytics.bench")

Work = Callable[[Any, dict[str, Any], str], int]


def _stream(spark: Any, frame: Any, mode: str, on_batch: Callable[[Any], None]) -> int:
    """Run ``frame`` as an ``availableNow`` query (throw-away checkpoint) handing each
    micro-batch to ``on_batch``; the Kafka records it read."""
    with tempfile.TemporaryDirectory(prefix="rmq-spark-floor-") as checkpoint:
        query = (
            frame.writeStream.trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .outputMode(mode)
            .foreachBatch(lambda batch, _batch_id: on_batch(batch))
            .start()
        )
        query.awaitTermination()
        return sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)


def _stream_count(spark: Any, config: dict[str, Any], logical: str) -> int:
    from adapter.analytics.jobs import trace_source

    return _stream(spark, trace_source(spark, config, logical), "append", lambda b: b.count())


def _decode(spark: Any, config: dict[str, Any], logical: str) -> int:
    from pyspark.sql import functions as F

    from adapter.analytics.jobs import trace_source
    from adapter.analytics.transforms import decode_traces

    decoded = decode_traces(trace_source(spark, config, logical, streaming=False))
    # every field is read (hashed), so no column is pruned from the decode
    row = decoded.agg(F.count(F.lit(1)), F.max(F.hash(*decoded.columns))).first()
    assert row is not None
    return int(row[0])


def _aggregate(spark: Any, config: dict[str, Any], logical: str) -> int:
    from adapter.analytics.jobs import trace_source
    from adapter.analytics.transforms import consume_metrics, decode_traces

    raw = trace_source(spark, config, logical, streaming=False)
    rows = consume_metrics(decode_traces(raw), watermark=None).collect()
    return sum(int(r["consumed"]) + int(r["forwarded"]) for r in rows)  # every event once


def _stream_aggregate(spark: Any, config: dict[str, Any], logical: str) -> int:
    from adapter.analytics.jobs import trace_source
    from adapter.analytics.transforms import consume_metrics, decode_traces

    metrics = consume_metrics(
        decode_traces(trace_source(spark, config, logical)), with_max_event_time=True
    )
    return _stream(spark, metrics, "update", lambda b: b.collect())


#: The stages, cheapest first: (name, work); each returns the records it read.
STAGES: tuple[tuple[str, Work], ...] = (
    ("count", plain_count),
    ("stream count", _stream_count),
    ("decode", _decode),
    ("aggregate", _aggregate),
    ("stream aggregate", _stream_aggregate),
    ("job", stream_job),
)


@dataclass(frozen=True)
class StageResult:
    """One stage's median over the repeats."""

    stage: str
    seconds: float
    rows_per_s: float
    cpu_us_per_row: float
    ratio: float
    """This stage's rows/s over ``count``'s (the bench's ratio for ``job``)."""


def measure_stages(
    spark: Any,
    config: dict[str, Any],
    logical: str,
    rows: int,
    *,
    repeats: int = 3,
    stages: Sequence[tuple[str, Work]] = STAGES,
) -> list[StageResult]:
    """Each stage ``repeats`` times over ``logical`` (``rows`` records), round-robin so
    the machine's load falls on every stage alike; medians."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in stages}
    for _ in range(repeats):
        for name, work in stages:
            n, run = timed_run(spark, rows, lambda w=work: w(spark, config, logical))
            if n != rows:
                raise AdapterError(f"stage {name!r} read {n} rows, expected {rows}")
            runs[name].append((rows / run.rate, run.cpu_us))
    base = statistics.median(s for s, _ in runs[stages[0][0]])
    out = []
    for name, _ in stages:
        seconds = statistics.median(s for s, _ in runs[name])
        cpu = statistics.median(c for _, c in runs[name])
        out.append(StageResult(name, seconds, rows / seconds, cpu, base / seconds))
    return out


def render(results: Sequence[StageResult]) -> str:
    """A markdown table: each stage's seconds, rows/s, what it adds and its ratio."""
    lines = [
        "| stage | seconds | rows/s | + seconds over the stage before | ratio to count |",
        "|---|---:|---:|---:|---:|",
    ]
    before: float | None = None
    for r in results:
        added = "-" if before is None else f"{r.seconds - before:+.2f}"
        lines.append(
            f"| {r.stage} | {r.seconds:.2f} | {r.rows_per_s:,.0f} | {added} | {r.ratio:.3f} |"
        )
        before = r.seconds
    return "\n".join(lines).replace(",", " ")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m adapter.bench.spark_floor``: the stage table on stdout (and as JSON)."""
    parser = argparse.ArgumentParser(prog="python -m adapter.bench.spark_floor")
    parser.add_argument("-b", "--bootstrap-servers")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    from adapter.analytics.session import build_spark_session
    from adapter.embedded import EmbeddedKafka

    with tempfile.TemporaryDirectory(prefix="rmq-spark-floor-kafka-") as instances:
        broker = None
        bootstrap = args.bootstrap_servers
        if not bootstrap:
            broker = EmbeddedKafka(f"spark-floor-{uuid.uuid4().hex[:8]}", instances_dir=instances)
            bootstrap = broker.start(fresh=True)
        try:
            config = {"bootstrap.servers": bootstrap}
            uid = uuid.uuid4().hex[:8]
            logical = f"bench-trace-{uid}"
            fill_trace_topic(config, logical, args.rows)
            spark = build_spark_session("rmq-kafka spark floor")
            warm = f"bench-trace-warm-{uid}"
            fill_trace_topic(config, warm, min(args.rows, 5_000))
            for _name, work in STAGES:  # JIT, codegen and class loading out of the runs
                work(spark, config, warm)
            results = measure_stages(spark, config, logical, args.rows, repeats=args.repeats)
        finally:
            if broker is not None:
                broker.stop()
    print(render(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([r.__dict__ for r in results], fh, indent=2)


if __name__ == "__main__":  # pragma: no cover - manual run
    main()
