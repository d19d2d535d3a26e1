"""Pure Spark transformations of the analytics path: DataFrame in, DataFrame out, no I/O.

The jobs (:mod:`adapter.analytics.jobs`) only read Kafka with Spark's own Kafka source and
write sinks; everything in between is here, so it is unit-tested on small in-memory
DataFrames.  Inputs are the Kafka source's rows (``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``, ``headers`` with ``includeHeaders=true``).

Consume metrics (:func:`consume_metrics`), one row per event-time window and
(``group``, ``topic``) -- topics are logical names, as the trace events carry them:

================================ ==========================================================
column                           meaning
================================ ==========================================================
``consumed``                     consumptions that ended (SUCCESS + RETRY + DLQ + DROPPED)
``succeeded``                    SUCCESS
``failed``                       RETRY + DLQ + DROPPED
``retried``                      RETRY: failed and sent back to a delay level
``retries_by_reconsume_times``   map: ``reconsume_times`` of the failed delivery (0 = the
                                 first delivery failed) -> RETRY count; keys at or above
                                 ``max_tracked_reconsume`` are folded into that key
``dlq_arrivals``                 DLQ: sent to ``%DLQ%<group>``
``dropped``                      DROPPED (broadcasting failures)
``redeliveries``                 consumptions of retried messages (``reconsume_times`` >= 1)
``redelivered_succeeded``        ... of which SUCCESS
``retry_success_rate``           ``redelivered_succeeded / redeliveries`` (null when 0)
``time_to_success_*_ms``         SUCCESS: event time - born time of the first delivery
                                 (avg, p50, p95, max; percentiles approximate)
``forwarded``                    ScheduleService forwards (its own group; ``topic`` is the
                                 destination, e.g. ``%RETRY%<group>``)
``lateness_*_ms``                forward time - due time (avg, p95, max): is the ladder on
                                 time
================================ ==========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from adapter.constants import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HEADER_GROUP,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core.trace import SEPARATOR
from adapter.errors import ConfigError
from adapter.io.avro import (
    TRACE,
    TRACE_BATCH,
    TRACE_SCHEMA_HEADER,
    known_schemas,
    trace_batch_schema,
    trace_schema,
)

__all__ = [
    "CONSUME_STATUSES",
    "METRIC_COLUMNS",
    "consume_metrics",
    "decode_traces",
    "dlq_entries",
    "dlq_summary",
    "header",
    "logical_topic",
]

SUCCESS: Final = "SUCCESS"
RETRY: Final = "RETRY"
DLQ: Final = "DLQ"
DROPPED: Final = "DROPPED"
FORWARDED: Final = "FORWARDED"
#: Statuses that end a consumption (the consumer's events; FORWARDED is the service's).
CONSUME_STATUSES: Final = (SUCCESS, RETRY, DLQ, DROPPED)
FAILED_STATUSES: Final = (RETRY, DLQ, DROPPED)
#: RocketMQ separates several keys in ``KEYS`` with a space (``MessageConst.KEY_SEPARATOR``).
KEY_SEPARATOR: Final = " "
NONE_LABEL: Final = "(none)"

METRIC_COLUMNS: Final = (
    "window_start",
    "window_end",
    "group",
    "topic",
    "consumed",
    "succeeded",
    "failed",
    "retried",
    "retries_by_reconsume_times",
    "dlq_arrivals",
    "dropped",
    "redeliveries",
    "redelivered_succeeded",
    "retry_success_rate",
    "time_to_success_avg_ms",
    "time_to_success_p50_ms",
    "time_to_success_p95_ms",
    "time_to_success_max_ms",
    "forwarded",
    "lateness_avg_ms",
    "lateness_p95_ms",
    "lateness_max_ms",
)


# --------------------------------------------------------------------------------------------
# headers and names
# --------------------------------------------------------------------------------------------


def header(name: str, headers: str = "headers") -> Column:
    """The (last) value of Kafka header ``name`` as a UTF-8 string, null when absent."""
    matching = F.filter(F.col(headers), lambda h: h["key"] == F.lit(name))
    return F.try_element_at(matching, F.lit(-1))["value"].cast("string")


def logical_topic(kafka_topic: Column, names: Mapping[str, str]) -> Column:
    """Map physical Kafka topic names to logical ones with a literal lookup table (the
    table is small: the topics a job reads); unknown names stay as they are."""
    if not names:
        return kafka_topic
    lookup = F.create_map(*[F.lit(x) for pair in sorted(names.items()) for x in pair])
    return F.coalesce(F.try_element_at(lookup, kafka_topic), kafka_topic)


# --------------------------------------------------------------------------------------------
# traces
# --------------------------------------------------------------------------------------------


def decode_traces(raw: DataFrame, *, keep_malformed: bool = False) -> DataFrame:
    """Kafka source rows -> one row per trace event (the ``consume_trace.avsc`` fields plus
    ``event_time`` and the record's ``kafka_partition``/``kafka_offset``).

    A topic may hold both record kinds: single events (``consume_trace.avsc``, what sinks
    wrote before packing, or with ``packed=False``) and packed ones
    (``consume_trace_batch.avsc``: an array of events, and runs of events written as
    columns, exploded here into one row each -- the events first, then each run's -- all
    with the record's partition and offset).  The ``RMQ_TRACE_SCHEMA`` header names the
    writer schema of each record, which is decoded with it and resolved to the current
    schema of its kind; records without the header are read as single events with the
    current schema.  Records that do not decode (``PERMISSIVE`` mode gives null) are
    dropped unless ``keep_malformed`` (then they give one all-null row).
    """
    current = trace_schema()
    tag = header(TRACE_SCHEMA_HEADER)
    single_options = {"mode": "PERMISSIVE", "avroSchema": current.text}
    packed_options = {"mode": "PERMISSIVE", "avroSchema": trace_batch_schema().text}
    events: Column | None = None
    single = known_schemas(TRACE)
    for writer_tag, writer in sorted(single.items()):
        # a single event: an array of one, so both kinds explode alike
        value = F.array(from_avro(F.col("value"), writer.text, single_options))
        cond = tag == F.lit(writer_tag)
        if writer_tag == current.tag:
            cond = cond | tag.isNull()
        events = F.when(cond, value) if events is None else events.when(cond, value)
    # every packed writer schema resolves to the current packed schema: the record is picked
    # by its writer, and the events and runs it holds are expanded by one expression (built
    # once: each run expansion is hundreds of JVM calls to build)
    record: Column | None = None
    packed = [(t, w) for t, w in sorted(known_schemas(TRACE_BATCH).items()) if t not in single]
    for writer_tag, writer in packed:
        decoded = from_avro(F.col("value"), writer.text, packed_options)
        cond = tag == F.lit(writer_tag)
        record = F.when(cond, decoded) if record is None else record.when(cond, decoded)
    if record is not None:
        value = F.concat(record["events"], _run_events(record["runs"]))
        cond = tag.isin(*[t for t, _ in packed])
        events = F.when(cond, value) if events is None else events.when(cond, value)
    assert events is not None
    explode = F.explode_outer if keep_malformed else F.explode
    out = raw.select(
        explode(events).alias("e"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    )
    if not keep_malformed:
        # PERMISSIVE gives an all-null struct for a record that does not decode; a decoded
        # record always has its (required) event time
        out = out.where(F.col("e.event_time_ms").isNotNull())
    return out.select(
        "e.*",
        F.timestamp_millis(F.col("e.event_time_ms")).alias("event_time"),
        "kafka_partition",
        "kafka_offset",
    )


def _longs(text: Column) -> Column:
    return F.transform(F.split(text, ","), lambda x: x.cast("long"))


def _int64s(data: Column) -> Column:
    """Packed big-endian int64s (8 bytes each) -> an array of longs."""
    return F.transform(
        F.sequence(F.lit(0), (F.length(data) / 8).cast("int") - 1),
        lambda k: F.conv(F.hex(data.substr(k * 8 + 1, F.lit(8))), 16, 10).cast("bigint"),
    )


def _run_events(runs: Column) -> Column:
    """The ``ConsumeTrace`` events the ``ConsumeTraceRun`` records of a packed record stand
    for, in order (what :func:`adapter.core.trace.expand_run` gives in Python): each run's
    columns are parsed once, then one event per position."""
    parsed = F.transform(
        F.filter(runs, lambda r: r["count"] > 0),
        lambda r: F.struct(
            r.alias("r"),
            F.when(
                r["offsets"] == "",
                F.sequence(r["first_offset"], r["first_offset"] + r["count"] - 1),
            )
            .otherwise(_longs(r["offsets"]))
            .alias("o"),
            F.when(r["batch_indices"] == "", F.array())
            .otherwise(_longs(r["batch_indices"]))
            .alias("b"),
            F.when(F.length(r["timestamps"]) == 0, F.array().cast("array<bigint>"))
            .otherwise(_int64s(r["timestamps"]))
            .alias("t"),
            # the text columns (null: no record had that header; a run written with the
            # previous schema version reads them as null)
            F.split(r["msg_ids"], SEPARATOR).alias("m"),
            F.split(r["tags"], SEPARATOR).alias("g"),
            F.split(r["keys"], SEPARATOR).alias("k"),
        ),
    )

    def event(p: Column, i: Column) -> Column:
        r = p["r"]
        offset = F.element_at(p["o"], i + 1)
        msg_id = F.coalesce(
            F.nullif(F.try_element_at(p["m"], i + 1), F.lit("")),
            F.concat_ws(
                ":", r["kafka_topic"], r["partition"].cast("string"), offset.cast("string")
            ),
        )
        stamp = F.try_element_at(p["t"], i + 1)
        born = F.when(r["timestamp_type"] == 1, stamp).cast("long")
        null_int, null_long, null_str = (F.lit(None).cast(t) for t in ("int", "long", "string"))
        return F.struct(
            r["event_time_ms"].alias("event_time_ms"),
            r["source"].alias("source"),
            r["group"].alias("group"),
            r["topic"].alias("topic"),
            r["partition"].alias("partition"),
            offset.cast("long").alias("offset"),
            msg_id.alias("msg_id"),
            msg_id.alias("origin_msg_id"),
            r["status"].alias("status"),
            F.lit(0).alias("reconsume_times"),
            F.try_element_at(p["g"], i + 1).alias("tags"),
            F.try_element_at(p["k"], i + 1).alias("keys"),
            r["batch_size"].alias("batch_size"),
            F.coalesce(F.try_element_at(p["b"], i + 1).cast("int"), i % r["batch_size"]).alias(
                "batch_index"
            ),
            r["ack_index"].alias("ack_index"),
            null_int.alias("delay_level"),
            r["consume_rt_ms"].alias("consume_rt_ms"),
            born.alias("born_timestamp_ms"),
            born.alias("origin_born_timestamp_ms"),
            F.when(r["timestamp_type"].isin(1, 2), stamp).cast("long").alias("store_timestamp_ms"),
            r["consume_timestamp_ms"].alias("consume_timestamp_ms"),
            null_long.alias("lateness_ms"),
            null_str.alias("failure_type"),
            null_str.alias("failure_message"),
            null_str.alias("dlq_reason"),
        )

    return F.flatten(
        F.transform(
            parsed,
            lambda p: F.transform(F.sequence(F.lit(0), p["r"]["count"] - 1), lambda i: event(p, i)),
        )
    )


def _count(cond: Column) -> Column:
    return F.count_if(cond)


def consume_metrics(
    traces: DataFrame,
    *,
    window: str = "1 minute",
    slide: str | None = None,
    watermark: str | None = "2 minutes",
    max_tracked_reconsume: int = 32,
    with_max_event_time: bool = False,
) -> DataFrame:
    """Decoded trace events -> windowed metrics per (``group``, ``topic``); see the module
    docstring for the columns.  With a ``watermark``, events later than it are dropped and
    (in a streaming query, append mode) a window is emitted once the watermark passes its
    end.  ``with_max_event_time`` adds ``max_event_time_ms``: the newest event of the
    window (what the streaming job's table derives the watermark from)."""
    if max_tracked_reconsume < 1:
        raise ConfigError("max_tracked_reconsume", max_tracked_reconsume, "must be >= 1")
    df = traces.withWatermark("event_time", watermark) if watermark else traces
    status = F.col("status")
    rc = F.col("reconsume_times")
    consumed = status.isin(*CONSUME_STATUSES)
    succeeded = status == SUCCESS
    retried = status == RETRY
    forwarded = status == FORWARDED
    born = F.coalesce(F.col("origin_born_timestamp_ms"), F.col("born_timestamp_ms"))
    tts = F.when(succeeded, F.col("event_time_ms") - born)
    lateness = F.when(forwarded, F.col("lateness_ms"))
    folded_rc = F.least(rc, F.lit(max_tracked_reconsume))
    buckets = list(range(max_tracked_reconsume + 1))
    win = F.window("event_time", window, slide) if slide else F.window("event_time", window)
    agg = df.groupBy(win.alias("window"), "group", "topic").agg(
        _count(consumed).alias("consumed"),
        _count(succeeded).alias("succeeded"),
        _count(status.isin(*FAILED_STATUSES)).alias("failed"),
        _count(retried).alias("retried"),
        *[_count(retried & (folded_rc == k)).alias(f"_retry_rc_{k}") for k in buckets],
        _count(status == DLQ).alias("dlq_arrivals"),
        _count(status == DROPPED).alias("dropped"),
        _count(consumed & (rc >= 1)).alias("redeliveries"),
        _count(succeeded & (rc >= 1)).alias("redelivered_succeeded"),
        F.avg(tts).alias("time_to_success_avg_ms"),
        F.percentile_approx(tts, [0.5, 0.95]).alias("_tts_pct"),
        F.max(tts).alias("time_to_success_max_ms"),
        _count(forwarded).alias("forwarded"),
        F.avg(lateness).alias("lateness_avg_ms"),
        F.percentile_approx(lateness, 0.95).alias("lateness_p95_ms"),
        F.max(lateness).alias("lateness_max_ms"),
        F.max("event_time_ms").alias("_max_event_time_ms"),
    )
    by_rc = F.map_filter(
        F.map_from_arrays(
            F.array(*[F.lit(k) for k in buckets]),
            F.array(*[F.col(f"_retry_rc_{k}") for k in buckets]),
        ),
        lambda _k, v: v > 0,
    )
    return agg.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "group",
        "topic",
        "consumed",
        "succeeded",
        "failed",
        "retried",
        by_rc.alias("retries_by_reconsume_times"),
        "dlq_arrivals",
        "dropped",
        "redeliveries",
        "redelivered_succeeded",
        F.when(
            F.col("redeliveries") > 0,
            F.col("redelivered_succeeded") / F.col("redeliveries"),
        ).alias("retry_success_rate"),
        "time_to_success_avg_ms",
        F.try_element_at("_tts_pct", F.lit(1)).alias("time_to_success_p50_ms"),
        F.try_element_at("_tts_pct", F.lit(2)).alias("time_to_success_p95_ms"),
        "time_to_success_max_ms",
        "forwarded",
        "lateness_avg_ms",
        "lateness_p95_ms",
        "lateness_max_ms",
        *([F.col("_max_event_time_ms").alias("max_event_time_ms")] if with_max_event_time else []),
    )


# --------------------------------------------------------------------------------------------
# dead letters
# --------------------------------------------------------------------------------------------


def _headers_map(headers: str = "headers") -> Column:
    """Every header as ``map<string, string>`` (last value wins for repeated keys)."""
    keys = F.array_distinct(F.transform(F.col(headers), lambda h: h["key"]))
    values = F.transform(
        keys,
        lambda k: F.try_element_at(F.filter(F.col(headers), lambda h: h["key"] == k), F.lit(-1))[
            "value"
        ].cast("string"),
    )
    return F.map_from_arrays(keys, values)


def dlq_entries(raw: DataFrame, topic_names: Mapping[str, str] | None = None) -> DataFrame:
    """Kafka source rows of DLQ topics -> one row per dead letter, with the fields of
    ``dlq_export.avsc`` plus ``dlq_time`` (when it was dead-lettered, else the record
    timestamp) and ``hour`` (``dlq_time`` truncated to the hour).

    ``topic_names`` maps Kafka topic names to logical ones (``rmq.dlq.g`` -> ``%DLQ%g``);
    a name it lacks is rebuilt from the ``RMQ_GROUP`` header.
    """
    group = header(HEADER_GROUP)
    dlq_time_ms = header(HEADER_DLQ_TIME_MS).try_cast("long")
    timestamp_ms = F.unix_millis(F.col("timestamp"))
    mapped = logical_topic(F.col("topic"), topic_names or {})
    dlq_topic = (
        F.when(mapped != F.col("topic"), mapped)
        .when(group.isNotNull(), F.concat(F.lit("%DLQ%"), group))
        .otherwise(F.col("topic"))
    )
    when = F.timestamp_millis(F.coalesce(dlq_time_ms, timestamp_ms))
    return raw.select(
        dlq_topic.alias("dlq_topic"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        timestamp_ms.alias("timestamp_ms"),
        group.alias("group"),
        F.coalesce(header(PROPERTY_DLQ_ORIGIN_TOPIC), header(PROPERTY_RETRY_TOPIC)).alias(
            "origin_topic"
        ),
        header(PROPERTY_UNIQ_KEY).alias("msg_id"),
        F.coalesce(
            header(PROPERTY_DLQ_ORIGIN_MESSAGE_ID),
            header(PROPERTY_ORIGIN_MESSAGE_ID),
            header(PROPERTY_UNIQ_KEY),
        ).alias("origin_msg_id"),
        header(PROPERTY_TAGS).alias("tags"),
        header(PROPERTY_KEYS).alias("keys"),
        header(PROPERTY_RECONSUME_TIME).try_cast("int").alias("reconsume_times"),
        header(HEADER_DLQ_REASON).alias("reason"),
        header(HEADER_FAILURE_TYPE).alias("failure_type"),
        header(HEADER_FAILURE_MESSAGE).alias("failure_message"),
        dlq_time_ms.alias("dlq_time_ms"),
        F.col("key"),
        F.col("value").alias("body"),
        _headers_map().alias("headers"),
        when.alias("dlq_time"),
        F.date_trunc("hour", when).alias("hour"),
    )


#: What the DLQ summary groups by.
SUMMARY_KEYS: Final = ("origin_topic", "tags", "reason", "failure_type", "hour")


def dlq_summary(entries: DataFrame, *, top_keys: int = 3) -> DataFrame:
    """Dead letters grouped by original topic, tags, failure reason/type and hour:
    ``dead_letters``, the groups they came from, the ``reconsume_times`` range and the
    ``top_keys`` most frequent message keys (``array<struct<key, count>>``, most frequent
    first, ties by key).  Missing labels read ``(none)``; rows are ordered by hour, then
    count (descending)."""
    if top_keys < 1:
        raise ConfigError("top_keys", top_keys, "must be >= 1")
    labelled = entries.select(
        *[
            F.coalesce(F.col(c), F.lit(NONE_LABEL)).alias(c) if c != "hour" else F.col(c)
            for c in SUMMARY_KEYS
        ],
        "group",
        "keys",
        "reconsume_times",
    )
    keys = list(SUMMARY_KEYS)
    counts = labelled.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("dead_letters"),
        F.array_sort(F.collect_set("group")).alias("groups"),
        F.min("reconsume_times").alias("min_reconsume_times"),
        F.max("reconsume_times").alias("max_reconsume_times"),
    )
    per_key = (
        labelled.select(
            *keys, F.explode(F.split(F.coalesce("keys", F.lit("")), KEY_SEPARATOR)).alias("key")
        )
        .where(F.col("key") != "")
        .groupBy(*keys, "key")
        .agg(F.count(F.lit(1)).alias("count"))
    )
    rank = F.row_number().over(
        Window.partitionBy(*keys).orderBy(F.col("count").desc(), F.col("key").asc())
    )
    top = (
        per_key.withColumn("_rank", rank)
        .where(F.col("_rank") <= top_keys)
        .groupBy(*keys)
        .agg(F.array_sort(F.collect_list(F.struct("_rank", "key", "count"))).alias("_top"))
        .select(
            *[F.col(k).alias(f"_top_{k}") for k in keys],
            F.transform("_top", lambda t: F.struct(t["key"], t["count"])).alias("_top"),
        )
    )
    cond = [F.col(k).eqNullSafe(F.col(f"_top_{k}")) for k in keys]
    joined = counts.join(top, on=cond, how="left").select(
        *keys,
        "dead_letters",
        "groups",
        "min_reconsume_times",
        "max_reconsume_times",
        F.coalesce(F.col("_top"), F.array().cast("array<struct<key:string,count:bigint>>")).alias(
            "top_keys"
        ),
    )
    return joined.orderBy(F.col("hour").asc(), F.col("dead_letters").desc(), *keys[:-1])


def export_columns(entries: DataFrame) -> DataFrame:
    """The ``dlq_export.avsc`` columns of :func:`dlq_entries` (for the Avro export)."""
    from adapter.io.avro import dlq_export_schema

    return entries.select(*dlq_export_schema().field_names)
