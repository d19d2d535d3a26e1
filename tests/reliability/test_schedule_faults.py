"""ScheduleService killed with SIGKILL again and again while due messages stream through.

``tests/integration/test_schedule_service.py`` kills an instance once.  Here one test per
delivery mode kills a child-process service ``KILLS`` times (6; 12 with
``RMQ_RELIABILITY_FULL=1``) while a producer keeps sending scheduled messages, then lets a
last instance finish and checks what reached the real topic against what was sent:

* every message arrives (by ``UNIQ_KEY``), never before its ``RMQ_DUE_MS``;
* at-least-once: repeats are allowed (and expected: they prove kills landed between a
  forward and its offset commit);
* exactly-once: a ``read_committed`` reader sees every message exactly once; a
  ``read_uncommitted`` reader sees aborted forwards, which proves kills landed inside
  open transactions (between a produce and the commit);
* nothing goes to the service's dead-letter topic.

Where the kills land, in turn: (1) the child runs with ``--kill-after-forwards N`` (random
``N``) and SIGKILLs itself within ~0.2 ms of handing its N-th forward to the producer -
between that produce and the commit that settles it, usually before the records even left
the client; (2) the same, but only once those forwards were acknowledged by the broker while
the transaction is still open (``--kill-when acked``): the records are in the log, their
commit is not; (3) the test kills the child at a random moment while it forwards.  Offsets
auto-commit every 200 ms in at-least-once mode, so kills also fall between commits that did
happen.  The instances
use static group membership (``group.instance.id``), so a successor takes the partitions
over at once instead of waiting for the victim's session to expire, and, in exactly-once
mode, a stable ``transactional.id`` (fencing the victim's open transaction at once); the
full run adds the fresh-id variant, whose open transactions block readers until the
broker times them out.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from adapter import Message, Producer
from adapter.constants import HEADER_DUE_MS, PROPERTY_UNIQ_KEY
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.io.topics import ensure_topics, plan_topics

try:
    from tests.support.rel_common import (
        FULL,
        Arrival,
        Collector,
        delete_topics,
        now_ms,
        planned_kafka_topics,
        unique,
    )
except ModuleNotFoundError:  # pragma: no cover - if this folder becomes a package
    from tests.reliability.rel_common import (
        FULL,
        Arrival,
        Collector,
        delete_topics,
        now_ms,
        planned_kafka_topics,
        unique,
    )

from tests.support.consumer_helpers import read_topic
from tests.support.service_procs import (
    ServiceProcess,
)

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

LEVELS = "200ms 1s"
PARTS = 2
KILLS = 12 if FULL else 6
SEED = int(os.environ.get("RMQ_RELIABILITY_SEED", str(random.randrange(1 << 30))))


class Stream:
    """Sends scheduled messages (mostly level 1, some level 2) on a thread until stopped."""

    def __init__(self, conf: dict[str, Any], namespace: str, real: str) -> None:
        self.producer = Producer(conf, delay_levels=LEVELS, namespace=namespace).start()
        self.real = real
        self.sent: dict[str, tuple[bytes, int]] = {}  # UNIQ_KEY -> (body, sent ms)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rel-stream", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Stream:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                msgs = []
                for _ in range(40):
                    body = f"m-{n:06d}".encode()
                    msgs.append(
                        Message(
                            topic=self.real,
                            body=body,
                            delay_time_level=2 if n % 4 == 0 else 1,
                            sharding_key=body,
                        )
                    )
                    n += 1
                stamp = now_ms()
                for m, r in zip(msgs, self.producer.send_batch(msgs), strict=True):
                    self.sent[r.msg_id] = (m.body, stamp)
                self._stop.wait(0.04)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> dict[str, tuple[bytes, int]]:
        self._stop.set()
        self._thread.join(30)
        self.producer.shutdown(10)
        assert self.error is None, f"the producer failed: {self.error!r}"
        return dict(self.sent)


@pytest.fixture
def namespace(kafka_bootstrap_servers: str) -> Iterator[str]:
    ns = unique("rel")
    yield ns
    delete_topics(
        kafka_bootstrap_servers,
        planned_kafka_topics(
            groups=[f"rmq-schedule-service.{ns}"], levels=LEVELS, namespace=ns, partitions=PARTS
        ),
    )


def _uniq(rec: Arrival) -> str:
    value = rec.text(PROPERTY_UNIQ_KEY)
    assert value is not None, f"forwarded record without UNIQ_KEY: {rec}"
    return value


def _kill_rounds(
    make: Any, rng: random.Random, log: list[str], procs: list[ServiceProcess]
) -> None:
    """``KILLS`` instances, each SIGKILLed while it forwards."""
    for round_no in range(KILLS):
        kind = ("produced", "acked", "random")[round_no % 3]
        self_kill = kind != "random"
        after = rng.randint(1, 400) if self_kill else 0
        proc = make(f"victim{round_no}", after, kind)
        procs.append(proc)
        if self_kill:
            assert proc.proc is not None
            try:
                code = proc.proc.wait(60)
            except Exception as exc:
                raise AssertionError(
                    f"round {round_no}: no {after} forwards within 60s; last status "
                    f"{proc.status}\n{proc.log_tail()}"
                ) from exc
            assert code == -9, f"round {round_no}: exit {code}\n{proc.log_tail()}"
            log.append(f"round {round_no}: self-kill after forward #{after} ({kind})")
        else:
            proc.wait_for(lambda s: s["forwarded"] > 0, 60, "a first forward")
            time.sleep(rng.uniform(0.0, 1.2))  # a random moment of the forward stream
            proc.kill()
            log.append(f"round {round_no}: killed after {proc.status.get('forwarded')} forwards")


def _run_kill_scenario(
    bootstrap: str,
    namespace: str,
    real: str,
    *,
    delivery: str,
    txn_id: str | None,
) -> tuple[dict[str, tuple[bytes, int]], Collector, Collector, list[str]]:
    conf = {"bootstrap.servers": bootstrap}
    levels = DelayLevels.parse(LEVELS)
    group = f"rmq-schedule-service.{namespace}"
    ensure_topics(
        conf,
        plan_topics(groups=[group], delay_levels=levels, namespace=namespace, partitions=PARTS),
    )
    rng = random.Random(SEED)
    config = {
        # a successor replaces the victim at once (no wait for its session to expire)
        "group.instance.id": f"rel-{namespace}",
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "500",
        "auto.commit.interval.ms": "200",
    }
    procs: list[ServiceProcess] = []

    def make(name: str, after: int, kill_when: str = "produced") -> ServiceProcess:
        return ServiceProcess(
            bootstrap,
            namespace,
            LEVELS,
            delivery=delivery,
            partitions=PARTS,
            transactional_id=txn_id,
            config=config,
            name=name,
            kill_after_forwards=after,
            kill_when=kill_when,
        ).start()

    committed = Collector(bootstrap, real, PARTS, read_committed=True)
    uncommitted = Collector(bootstrap, real, PARTS, read_committed=False)
    stream = Stream(conf, namespace, real).start()
    log: list[str] = [f"seed {SEED}"]
    try:
        _kill_rounds(make, rng, log, procs)
        sent = stream.stop()
        last = make("last", 0)
        procs.append(last)
        wanted = {body for body, _ in sent.values()}
        committed.wait_values(wanted, timeout=120 if txn_id is None else 60)
        committed.drain(quiet_s=1.5)
        assert last.stop() == 0, f"the last instance did not stop cleanly\n{last.log_tail()}"
        assert last.status.get("early") == 0
        # the service's own dead-letter topic stays empty: nothing was invalid
        dlq = read_topic(conf, naming.to_kafka(naming.dlq_topic(group)))
        assert dlq == [], f"{len(dlq)} entries dead-lettered by the service"
        return sent, committed, uncommitted, log
    finally:
        with contextlib.suppress(Exception):
            stream.stop()
        for proc in procs:
            proc.close()


def _check_common(
    sent: dict[str, tuple[bytes, int]], records: list[Arrival], log: list[str]
) -> Counter[str]:
    counts = Counter(_uniq(r) for r in records)
    lost = set(sent) - set(counts)
    assert not lost, f"{len(lost)} of {len(sent)} messages lost ({'; '.join(log)})"
    assert set(counts) <= set(sent), "a record nobody sent"
    levels = DelayLevels.parse(LEVELS)
    for rec in records:
        due = int(rec.text(HEADER_DUE_MS) or "0")
        assert rec.created_ms >= due, f"{rec.value!r} forwarded {due - rec.created_ms} ms early"
        body, sent_ms = sent[_uniq(rec)]
        assert rec.value == body
        assert rec.received_ms >= sent_ms + levels.delay_ms(1)
    return counts


@pytest.mark.timeout(240)
def test_repeated_kill9_at_least_once_loses_nothing(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, namespace: str
) -> None:
    real = kafka_topic_factory("rel-kill-alo", partitions=PARTS)
    sent, committed, uncommitted, log = _run_kill_scenario(
        kafka_bootstrap_servers, namespace, real, delivery="AT_LEAST_ONCE", txn_id=None
    )
    try:
        records = committed.snapshot()
        counts = _check_common(sent, records, log)
        repeats = sum(c - 1 for c in counts.values())
        # the kills landed between forwards and their commits: those entries went out again
        assert repeats > 0, f"no kill landed between a forward and its commit ({log})"
    finally:
        committed.close()
        uncommitted.close()


TXN_VARIANTS = ["stable-id", "fresh-id"] if FULL else ["stable-id"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", TXN_VARIANTS)
def test_repeated_kill9_exactly_once_has_no_duplicates_and_loses_nothing(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, namespace: str, variant: str
) -> None:
    real = kafka_topic_factory("rel-kill-eos", partitions=PARTS)
    txn_id = f"rel-txn-{namespace}" if variant == "stable-id" else None
    sent, committed, uncommitted, log = _run_kill_scenario(
        kafka_bootstrap_servers, namespace, real, delivery="EXACTLY_ONCE", txn_id=txn_id
    )
    try:
        records = committed.snapshot()
        counts = _check_common(sent, records, log)
        dupes = {k: c for k, c in counts.items() if c > 1}
        assert dupes == {}, f"{len(dupes)} duplicates for a read_committed reader ({log})"
        # read_uncommitted also sees the forwards of transactions the kills left open (and
        # the successor aborted): proof that kills landed between a produce and the commit
        raw = uncommitted.drain(quiet_s=0.5)
        aborted = len(raw) - len(records)
        assert aborted > 0, f"no kill landed inside an open transaction ({log})"
    finally:
        committed.close()
        uncommitted.close()
