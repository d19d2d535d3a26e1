"""The batch DLQ report: the DLQ topics read as a batch with Spark's Kafka source ->
:func:`~adapter.analytics.transforms.dlq_summary` -> a Parquet table, a CSV file and a PNG
chart (:mod:`adapter.analytics.report`), and, with ``export``, every dead letter as Avro
(``dlq_export.avsc``): :func:`run_dlq_report`."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from adapter.analytics import transforms
from adapter.analytics.kafka_source import KAFKA_SOURCE_SCHEMA, spark_kafka_error
from adapter.analytics.preflight import check_tls
from adapter.analytics.report import dlq_title, render_chart, write_csv
from adapter.analytics.session import kafka_options
from adapter.constants import KAFKA_DLQ_PREFIX
from adapter.core import naming
from adapter.errors import TopicNameError
from adapter.io.avro import dlq_export_schema
from adapter.io.config import admin_config, check_kafka_config
from adapter.io.errors import client_error, make_client

log = logging.getLogger("adapter.analytics")


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
    check_tls(config, kafka_extra, what="dlq report")
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
    png = render_chart(rows, out / "dlq_report.png", title=dlq_title(list(topics.values())))
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
