"""The streaming consume-metrics job: Spark's own Kafka source in, sinks out; the logic is in
``transforms`` (the batch DLQ report is :mod:`adapter.analytics.dlq_report_job`).

* :func:`start_consume_metrics` / :func:`run_consume_metrics` -- the streaming job: the
  trace topic -> :func:`~adapter.analytics.transforms.consume_metrics` -> the metrics
  table (Parquet, checkpointed: a restart resumes from the checkpoint and neither loses
  nor repeats an event) and/or the console (update mode: the open windows as they
  change).  Each micro-batch appends the windows it changed, with their running totals,
  and the windows its watermark (the latest event time seen minus ``watermark``) closed;
  a row is ``provisional`` while the watermark has not passed its window's end.  A window
  has exactly one final row; :func:`read_metrics` reads the latest row of each window
  (:mod:`adapter.analytics.windows`).  So a drain run (``available_now``) writes every
  window it read, the open ones provisional, and the next run completes them.
* :func:`read_metrics` / :func:`table_summary` -- the metrics table read back.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.errors import AnalysisException
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from adapter.analytics import transforms
from adapter.analytics.jars import AnalyticsError
from adapter.analytics.kafka_source import spark_kafka_error
from adapter.analytics.preflight import check_tls
from adapter.analytics.session import kafka_options
from adapter.analytics.windows import BatchProgress, Key, interval_ms, merge_batch, window_key
from adapter.constants import TRACE_TOPIC
from adapter.core import naming
from adapter.errors import TlsError

__all__ = [
    "MetricsTable",
    "StreamJobOptions",
    "read_metrics",
    "run_consume_metrics",
    "start_consume_metrics",
    "table_summary",
    "trace_source",
]

log = logging.getLogger("adapter.analytics")

SINKS: Final = ("parquet", "console")


@dataclass(frozen=True)
class StreamJobOptions:
    """What the streaming consume-metrics job reads, computes and writes."""

    output: str | None = None
    """Parquet directory (required with the ``parquet`` sink)."""
    checkpoint: str | None = None
    """Checkpoint root (default ``<output>/_checkpoint``; hidden from Parquet readers)."""
    trace_topic: str = TRACE_TOPIC
    """Logical trace topic."""
    sinks: tuple[str, ...] = ("parquet",)
    window: str = "1 minute"
    slide: str | None = None
    watermark: str = "2 minutes"
    available_now: bool = False
    """Process what is in the topic now, then stop (restartable: the next run resumes)."""
    processing_time: str = "30 seconds"
    """Micro-batch interval when running continuously."""
    starting_offsets: str = "earliest"
    """Where a query without a checkpoint starts."""
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = False
    """Trace records expire with the topic's retention; by default that is not fatal."""
    max_tracked_reconsume: int = 32
    kafka_extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        interval_ms(self.watermark, "watermark")  # a clear error before Spark starts
        unknown = [s for s in self.sinks if s not in SINKS]
        if unknown or not self.sinks:
            raise AnalyticsError(f"sinks={self.sinks!r}: choose from {SINKS}")
        if "parquet" in self.sinks and not self.output:
            raise AnalyticsError("the parquet sink needs an output directory")
        if not self.checkpoint and not self.output:
            # console only: a throw-away checkpoint (such a run does not resume)
            object.__setattr__(self, "checkpoint", tempfile.mkdtemp(prefix="rmq-consume-metrics-"))

    @property
    def checkpoint_root(self) -> str:
        return self.checkpoint or os.path.join(str(self.output), "_checkpoint")


