"""A produce-consume-validate workload for bouncing brokers under (the model: Kafka's own
system tests, and Jepsen's lost / duplicated / unseen accounting).

On a multi-broker cluster it runs, all in this process and all at the adapter's defaults:

* a Producer sending throughout, at a steady rate, to a user topic ``T`` (ids) and a keyed
  topic ``K`` (a sequence number per key); every send must succeed;
* a PushConsumer on ``T`` whose listener fails 10 % of first deliveries (so the retry
  ladder, the delay-level topics and the ScheduleService are busy);
* an orderly PushConsumer on ``K`` that suspends 5 % of first deliveries;
* a SimpleConsumer on a third topic ``S`` that acknowledges every message;
* the ScheduleService in the delivery mode under test.

:meth:`Workload.verify` waits until everything sent is settled and returns a
:class:`Report`: what was lost (sent, never handled, not in the DLQ), duplicated out of
exactly-once forwarding (the same retry copy twice on the read_committed retry topic),
delivered early (before its ``RMQ_DUE_MS``), out of order per key, plus what the bounce cost:
retry lateness p99 and the longest stall of each consumer.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from adapter import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
    SimpleConsumer,
)
from adapter.constants import HEADER_DUE_MS, PROPERTY_RECONSUME_TIME, PROPERTY_UNIQ_KEY
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.services.schedule import DeliveryGuarantee

LEVELS = "1s 2s 3s 4s 5s 6s"
PARTITIONS = 3
FAIL_MOD = 10  # one id in ten fails its first delivery
SUSPEND_MOD = 20  # one keyed message in twenty suspends its first delivery
KEYS = 12


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


@dataclass
class Report:
    sent: int
    send_failures: list[str]
    lost: list[str]
    dead_lettered: int
    duplicates_forwarded: int
    early: list[str]
    order_violations: list[str]
    simple_lost: list[str]
    lateness_p99_ms: float
    stall_s: dict[str, float]
    forwarded: int
    aborted_transactions: int
    bounce_s: float
    #: sends that succeeded while the bounce ran and after it (the traffic went on)
    sent_during: int = 0
    sent_after: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        stalls = ", ".join(f"{k} {v:.1f} s" for k, v in self.stall_s.items())
        return (
            f"sent {self.sent}, send failures {len(self.send_failures)}, lost "
            f"{len(self.lost)}, DLQ {self.dead_lettered}, duplicates out of forwarding "
            f"{self.duplicates_forwarded}, early {len(self.early)}, order violations "
            f"{len(self.order_violations)}, SimpleConsumer lost {len(self.simple_lost)}; "
            f"retry lateness p99 {self.lateness_p99_ms:.0f} ms; longest stall: {stalls}; "
            f"forwarded {self.forwarded}, aborted transactions {self.aborted_transactions}; "
            f"bounce took {self.bounce_s:.1f} s (sent during it {self.sent_during}, "
            f"after it {self.sent_after})"
        )


class _Stalls:
    """The longest gap between two consecutive events while the workload ran."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.longest = 0.0
        self.lock = threading.Lock()

    def tick(self) -> None:
        now = time.monotonic()
        with self.lock:
            if self.last is not None:
                self.longest = max(self.longest, now - self.last)
            self.last = now


