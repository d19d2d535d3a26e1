"""Traces written as runs (``ConsumeTraceRun``, the columns of consecutive listener batches
of records without headers): read back, they are exactly the events the sink would have
written one by one; what cannot be a run is refused (and then derived per event); runs
join and cut where they should; the new batch schema still reads (and is read by) the
retired one."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.clients.member.outcomes import ConsumerTracer
from adapter.core.message import MessageExt, view_of
from adapter.core.trace import (
    BATCHES,
    RUN,
    RUN_FIELDS,
    TS_CREATE,
    RunBuilder,
    TraceEvent,
    batches_fields,
    expand_run,
    run_fields,
)
from adapter.errors import ConfigError
from adapter.io.avro import (
    TRACE_BATCH,
    decode,
    decode_trace_records,
    encode_trace,
    known_schemas,
    pack_traces,
    run_encoder,
    trace_batch_schema,
)
from adapter.io.trace_columns import add_batch_run
from tests.unit.kafka_fakes import FakeClock

BASE = 1_700_000_000_000


def _records(
    n: int,
    *,
    first: int = 100,
    gaps: frozenset[int] = frozenset(),
    kinds: tuple[int, ...] = (TS_CREATE,),
    headers: dict[int, list[tuple[str, bytes]]] | None = None,
    partition: int = 2,
) -> list[Message]:
    out = []
    offset = first
    for i in range(n):
        if i in gaps:
            offset += 3
        out.append(
            Message(
                topic="k-orders",
                partition=partition,
                offset=offset,
                value=b"x",
                timestamp=(kinds[i % len(kinds)], BASE + 7 * i),
                headers=(headers or {}).get(i),
            )
        )
        offset += 1
    return out


def _run(
    records: list[Message], ok: Any = None, *, now: int = BASE + 5_000, ack: int | None = None
) -> tuple[Any, ...]:
    stamp: list[int | None] = [BASE + 4_000]
    batch = [view_of(r, "orders", False, stamp) for r in records]
    indices = range(len(batch)) if ok is None else ok
    return (RUN, "g", now, batch, indices, ack, 1.5, BASE + 4_000)


def _one_by_one(runs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out = []
    for run in runs:
        for fields in run_fields(run):  # type: ignore[arg-type]
            event = TraceEvent._make(fields)
            out.append(event.to_record())
    return out


def _as_runs(runs: list[tuple[Any, ...]], max_events: int = 1000) -> tuple[list[Any], list[Any]]:
    """What the sink's thread does: runs where it can, the events one by one elsewhere."""
    builder = RunBuilder(max_events)
    closed: list[tuple[Any, ...]] = []
    single: list[tuple[Any, ...]] = []
    for run in runs:
        done = add_batch_run(builder, run)  # type: ignore[arg-type]
        if done is False:
            single.append(run)
        elif done is not None:
            closed.append(done)  # type: ignore[arg-type]
    last = builder.close()
    if last is not None:
        closed.append(last)
    return closed, single


def _decoded(closed: list[tuple[Any, ...]], single: list[tuple[Any, ...]]) -> list[Any]:
    encode = run_encoder()
    events = [
        encode_trace(TraceEvent._make(f))
        for run in single
        for f in (run_fields(run) if run[0] is RUN else batches_fields(run))  # type: ignore[arg-type]
    ]
    packed = pack_traces(events, [encode(r) for r in closed])
    return decode_trace_records(packed, trace_batch_schema().tag)