def trace_source(
    spark: Any,
    config: Mapping[str, Any],
    topic: str = TRACE_TOPIC,
    *,
    streaming: bool = True,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    fail_on_data_loss: bool = False,
    kafka_extra: Mapping[str, str] | None = None,
) -> Any:
    """Spark's Kafka source over the logical trace ``topic`` (raw rows, headers included)."""
    reader = spark.readStream if streaming else spark.read
    reader = (
        reader.format("kafka")
        .options(**kafka_options(config, kafka_extra))
        .option("subscribe", naming.to_kafka(topic))
        .option("includeHeaders", "true")
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    if max_offsets_per_trigger and streaming:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


class MetricsTable:
    """The ``foreachBatch`` function of the streaming job's table sink: each micro-batch
    appends its rows (:func:`adapter.analytics.windows.merge_batch`) to
    ``<output>/batch_id=<id>/``, overwriting that directory, so a micro-batch Spark runs
    again after a failure writes the same rows in the same place: nothing twice.  The open
    windows are kept between micro-batches and rebuilt from the table when a query starts
    (or a micro-batch is run again)."""

    def __init__(
        self,
        output: str,
        delay_ms: int,
        schema: Any,
        on_batch: Callable[[BatchProgress], None] | None = None,
    ) -> None:
        self.output = output
        self.delay_ms = delay_ms
        self.schema = schema  # the changed windows' schema (times in epoch ms)
        self.on_batch = on_batch
        self.batches: dict[int, BatchProgress] = {}
        self._lock = threading.Lock()
        self._open: dict[Key, dict[str, Any]] = {}
        self._watermark_ms: int | None = None
        self._next_batch: int | None = None

    def _load(self, spark: Any, batch_id: int) -> None:
        """The open windows and the watermark as the micro-batches before ``batch_id``
        left them (the table's latest row per window)."""
        self._open, self._watermark_ms = {}, None
        try:
            table = spark.read.parquet(self.output).where(F.col("batch_id") < batch_id)
            latest = _latest(table)
            wm = table.agg(F.max(F.unix_millis("watermark"))).first()
        except AnalysisException as exc:  # no table yet
            log.debug("no metrics table at %s yet: %s", self.output, exc)
            return
        self._watermark_ms = None if wm is None or wm[0] is None else int(wm[0])
        names = [f.name for f in self.schema.fields if f.name != "max_event_time_ms"]
        for row in _as_ms(latest.where(F.col("provisional"))).select(*names).collect():
            r = row.asDict(recursive=True)
            self._open[window_key(r)] = r

    def __call__(self, batch: Any, batch_id: int) -> None:
        spark = batch.sparkSession
        with self._lock:
            if self._next_batch != batch_id:  # a new query, or a micro-batch run again
                self._load(spark, batch_id)
            changed = [r.asDict(recursive=True) for r in batch.collect()]
            outcome = merge_batch(self._open, changed, self._watermark_ms, self.delay_ms)
            if outcome.rows:
                names = [f.name for f in self.schema.fields if f.name != "max_event_time_ms"]
                write_schema = StructType(
                    [
                        *[f for f in self.schema.fields if f.name in names],
                        StructField("provisional", BooleanType(), False),
                        StructField("watermark_ms", LongType(), True),
                    ]
                )
                cols = [*names, "provisional", "watermark_ms"]
                frame = spark.createDataFrame(
                    [tuple(r.get(c) for c in cols) for r in outcome.rows], write_schema
                )
                (
                    _from_ms(frame)
                    .coalesce(1)
                    .write.mode("overwrite")
                    .parquet(f"{self.output.rstrip('/')}/batch_id={batch_id}")
                )
            self._open, self._watermark_ms = outcome.open_windows, outcome.watermark_ms
            self._next_batch = batch_id + 1
            progress = BatchProgress(
                batch_id,
                windows_written=len(outcome.rows),
                final=outcome.final,
                provisional=outcome.provisional,
                watermark_ms=outcome.watermark_ms,
                extra={"open_windows": len(outcome.open_windows)},
            )
            self.batches[batch_id] = progress


def _check_table(spark: Any, output: str) -> None:
    """Refuse an ``output`` that holds Parquet of another layout (the append-mode table
    written before 2026-11-28: no ``batch_id``): the two do not mix."""
    try:
        columns = spark.read.parquet(output).columns
    except AnalysisException:  # nothing there yet
        return
    if "batch_id" not in columns:
        raise AnalyticsError(
            f"--output {output!r} holds Parquet without batch_id (a metrics table written in "
            "append mode, before 2026-11-28, or other files): give the stream a new --output "
            "(read_metrics still reads the old table)"
        )


def _as_ms(table: Any) -> Any:
    """Table rows with the window bounds in epoch milliseconds (as the sink keeps them)."""
    return table.withColumn("window_start_ms", F.unix_millis("window_start")).withColumn(
        "window_end_ms", F.unix_millis("window_end")
    )


def _from_ms(frame: Any) -> Any:
    """The sink's rows as the table stores them: the metric columns (times as timestamps),
    ``provisional`` and ``watermark``."""
    return frame.select(
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        *[c for c in transforms.METRIC_COLUMNS if c not in ("window_start", "window_end")],
        "provisional",
        F.timestamp_millis("watermark_ms").alias("watermark"),
    )


def _latest(table: Any) -> Any:
    """The row of the largest ``batch_id`` of each window."""
    keys = ["window_start", "window_end", "group", "topic"]
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(F.col("batch_id").desc()))
    return table.withColumn("_rank", rank).where(F.col("_rank") == 1).drop("_rank")


