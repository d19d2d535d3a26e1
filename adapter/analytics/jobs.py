"""The Spark jobs: Spark's own Kafka source in, sinks out; the logic is in ``transforms``.

* :func:`start_consume_metrics` / :func:`run_consume_metrics` -- the streaming job: the
  trace topic -> :func:`~adapter.analytics.transforms.consume_metrics` -> Parquet (append
  mode, checkpointed: a restart resumes from the checkpoint and neither loses nor repeats
  a window) and/or the console (update mode: the open windows as they change).  A window
  reaches Parquet once the watermark (the latest event time seen minus ``watermark``)
  passes its end.
* :func:`run_dlq_report` -- the batch DLQ report: the DLQ topics read as a batch ->
  :func:`~adapter.analytics.transforms.dlq_summary` -> a Parquet table, a CSV file and a
  PNG chart (and, with ``export``, every dead letter as Avro, ``dlq_export.avsc``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import functions as F

from adapter.analytics import transforms
from adapter.analytics.jars import AnalyticsError, SparkAuthenticationError
from adapter.analytics.report import render_chart, write_csv
from adapter.analytics.session import kafka_options
from adapter.constants import KAFKA_DLQ_PREFIX, TRACE_TOPIC
from adapter.core import naming
from adapter.errors import TopicNameError
from adapter.io.avro import dlq_export_schema
from adapter.io.config import admin_config, check_kafka_config
from adapter.io.errors import client_error, make_client

__all__ = [
    "KAFKA_SOURCE_SCHEMA",
    "DlqReport",
    "StreamJobOptions",
    "dlq_topics",
    "read_metrics",
    "run_consume_metrics",
    "run_dlq_report",
    "spark_kafka_error",
    "start_consume_metrics",
    "trace_source",
]

log = logging.getLogger("adapter.analytics")

SINKS: Final = ("parquet", "console")
#: The Kafka source's row schema with ``includeHeaders=true`` (for an empty batch).
KAFKA_SOURCE_SCHEMA: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)


#: Java exception names (and texts) that mean the Kafka cluster refused us.
_AUTH_MARKERS: Final = (
    "SaslAuthenticationException",
    "SslAuthenticationException",
    "AuthenticationException",
    "TopicAuthorizationException",
    "GroupAuthorizationException",
    "ClusterAuthorizationException",
    "Authentication failed",
)
_MAX_DETAIL: Final = 400


def spark_kafka_error(exc: BaseException, config: Mapping[str, Any], what: str) -> AnalyticsError:
    """A short, clear error for a failed Spark job reading Kafka (not a JVM stack trace): an
    authentication or authorization failure becomes a :class:`SparkAuthenticationError`
    naming the cluster, the protocol, the mechanism and the user."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    marker = next((m for m in _AUTH_MARKERS if m in text), None)
    if marker is None:
        detail = lines[0] if lines else type(exc).__name__
        return AnalyticsError(f"{what} failed: {detail[:_MAX_DETAIL]}")
    detail = next((ln for ln in lines if marker in ln), lines[0])
    # "org.apache.kafka...SaslAuthenticationException: Authentication failed ..." -> the text
    detail = detail.split(f"{marker}: ", 1)[-1] if f"{marker}: " in detail else detail
    who = f"user {config['sasl.username']!r}" if config.get("sasl.username") else "no user"
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "-"
    return SparkAuthenticationError(
        f"{what}: Spark's Kafka source was refused by {config.get('bootstrap.servers')} "
        f"(security.protocol={config.get('security.protocol', 'PLAINTEXT')}, "
        f"sasl.mechanism={mechanism}, {who}): {marker}: {detail[:_MAX_DETAIL]}. Check "
        "sasl.username/sasl.password (-X or --config-file; they reach Spark as "
        "kafka.sasl.jaas.config) and the principal's ACLs"
    )


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


def start_consume_metrics(
    spark: Any, config: Mapping[str, Any], opts: StreamJobOptions
) -> list[Any]:
    """Start the streaming job's queries (one per sink); returns the StreamingQuery objects."""
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
    )
    trigger: dict[str, Any] = (
        {"availableNow": True} if opts.available_now else {"processingTime": opts.processing_time}
    )
    queries = []
    for sink in opts.sinks:
        writer = metrics.writeStream.trigger(**trigger).option(
            "checkpointLocation", os.path.join(opts.checkpoint_root, sink)
        )
        if sink == "parquet":
            writer = writer.format("parquet").outputMode("append").option("path", opts.output)
        else:
            writer = (
                writer.format("console")
                .outputMode("update")
                .option("truncate", "false")
                .option("numRows", "100")
            )
        queries.append(writer.queryName(f"consume-metrics-{sink}").start())
        log.info("started consume-metrics -> %s (%s)", sink, opts.output or "console")
    return queries


