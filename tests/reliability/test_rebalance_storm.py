"""Rebalance storm: consumer processes joining, leaving and crashing while messages fail.

Up to three child processes (each a PushConsumer with its own ScheduleService, see
``consumer_procs.py``) share one group on a six-partition topic; every tenth message fails on
its first delivery and comes back through the delay levels and the retry topic.  While the
stream is produced in waves, the storm runs: three members join one after the other, one is
killed (``SIGKILL``), a new one joins, one leaves (``SIGTERM``, a clean shutdown), another
joins, one more is killed, one more joins, one more leaves -- two survivors finish.

Checked from what was produced and what the listeners logged (fsync'd, in one append-only
file, so its line order is the order in which things happened across the processes):

* nothing is lost: every id succeeds, nothing reaches the DLQ, a message that failed first
  succeeds only through the retry topic;
* one owner per partition at a time: no listener call of one process on a partition begins
  while a call of another live process on the same partition is still running;
* no partition is left paused: after the storm a probe message on every partition of the
  topic and of the retry topic gets through, and the group's offsets reach the ends;
* the storm did happen: every process handled messages and partitions moved.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

try:
    from tests.support.rel_common import wait_until
except ModuleNotFoundError:  # pragma: no cover - if this folder becomes a package
    from tests.reliability.rel_common import wait_until

from tests.support.consumer_helpers import (
    dlq_ids,
    names,
    new_ids,
    offset_probe,
    produce,
    retry_kafka_topic,
)
from tests.support.consumer_procs import (
    ConsumerProcess,
    Record,
    fails_first,
    mark_killed,
    overlaps,
    read_log,
)
from tests.support.group_protocol import member_config

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

PARTITIONS = 6
RETRY_PARTITIONS = 2
FAIL_MOD = 10
WAVES = 10
PER_WAVE = 60
STEP_S = 3.0  # between two storm events
EVENT_AFTER_S = 0.5  # from a wave's produce to the event (its retries are still to come)


def _ok_id(prefix: str) -> str:
    """An id the listener handles at once (it does not fail on its first delivery)."""
    while True:
        msg_id = f"{prefix}-{uuid.uuid4().hex}"
        if not fails_first(msg_id, FAIL_MOD):
            return msg_id


def test_rebalance_storm_loses_nothing_keeps_one_owner_and_leaves_nothing_paused(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path, group_protocol: str
) -> None:
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("storm", partitions=PARTITIONS)
    group, ns = names()
    retry_topic = retry_kafka_topic(group)
    ids = new_ids(WAVES * PER_WAVE)
    waves = [ids[i : i + PER_WAVE] for i in range(0, len(ids), PER_WAVE)]
    failing = {i for i in ids if fails_first(i, FAIL_MOD)}
    assert failing
    log = tmp_path / "deliveries.log"
    common: dict[str, Any] = {
        "bootstrap": bs,
        "topic": topic,
        "group": group,
        "namespace": ns,
        "log": log,
        "fail_mod": FAIL_MOD,
        "slow": 0.2,  # per listener call of up to 4 messages: the storm runs mid-stream
        "service": True,
        "options": {
            "consume_message_batch_max_size": 4,
            "pull_batch_size": 8,
            "consume_thread_max": 2,
            "pull_threshold_for_queue": 16,  # flow control pauses partitions as they move
            "partitions": RETRY_PARTITIONS,
        },
        # a crashed member leaves the group in seconds, under either group protocol
        "config": {**member_config(group_protocol), "auto.commit.interval.ms": 200},
    }
    procs: dict[str, ConsumerProcess] = {}
    events: list[str] = []

    def join(name: str) -> None:
        procs[name] = ConsumerProcess(**common, name=name).start()
        procs[name].wait_started()
        events.append(f"{name} joined")

    def crash(name: str) -> None:
        procs[name].kill()
        mark_killed(log, procs[name].pid)
        events.append(f"{name} killed")

    def leave(name: str) -> None:
        assert procs[name].stop(60) == 0, procs[name].log_tail()
        events.append(f"{name} left")

    storm = [
        lambda: join("a"),
        lambda: join("b"),
        lambda: join("c"),
        lambda: crash("b"),
        lambda: join("d"),
        lambda: leave("a"),
        lambda: join("e"),
        lambda: crash("c"),
        lambda: join("f"),
        lambda: leave("d"),
    ]
    assert len(storm) == WAVES
    with offset_probe(bs, group) as probe:
        try:
            for wave, event in zip(waves, storm, strict=True):
                # each event lands while a wave is being consumed (and partly retried)
                produce(bs, topic, wave)
                time.sleep(EVENT_AFTER_S)
                event()
                alive = [n for n, p in procs.items() if p.running()]
                assert len(alive) <= 3, alive
                time.sleep(STEP_S - EVENT_AFTER_S)  # the storm's rhythm, not a wait for a condition

            def all_ok() -> bool:
                return {r.id for r in read_log(log) if r.outcome == "ok"} >= set(ids)

            try:
                wait_until(all_ok, 90, "every id handled successfully after the storm", 0.2)
            except AssertionError as exc:
                recs = read_log(log)
                missing = set(ids) - {r.id for r in recs if r.outcome == "ok"}
                raise AssertionError(
                    f"{exc}: {len(missing)} missing, e.g. "
                    f"{[[r for r in recs if r.id == m] for m in sorted(missing)[:4]]}; "
                    f"events {events}\n--- e ---\n{procs['e'].log_tail(60)}"
                ) from None
            # no partition is left paused: a probe on every partition of both topics
            probes = {p: _ok_id(f"probe{p}") for p in range(PARTITIONS)}
            for p, msg_id in probes.items():
                produce(bs, topic, [msg_id], partition=lambda _, p=p: p)
            retry_probes = {p: _ok_id(f"rprobe{p}") for p in range(RETRY_PARTITIONS)}
            for p, msg_id in retry_probes.items():
                produce(bs, retry_topic, [msg_id], partition=lambda _, p=p: p)
            everything = set(probes.values()) | set(retry_probes.values())
            wait_until(
                lambda: {r.id for r in read_log(log) if r.outcome == "ok"} >= everything,
                30,
                "a probe on every partition of the topic and the retry topic",
                0.2,
            )
            for t, count in ((topic, PARTITIONS), (retry_topic, RETRY_PARTITIONS)):
                parts = list(range(count))
                ends = probe.ends(t, parts)

                def at_ends(t: str = t, parts: list[int] = parts, ends: Any = ends) -> bool:
                    committed = probe.committed(t, parts)
                    return all(committed[p] >= ends[p] for p in parts)

                wait_until(at_ends, 30, f"the group's offsets on {t} to reach {ends}", 0.2)
            for name in ("e", "f"):
                leave(name)
        finally:
            for proc in procs.values():
                proc.close()

    records = read_log(log)
    oks: dict[str, list[Record]] = {}
    for rec in records:
        if rec.outcome == "ok":
            oks.setdefault(rec.id, []).append(rec)
    # nothing lost, nothing dead-lettered, retried messages succeed from the retry topic
    assert set(oks) >= set(ids)
    assert dlq_ids(bs, group) == []
    for msg_id in failing:
        assert all(r.reconsume_times >= 1 and r.kafka_topic == retry_topic for r in oks[msg_id])
    # one owner per partition at a time
    found_overlaps = overlaps(records)
    assert not found_overlaps, found_overlaps[:5]
    # the storm happened: every process handled messages, and partitions changed hands
    pids = {p.pid: n for n, p in procs.items()}
    handled = {pids[r.pid] for r in records if r.outcome == "ok" and r.pid in pids}
    assert handled == set(procs), (handled, events)
    owners: dict[tuple[str, int], list[int]] = {}
    for r in records:
        if r.outcome == "begin" and r.kafka_topic == topic:
            seq = owners.setdefault((r.kafka_topic, r.partition), [])
            if not seq or seq[-1] != r.pid:
                seq.append(r.pid)
    moves = sum(len(seq) - 1 for seq in owners.values())
    repeats = sum(len(rs) - 1 for rs in oks.values())
    print(
        f"storm ({group_protocol}): {events}; {moves} ownership changes, "
        f"{repeats} repeated successes"
    )
    assert moves >= PARTITIONS, owners
