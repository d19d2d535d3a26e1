"""Benchmark rows of the SimpleConsumer's share backend across processes: 1, 2 and 4
consumer processes of one share group on **one** partition (what a classic group cannot
do: a partition has one owner there), each ``receive(32)`` + ``ack`` of every message,
against the same number of raw confluent-kafka ``ShareConsumer`` processes with explicit
acknowledgement.

Each consumer runs in a process of its own (``python -m adapter.bench --share-worker``), so
the interpreter lock does not join them. The children build and subscribe their consumer,
say so, and start receiving together when told; each reports how many messages it took,
when it took its first and its last (the system-wide monotonic clock) and its CPU time.
The row's rate is all messages over the span from the first message any process took to the
last; its CPU per message is the children's CPU summed over all messages.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import confluent_kafka

from adapter.bench.harness import CONSUMER_SCALE, Run, Scenario, noop_listener
from adapter.bench.share import BATCH, earliest_share_group
from adapter.clients.simple.simple_consumer import SimpleConsumer

if TYPE_CHECKING:
    from adapter.bench.harness import Bench

__all__ = ["share_scaling_scenarios", "share_worker"]

#: Consumer processes per row.
PROCESSES = (1, 2, 4)
#: A child stops once it has received nothing for this long (the others took the rest).
IDLE_S = 3.0
#: ... or, having received nothing at all, after this long.
FIRST_WAIT_S = 30.0


def share_scaling_scenarios(bench: Bench, size: int = 100) -> list[Scenario]:
    """One row per process count, ours and raw alternating ``bench.repeats`` times on one
    pre-filled one-partition topic (each run a new share group from the earliest offset)."""
    n = bench.n * CONSUMER_SCALE
    topic = bench.topic()
    bench.fill(topic, n, size)
    rows = []
    for k in PROCESSES:
        sc = Scenario(
            f"SimpleConsumer(share) {k} process(es), one partition, receive/ack batch={BATCH}"
            f" body={size}B ({n} msgs)"
        )
        for _ in range(bench.repeats):
            sc.raw.append(_in_processes(bench, "raw", topic, n, k))
            sc.ours.append(_in_processes(bench, "ours", topic, n, k))
        sc.extra["processes"] = k
        rows.append(sc)
    if rows and rows[0].ours:
        one = rows[0].summary()
        for sc in rows[1:]:
            s = sc.summary()
            sc.extra["ours_vs_1_process"] = round(s["ours_msgs_per_s"] / one["ours_msgs_per_s"], 2)
            sc.extra["raw_vs_1_process"] = round(s["raw_msgs_per_s"] / one["raw_msgs_per_s"], 2)
    return rows


def _in_processes(bench: Bench, kind: str, topic: str, n: int, k: int) -> Run:
    group = earliest_share_group(bench, f"share-{kind}{k}")
    bootstrap = str(bench.config["bootstrap.servers"])
    cmd = [sys.executable, "-m", "adapter.bench", "--share-worker", kind, bootstrap, topic, group]
    children = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(k)
    ]
    try:
        for child in children:  # each has its consumer subscribed
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"share worker {kind} did not start")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = [json.loads(child.communicate(timeout=600)[0]) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    took = [r for r in reports if r["count"]]
    count = sum(r["count"] for r in reports)
    if count < n:
        raise RuntimeError(f"{k} share {kind} process(es) took {count} of {n} messages")
    span = max(r["last"] for r in took) - min(r["first"] for r in took)
    return Run(count / max(span, 1e-9), sum(r["cpu"] for r in reports) / count * 1e6)


def share_worker(kind: str, bootstrap: str, topic: str, group: str) -> None:
    """A child: subscribe, say ``ready``, wait for ``go``, then receive and acknowledge
    until nothing came for :data:`IDLE_S`; print what it took as one JSON line."""
    config = {"bootstrap.servers": bootstrap}
    receive: Any
    if kind == "raw":
        c: Any = confluent_kafka.ShareConsumer(
            {
                **config,
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": BATCH,
            }
        )
        c.subscribe([topic])
        accept = confluent_kafka.AcknowledgeType.ACCEPT

        def receive() -> int:
            records = [m for m in c.poll(0.5) or () if m.error() is None]
            noop_listener(records)
            for m in records:
                c.acknowledge(m, accept)
            return len(records)

        close = c.close
    else:
        sc = SimpleConsumer(
            config,
            group,
            backend="share",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            partitions=1,
            await_duration=0.5,
        )
        sc.subscribe(topic)
        sc.start()

        def receive() -> int:
            views = sc.receive(BATCH, 20)
            noop_listener(views)
            for view in views:
                sc.ack(view)
            return len(views)

        close = sc.shutdown
    print("ready", flush=True)
    sys.stdin.readline()
    cpu0 = time.process_time()
    count, first, last = 0, 0.0, 0.0
    started = time.monotonic()
    while True:
        got = receive()
        now = time.monotonic()
        if got:
            count += got
            first = first or now
            last = now
        elif (count and now - last > IDLE_S) or (not count and now - started > FIRST_WAIT_S):
            break  # the others took the rest (or everything)
    cpu = time.process_time() - cpu0
    close()
    print(json.dumps({"count": count, "first": first, "last": last, "cpu": cpu}), flush=True)
