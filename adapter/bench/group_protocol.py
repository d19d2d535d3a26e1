"""Benchmark rows of the PushConsumer in a group of the consumer group protocol
(``group.protocol=consumer``, KIP-848): the no-op listener and 1 % failing, each against a
raw confluent-kafka loop in a group of the same protocol (the classic rows are
``consumer`` and ``failures``)."""

from __future__ import annotations

from adapter.bench.harness import CONSUMER_SCALE, Bench, Scenario

__all__ = ["CONSUMER_PROTOCOL", "consumer_protocol_scenarios"]

#: The group settings of these rows.
CONSUMER_PROTOCOL = {"group.protocol": "consumer"}


def consumer_protocol_scenarios(bench: Bench) -> list[Scenario]:
    """All-success at batch 1 and 32 (``CONSUMER_SCALE`` times ``--messages``, as the
    classic ``consumer`` rows) and 1 % failing at batch 32 (half ``--messages``, as the
    classic ``failures`` row), under ``group.protocol=consumer``."""
    out = []
    n = bench.n * CONSUMER_SCALE
    for batch in (1, 32):
        sc = Scenario(f"consume all-success batch={batch} body=100B group.protocol=consumer")
        topic = bench.topic()
        bench.fill(topic, n, 100)
        for _ in range(bench.repeats):
            sc.raw.append(bench.raw_consume(topic, n, batch, group_config=CONSUMER_PROTOCOL))
            sc.ours.append(bench.ours_consume(topic, n, batch, group_config=CONSUMER_PROTOCOL))
        out.append(sc)
    fail_every, batch = 100, 32
    sc = Scenario(
        f"consume 1% failing batch={batch} body=100B group.protocol=consumer "
        "(first delivery + send-back)"
    )
    topic = bench.topic()
    n = bench.n // 2
    bench.fill(topic, n, 100)
    for _ in range(bench.repeats):
        sc.raw.append(
            bench.raw_consume(topic, n, batch, fail_every, group_config=CONSUMER_PROTOCOL)
        )
        sc.ours.append(
            bench.ours_consume(
                topic, n, batch, fail_every=fail_every, group_config=CONSUMER_PROTOCOL
            )
        )
    out.append(sc)
    return out