def start_consume_metrics(
    spark: Any, config: Mapping[str, Any], opts: StreamJobOptions
) -> list[Any]:
    """Start the streaming job's queries (one per sink); returns the StreamingQuery objects.
    The table sink (``parquet``) runs in update mode through a :class:`MetricsTable`."""
    delay_ms = interval_ms(opts.watermark, "watermark")
    if "parquet" in opts.sinks:
        _check_table(spark, str(opts.output))
    check_tls(config, opts.kafka_extra, what="consume-metrics")
    raw = trace_source(
        spark,
        config,
        opts.trace_topic,
        starting_offsets=opts.starting_offsets,
        max_offsets_per_trigger=opts.max_offsets_per_trigger,
        fail_on_data_loss=opts.fail_on_data_loss,
        kafka_extra=opts.kafka_extra,
    )
    metrics = transforms.consume_metrics(
        transforms.decode_traces(raw),
        window=opts.window,
        slide=opts.slide,
        watermark=opts.watermark,
        max_tracked_reconsume=opts.max_tracked_reconsume,
        with_max_event_time="parquet" in opts.sinks,
    )
    trigger: dict[str, Any] = (
        {"availableNow": True} if opts.available_now else {"processingTime": opts.processing_time}
    )
    queries = []
    for sink in opts.sinks:
        if sink == "parquet":
            changed = _as_ms(metrics).select(
                "window_start_ms",
                "window_end_ms",
                *[c for c in transforms.METRIC_COLUMNS if c not in ("window_start", "window_end")],
                "max_event_time_ms",
            )
            table = MetricsTable(str(opts.output), delay_ms, changed.schema)
            writer = (
                changed.writeStream.trigger(**trigger)
                .option("checkpointLocation", os.path.join(opts.checkpoint_root, "table"))
                .outputMode("update")
                .foreachBatch(table)
            )
            query = writer.queryName(f"consume-metrics-{sink}").start()
            _TABLE_SINKS[query.id] = table
        else:
            query = (
                metrics.drop("max_event_time_ms")
                .writeStream.trigger(**trigger)
                .option("checkpointLocation", os.path.join(opts.checkpoint_root, sink))
                .format("console")
                .outputMode("update")
                .option("truncate", "false")
                .option("numRows", "100")
                .queryName(f"consume-metrics-{sink}")
                .start()
            )
        queries.append(query)
        log.debug("started consume-metrics -> %s (%s)", sink, opts.output or "console")
    return queries


#: query id -> its table sink (progress: the windows each micro-batch wrote)
_TABLE_SINKS: dict[str, MetricsTable] = {}


def _report_progress(
    queries: Sequence[Any], seen: set[tuple[str, int]], report: Callable[[str], None]
) -> None:
    """One line per micro-batch not reported yet (records read; windows written)."""
    for q in queries:
        table = _TABLE_SINKS.get(q.id)
        for p in q.recentProgress:
            batch_id = int(p.get("batchId", -1))
            if (q.name, batch_id) in seen:
                continue
            seen.add((q.name, batch_id))
            rows = int(p.get("numInputRows", 0))
            if table is not None and batch_id in table.batches:
                bp = table.batches[batch_id]
                bp.input_rows = rows
                report(f"{q.name} {bp.line()}")
            elif table is None:
                report(f"{q.name} batch {batch_id}: {rows} trace record(s) read")
            else:  # an empty micro-batch (no data: only the watermark moved)
                report(f"{q.name} batch {batch_id}: {rows} trace record(s) read, no window changed")


