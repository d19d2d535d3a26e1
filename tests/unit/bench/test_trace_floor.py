"""The trace-floor decision aid (:mod:`adapter.bench.trace_floor`) on records built in the
process: its columns-only sink reads what the Kafka sink reads at a hand-over (and refuses
what cannot be a run), and the floor report has every step, the floor their sum."""

from __future__ import annotations

import pytest
from confluent_kafka import Message

from adapter.bench.trace_floor import ColumnsOnly, floor_costs, local_records, views_of
from adapter.core.trace import BATCHES, RUN

pytestmark = pytest.mark.unit


def test_local_records_are_consecutive_plain_records() -> None:
    records = local_records(5, body=10)
    assert [r.offset() for r in records] == [0, 1, 2, 3, 4]
    assert {r.headers() for r in records} == {None}
    assert records[0].value() == b"x" * 10
    assert records[3].timestamp()[0] == records[0].timestamp()[0]
    assert records[3].timestamp()[1] == records[0].timestamp()[1] + 3
    assert [m.queue_offset for m in views_of(records)] == [0, 1, 2, 3, 4]


def test_columns_only_reads_runs_of_plain_records() -> None:
    sink = ColumnsOnly()
    msgs = views_of(local_records(64))
    sink.defer((BATCHES, "g", 0, msgs, 32, 1.0, 0))
    sink.defer((RUN, "g", 0, msgs[:32], range(32), None, 1.0, 0))
    assert sink.columns == 2


def test_columns_only_skips_what_cannot_be_a_run() -> None:
    sink = ColumnsOnly()
    retried = Message(
        topic="t", partition=0, offset=0, value=b"", timestamp=(1, 1),
        headers=[("RECONSUME_TIME", b"2")],
    )  # fmt: skip
    sink.defer((BATCHES, "g", 0, views_of([retried]), 1, 1.0, 0))
    sink.defer(("g", 0, None, None, None, None, None, None))  # one event: not read
    sink(object())  # an event built by the caller: dropped
    assert sink.columns == 0


def test_floor_is_the_sum_of_its_steps() -> None:
    costs = floor_costs(local_records(2_000), run=100, repeats=1)
    steps = ("touch", "slot_read", "headers", "timestamp", "timestamp_column")
    assert all(costs[name] > 0 for name in (*steps, "handover", "sink"))
    assert costs["floor"] == pytest.approx(
        costs["slot_read"] + costs["headers"] + costs["timestamp_column"]
    )
