"""The pure Spark transformations on small in-memory DataFrames (a real local Spark)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Message
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from adapter.analytics import transforms
from adapter.analytics.kafka_source import KAFKA_SOURCE_SCHEMA
from adapter.analytics.testing import shared_spark
from adapter.core.message import view_of
from adapter.core.trace import (
    BATCHES,
    RUN,
    RunBuilder,
    TraceEvent,
    TraceStatus,
    batches_fields,
    run_fields,
)
from adapter.io import avro as schemas
from adapter.io.avro import TRACE_SCHEMA_HEADER, encode, encode_trace, trace_schema
from adapter.io.trace_columns import add_batch_run

pytestmark = pytest.mark.spark

S = TraceStatus
BASE = 1_700_000_040_000  # 2023-11-14 22:14:00 UTC: a minute boundary
TAG = trace_schema().tag


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return shared_spark()


def ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def raw(
    spark: SparkSession,
    values: Sequence[bytes],
    headers: Sequence[list[tuple[str, bytes | None]]] | None = None,
    *,
    topic: str = "RMQ_SYS_TRACE_TOPIC",
    timestamp_ms: int = BASE,
) -> DataFrame:
    rows = [
        (
            None,
            v,
            topic,
            0,
            i,
            ts(timestamp_ms),
            0,
            headers[i] if headers is not None else [(TRACE_SCHEMA_HEADER, TAG.encode())],
        )
        for i, v in enumerate(values)
    ]
    return spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA)


def consume(
    i: int,
    status: TraceStatus,
    rc: int,
    *,
    group: str = "g",
    topic: str = "orders",
    at: int = 0,
    born: int | None = None,
    **kw: Any,
) -> TraceEvent:
    return TraceEvent(
        BASE + at,
        "consumer",
        group,
        topic,
        0,
        i,
        f"m{i}",
        f"o{i}",
        status,
        rc,
        origin_born_timestamp_ms=born,
        born_timestamp_ms=BASE,
        **kw,
    )


def forward(
    at: int, offset: int, msg_id: str, *, lateness_ms: int, partition: int = 0
) -> TraceEvent:
    return TraceEvent(
        at,
        "schedule-service",
        "svc",
        "%RETRY%g",
        partition,
        offset,
        msg_id,
        msg_id,
        S.FORWARDED,
        1,
        delay_level=3,
        lateness_ms=lateness_ms,
    )


COUNTS = ("consumed", "succeeded", "failed", "retried", "dlq_arrivals", "dropped",
          "redeliveries", "redelivered_succeeded", "forwarded")  # fmt: skip


def metrics_row(
    start: dt.datetime, end: dt.datetime, group: str, topic: str, **values: Any
) -> tuple[Any, ...]:
    """A consume_metrics row: counts default to 0, the map to {}, the rest to None."""
    row: dict[str, Any] = dict.fromkeys(transforms.METRIC_COLUMNS)
    row.update(dict.fromkeys(COUNTS, 0), retries_by_reconsume_times={})
    row.update(window_start=start, window_end=end, group=group, topic=topic, **values)
    assert set(row) == set(transforms.METRIC_COLUMNS)
    return tuple(row[c] for c in transforms.METRIC_COLUMNS)


# --- decoding ---------------------------------------------------------------------------------


def test_decode_traces(spark: SparkSession) -> None:
    events = [
        consume(1, S.SUCCESS, 0, tags="A", keys="k1 k2", consume_rt_ms=2.5, at=10),
        consume(2, S.DLQ, 3, dlq_reason="MAX_RECONSUME_TIMES", failure_type="E", at=20),
        forward(BASE, 9, "m3", lateness_ms=12, partition=1),
    ]
    out = transforms.decode_traces(raw(spark, [encode_trace(e) for e in events]))
    blank = dict.fromkeys(["tags", "keys", "consume_rt_ms", "dlq_reason", "lateness_ms"])
    rows = [
        {**blank, "group": "g", "topic": "orders", "msg_id": "m1", "status": "SUCCESS",
         "reconsume_times": 0, "tags": "A", "keys": "k1 k2", "consume_rt_ms": 2.5,
         "delay_level": None, "event_time": ts(BASE + 10), "kafka_offset": 0},
        {**blank, "group": "g", "topic": "orders", "msg_id": "m2", "status": "DLQ",
         "reconsume_times": 3, "dlq_reason": "MAX_RECONSUME_TIMES", "delay_level": None,
         "event_time": ts(BASE + 20), "kafka_offset": 1},
        {**blank, "group": "svc", "topic": "%RETRY%g", "msg_id": "m3", "status": "FORWARDED",
         "reconsume_times": 1, "delay_level": 3, "lateness_ms": 12, "event_time": ts(BASE),
         "kafka_offset": 2},
    ]  # fmt: skip
    cols = list(rows[0])
    expected = spark.createDataFrame(
        [tuple(r[c] for c in cols) for r in rows], out.select(*cols).schema
    )
    assertDataFrameEqual(out.select(*cols), expected)
    assert out.columns[: len(trace_schema().field_names)] == list(trace_schema().field_names)


def test_decode_drops_malformed_records(spark: SparkSession) -> None:
    good = encode_trace(consume(1, S.SUCCESS, 0))
    df = raw(spark, [good, b"\x01", b""], [[], [], []])  # no header: the current schema
    assert [r.msg_id for r in transforms.decode_traces(df).collect()] == ["m1"]
    kept = transforms.decode_traces(df, keep_malformed=True)
    assert kept.count() == 3
    assert kept.where(F.col("event_time_ms").isNull()).count() == 2


def test_decode_resolves_each_writer_schema(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic holding records of two schema versions: each is read with the writer schema
    its header names and resolved to the current one."""
    v2_raw = json.loads(trace_schema().text)
    v2_raw["fields"].append({"name": "host", "type": ["null", "string"], "default": None})
    next(f for f in v2_raw["fields"] if f["name"] == "status")["type"]["symbols"].append("EXPIRED")
    v2 = schemas._build("consume_trace", json.dumps(v2_raw))
    known = {TAG: trace_schema(), v2.tag: v2}
    monkeypatch.setattr(transforms, "known_schemas", lambda _name: known)
    old = encode_trace(consume(1, S.RETRY, 2))
    new = encode(v2, {**schemas.trace_record(consume(2, S.SUCCESS, 0)), "host": "h1"})
    newer = encode(v2, {**schemas.trace_record(consume(3, S.SUCCESS, 0)), "status": "EXPIRED"})
    df = raw(
        spark,
        [old, new, newer],
        [[(TRACE_SCHEMA_HEADER, t.encode())] for t in (TAG, v2.tag, v2.tag)],
    )
    out = transforms.decode_traces(df).select("msg_id", "status", "reconsume_times")
    assertDataFrameEqual(
        out,
        spark.createDataFrame(
            [("m1", "RETRY", 2), ("m2", "SUCCESS", 0), ("m3", "UNKNOWN", 0)], out.schema
        ),
    )
    assert "host" not in transforms.decode_traces(df).columns


