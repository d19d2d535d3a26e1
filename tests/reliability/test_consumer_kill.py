"""``kill -9`` of a consumer process at three points, again and again.

Each test runs one kill point for several rounds on one group: a child process (a
PushConsumer and its own ScheduleService, see ``consumer_procs.py``) consumes a stream in
which every tenth message fails on its first delivery, and SIGKILLs itself at the point once
it has handled a few dozen messages; the next round starts a new process on the same group;
a last, unkilled process finishes the stream.  The points:

* ``listener``: in the middle of a listener call (part of the batch logged as handled);
* ``returned``: a few ms after a listener call returned, before the auto-commit that would
  cover it (``auto.commit.interval.ms`` is 100 ms);
* ``committed``: in the ``on_commit`` callback right after a commit reached the broker.

Checked from what was produced, what the listeners logged (fsync'd before they go on) and
what the group committed (sampled every 100 ms by a probe that never joins the group):

* nothing is lost: every id is handled successfully, nothing reaches the DLQ, a message that
  failed first succeeds only through the retry topic;
* duplicates are bounded by what was in flight: within one process nothing succeeds twice; a
  message handled again by a later process sits at or above its partition's committed offset
  when the earlier process died, and per kill their number stays under the in-flight window;
* committed offsets never go back (the topic and the retry topic, across every kill and
  restart), and each new process re-reads from the committed offsets, never below;
* each kill happened where it says: a batch cut short; a returned batch left uncommitted
  (in at least one round); the offsets of the last commit are exactly what the group holds.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

try:
    from tests.support.rel_common import FULL, wait_until
except ModuleNotFoundError:  # pragma: no cover - if this folder becomes a package
    from tests.reliability.rel_common import FULL, wait_until

from tests.support.consumer_helpers import (
    dlq_ids,
    names,
    new_ids,
    offset_probe,
    produce,
    retry_kafka_topic,
)
from tests.support.consumer_procs import ConsumerProcess, Record, fails_first, read_log

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

PARTITIONS = 3
RETRY_PARTITIONS = 2
PULL_BATCH = 8
THREADS = 2
BATCH = 4
FAIL_MOD = 10
ROUNDS = 5 if FULL else 3
PER_ROUND = 100
#: Each listener call takes this long (the child's ``slow``: per batch).
SLOW_S = 0.02
#: The child's ``auto.commit.interval.ms``, in seconds.
COMMIT_INTERVAL_S = 0.1
#: What one process can have in flight when it dies (see the bound in the test): a fetch per
#: partition, twice the listeners' batches, and what the listeners settle in one auto-commit
#: interval (THREADS listeners, BATCH messages each SLOW_S).
IN_FLIGHT_BOUND = (
    PULL_BATCH * PARTITIONS
    + 2 * THREADS * BATCH
    + round(THREADS * BATCH / SLOW_S * COMMIT_INTERVAL_S)
)

Offsets = dict[str, dict[int, int]]


class _Sampler:
    """The group's committed offsets on the topic and the retry topic, every 100 ms."""

    def __init__(self, probe: Any, topic: str, retry_topic: str) -> None:
        self.probe, self.topic, self.retry_topic = probe, topic, retry_topic
        self.samples: list[tuple[float, Offsets]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-sampler", daemon=True)

    def sample(self) -> Offsets:
        return {
            self.topic: self.probe.committed(self.topic, list(range(PARTITIONS))),
            self.retry_topic: self.probe.committed(self.retry_topic, list(range(RETRY_PARTITIONS))),
        }

    def record(self) -> Offsets:
        """Sample now, keep it in the history and return it."""
        now = self.sample()
        self.samples.append((time.monotonic(), now))
        return now

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(Exception):
                self.record()

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("point", ["listener", "returned", "committed"])
def test_kill9_at_a_point_repeatedly_loses_nothing_and_never_commits_backwards(
    point: str, kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory(f"k9{point}", partitions=PARTITIONS)
    group, ns = names()
    retry_topic = retry_kafka_topic(group)
    # a fresh wave per round (and one for the last process): every round has traffic to
    # handle past its kill point, whatever the rounds before it left
    waves = [new_ids(PER_ROUND) for _ in range(ROUNDS + 1)]
    ids = [i for wave in waves for i in wave]
    where: dict[str, tuple[int, int]] = {}
    failing = {i for i in ids if fails_first(i, FAIL_MOD)}
    assert failing, "the hash must pick some ids to fail"
    log = tmp_path / "deliveries.log"
    rng = random.Random(f"{point}-{len(ids)}")
    common: dict[str, Any] = {
        "bootstrap": bs,
        "topic": topic,
        "group": group,
        "namespace": ns,
        "log": log,
        "fail_mod": FAIL_MOD,
        "slow": SLOW_S,
        "service": True,  # the kill takes the process's ScheduleService down with it
        "options": {
            "consume_message_batch_max_size": BATCH,
            "pull_batch_size": PULL_BATCH,
            "consume_thread_max": THREADS,
            "partitions": RETRY_PARTITIONS,
        },
        "config": {
            "session.timeout.ms": 6000,  # the dead member leaves the group in seconds
            "heartbeat.interval.ms": 500,
            "auto.commit.interval.ms": round(COMMIT_INTERVAL_S * 1000),
        },
    }
    kills: list[tuple[ConsumerProcess, dict[str, Any], Offsets]] = []
    procs: list[ConsumerProcess] = []
    with offset_probe(bs, group) as probe, _Sampler(probe, topic, retry_topic) as sampler:
        try:
            for r in range(ROUNDS):
                proc = ConsumerProcess(
                    **common, kill_at=point, kill_after=rng.randint(20, 50), name=f"round{r}"
                )
                procs.append(proc)
                where.update(produce(bs, topic, waves[r]))
                proc.start()
                code = proc.wait_exit(90)
                status = proc.status("killing")
                assert code == -9 and status is not None, (code, proc.log_tail())
                kills.append((proc, status, sampler.record()))  # it can commit no more
            final = ConsumerProcess(**common, name="final")
            procs.append(final)
            where.update(produce(bs, topic, waves[ROUNDS]))
            final.start()

            def all_ok() -> bool:
                return {r.id for r in read_log(log) if r.outcome == "ok"} >= set(ids)

            try:
                wait_until(all_ok, 90, "every id handled successfully after the kills", 0.2)
            except AssertionError as exc:
                recs = read_log(log)
                missing = set(ids) - {r.id for r in recs if r.outcome == "ok"}
                raise AssertionError(
                    f"{exc}: {len(missing)} missing, e.g. "
                    f"{[(where[m], [r for r in recs if r.id == m]) for m in sorted(missing)[:5]]}"
                    f"; kills {[(k[1], k[2]) for k in kills]}\n{final.log_tail(80)}"
                ) from None
            ends = probe.ends(topic, list(range(PARTITIONS)))
            wait_until(
                lambda: probe.committed(topic, list(range(PARTITIONS))) == ends,
                30,
                "the committed offsets to reach the end",
                0.2,
            )
            final.stop()
            sampler.record()
        finally:
            for proc in procs:
                proc.close()

    records = read_log(log)
    oks: dict[str, list[Record]] = {}
    for rec in records:
        if rec.outcome == "ok":
            oks.setdefault(rec.id, []).append(rec)
    # nothing lost, nothing foreign, nothing dead-lettered
    assert set(oks) == set(ids), set(ids) ^ set(oks)
    assert dlq_ids(bs, group) == []
    # a message that fails on its first delivery only ever succeeds from the retry topic
    for msg_id in failing:
        assert all(r.reconsume_times >= 1 and r.kafka_topic == retry_topic for r in oks[msg_id])

    # each kill happened at its point
    returned_uncommitted = 0
    for proc, status, at_kill in kills:
        mine = [r for r in records if r.pid == proc.pid]
        if point == "listener":
            batch = [r for r in mine if r.batch == status["batch"] and r.outcome != "begin"]
            assert len(batch) == status["logged"] < status["size"], (status, batch)
        elif point == "returned":
            returned_uncommitted += all(
                t == topic and at_kill[topic][p] <= offset for t, p, offset in status["where"]
            )
        else:
            # (a partition the commit did not cover is reported with a negative offset)
            for p, offset in status["offsets"]:
                assert offset < 0 or at_kill[topic][p] == offset, (status, at_kill)
    if point == "returned":
        assert returned_uncommitted >= 1, [k[1:] for k in kills]

    # duplicates only for what was in flight when a process died
    retried = {r.id for r in records if r.outcome in ("fail", "nack")}
    committed_at_death = {proc.pid: at_kill for proc, _, at_kill in kills}
    repeats: Counter[int] = Counter()
    for msg_id, rs in oks.items():
        assert max(Counter(r.pid for r in rs).values()) == 1 or msg_id in retried, rs
        if msg_id in retried or len(rs) == 1:
            continue
        first = rs[0]
        partition, offset = where[msg_id]
        # only a process that died can have left it to a successor, and only uncommitted
        assert first.pid in committed_at_death, rs
        assert offset >= committed_at_death[first.pid][topic][partition], (rs, committed_at_death)
        repeats[first.pid] += 1
    # Per kill: what the successor re-reads above the committed offsets is at most what was
    # fetched and not settled (the soft back-pressure limit, 2 x threads x batch size, plus one
    # fetch per partition), what settled behind the smallest unsettled offset (the same
    # window) and what settled within the last auto-commit interval (the listeners' rate
    # times the interval: a bound of one fetch there held only while the listeners ran slower).
    print(f"kill -9 at {point}: repeats per kill {dict(repeats)}, bound {IN_FLIGHT_BOUND}")
    assert all(n <= IN_FLIGHT_BOUND for n in repeats.values()), (repeats, IN_FLIGHT_BOUND)

    # every new process re-reads from the committed offsets, never below
    for (_, _, at_kill), successor in zip(kills, procs[1:], strict=True):
        for p in range(PARTITIONS):
            offsets = [
                r.offset
                for r in records
                if r.pid == successor.pid and r.kafka_topic == topic and r.partition == p
            ]
            if offsets:
                assert min(offsets) >= at_kill[topic][p], (p, min(offsets), at_kill)

    # committed offsets never go back, across every kill and restart
    history = sorted(sampler.samples, key=lambda s: s[0])
    for t, count in ((topic, PARTITIONS), (retry_topic, RETRY_PARTITIONS)):
        for p in range(count):
            seq = [s[t][p] for _, s in history]
            assert all(a <= b for a, b in itertools.pairwise(seq)), (t, p, seq)
