"""Benchmark rows of the PushConsumer with a listener that never fails: all-success at
batch 1 and 32 (and 1 kB bodies), the same listener forced onto the worker pool, and a
listener that blocks, each against raw confluent-kafka (or the ideal rate) in the same run."""

from __future__ import annotations

from adapter.bench.harness import CONSUMER_SCALE, Bench, Run, Scenario

__all__ = ["blocking_scenario", "consumer_scenarios", "pool_scenarios"]


def consumer_scenarios(bench: Bench, size: int, batches: tuple[int, ...]) -> list[Scenario]:
    """All-success rows over ``CONSUMER_SCALE`` times ``--messages``: the raw loop reads
    100 000 records in about 0.1 s, too short to measure past the fetch ramp-up."""
    out = []
    n = bench.n * CONSUMER_SCALE
    for batch in batches:
        sc = Scenario(f"consume all-success batch={batch} body={size}B ({n} msgs)")
        topic = bench.topic()
        bench.fill(topic, n, size)
        for _ in range(bench.repeats):
            sc.raw.append(bench.raw_consume(topic, n, batch))
            sc.ours.append(bench.ours_consume(topic, n, batch))
        out.append(sc)
    return out


def pool_scenarios(bench: Bench) -> list[Scenario]:
    """The same no-op listener forced onto the worker pool (a hand-off per batch)."""
    out = []
    for batch in (1, 32):
        sc = Scenario(f"consume all-success batch={batch} body=100B listener_mode=POOL")
        topic = bench.topic()
        bench.fill(topic, bench.n // 2, 100)
        for _ in range(bench.repeats):
            sc.raw.append(bench.raw_consume(topic, bench.n // 2, batch))
            sc.ours.append(bench.ours_consume(topic, bench.n // 2, batch, listener_mode="POOL"))
        out.append(sc)
    return out


def blocking_scenario(bench: Bench, threads: int = 20, block_s: float = 0.010) -> Scenario:
    """A listener that blocks ``block_s`` per batch (batch 1) on ``threads`` workers;
    the baseline is the ideal ``threads / block_s`` batches per second."""
    ideal = threads / block_s
    n = int(ideal * 3)  # about three seconds of work at the ideal rate
    sc = Scenario(
        f"consume blocking listener {block_s * 1000:.0f} ms/batch, "
        f"consume_thread_max={threads}, batch=1 (baseline: {ideal:.0f} batches/s)"
    )
    topic = bench.topic()
    bench.fill(topic, n, 100)
    for _ in range(bench.repeats):
        sc.raw.append(Run(ideal, 0.0))
        sc.ours.append(bench.ours_consume(topic, n, 1, consume_thread_max=threads, block_s=block_s))
    return sc