def run_consume_metrics(
    spark: Any, config: Mapping[str, Any], opts: StreamJobOptions
) -> list[dict[str, Any]]:
    """Run the streaming job: until the topic is drained (``available_now``) or until
    stopped (Ctrl-C / a failed query).  Returns per query: its sink, the micro-batches it
    ran and the trace records it read (as far as Spark keeps progress reports)."""
    try:
        queries = start_consume_metrics(spark, config, opts)
    except AnalyticsError:
        raise
    except Exception as exc:  # the source failed before the first batch (e.g. its offsets)
        raise spark_kafka_error(exc, config, "consume-metrics") from exc
    try:
        if opts.available_now:
            for q in queries:
                q.awaitTermination()
        else:
            spark.streams.awaitAnyTermination()
    except KeyboardInterrupt:
        log.info("stopping the consume-metrics queries")
    except Exception as exc:  # a failed query: reported below with its own exception
        log.debug("consume-metrics query failed: %s", exc)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    for q in queries:
        failure = q.exception()
        if failure is not None:
            raise spark_kafka_error(failure, config, f"query {q.name}")
    return [
        {
            "query": q.name,
            "batches": len(q.recentProgress),
            "input_rows": sum(int(p.get("numInputRows", 0)) for p in q.recentProgress),
        }
        for q in queries
    ]


def read_metrics(spark: Any, path: str) -> Any:
    """The committed windows the Parquet sink wrote (its metadata log: no partial files)."""
    return spark.read.parquet(path)


# --------------------------------------------------------------------------------------------
# DLQ report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DlqReport:
    """Where the DLQ report went and what it found."""

    topics: dict[str, str]  # kafka -> logical
    dead_letters: int
    groups: int  # rows of the summary
    table: Path  # Parquet
    csv: Path
    png: Path
    export: Path | None
    rows: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        return {
            "dlq_topics": sorted(self.topics.values()),
            "dead_letters": self.dead_letters,
            "summary_rows": self.groups,
            "table": str(self.table),
            "csv": str(self.csv),
            "png": str(self.png),
            "export": str(self.export) if self.export else None,
        }


def dlq_topics(
    config: Mapping[str, Any], groups: Sequence[str] | None = None, *, timeout_s: float = 15.0
) -> dict[str, str]:
    """The existing DLQ topics: ``{kafka name: logical name}`` (all, or those of ``groups``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = make_client(
        AdminClient, admin_config(check_kafka_config(config, "dlq report")), what="admin client"
    )
    try:
        existing = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise client_error(exc, what="dlq report: listing the DLQ topics") from exc
    out: dict[str, str] = {}
    if groups:
        for g in groups:
            logical = naming.dlq_topic(g)
            kafka = naming.to_kafka(logical)
            if kafka in existing:
                out[kafka] = logical
            else:
                log.warning("%s (%s) does not exist: nothing to report for it", logical, kafka)
        return out
    for kafka in sorted(existing):
        if kafka.startswith(KAFKA_DLQ_PREFIX):
            try:
                out[kafka] = naming.from_kafka(kafka)
            except TopicNameError:
                out[kafka] = kafka  # a digest name: the RMQ_GROUP header names the group
    return out


def run_dlq_report(
    spark: Any,
    config: Mapping[str, Any],
    output: str | os.PathLike[str],
    *,
    groups: Sequence[str] | None = None,
    top_keys: int = 3,
    export: bool = False,
    kafka_extra: Mapping[str, str] | None = None,
) -> DlqReport:
    """Read the DLQ topics as a batch and write the report into ``output``:
    ``dlq_summary/`` (Parquet), ``dlq_summary.csv``, ``dlq_report.png`` and, with
    ``export``, ``dlq_export/`` (Avro, ``dlq_export.avsc``)."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    topics = dlq_topics(config, groups)
    if topics:
        raw = (
            spark.read.format("kafka")
            .options(**kafka_options(config, kafka_extra))
            .option("subscribe", ",".join(sorted(topics)))
            .option("includeHeaders", "true")
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
    else:
        raw = spark.createDataFrame([], KAFKA_SOURCE_SCHEMA)
    entries = transforms.dlq_entries(raw, topics).cache()
    try:
        summary = transforms.dlq_summary(entries, top_keys=top_keys)
        table = out / "dlq_summary"
        try:
            summary.write.mode("overwrite").parquet(str(table))  # the first Kafka read
        except Exception as exc:
            raise spark_kafka_error(exc, config, "dlq report") from exc
        # the chart and the CSV label hours in the session time zone (UTC by default)
        tz = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        labelled = spark.read.parquet(str(table)).withColumn(
            "hour", F.date_format("hour", f"yyyy-MM-dd HH:00 '{tz}'")
        )
        rows = [r.asDict(recursive=True) for r in labelled.collect()]
        rows.sort(key=lambda r: (r["hour"], -r["dead_letters"], r["origin_topic"], r["reason"]))
        export_path = None
        if export:
            export_path = out / "dlq_export"
            (
                transforms.export_columns(entries)
                .write.mode("overwrite")
                .format("avro")
                .option("avroSchema", dlq_export_schema().text)
                .option("compression", "deflate")  # readable without snappy libraries
                .save(str(export_path))
            )
    finally:
        entries.unpersist()
    csv_path = write_csv(rows, out / "dlq_summary.csv")
    names = ", ".join(sorted(topics.values())) or "no DLQ topics"
    png = render_chart(rows, out / "dlq_report.png", title=f"Dead letters ({names})")
    report = DlqReport(
        topics=topics,
        dead_letters=sum(int(r["dead_letters"]) for r in rows),
        groups=len(rows),
        table=table,
        csv=csv_path,
        png=png,
        export=export_path,
        rows=rows,
    )
    (out / "dlq_report.json").write_text(json.dumps(report.summary(), indent=2) + "\n", "utf-8")
    return report
