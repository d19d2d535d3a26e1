"""The floor of tracing in Python: what reading what a packed trace run must carry costs per
record, beside the budget the trace rows' batch-32 target leaves (traced >= 0.8 of
untraced).  A decision aid, not a benchmark row::

    python -m adapter.bench.trace_floor                 # records built in this process
    python -m adapter.bench.trace_floor -b HOST:PORT    # records fetched from a broker, and
                                                        # the consumer untraced, reading the
                                                        # columns only, and traced

A run of plain successes (records without headers) must carry, per record, its offset
(free when consecutive) and its Kafka timestamp; to know that it is such a run the sink
must also look at each record's headers.  On the consumer's thread that is, per record, at
least: reaching the record under its view (a slot read), one ``headers()`` call, one
``timestamp()`` call (confluent-kafka builds a tuple) and the transposition of the
``(type, timestamp)`` pairs into a column -- each a C-level pass (``map``, ``any``,
``zip``), no Python frame per record.  Handing the records over unread instead keeps
GC-tracked objects alive until the sink's thread reads them (CHANGELOG.md, "Benchmark
history", the traces of 2026-11-26 before 15:39 UTC), and with one GIL the reading costs
the same on either thread.  The sink's thread then makes one run of each hand-over and
encodes it (their listener times differ, so hand-overs never share a run).

Every figure is thread CPU (``time.thread_time``), the best of ``--repeats`` passes over
``--records`` records in hand-overs of ``--run`` (a fetched run's size in the trace rows),
so it is a lower bound: inside the running consumer the same code costs more (caches
shared with librdkafka's threads and the broker).  With ``-b`` the consumer's own CPU per
message (``Bench.ours_consume``: the process's CPU over the run, as the bench's CPU
columns) untraced, with :class:`ColumnsOnly` (the consume path's side of tracing and
nothing else) and traced gives the budget: at 0.8 the traced consumer may spend at most
0.25 of the untraced CPU more a message, when (as on a loaded 2-core machine) its rate
follows its CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, Message

from adapter.bench.harness import Bench
from adapter.core.message import MessageExt, fetched_records, split_fetch
from adapter.core.trace import BATCHES, RUN, RunBuilder
from adapter.io.avro import run_encoder
from adapter.io.trace_columns import Columns, add_batch_run, batch_columns

__all__ = [
    "VARIANTS",
    "ColumnsOnly",
    "FloorReport",
    "consumer_costs",
    "floor_costs",
    "local_records",
    "main",
    "views_of",
]

#: Records in one hand-over by default: what one fetch brings per partition in the trace
#: rows (100-byte bodies, the PushConsumer's fetch settings; the sink is handed each
#: fetched run once).
DEFAULT_RUN = 110
#: The traced / untraced ratio the trace rows aim for at batch 32 (BENCHMARKS.md).
TARGET = 0.8

_TIMESTAMP: Any = Message.timestamp
_HEADERS: Any = Message.headers

FloorReport = dict[str, float]


def local_records(n: int, body: int = 100, *, topic: str = "floor") -> list[Any]:
    """``n`` confluent-kafka records built in this process: one partition, consecutive
    offsets, ``body``-byte values, CreateTime timestamps, no headers (the bench's trace
    rows' records as a consumer would fetch them, allocated one after the other)."""
    value = b"x" * body
    base = 1_700_000_000_000
    return [
        Message(topic=topic, partition=0, offset=i, value=value, timestamp=(1, base + i))
        for i in range(n)
    ]


def fetched_from(bootstrap: str, topic: str, n: int) -> list[Any]:
    """The first ``n`` records of ``topic``, consumed with a raw confluent-kafka consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"floor-{uuid.uuid4().hex[:10]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        records: list[Any] = []
        deadline = time.monotonic() + 120
        while len(records) < n and time.monotonic() < deadline:
            records.extend(r for r in consumer.consume(1000, 1.0) if r.error() is None)
    finally:
        consumer.close()
    return records[:n]


def views_of(records: Sequence[Any]) -> list[MessageExt]:
    """The consumer's views of ``records`` (one partition), as its fetch loop makes them."""
    runs, _ = split_fetch(records, lambda kafka_topic: (kafka_topic, False), {})
    return [msg for run in runs for msg in run.msgs]


def _best(step: Callable[[Any], object], parts: Sequence[Any], repeats: int) -> float:
    """The fastest of ``repeats`` passes of ``step`` over ``parts``, thread CPU seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for part in parts:
            step(part)
        best = min(best, time.thread_time() - t0)
    return best


def _transposed(records: list[Any]) -> tuple[bool, tuple[int, ...]]:
    kinds, stamps = zip(*map(_TIMESTAMP, records), strict=True)
    return kinds.count(kinds[0]) == len(records), stamps


def floor_costs(records: Sequence[Any], run: int = DEFAULT_RUN, repeats: int = 5) -> FloorReport:
    """ns per record of each step a trace of plain successes needs (see the module's
    docstring), of their sum (``floor``), of what the sink reads at a hand-over as it is
    (``handover``: :func:`~adapter.io.trace_columns.batch_columns`) and of the sink's thread
    making a run of them and encoding it (``sink``)."""
    msgs = views_of(records)
    n = len(msgs)
    if not n:
        raise ValueError("no records")
    views = [msgs[i : i + run] for i in range(0, n, run)]
    recs = [list(records[i : i + run]) for i in range(0, n, run)]
    steps: dict[str, Callable[[Any], object]] = {
        "touch": lambda part: part[:],  # each record's reference count: the least any pass does
        "slot_read": fetched_records,
        "headers": lambda part: any(map(_HEADERS, part)),
        "timestamp": lambda part: list(map(_TIMESTAMP, part)),
        "timestamp_column": _transposed,
    }
    out: FloorReport = {}
    for name, step in steps.items():
        out[name] = _best(step, views if name == "slot_read" else recs, repeats) / n * 1e9
    out["floor"] = out["slot_read"] + out["headers"] + out["timestamp_column"]

    def handover(part: list[MessageExt]) -> Columns | None:
        return batch_columns((BATCHES, "group", 0, part, 32, 1.0, 0))

    out["handover"] = _best(handover, views, repeats) / n * 1e9
    # one column item per hand-over, each its own run (their listener times differ)
    items: list[Columns] = []
    for k, part in enumerate(views):
        columns = batch_columns((BATCHES, "group", k, part, 32, 1.0 + k, k))
        if columns is None:
            raise ValueError("these records cannot be a run")
        items.append(columns)
    encode = run_encoder()

    def sink(parts: list[Columns]) -> None:
        builder = RunBuilder(1000)
        for item in parts:
            closed = add_batch_run(builder, item)
            if closed:
                encode(closed)  # type: ignore[arg-type]
        last = builder.close()
        if last is not None:
            encode(last)

    out["sink"] = _best(sink, [items], repeats) / n * 1e9
    return out


class ColumnsOnly:
    """A trace sink that reads what :class:`~adapter.io.trace_sink.KafkaTraceSink` reads at
    a hand-over (:func:`~adapter.io.trace_columns.batch_columns`) and drops it: no queue, no
    thread, no producer.  A consumer with it pays the loop's side of tracing and nothing
    else: the floor of the loop's cost inside the running consumer."""

    def __init__(self) -> None:
        self.columns = 0  # hand-overs read as columns

    def __call__(self, event: Any) -> None:
        """Events built by the caller: dropped."""

    def defer(self, pending: Any) -> None:
        """A consumer outcome or the successes of listener batches: their columns read."""
        kind = pending[0]
        if (kind is BATCHES or kind is RUN) and batch_columns(pending) is not None:
            self.columns += 1


#: The consumer variants :func:`consumer_costs` runs: untraced, the loop's side of tracing
#: only (:class:`ColumnsOnly`), traced to a topic (the bench's trace row).
VARIANTS = ("untraced", "columns_only", "traced")


def consumer_costs(
    bootstrap: str, messages: int, repeats: int
) -> tuple[list[Any], dict[str, FloorReport]]:
    """Fill a topic with ``messages`` 100-byte records; the records as fetched, and for
    each of :data:`VARIANTS` the PushConsumer's rate and CPU per message at batch 32
    (medians of ``repeats`` runs, the variants alternating as the bench's trace row runs
    them; ``ratio``: its rate over the untraced one's)."""
    bench = Bench(bootstrap, messages, repeats)
    topic = bench.topic()
    bench.fill(topic, messages, 100)
    trace_topic = f"bench-floor-trace-{uuid.uuid4().hex[:8]}"
    bench.ours_consume(topic, min(messages, 5_000), 32, trace_topic=trace_topic)  # warm-up
    options: dict[str, dict[str, Any]] = {
        "untraced": {},
        "columns_only": {"trace_sink": None},
        "traced": {"trace_topic": trace_topic},
    }
    runs: dict[str, list[Any]] = {name: [] for name in VARIANTS}
    for _ in range(repeats):
        for name in VARIANTS:
            extra = options[name]
            if "trace_sink" in extra:
                extra = {"trace_sink": ColumnsOnly()}
            runs[name].append(bench.ours_consume(topic, messages, 32, **extra))
    untraced = statistics.median(r.rate for r in runs["untraced"])
    costs = {
        name: {
            "cpu_us": statistics.median(r.cpu_us for r in done),
            "rate": statistics.median(r.rate for r in done),
            "ratio": statistics.median(r.rate for r in done) / untraced,
        }
        for name, done in runs.items()
    }
    return fetched_from(bootstrap, topic, messages), costs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m adapter.bench.trace_floor", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("-b", "--bootstrap-servers", help="fetch real records from this broker")
    parser.add_argument("--records", type=int, default=100_000, help="as the bench row")
    parser.add_argument("--run", type=int, default=DEFAULT_RUN, help="records a hand-over")
    parser.add_argument("--repeats", type=int, default=5, help="passes of each step")
    parser.add_argument("--rounds", type=int, default=3, help="consumer runs of each variant")
    args = parser.parse_args(argv)
    consumer: dict[str, FloorReport] = {}
    if args.bootstrap_servers:
        records, consumer = consumer_costs(args.bootstrap_servers, args.records, args.rounds)
    else:
        records = local_records(args.records)
    costs = floor_costs(records, args.run, args.repeats)
    where = "fetched from the broker" if args.bootstrap_servers else "built in this process"
    print(f"{len(records)} records {where}, hand-overs of {args.run}; ns a record (thread CPU):")
    for name in ("touch", "slot_read", "headers", "timestamp", "timestamp_column"):
        print(f"  {name:18s} {costs[name]:7.1f}")
    print(f"  {'floor (loop)':18s} {costs['floor']:7.1f}   slot_read + headers + timestamp_column")
    print(f"  {'hand-over as is':18s} {costs['handover']:7.1f}   batch_columns (loop)")
    print(f"  {'sink thread':18s} {costs['sink']:7.1f}   RunBuilder + run encoder")
    if consumer:
        untraced = consumer["untraced"]["cpu_us"]
        print(f"PushConsumer, batch 32, {len(records)} messages (median of {args.rounds}):")
        for name in VARIANTS:
            got = consumer[name]
            more = (got["cpu_us"] - untraced) * 1000
            print(
                f"  {name:14s} {got['rate']:9.0f} msg/s  ratio {got['ratio']:.3f}  "
                f"{got['cpu_us']:.2f} µs CPU a message (+{more:.0f} ns)"
            )
        budget = untraced * (1 / TARGET - 1) * 1000
        floor = costs["floor"] + costs["sink"]
        print(
            f"budget at {TARGET} (when the rate follows CPU): +{budget:.0f} ns a message; the "
            f"floor measured alone (loop + sink) {floor:.0f} ns = {floor / budget:.0%} of it"
        )


if __name__ == "__main__":
    main()
