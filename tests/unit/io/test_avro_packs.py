"""Packed consume traces: where runs are cut, the packed record's bytes and both record kinds
decoded back."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.core.trace import (
    TraceEvent,
    TraceStatus,
    plan_packs,
)
from adapter.errors import AdapterError, ConfigError
from adapter.io.avro import (
    TRACE_BATCH,
    check_evolution,
    decode_trace_records,
    encode_trace,
    known_schemas,
    pack_traces,
    trace_batch_schema,
    trace_record,
    trace_schema,
)


def _event(i: int, **kw: Any) -> TraceEvent:
    base = TraceEvent(
        1_700_000_000_000 + i, "consumer", "g", "orders", i % 3, i, f"id-{i}", f"id-{i}",
        TraceStatus.SUCCESS, 0,
    )  # fmt: skip
    return base._replace(**kw)


def test_packs_cut_at_the_event_cap() -> None:
    assert plan_packs([10] * 7, 3, 1_000) == [3, 6, 7]


def test_packs_cut_before_the_byte_cap() -> None:
    assert plan_packs([40, 40, 40, 10, 90], 100, 100) == [2, 4, 5]


def test_an_oversized_event_is_a_pack_of_its_own() -> None:
    assert plan_packs([10, 500, 10], 100, 100) == [1, 2, 3]


def test_nothing_to_pack() -> None:
    assert plan_packs([], 10, 10) == []


@pytest.mark.parametrize(("events", "size"), [(0, 10), (10, 0), (-1, 5)])
def test_caps_below_one_are_refused(events: int, size: int) -> None:
    with pytest.raises(ConfigError) as err:
        plan_packs([1], events, size)
    assert isinstance(err.value, AdapterError)


@given(
    sizes=st.lists(st.integers(1, 300), max_size=200),
    max_events=st.integers(1, 50),
    max_bytes=st.integers(1, 2_000),
)
def test_packs_cover_the_run_in_order_within_the_caps(
    sizes: list[int], max_events: int, max_bytes: int
) -> None:
    ends = plan_packs(sizes, max_events, max_bytes)
    starts = [0, *ends][: len(ends)]
    assert (ends[-1] if ends else 0) == len(sizes)
    for start, end in zip(starts, ends, strict=True):
        assert 1 <= end - start <= max_events
        assert sum(sizes[start:end]) <= max_bytes or end - start == 1
        if end < len(sizes):  # not cut early: the next event would break a cap
            assert end - start == max_events or sum(sizes[start : end + 1]) > max_bytes


def test_batch_schema_embeds_the_single_event_schema() -> None:
    """The packed record's element is consume_trace.avsc itself: they evolve together."""
    batch = json.loads(trace_batch_schema().text)
    assert batch["fields"][0]["type"]["items"] == json.loads(trace_schema().text)
    assert trace_batch_schema().fullname == "io.rmqkafka.trace.ConsumeTraceBatch"
    assert trace_batch_schema().tag != trace_schema().tag


@pytest.mark.parametrize("n", [0, 1, 63, 64, 200])
def test_packed_bytes_are_what_fastavro_writes(n: int) -> None:
    events = [_event(i, tags="T" if i % 2 else None, consume_rt_ms=0.25) for i in range(n)]
    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf, trace_batch_schema().parsed, {"events": [trace_record(e) for e in events]}
    )
    assert pack_traces([encode_trace(e) for e in events]) == buf.getvalue()


def test_both_record_kinds_decode_to_the_events() -> None:
    events = [_event(i, status=TraceStatus.RETRY, delay_level=3) for i in range(5)]
    packed = pack_traces([encode_trace(e) for e in events])
    assert decode_trace_records(packed, trace_batch_schema().tag) == [e.to_record() for e in events]
    single = encode_trace(events[0])
    assert decode_trace_records(single, trace_schema().tag) == [events[0].to_record()]
    assert decode_trace_records(single, None) == [events[0].to_record()]


def test_every_retired_batch_schema_evolves_safely() -> None:
    current = json.loads(trace_batch_schema().text)
    for tag, schema in known_schemas(TRACE_BATCH).items():
        assert check_evolution(json.loads(schema.text), current) == [], tag
