"""Benchmark rows of the PushConsumer with a share of the messages failing (``ack_index``:
the failed message and the rest of its batch go back to the retry topic), against a raw
loop that produces the same records, with the same headers, to a side topic."""

from __future__ import annotations

from adapter.bench.harness import Bench, Scenario

__all__ = ["failure_scenarios"]


def failure_scenarios(bench: Bench, rows: tuple[tuple[int, int], ...]) -> list[Scenario]:
    """One row per ``(percent failing, batch size)``."""
    out = []
    for pct, batch in rows:
        fail_every = max(1, round(100 / pct))
        sc = Scenario(
            f"consume {pct}% failing batch={batch} body=100B (first delivery + send-back)"
        )
        topic = bench.topic()
        n = bench.n // 2
        bench.fill(topic, n, 100)
        for _ in range(bench.repeats):
            sc.raw.append(bench.raw_consume(topic, n, batch, fail_every))
            sc.ours.append(bench.ours_consume(topic, n, batch, fail_every))
        out.append(sc)
    return out
