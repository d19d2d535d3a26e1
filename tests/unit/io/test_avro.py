"""Avro trace and DLQ-export schemas: golden bytes, round trips, evolution rules."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.core.trace import TraceEvent, TraceStatus
from adapter.io import avro as schemas
from adapter.io.avro import (
    TRACE_SCHEMA_HEADER,
    AvroSchema,
    check_evolution,
    decode,
    decode_trace,
    dlq_export_schema,
    encode,
    encode_trace,
    known_schemas,
    trace_record,
    trace_schema,
)

ROOT = Path(__file__).resolve().parents[3]

FULL = TraceEvent(
    event_time_ms=1_700_000_000_123,
    source="consumer",
    group="g1",
    topic="orders",
    partition=2,
    offset=42,
    msg_id="MID-1",
    origin_msg_id="ORIG-1",
    status=TraceStatus.RETRY,
    reconsume_times=3,
    tags="TagA",
    keys="k1 k2",
    batch_size=4,
    batch_index=1,
    ack_index=0,
    delay_level=6,
    consume_rt_ms=1.5,
    born_timestamp_ms=1_700_000_000_000,
    origin_born_timestamp_ms=1_699_999_990_000,
    store_timestamp_ms=1_700_000_000_001,
    consume_timestamp_ms=1_700_000_000_100,
    failure_type="ValueError",
    failure_message="boom",
)
FULL_HEX = (
    "f6a1abfef96210636f6e73756d65720467310c6f726465727304540a4d49442d310c4f5249472d3104060208"
    "54616741020a6b31206b3208020200020c02000000000000f83f0280a0abfef96202e083aafef9620282a0ab"
    "fef96202c8a1abfef96200021456616c75654572726f720208626f6f6d00"
)

MINIMAL = TraceEvent(1, "consumer", "g", "t", 0, 0, "m", "m", TraceStatus.SUCCESS, 0)
# zig-zag varints and length-prefixed strings, field by field (Avro spec):
MINIMAL_BYTES = bytes.fromhex(
    "02"  # event_time_ms = 1
    "10"
    + b"consumer".hex()  # source: length 8
    + "02"
    + b"g".hex()  # group
    + "02"
    + b"t".hex()  # topic
    + "00"  # partition 0
    + "00"  # offset 0
    + "02"
    + b"m".hex()  # msg_id
    + "02"
    + b"m".hex()  # origin_msg_id
    + "02"  # status: enum index 1 = SUCCESS (0 is UNKNOWN)
    + "00"  # reconsume_times 0
    + "00" * 2  # tags, keys: union branch 0 = null
    + "02"  # batch_size 1
    + "00"  # batch_index 0
    + "00" * 11  # ack_index .. dlq_reason: null
)


def test_golden_bytes_minimal_event() -> None:
    assert encode_trace(MINIMAL) == MINIMAL_BYTES


def test_golden_bytes_full_event() -> None:
    assert encode_trace(FULL).hex() == FULL_HEX


@pytest.mark.parametrize("event", [MINIMAL, FULL], ids=["minimal", "full"])
def test_round_trip(event: TraceEvent) -> None:
    record = decode_trace(encode_trace(event), trace_schema().tag)
    assert record == event.to_record()
    assert TraceEvent(**{**record, "status": TraceStatus(record["status"])}) == event


_LONGS = st.integers(-(2**63), 2**63 - 1)
_INTS = st.integers(-(2**31), 2**31 - 1)
_TEXT = st.text(max_size=40)
_EVENTS = st.builds(
    TraceEvent,
    event_time_ms=_LONGS,
    source=_TEXT,
    group=_TEXT,
    topic=_TEXT,
    partition=_INTS,
    offset=_LONGS,
    msg_id=_TEXT,
    origin_msg_id=_TEXT,
    status=st.sampled_from(TraceStatus),
    reconsume_times=_INTS,
    tags=st.none() | _TEXT,
    keys=st.none() | _TEXT,
    batch_size=_INTS,
    batch_index=_INTS,
    ack_index=st.none() | _INTS,
    delay_level=st.none() | _INTS,
    consume_rt_ms=st.none() | st.floats(allow_nan=False),
    born_timestamp_ms=st.none() | _LONGS,
    origin_born_timestamp_ms=st.none() | _LONGS,
    store_timestamp_ms=st.none() | _LONGS,
    consume_timestamp_ms=st.none() | _LONGS,
    lateness_ms=st.none() | _LONGS,
    failure_type=st.none() | _TEXT,
    failure_message=st.none() | _TEXT,
    dlq_reason=st.none() | _TEXT,
)


@settings(max_examples=300, deadline=None)
@given(_EVENTS)
def test_compiled_writer_writes_what_fastavro_writes(event: TraceEvent) -> None:
    """The sink's writer is compiled from the schema; fastavro is the reference."""
    assert schemas.compile_encoder(trace_schema()) is not None
    expected = encode(trace_schema(), trace_record(event))
    assert encode_trace(event) == expected
    assert encode_trace(event) == expected  # again: the recent-value cache gives the same bytes
    assert decode_trace(expected) == event.to_record()