class Workload:
    def __init__(
        self,
        bootstrap: str,
        topic_factory: Any,
        *,
        delivery: DeliveryGuarantee,
        rate: int = 150,
        protocol: str = "classic",
    ) -> None:
        self.conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
        #: every group member's (the consumers' and the ScheduleService's) group protocol
        self.member: dict[str, Any] = {**self.conf, "group.protocol": protocol}
        self.delivery = delivery
        self.rate = rate
        self.tag = uuid.uuid4().hex[:8]
        self.ns = f"bounce{self.tag}"
        self.levels = DelayLevels.parse(LEVELS)
        self.transactional_id = f"rmq-bounce-{self.tag}"
        self.group = f"g-bounce-{self.tag}"
        self.orderly_group = f"g-bounce-orderly-{self.tag}"
        self.simple_group = f"g-bounce-simple-{self.tag}"
        self.topic = topic_factory("bounce-t", partitions=PARTITIONS)
        self.keyed = topic_factory("bounce-k", partitions=PARTITIONS)
        self.simple_topic = topic_factory("bounce-s", partitions=PARTITIONS)
        self.lock = threading.Lock()
        self.sent: list[str] = []
        self.sent_keyed: dict[str, int] = {}  # key -> last seq sent
        self.sent_simple: list[str] = []
        self.send_failures: list[str] = []
        self.handled: dict[str, list[tuple[int, int, int | None]]] = {}  # id -> (rt, ms, due)
        self.keyed_seen: dict[str, list[int]] = {}  # key -> seqs in success order
        self.simple_acked: set[str] = set()
        self.stalls = {"push": _Stalls(), "orderly": _Stalls(), "simple": _Stalls()}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._closers: list[Any] = []
        self.errors: list[BaseException] = []
        self._marks: list[int] = []  # sends counted at the bounce's start and end

    # ---- clients ---------------------------------------------------------------------------

    def _listener(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        m = msgs[0]
        arrived = now_ms()
        ident = m.body.decode()
        due = m.properties.get(HEADER_DUE_MS)
        with self.lock:
            self.handled.setdefault(ident, []).append(
                (m.reconsume_times, arrived, int(due) if due else None)
            )
        self.stalls["push"].tick()
        if m.reconsume_times == 0 and _crc(ident) % FAIL_MOD == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _orderly(self, msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        if any(m.reconsume_times == 0 and _crc(m.body.decode()) % SUSPEND_MOD == 0 for m in msgs):
            ctx.suspend_current_queue_time_millis = 100
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        with self.lock:
            for m in msgs:
                key, seq = m.body.decode().split(":")
                self.keyed_seen.setdefault(key, []).append(int(seq))
        self.stalls["orderly"].tick()
        return ConsumeOrderlyStatus.SUCCESS

    def start(self) -> Workload:
        opts: dict[str, Any] = {"delay_levels": LEVELS, "namespace": self.ns}
        svc = ScheduleService(
            {**self.member},
            partitions=PARTITIONS,
            delivery=self.delivery,
            transactional_id=(
                self.transactional_id if self.delivery is DeliveryGuarantee.EXACTLY_ONCE else None
            ),
            **opts,
        ).start()
        self.service = svc
        self._closers.append(lambda: svc.shutdown(30))
        push = PushConsumer(
            {**self.member, "group.id": self.group, "auto.offset.reset": "earliest"},
            partitions=PARTITIONS,
            **opts,
        )
        push.subscribe(self.topic)
        push.register_message_listener(self._listener)
        push.start()
        self.push = push
        self._closers.append(lambda: push.shutdown(30))
        orderly = PushConsumer(
            {**self.member, "group.id": self.orderly_group, "auto.offset.reset": "earliest"},
            partitions=PARTITIONS,
            **opts,
        )
        orderly.subscribe(self.keyed)
        orderly.register_message_listener_orderly(self._orderly)
        orderly.start()
        self.orderly = orderly
        self._closers.append(lambda: orderly.shutdown(30))
        simple = SimpleConsumer(
            {**self.member, "auto.offset.reset": "earliest"},
            self.simple_group,
            await_duration=1,
            partitions=PARTITIONS,
        )
        simple.subscribe(self.simple_topic)
        simple.startup()
        self.simple = simple
        self._closers.append(simple.shutdown)
        self.producer = Producer(self.conf)
        self._closers.append(self.producer.shutdown)
        self._spawn(self._produce, "bounce-producer")
        self._spawn(self._receive, "bounce-simple")
        return self

    def _spawn(self, target: Any, name: str) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                self.errors.append(exc)
                raise

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _produce(self) -> None:
        seqs = Counter[str]()
        period = 1.0 / self.rate
        nxt = time.monotonic()
        for i in itertools.count():
            if self._stop.is_set():
                return
            which = i % 3
            try:
                if which == 0:
                    ident = f"{self.tag}-{i:07d}"
                    self.producer.send(Message(topic=self.topic, body=ident.encode()))
                    with self.lock:
                        self.sent.append(ident)
                elif which == 1:
                    key = f"k{i % KEYS}"
                    seqs[key] += 1
                    body = f"{key}:{seqs[key]}".encode()
                    self.producer.send(Message(topic=self.keyed, body=body, sharding_key=key))
                    with self.lock:
                        self.sent_keyed[key] = seqs[key]
                else:
                    ident = f"{self.tag}-s{i:07d}"
                    self.producer.send(Message(topic=self.simple_topic, body=ident.encode()))
                    with self.lock:
                        self.sent_simple.append(ident)
            except Exception as exc:  # counted: the test asserts there is none
                with self.lock:
                    self.send_failures.append(f"#{i}: {type(exc).__name__}: {exc}")
                if which == 1:
                    seqs[f"k{i % KEYS}"] -= 1  # not sent: the next one takes its number
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)

    def _receive(self) -> None:
        while not self._stop.is_set():
            for view in self.simple.receive(16, invisible_duration=20):
                self.simple.ack(view)
                with self.lock:
                    self.simple_acked.add(view.body.decode())
                self.stalls["simple"].tick()

    # ---- verdict ---------------------------------------------------------------------------

    def mark(self) -> None:
        """Count the sends so far (called as the bounce starts and as it ends)."""
        with self.lock:
            self._marks.append(self._sent_count())

    def _sent_count(self) -> int:
        return len(self.sent) + sum(self.sent_keyed.values()) + len(self.sent_simple)

    def stop_sending(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def settled(self) -> bool:
        with self.lock:
            ok = all(
                any(
                    not (rt == 0 and _crc(i) % FAIL_MOD == 0)
                    for rt, _a, _d in self.handled.get(i, [])
                )
                for i in self.sent
            )
            keyed = all(
                seqs and max(seqs) >= self.sent_keyed[k]
                for k in self.sent_keyed
                for seqs in [self.keyed_seen.get(k, [])]
            )
            simple = set(self.sent_simple) <= self.simple_acked
        return ok and keyed and simple

    def verify(self, bounce_s: float, timeout: float = 180.0) -> Report:
        """Stop sending, wait (bounded) until everything sent is settled, and account."""
        self.stop_sending()
        deadline = time.monotonic() + timeout
        while not self.settled() and time.monotonic() < deadline:
            self.push.check_alive()
            self.orderly.check_alive()
            self.service.check_alive()
            time.sleep(0.5)
        # a client whose loop died fails the scenario, whether or not it settled
        for client in (self.push, self.orderly, self.service, self.simple):
            client.check_alive()
        self._resume_simple_receiver()
        with self.lock:
            handled = {k: list(v) for k, v in self.handled.items()}
            keyed = {k: list(v) for k, v in self.keyed_seen.items()}
            sent = list(self.sent)
            sent_keyed = dict(self.sent_keyed)
        dlq = self._dead_letters()
        lost = [
            i
            for i in sent
            if i not in dlq
            and not any(
                not (rt == 0 and _crc(i) % FAIL_MOD == 0) for rt, _a, _d in handled.get(i, [])
            )
        ]
        early, lateness = [], []
        for ident, deliveries in handled.items():
            for rt, arrived, due in deliveries:
                if rt > 0:
                    if due is None or arrived < due:
                        early.append(f"{ident}#{rt}: arrived {arrived}, due {due}")
                    else:
                        lateness.append(arrived - due)
        violations = []
        for key, seqs in keyed.items():
            firsts: list[int] = []
            for s in seqs:
                if s not in firsts:
                    firsts.append(s)
            if firsts != sorted(firsts) or firsts != list(range(1, sent_keyed.get(key, 0) + 1)):
                violations.append(f"{key}: {firsts[:20]}... of {sent_keyed.get(key)}")
        with self.lock:
            simple_lost = sorted(set(self.sent_simple) - self.simple_acked)
        lateness.sort()
        p99 = (
            float(lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))]) if lateness else 0.0
        )
        stats = self.service.stats
        extra = self._diagnose(lost) if lost else {}
        with self.lock:
            total = self._sent_count()
        start, end = [*self._marks, total, total][:2]
        return Report(
            sent=total,
            send_failures=list(self.send_failures),
            lost=lost,
            dead_lettered=len(dlq),
            duplicates_forwarded=self._forwarding_duplicates(),
            early=early,
            order_violations=violations,
            simple_lost=simple_lost,
            lateness_p99_ms=p99,
            stall_s={k: round(v.longest, 1) for k, v in self.stalls.items()},
            forwarded=stats.forwarded,
            aborted_transactions=stats.transactions_aborted,
            bounce_s=bounce_s,
            sent_during=end - start,
            sent_after=total - end,
            extra=extra,
        )

    def _diagnose(self, lost: list[str]) -> dict[str, Any]:
        """Where the lost ids are: on the retry topic or not, what the group committed
        there, and what the push consumer says about its partitions."""
        from adapter.io.admin import AdminSession
        from tests.support.consumer_helpers import read_topic

        retry = naming.to_kafka(naming.retry_topic(self.group))
        on_retry = Counter(
            r.value.decode() for r in read_topic(self.conf, retry, timeout=60) if r.value
        )
        out: dict[str, Any] = {
            "lost_on_retry_topic": sum(1 for i in lost if on_retry[i]),
            "retry_records": sum(on_retry.values()),
            "push_info": self.push.running_info(),
            "push_stats": {t: vars(st) for t, st in self.push.stats().items()},
            "service": {
                k: getattr(self.service.stats, k)
                for k in ("forwarded", "reparked", "invalid", "send_failures", "pauses")
            },
            "service_info": self.service.running_info(),
        }
        with contextlib.suppress(Exception):
            session = AdminSession(self.conf)
            out["committed"] = {
                f"{t}[{p}]": o for (t, p), o in session.committed(self.group).items()
            }
            out["retry_ends"] = {
                f"[{p}]": session.watermarks([(retry, p)], "ends") for p in range(PARTITIONS)
            }
        return out

    def _resume_simple_receiver(self) -> None:
        """After stop_sending the receiver thread is gone: drain what is left here."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with self.lock:
                if set(self.sent_simple) <= self.simple_acked:
                    return
            for view in self.simple.receive(32, invisible_duration=20):
                self.simple.ack(view)
                with self.lock:
                    self.simple_acked.add(view.body.decode())

    def _dead_letters(self) -> set[str]:
        from tests.support.consumer_helpers import read_topic

        dlq = naming.to_kafka(naming.dlq_topic(self.group))
        return {
            r.value.decode() for r in read_topic(self.conf, dlq, timeout=30) if r.value is not None
        }

    def _forwarding_duplicates(self) -> int:
        """Retry copies of the same message and delivery (UNIQ_KEY, RECONSUME_TIME) on the
        read_committed retry topic, beyond the first."""
        from tests.support.consumer_helpers import read_topic

        retry = naming.to_kafka(naming.retry_topic(self.group))
        seen = Counter(
            (r.header(PROPERTY_UNIQ_KEY), r.header(PROPERTY_RECONSUME_TIME))
            for r in read_topic(self.conf, retry, timeout=60)
        )
        return sum(n - 1 for n in seen.values() if n > 1)

    def close(self) -> None:
        self._stop.set()
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