def test_decode_explodes_packed_records_beside_single_ones(spark: SparkSession) -> None:
    """A topic holding single records (older sinks) and packed ones: one row per event,
    the same rows as if every event had its own record."""
    events = [consume(i, S.SUCCESS if i % 3 else S.RETRY, i % 2, at=i) for i in range(1, 8)]
    packed_tag = schemas.trace_batch_schema().tag
    values = [
        encode_trace(events[0]),
        schemas.pack_traces([encode_trace(e) for e in events[1:4]]),
        schemas.pack_traces([]),  # an empty pack: no rows
        encode_trace(events[4]),
        schemas.pack_traces([encode_trace(e) for e in events[5:]]),
    ]
    tags = [TAG, packed_tag, packed_tag, TAG, packed_tag]
    df = raw(spark, values, [[(TRACE_SCHEMA_HEADER, t.encode())] for t in tags])
    fields = list(trace_schema().field_names)
    got = transforms.decode_traces(df)
    single = transforms.decode_traces(raw(spark, [encode_trace(e) for e in events]))
    assertDataFrameEqual(got.select(*fields), single.select(*fields))
    assert [r.kafka_offset for r in got.orderBy("msg_id").collect()] == [0, 1, 1, 1, 3, 4, 4]
    assert transforms.decode_traces(df, keep_malformed=True).count() == 8  # + the empty pack