@pytest.mark.parametrize(
    "bad",
    [
        MINIMAL._replace(msg_id=None),
        MINIMAL._replace(event_time_ms=2**63),
        MINIMAL._replace(status="EXPIRED"),
        MINIMAL._replace(tags=7),
    ],
    ids=["null-required-string", "long-overflow", "unknown-symbol", "wrong-type"],
)
def test_compiled_writer_refuses_bad_fields(bad: Any) -> None:
    with pytest.raises((AttributeError, ValueError, KeyError, TypeError)):
        encode_trace(bad)


def test_compiler_declines_unsupported_schemas() -> None:
    raw = json.loads(trace_schema().text)
    raw["fields"].append({"name": "extra", "type": ["null", "string", "long"], "default": None})
    text = json.dumps(raw)
    assert schemas.compile_encoder(schemas._build("x", text)) is None


def test_every_status_round_trips() -> None:
    for status in TraceStatus:
        event = TraceEvent(5, "consumer", "g", "t", 0, 0, "m", "m", status, 1)
        assert decode_trace(encode_trace(event))["status"] == status.value


def test_record_matches_schema_fields() -> None:
    """Every TraceEvent field is in the schema, in the same order (and nothing else)."""
    assert tuple(trace_record(MINIMAL)) == trace_schema().field_names


def test_schema_parsed_once_and_fingerprinted() -> None:
    assert schemas.load_schema("consume_trace") is trace_schema()
    tag = trace_schema().tag
    assert tag.startswith("io.rmqkafka.trace.ConsumeTrace/")
    assert len(tag.rsplit("/", 1)[1]) == 16
    assert tag in known_schemas("consume_trace")
    assert TRACE_SCHEMA_HEADER == "RMQ_TRACE_SCHEMA"


def test_unknown_writer_schema_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown trace schema"):
        decode_trace(encode_trace(MINIMAL), "io.rmqkafka.trace.ConsumeTrace/0000000000000000")


@pytest.mark.parametrize("name", ["consume_trace", "consume_trace_batch", "dlq_export"])
def test_repository_copy_is_identical(name: str) -> None:
    """schemas/ (the contract) and the copy shipped in the package never drift apart."""
    shipped = Path(schemas.__file__).parent / "schemas" / f"{name}.avsc"
    assert (ROOT / "schemas" / f"{name}.avsc").read_bytes() == shipped.read_bytes()


def test_dlq_export_round_trip() -> None:
    record: dict[str, Any] = {
        "dlq_topic": "%DLQ%g1",
        "kafka_topic": "rmq.dlq.g1",
        "partition": 1,
        "offset": 7,
        "timestamp_ms": 1_700_000_000_000,
        "group": "g1",
        "origin_topic": "orders",
        "msg_id": "MID",
        "origin_msg_id": "ORIG",
        "tags": "TagA",
        "keys": "k1",
        "reconsume_times": 16,
        "reason": "MAX_RECONSUME_TIMES",
        "failure_type": "ValueError",
        "failure_message": "bad",
        "dlq_time_ms": 1_700_000_000_500,
        "key": b"\x00k",
        "body": b"\xffbody",
        "headers": {"TAGS": "TagA", "EMPTY": None},
    }
    schema = dlq_export_schema()
    assert decode(schema, encode(schema, record)) == record
    sparse = {"dlq_topic": "%DLQ%g", "kafka_topic": "rmq.dlq.g", "partition": 0, "offset": 0}
    decoded = decode(schema, encode(schema, sparse))
    assert decoded["headers"] == {} and decoded["body"] is None