def _key(record: dict[str, Any]) -> tuple[Any, ...]:
    return record["event_time_ms"], record["offset"]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    gaps=st.frozensets(st.integers(0, 40), max_size=3),
    kinds=st.sampled_from([(1,), (2,), (0,), (1, 2)]),
    partial=st.booleans(),
    clock_step=st.integers(0, 1),
    header_mode=st.sampled_from(["none", "first", "producer", "origin"]),
)
def test_runs_read_back_as_the_events_written_one_by_one(
    *,
    sizes: list[int],
    gaps: frozenset[int],
    kinds: tuple[int, ...],
    partial: bool,
    clock_step: int,
    header_mode: str,
) -> None:
    """Records without headers, with headers on the first only, as our producer writes
    them (UNIQ_KEY, TAGS, KEYS, a repeated key, a null value, a user property), or with an
    origin id (a retried message's): read back, the same events."""
    total = sum(sizes)
    headers = {
        "none": {},
        "first": {0: [("UNIQ_KEY", b"U1"), ("TAGS", b"t")]},
        "producer": {i: _producer_headers(i) for i in range(total)},
        "origin": {i: [*_producer_headers(i), ("ORIGIN_MESSAGE_ID", b"O")] for i in range(total)},
    }[header_mode]
    records = _records(total, gaps=gaps, kinds=kinds, headers=headers)
    runs = []
    start = 0
    for j, size in enumerate(sizes):
        batch = records[start : start + size]
        ok = [i for i in range(size) if i != 1] if partial and size > 2 else None
        runs.append(_run(batch, ok, now=BASE + 5_000 + clock_step * (j // 2)))
        start += size
    closed, single = _as_runs(runs)
    assert sorted(_decoded(closed, single), key=_key) == sorted(_one_by_one(runs), key=_key)
    if header_mode == "first" and sizes[0] > 1:
        assert single  # a batch where some records have a header and some not: per event
    if header_mode == "producer" and len(set(kinds)) == 1:
        assert not single  # text columns
    if header_mode == "origin":
        assert not closed  # an origin id: per event


def _producer_headers(i: int) -> list[tuple[str, bytes | None]]:
    return [
        ("TAGS", b"first"), ("UNIQ_KEY", f"AC{i:04d}".encode()), ("TAGS", b"" if i == 2 else b"t"),
        ("KEYS", f"k{i} k\u00e9".encode()), ("color", b"red"), ("gone", None),
    ]  # fmt: skip


def test_producer_records_are_one_run_with_text_columns() -> None:
    closed, single = _as_runs(
        [_run(_records(3, headers={i: _producer_headers(i) for i in range(3)}))]
    )
    assert not single
    fields = dict(zip(RUN_FIELDS, closed[0], strict=True))
    assert fields["msg_ids"] == "AC0000\x1eAC0001\x1eAC0002"
    assert fields["tags"] == "t\x1et\x1e"
    assert fields["keys"] == "k0 k\u00e9\x1ek1 k\u00e9\x1ek2 k\u00e9"
    events = expand_run(fields)
    assert [e["msg_id"] for e in events] == [e["origin_msg_id"] for e in events]
    assert [e["tags"] for e in events] == ["t", "t", ""]


@pytest.mark.parametrize(
    "bad",
    [
        [("UNIQ_KEY", b"a\x1eb")],  # holds the separator
        [("KEYS", b"\xff")],  # not UTF-8 (the event shows U+FFFD)
        [("UNIQ_KEY", b"")],  # an empty UNIQ_KEY: the id is derived from the record
        [("RECONSUME_TIME", b"1")],
        [("RMQ_ORIGIN_BORN_MS", b"5")],
        [("RETRY_TOPIC", b"orders")],
        [],  # no UNIQ_KEY on this one only
    ],
)
def test_what_a_run_cannot_hold_is_traced_per_event(bad: list[tuple[str, bytes]]) -> None:
    headers = {0: [("UNIQ_KEY", b"U0")], 1: [*([("UNIQ_KEY", b"U1")] if bad else []), *bad]}
    runs = [_run(_records(2, headers=headers))]
    closed, single = _as_runs(runs)
    assert not closed and single
    assert sorted(_decoded(closed, single), key=_key) == sorted(_one_by_one(runs), key=_key)


def test_empty_values_of_other_headers_read_as_absent() -> None:
    empty = [("UNIQ_KEY", b"U"), ("RECONSUME_TIME", b""), ("ORIGIN_MESSAGE_ID", b"")]
    runs = [_run(_records(1, headers={0: empty}))]
    closed, single = _as_runs(runs)
    assert closed and not single
    assert _decoded(closed, single) == _one_by_one(runs)


def test_whole_batches_with_consecutive_offsets_join_into_one_run() -> None:
    records = _records(64)
    runs = [_run([r]) for r in records]  # batch=1: one hand-over per message
    closed, single = _as_runs(runs)
    assert not single
    assert len(closed) == 1
    fields = dict(zip(RUN_FIELDS, closed[0], strict=True))
    assert fields["count"] == 64
    assert fields["offsets"] == fields["batch_indices"] == ""  # nothing per event but stamps
    assert fields["timestamps"] == b"".join((BASE + 7 * i).to_bytes(8, "big") for i in range(64))


@pytest.mark.parametrize(
    ("change", "runs"),
    [
        ({"now": BASE + 6_000}, 2),  # another event time
        ({"ack": 0}, 2),  # another ack index
        ({}, 1),
    ],
)
def test_a_batch_that_differs_opens_a_new_run(change: dict[str, Any], runs: int) -> None:
    records = _records(8)
    closed, _ = _as_runs([_run(records[:4]), _run(records[4:], **change)])
    assert len(closed) == runs


def test_runs_stay_within_the_event_cap() -> None:
    closed, _ = _as_runs([_run([r]) for r in _records(25)], max_events=10)
    assert [dict(zip(RUN_FIELDS, c, strict=True))["count"] for c in closed] == [10, 10, 5]


def test_a_gap_in_offsets_keeps_them_as_a_column() -> None:
    closed, _ = _as_runs([_run(_records(5, gaps=frozenset({2})))])
    fields = dict(zip(RUN_FIELDS, closed[0], strict=True))
    assert fields["offsets"] == "100,101,105,106,107"


def test_what_a_record_does_not_say_is_not_a_run() -> None:
    """A local redelivery (one delivery more than its record says), a message built from
    fields (no Kafka record), mixed timestamp types: derived per event."""
    plain = _run(_records(3))
    redelivered = (*plain[:3], [m.redelivered() for m in plain[3]], *plain[4:])
    built = MessageExt(topic="orders", body=b"", msg_id="M", queue_id=0, queue_offset=1,
                       kafka_topic="k-orders")  # fmt: skip
    from_fields = (*plain[:3], [built], range(1), *plain[5:])
    mixed = _run(_records(2, kinds=(1, 2)))
    for run in (redelivered, from_fields, mixed):
        assert add_batch_run(RunBuilder(10), run) is False  # type: ignore[arg-type]


def test_a_batch_without_successes_adds_nothing() -> None:
    builder = RunBuilder(10)
    assert add_batch_run(builder, _run(_records(3), [])) is None  # type: ignore[arg-type]
    assert builder.close() is None


def test_builder_refuses_a_cap_below_one() -> None:
    with pytest.raises(ConfigError):
        RunBuilder(0)


def test_run_bytes_are_what_fastavro_writes() -> None:
    closed, _ = _as_runs([_run(_records(5, gaps=frozenset({3})), [0, 2, 3]), _run(_records(2))])
    records = [dict(zip(RUN_FIELDS, c, strict=True)) for c in closed]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, trace_batch_schema().parsed, {"events": [], "runs": records})
    assert pack_traces([], [run_encoder()(c) for c in closed]) == buf.getvalue()


def test_expand_run_of_a_log_append_run_has_no_born_time() -> None:
    run = dict(zip(RUN_FIELDS, _as_runs([_run(_records(2, kinds=(2,)))])[0][0], strict=True))
    events = expand_run(run)
    assert [e["born_timestamp_ms"] for e in events] == [None, None]
    assert [e["store_timestamp_ms"] for e in events] == [BASE, BASE + 7]
    assert [e["msg_id"] for e in events] == ["k-orders:2:100", "k-orders:2:101"]


def test_the_retired_batch_schema_and_the_new_one_read_each_other() -> None:
    """Packs written before runs existed decode with the new reader (no runs); a pack
    with runs decodes with the retired reader (its events, without the runs': an old
    reader does not know them)."""
    current = trace_batch_schema()
    (retired,) = [
        s
        for t, s in known_schemas(TRACE_BATCH).items()
        if t != current.tag and "runs" not in s.text
    ]
    event = TraceEvent(BASE, "consumer", "g", "orders", 0, 1, "m", "m", "SUCCESS", 0)  # type: ignore[arg-type]
    old = pack_traces([encode_trace(event)])[:-1]  # the retired layout: events only
    assert decode(retired, old)["events"][0]["msg_id"] == "m"
    assert decode_trace_records(old, retired.tag) == [event._replace(status="SUCCESS")._asdict()]  # type: ignore[arg-type]
    closed, _ = _as_runs([_run(_records(2))])
    new = pack_traces([encode_trace(event)], [run_encoder()(c) for c in closed])
    assert decode(current, new, reader=retired) == {"events": decode(retired, old)["events"]}
    assert len(decode_trace_records(new, current.tag)) == 3
    assert json.loads(current.text)["fields"][1]["default"] == []


# -- whole batches in one hand-over ------------------------------------------------------------


class _Deferring:
    def __init__(self) -> None:
        self.pending: list[Any] = []

    def __call__(self, event: TraceEvent) -> None:
        raise AssertionError("a deferring sink is handed tuples")

    def defer(self, pending: Any) -> None:
        self.pending.append(pending)


def test_whole_batches_are_one_hand_over_with_the_same_events() -> None:
    stamp: list[int | None] = [BASE + 4_000]
    msgs = [view_of(r, "orders", False, stamp) for r in _records(6)]
    events: list[TraceEvent] = []
    deferring = _Deferring()
    clock = FakeClock(9.0)
    ConsumerTracer(events.append, name="c", group="g", clock=clock).emit_batches(msgs, 3, 0.5)
    ConsumerTracer(deferring, name="c", group="g", clock=clock).emit_batches(msgs, 3, 0.5)
    assert len(deferring.pending) == 1
    (item,) = deferring.pending
    assert [TraceEvent._make(f) for f in batches_fields(item)] == events
    assert [(e.batch_size, e.batch_index, e.offset) for e in events] == [
        (3, i % 3, 100 + i) for i in range(6)
    ]
    closed, single = _as_runs([item])
    assert not single and len(closed) == 1
    assert _decoded(closed, []) == [e.to_record() for e in events]


@pytest.mark.parametrize("headers", [None, {4: [("KEYS", b"k")]}])
def test_whole_batches_and_single_batches_join_or_fall_back(headers: Any) -> None:
    stamp: list[int | None] = [BASE + 4_000]
    records = _records(8, headers=headers)
    msgs = [view_of(r, "orders", False, stamp) for r in records]
    whole = (BATCHES, "g", BASE + 5_000, msgs[:6], 2, 1.5, BASE + 4_000)
    tail = (RUN, "g", BASE + 5_000, msgs[6:], range(2), None, 1.5, BASE + 4_000)
    closed, single = _as_runs([whole, tail])
    want = [dict(zip(TraceEvent._fields, f, strict=True)) for f in batches_fields(whole)]
    want += [dict(zip(TraceEvent._fields, f, strict=True)) for f in run_fields(tail)]  # type: ignore[arg-type]
    for w in want:
        w["status"] = w["status"].value
    got = _decoded(closed, [])
    if headers is None:
        assert len(closed) == 1  # the tail batch has the same size: the run goes on
        assert got == want
    else:
        assert single == [whole] and len(closed) == 1


def test_runs_with_and_without_text_columns_read_across_schema_versions() -> None:
    """The previous version (runs without text columns) reads a run with them (its other
    columns); the current one reads a run written before (text columns null: ids derived
    from the records)."""
    current = trace_batch_schema()
    (previous,) = [
        s for t, s in known_schemas(TRACE_BATCH).items() if t != current.tag and "runs" in s.text
    ]
    runs = [_run(_records(2, headers={i: _producer_headers(i) for i in range(2)}))]
    closed, _ = _as_runs(runs)
    new = pack_traces([], [run_encoder()(c) for c in closed])
    (old_run,) = decode(current, new, reader=previous)["runs"]
    assert "msg_ids" not in old_run and old_run["count"] == 2
    old_fields = {k: v for k, v in old_run.items()}
    old = fastavro_bytes(previous, {"events": [], "runs": [old_fields]})
    assert [e["msg_id"] for e in decode_trace_records(old, previous.tag)] == [
        "k-orders:2:100",
        "k-orders:2:101",
    ]
    assert [e["msg_id"] for e in decode_trace_records(new, current.tag)] == ["AC0000", "AC0001"]


def fastavro_bytes(schema: Any, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema.parsed, record)
    return buf.getvalue()


def test_a_text_column_of_the_wrong_length_is_refused() -> None:
    from adapter.errors import InvalidInputError

    closed, _ = _as_runs([_run(_records(2, headers={i: _producer_headers(i) for i in range(2)}))])
    fields = dict(zip(RUN_FIELDS, closed[0], strict=True))
    with pytest.raises(InvalidInputError):
        expand_run({**fields, "keys": "only-one"})


@pytest.mark.parametrize(
    "second",
    [
        [("UNIQ_KEY", b"U1"), ("TAGS", None)],  # a null value where the first has one
        [("UNIQ_KEY", b""), ("TAGS", b"t")],  # an empty id where the first has one
    ],
)
def test_a_null_value_or_an_empty_id_in_the_same_layout_is_traced_per_event(
    second: list[tuple[str, bytes | None]],
) -> None:
    headers: dict[int, Any] = {0: [("UNIQ_KEY", b"U0"), ("TAGS", b"t")], 1: second}
    runs = [_run(_records(2, headers=headers))]
    closed, single = _as_runs(runs)
    assert not closed and single
    assert sorted(_decoded(closed, single), key=_key) == sorted(_one_by_one(runs), key=_key)


def test_records_with_more_headers_than_others_still_make_a_run_by_name() -> None:
    headers: dict[int, Any] = {
        0: [("UNIQ_KEY", b"U0"), ("TAGS", b"a")],
        1: [("X-APP", b"1"), ("UNIQ_KEY", b"U1"), ("TAGS", b"b")],
        2: [("TAGS", b"c"), ("UNIQ_KEY", b"U2")],  # same names, another order
    }
    runs = [_run(_records(3, headers=headers))]
    closed, single = _as_runs(runs)
    assert not single and len(closed) == 1
    fields = dict(zip(RUN_FIELDS, closed[0], strict=True))
    assert (fields["msg_ids"], fields["tags"]) == ("U0\x1eU1\x1eU2", "a\x1eb\x1ec")
    assert _decoded(closed, single) == _one_by_one(runs)


def test_timestamps_of_batches_of_many_lengths_read_back_in_order() -> None:
    """The builder packs each batch's timestamps in one call, with a packer per batch
    length (a bounded set of them): batches of 80 different lengths, one run each."""
    builder = RunBuilder(10_000)
    key = ("g", BASE, "orders", "k-orders", 0, 0, None, 1.0, BASE, TS_CREATE, (False,) * 3)
    offset, closed = 0, []
    for n in range(1, 81):
        stamps = [BASE + offset + i for i in range(n)]
        done = builder.add((*key[:5], n, *key[6:]), offset, n, None, None, stamps)
        if done is not None:
            closed.append(done)
        offset += n
    last = builder.close()
    assert last is not None
    closed.append(last)
    events = [e for run in closed for e in expand_run(dict(zip(RUN_FIELDS, run, strict=True)))]
    assert [e["store_timestamp_ms"] for e in events] == [BASE + i for i in range(offset)]
    assert [e["offset"] for e in events] == list(range(offset))


def test_a_local_redelivery_is_not_handed_over_as_fetched_batches() -> None:
    """Whole batches are read without looking for local redeliveries (a fetched run has
    none); a redelivered message comes in a batch of its own and is checked."""
    records = _records(1)
    again = view_of(records[0], "orders", False, [BASE + 4_000]).redelivered()
    retry = (RUN, "g", BASE + 5_000, [again], range(1), None, 1.5, BASE + 4_000)
    closed, single = _as_runs([retry])
    assert not closed and single == [retry]
    assert [e["reconsume_times"] for e in _decoded(closed, single)] == [1]