def run_consume_metrics(
    spark: Any,
    config: Mapping[str, Any],
    opts: StreamJobOptions,
    *,
    progress: Callable[[str], None] | None = None,
    poll_s: float = 1.0,
) -> list[dict[str, Any]]:
    """Run the streaming job: until the topic is drained (``available_now``) or until
    stopped (Ctrl-C / a failed query).  ``progress`` gets one line per micro-batch (default:
    logged at INFO).  Returns per query: its sink, the micro-batches it ran and the trace
    records it read (as far as Spark keeps progress reports) and, for the table, the windows
    written (final and provisional), the watermark and the table's latest state
    (:func:`read_metrics`): windows, how many are provisional, and the totals."""
    report = progress or (lambda line: log.info("%s", line))
    try:
        queries = start_consume_metrics(spark, config, opts)
    except (AnalyticsError, TlsError):
        raise
    except Exception as exc:  # the source failed before the first batch (e.g. its offsets)
        raise spark_kafka_error(exc, config, "consume-metrics") from exc
    seen: set[tuple[str, int]] = set()
    try:
        while any(q.isActive for q in queries):
            for q in queries:
                if q.isActive:
                    q.awaitTermination(poll_s)
                if not opts.available_now and not q.isActive:
                    break  # a continuous query stopped (failed): stop the others
            _report_progress(queries, seen, report)
            if not opts.available_now and not all(q.isActive for q in queries):
                break
    except KeyboardInterrupt:
        log.info("stopping the consume-metrics queries")
    except Exception as exc:  # a failed query: reported below with its own exception
        log.debug("consume-metrics query failed: %s", exc)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    _report_progress(queries, seen, report)
    for q in queries:
        failure = q.exception()
        if failure is not None:
            _TABLE_SINKS.pop(q.id, None)
            raise spark_kafka_error(failure, config, f"query {q.name}")
    out = []
    for q in queries:
        item: dict[str, Any] = {
            "query": q.name,
            "batches": len(q.recentProgress),
            "input_rows": sum(int(p.get("numInputRows", 0)) for p in q.recentProgress),
        }
        table = _TABLE_SINKS.pop(q.id, None)
        if table is not None:
            done = list(table.batches.values())
            item["windows_written"] = sum(b.windows_written for b in done)
            item["final_written"] = sum(b.final for b in done)
            item["provisional_written"] = sum(b.provisional for b in done)
            item["latest"] = table_summary(spark, str(opts.output))
        out.append(item)
    return out


def read_metrics(spark: Any, path: str, *, final_only: bool = False) -> Any:
    """The metrics table's latest state: one row per window and (``group``, ``topic``) --
    the row of its largest ``batch_id`` -- with ``provisional`` (the watermark had not
    passed the window's end when it was written: a later run may still change it) and
    ``watermark``.  ``final_only`` keeps the windows the watermark has passed (the same as
    ``spark.read.parquet(path).where("NOT provisional")``: a window has one final row).
    A table written before the table had ``batch_id`` (append-mode Parquet: final windows
    only) reads as it is, every row final."""
    table = spark.read.parquet(path)
    if "batch_id" not in table.columns:
        return table.withColumn("provisional", F.lit(False))
    if final_only:
        return table.where(~F.col("provisional"))
    return _latest(table)


def table_summary(spark: Any, path: str) -> dict[str, Any]:
    """The latest state of the metrics table in numbers: windows (and how many are
    provisional), consumed, succeeded, retried, DLQ arrivals, forwarded."""
    try:
        latest = read_metrics(spark, path)
    except AnalysisException:  # nothing written yet
        return {"windows": 0, "provisional": 0}
    row = latest.agg(
        F.count(F.lit(1)).alias("windows"),
        F.count_if(F.col("provisional")).alias("provisional"),
        *[F.sum(c).alias(c) for c in SUMMARY_TOTALS],
    ).first()
    return {k: int(v or 0) for k, v in row.asDict().items()}


#: The totals :func:`table_summary` reports.
SUMMARY_TOTALS: Final = ("consumed", "succeeded", "retried", "dlq_arrivals", "forwarded")