def _traffic() -> tuple[list[tuple[Any, ...]], list[TraceEvent]]:
    """Listener batches over records without headers (whole and partial successes, create
    and log-append times, a gap in the offsets, one record with headers among them) and
    over records as our producer writes them (UNIQ_KEY, TAGS, KEYS: text columns; one
    with an ORIGIN_MESSAGE_ID: per event) as the consumer hands them to the sink, and the
    events the sink used to write one by one."""
    stamps: list[int | None] = [BASE + 500]

    def headers(i: int) -> list[tuple[str, bytes | None]] | None:
        if i == 7:
            return [("UNIQ_KEY", b"U7")]
        if i < 18:
            return None
        out: list[tuple[str, bytes | None]] = [
            ("TAGS", b"old"), ("UNIQ_KEY", f"U{i}".encode()), ("TAGS", b"" if i == 19 else b"t"),
            ("KEYS", f"k{i} k".encode()), ("color", None),
        ]  # fmt: skip
        return [*out, ("ORIGIN_MESSAGE_ID", b"O1")] if i == 25 else out

    records = [
        Message(topic="k-orders", partition=1, offset=10 + i + (4 if i > 9 else 0), value=b"x",
                timestamp=(2 if 14 <= i < 18 else 1, BASE - 3_000 + 100 * i),
                headers=headers(i))
        for i in range(27)
    ]  # fmt: skip
    msgs = [view_of(r, "orders", False, stamps) for r in records]
    items: list[tuple[Any, ...]] = [
        (BATCHES, "g", BASE + 1_000, msgs[:6], 2, 0.5, BASE + 500),
        (RUN, "g", BASE + 1_000, msgs[6:9], range(3), None, 0.5, BASE + 500),  # headers
        (RUN, "g", BASE + 61_000, msgs[9:13], [0, 2, 3], 1, 0.25, BASE + 500),  # window 2
        (BATCHES, "g", BASE + 61_000, msgs[13:18], 5, 0.25, BASE + 500),  # mixed stamps
        (BATCHES, "g", BASE + 61_000, msgs[18:24], 3, 0.25, BASE + 500),  # text columns
        (BATCHES, "g", BASE + 61_000, msgs[24:27], 3, 0.25, BASE + 500),  # an origin id
    ]
    events = []
    for item in items:
        rows = batches_fields(item) if item[0] is BATCHES else run_fields(item)  # type: ignore[arg-type]
        events += [TraceEvent._make(f) for f in rows]
    return items, events


def test_runs_decode_to_the_rows_of_the_same_events_written_one_by_one(
    spark: SparkSession,
) -> None:
    """The same traffic written as runs (what the sink writes now), as packed events and as
    single records: decode_traces gives the same rows, consume_metrics the same output."""
    items, events = _traffic()
    builder = RunBuilder(1_000)
    runs, single = [], []
    for item in items:
        done = add_batch_run(builder, item)  # type: ignore[arg-type]
        if done is False:
            rows = batches_fields(item) if item[0] is BATCHES else run_fields(item)  # type: ignore[arg-type]
            single += [encode_trace(TraceEvent._make(f)) for f in rows]
        elif done is not None:
            runs.append(schemas.run_encoder()(done))  # type: ignore[arg-type]
    last = builder.close()
    assert last is not None
    runs.append(schemas.run_encoder()(last))
    assert len(runs) >= 2 and single  # both kinds are in the test
    packed_tag = schemas.trace_batch_schema().tag.encode()
    df = raw(
        spark,
        [schemas.pack_traces(single, runs), schemas.pack_traces([])],  # + an empty pack
        [[(TRACE_SCHEMA_HEADER, packed_tag)]] * 2,
    )
    fields = list(trace_schema().field_names)
    got = transforms.decode_traces(df)
    one_by_one = transforms.decode_traces(raw(spark, [encode_trace(e) for e in events]))
    assertDataFrameEqual(got.select(*fields), one_by_one.select(*fields))
    assert got.count() == len(events) == 26
    assertDataFrameEqual(
        transforms.consume_metrics(got, window="1 minute"),
        transforms.consume_metrics(one_by_one, window="1 minute"),
    )


def test_a_pack_in_the_retired_layout_still_decodes(spark: SparkSession) -> None:
    """Packs written before runs existed (the retired ConsumeTraceBatch, events only)."""
    current = schemas.trace_batch_schema()
    (retired,) = [
        s
        for t, s in schemas.known_schemas(schemas.TRACE_BATCH).items()
        if t != current.tag and "runs" not in s.text
    ]
    events = [consume(i, S.SUCCESS, 0, at=i) for i in range(1, 4)]
    old = schemas.pack_traces([encode_trace(e) for e in events])[:-1]  # no runs array
    df = raw(spark, [old], [[(TRACE_SCHEMA_HEADER, retired.tag.encode())]])
    fields = list(trace_schema().field_names)
    single = transforms.decode_traces(raw(spark, [encode_trace(e) for e in events]))
    assertDataFrameEqual(transforms.decode_traces(df).select(*fields), single.select(*fields))


# --- consume metrics --------------------------------------------------------------------------


def _metrics_input(spark: SparkSession, events: Sequence[TraceEvent]) -> DataFrame:
    return transforms.decode_traces(raw(spark, [encode_trace(e) for e in events]))