# --- evolution --------------------------------------------------------------------------------


def _evolved(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(json.loads(trace_schema().text))
    fields = raw["fields"]
    if "add" in changes:
        fields.append(changes["add"])
    if "drop" in changes:
        raw["fields"] = [f for f in fields if f["name"] != changes["drop"]]
    if "retype" in changes:
        name, new_type = changes["retype"]
        next(f for f in raw["fields"] if f["name"] == name)["type"] = new_type
    if "symbol" in changes:
        status = next(f for f in raw["fields"] if f["name"] == "status")
        status["type"]["symbols"].append(changes["symbol"])
    return raw


def _schema(raw: dict[str, Any]) -> AvroSchema:
    return schemas._build("consume_trace", json.dumps(raw))


V2 = _evolved(
    add={"name": "consumer_host", "type": ["null", "string"], "default": None},
    symbol="EXPIRED",
)


def test_compatible_change_passes_the_rules() -> None:
    assert check_evolution(json.loads(trace_schema().text), V2) == []


def test_new_reader_reads_old_data_with_defaults() -> None:
    v2 = _schema(V2)
    record = decode(trace_schema(), encode_trace(FULL), reader=v2)
    assert record["consumer_host"] is None
    assert {k: v for k, v in record.items() if k != "consumer_host"} == FULL.to_record()


def test_old_reader_reads_new_data() -> None:
    v2 = _schema(V2)
    new = {**trace_record(FULL), "consumer_host": "host-1", "status": "EXPIRED"}
    data = encode(v2, new)
    assert v2.tag != trace_schema().tag
    record = decode(v2, data, reader=trace_schema())
    assert record["status"] == "UNKNOWN"  # the enum default for a symbol it does not know
    assert "consumer_host" not in record
    assert record["msg_id"] == FULL.msg_id


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"add": {"name": "x", "type": "string"}}, "added without a default"),
        ({"drop": "msg_id"}, "removed but had no default"),
        ({"retype": ("partition", "long")}, "cannot be read"),
        ({"retype": ("tags", ["null", "string", "int"])}, "cannot be read"),
    ],
)
def test_breaking_changes_are_caught(change: dict[str, Any], problem: str) -> None:
    problems = check_evolution(json.loads(trace_schema().text), _evolved(**change))
    assert any(problem in p for p in problems), problems


def test_enum_symbols_need_a_default() -> None:
    old = json.loads(trace_schema().text)
    del next(f for f in old["fields"] if f["name"] == "status")["type"]["default"]
    new = _evolved(symbol="EXPIRED")
    assert any("enum symbols" in p for p in check_evolution(old, new))


def test_every_retired_schema_evolves_safely() -> None:
    current = json.loads(trace_schema().text)
    for tag, schema in known_schemas("consume_trace").items():
        assert check_evolution(json.loads(schema.text), current) == [], tag


def test_negative_zero_after_zero_is_written_as_itself() -> None:
    """The writer memoizes field bytes by value, and ``0.0 == -0.0``: found by the property
    test above (an rt of ``-0.0`` written as ``0.0`` after a ``0.0``)."""
    base = TraceEvent(
        1, "s", "g", "t", 0, 0, "m", "o", TraceStatus.SUCCESS, 0, None, None, 1, 0,
        None, None, 0.0, None, None, None, None, None, None, None, None,
    )  # fmt: skip
    for rt in (0.0, -0.0, 0.0):
        event = base._replace(consume_rt_ms=rt)
        assert encode_trace(event) == encode(trace_schema(), trace_record(event))