def test_consume_metrics_exact(spark: SparkSession) -> None:
    born = BASE - 1000
    events = [
        # window 1 (BASE .. BASE+60s), g/orders
        consume(1, S.SUCCESS, 0, at=1_000, born=born),  # tts 2000
        consume(2, S.RETRY, 0, at=2_000, delay_level=3),
        consume(3, S.RETRY, 0, at=3_000, delay_level=3),
        consume(2, S.SUCCESS, 1, at=12_000, born=born),  # tts 13000
        consume(3, S.RETRY, 1, at=13_000, delay_level=4),
        consume(3, S.DLQ, 2, at=40_000, dlq_reason="MAX_RECONSUME_TIMES"),
        consume(4, S.DLQ, 0, at=41_000, dlq_reason="LISTENER_REQUESTED"),
        # window 1, another group on the same topic, broadcasting
        consume(5, S.DROPPED, 0, group="b", at=5_000),
        # window 1, the ScheduleService
        forward(BASE + 11_000, 1, "m2", lateness_ms=10),
        forward(BASE + 12_500, 2, "m3", lateness_ms=30),
        # window 2
        consume(6, S.SUCCESS, 0, at=61_000, born=BASE + 60_500),  # tts 500
    ]
    out = transforms.consume_metrics(_metrics_input(spark, events), window="1 minute")
    assert tuple(out.columns) == transforms.METRIC_COLUMNS
    w1, w2, w3 = ts(BASE), ts(BASE + 60_000), ts(BASE + 120_000)
    rows = [
        metrics_row(w1, w2, "g", "orders", consumed=7, succeeded=2, failed=5, retried=3,
                    retries_by_reconsume_times={0: 2, 1: 1}, dlq_arrivals=2, redeliveries=3,
                    redelivered_succeeded=1, retry_success_rate=1 / 3,
                    time_to_success_avg_ms=7500.0, time_to_success_p50_ms=2000,
                    time_to_success_p95_ms=13000, time_to_success_max_ms=13000),
        metrics_row(w1, w2, "b", "orders", consumed=1, failed=1, dropped=1),
        metrics_row(w1, w2, "svc", "%RETRY%g", forwarded=2, lateness_avg_ms=20.0,
                    lateness_p95_ms=30, lateness_max_ms=30),
        metrics_row(w2, w3, "g", "orders", consumed=1, succeeded=1,
                    time_to_success_avg_ms=500.0, time_to_success_p50_ms=500,
                    time_to_success_p95_ms=500, time_to_success_max_ms=500),
    ]  # fmt: skip
    expected = spark.createDataFrame(rows, out.schema)
    assertDataFrameEqual(out, expected)


def test_retry_counts_fold_above_the_tracked_maximum(spark: SparkSession) -> None:
    events = [consume(i, S.RETRY, rc, at=i) for i, rc in enumerate([0, 1, 2, 5, 40])]
    out = transforms.consume_metrics(
        _metrics_input(spark, events), window="1 hour", max_tracked_reconsume=2
    )
    (row,) = out.collect()
    assert row.retries_by_reconsume_times == {0: 1, 1: 1, 2: 3}
    assert row.retried == 5
    with pytest.raises(ValueError, match="max_tracked_reconsume"):
        transforms.consume_metrics(_metrics_input(spark, events), max_tracked_reconsume=0)


def test_sliding_windows_count_an_event_in_each(spark: SparkSession) -> None:
    events = [consume(1, S.SUCCESS, 0, at=30_000)]
    out = transforms.consume_metrics(
        _metrics_input(spark, events), window="1 minute", slide="30 seconds", watermark=None
    )
    assert sorted(r.succeeded for r in out.collect()) == [1, 1]


# --- headers and names ------------------------------------------------------------------------


def test_header_last_value_wins_and_missing_is_null(spark: SparkSession) -> None:
    df = raw(spark, [b"x", b"y"], [[("A", b"1"), ("A", b"2"), ("B", None)], []])
    out = df.select(
        transforms.header("A").alias("a"),
        transforms.header("B").alias("b"),
        transforms.header("C").alias("c"),
    )
    assert [tuple(r) for r in out.collect()] == [("2", None, None), (None, None, None)]


def test_logical_topic_mapping(spark: SparkSession) -> None:
    df = spark.createDataFrame([("rmq.dlq.g_2Ex",), ("plain",)], "topic string")
    out = df.select(transforms.logical_topic(F.col("topic"), {"rmq.dlq.g_2Ex": "%DLQ%g.x"}))
    assert [r[0] for r in out.collect()] == ["%DLQ%g.x", "plain"]
    assert transforms.logical_topic(F.col("topic"), {}) is not None


# --- dead letters -----------------------------------------------------------------------------

HOUR = 1_700_002_800_000  # 2023-11-14 23:00:00 UTC


#: origin topic, tags, keys, reason, failure type, RECONSUME_TIME, RMQ_DLQ_TIME_MS
DLQ_CASES = [
    ("orders", "A", "k1 k2", "MAX_RECONSUME_TIMES", "ValueError", "16", HOUR + 1),
    ("orders", "A", "k1", "MAX_RECONSUME_TIMES", "ValueError", "16", HOUR + 2),
    ("orders", "A", "k3", "MAX_RECONSUME_TIMES", "ValueError", "16", HOUR + 3),
    ("orders", "A", "k2", "MAX_RECONSUME_TIMES", "ValueError", "oops", HOUR + 4),
    ("orders", None, None, "LISTENER_REQUESTED", "Rejected", "0", HOUR + 5),
    ("pay", "B", "p1", "MAX_RECONSUME_TIMES", "KeyError", "3", HOUR + 3_600_000),
]


def _dlq_headers(case: tuple[Any, ...]) -> list[tuple[str, bytes | None]]:
    origin, tags, keys, reason, failure, rc, at = case
    values = {
        "DLQ_ORIGIN_TOPIC": origin,
        "TAGS": tags,
        "KEYS": keys,
        "RMQ_DLQ_REASON": reason,
        "RMQ_FAILURE_TYPE": failure,
        "RMQ_FAILURE_MESSAGE": f"{failure}: boom",
        "RECONSUME_TIME": rc,
        "RMQ_DLQ_TIME_MS": str(at),
        "RMQ_GROUP": "g",
        "UNIQ_KEY": f"id-{at}",
    }
    return [(k, v.encode()) for k, v in values.items() if v is not None]


DLQ_HEADERS = [_dlq_headers(c) for c in DLQ_CASES]


def test_dlq_entries(spark: SparkSession) -> None:
    df = raw(spark, [b"body"] * len(DLQ_HEADERS), DLQ_HEADERS, topic="rmq.dlq.g")
    out = transforms.dlq_entries(df, {"rmq.dlq.g": "%DLQ%g"})
    first = out.orderBy("offset").first()
    assert first is not None
    assert first.dlq_topic == "%DLQ%g" and first.kafka_topic == "rmq.dlq.g"
    assert first.origin_topic == "orders" and first.group == "g"
    assert first.reason == "MAX_RECONSUME_TIMES" and first.failure_type == "ValueError"
    assert first.reconsume_times == 16 and first.dlq_time_ms == HOUR + 1
    assert first.msg_id == first.origin_msg_id == f"id-{HOUR + 1}"
    assert first.headers["TAGS"] == "A" and first.body == bytearray(b"body")
    # a malformed RECONSUME_TIME is null, not an error
    assert [r.reconsume_times for r in out.orderBy("offset").collect()][3] is None
    # without a name table the group header rebuilds the logical name
    unmapped = transforms.dlq_entries(df).select("dlq_topic").distinct().collect()
    assert [r.dlq_topic for r in unmapped] == ["%DLQ%g"]
    exported = transforms.export_columns(out)
    assert tuple(exported.columns) == schemas.dlq_export_schema().field_names


def test_dlq_summary(spark: SparkSession) -> None:
    df = raw(spark, [b"body"] * len(DLQ_HEADERS), DLQ_HEADERS, topic="rmq.dlq.g")
    out = transforms.dlq_summary(transforms.dlq_entries(df), top_keys=2)
    h1, h2 = ts(HOUR), ts(HOUR + 3_600_000)
    rows = [
        ("orders", "A", "MAX_RECONSUME_TIMES", "ValueError", h1, 4, ["g"], 16, 16,
         [("k1", 2), ("k2", 2)]),
        ("orders", "(none)", "LISTENER_REQUESTED", "Rejected", h1, 1, ["g"], 0, 0, []),
        ("pay", "B", "MAX_RECONSUME_TIMES", "KeyError", h2, 1, ["g"], 3, 3, [("p1", 1)]),
    ]  # fmt: skip
    expected = spark.createDataFrame(rows, out.schema)
    assertDataFrameEqual(out, expected, checkRowOrder=True)
    with pytest.raises(ValueError, match="top_keys"):
        transforms.dlq_summary(transforms.dlq_entries(df), top_keys=0)
