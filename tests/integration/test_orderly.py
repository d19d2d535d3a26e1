"""Orderly consumption (``register_message_listener_orderly``) on a real broker.

Every test has its own topic, group and namespace and waits by polling with deadlines.
Messages carry a key and a sequence number per key (``<key>:<seq>``), produced in order by
an idempotent producer, so order can be checked from what the listener saw.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer as RawProducer

from adapter import ConfigError, InvalidInputError, PushConsumer
from adapter.clients.push.push_consumer import ConsumeOrderlyContext, ConsumeOrderlyStatus
from tests.support.consumer_helpers import (
    LEVELS,
    committed_offsets,
    end_offsets,
    new_group,
    new_namespace,
    read_dlq_raw,
    read_topic,
    retry_kafka_topic,
    wait_until,
)
from tests.support.consumer_procs import ConsumerProcess, Record, mark_killed, overlaps, read_log
from tests.support.group_protocol import member_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
#: Commit stored offsets often, so tests can watch the committed offset move.
FAST_COMMIT = {"auto.commit.interval.ms": 100}


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def produce_keyed(
    bootstrap: str,
    topic: str,
    items: Sequence[tuple[str, int]],
    partition: int | None = None,
    headers: dict[tuple[str, int], list[tuple[str, bytes]]] | None = None,
) -> None:
    """One record per ``(key, seq)``: key ``key``, body ``key:seq``, in the given order."""
    p = RawProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[Any] = []
    for key, seq in items:
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        if headers and (key, seq) in headers:
            kwargs["headers"] = headers[(key, seq)]
        p.produce(
            topic,
            f"{key}:{seq}".encode(),
            key=key.encode(),
            on_delivery=lambda err, _m: errors.append(err) if err else None,
            **kwargs,
        )
    assert p.flush(30) == 0 and not errors, errors


def interleaved(keys: Sequence[str], per_key: int) -> list[tuple[str, int]]:
    return [(k, s) for s in range(per_key) for k in keys]


@dataclass(frozen=True)
class Seen:
    key: str
    seq: int
    partition: int
    offset: int
    reconsume_times: int


@dataclass
class Call:
    """One listener call."""

    no: int
    tp: tuple[str, int]
    msgs: list[Seen]
    began: float
    ended: float = 0.0
    ok: bool = False


class OrderlyRecorder:
    """An orderly listener that records every call (thread-safe) and asks ``decide(msgs,
    ctx)`` what to return (SUCCESS by default)."""

    def __init__(self, decide: Callable[[list[Any], Any], Any] | None = None) -> None:
        self.decide = decide
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.running: dict[tuple[str, int], int] = defaultdict(int)
        self.overlaps: list[str] = []

    def __call__(self, msgs: list[Any], ctx: ConsumeOrderlyContext) -> Any:
        tp = (msgs[0].kafka_topic, msgs[0].queue_id)
        seen = []
        for m in msgs:
            key, seq = m.body.decode().split(":")
            seen.append(Seen(key, int(seq), m.queue_id, m.queue_offset, m.reconsume_times))
        with self.lock:
            call = Call(len(self.calls), tp, seen, time.monotonic())
            self.calls.append(call)
            self.running[tp] += 1
            if self.running[tp] > 1:
                self.overlaps.append(f"two calls at once on {tp}")
        result: Any = SUCCESS
        try:
            if self.decide is not None:
                result = self.decide(msgs, ctx)
            return result
        except BaseException:
            result = None
            raise
        finally:
            with self.lock:
                self.running[tp] -= 1
                call.ended = time.monotonic()
                call.ok = result is SUCCESS

    def snapshot(self) -> list[Call]:
        with self.lock:
            return list(self.calls)

    def ok_seqs(self) -> dict[str, list[int]]:
        """Per key, the sequence numbers of successful calls, in call order."""
        out: dict[str, list[int]] = defaultdict(list)
        for call in self.snapshot():
            if call.ok:
                for s in call.msgs:
                    out[s.key].append(s.seq)
        return out

    def done(self, expected: dict[str, int]) -> bool:
        got = self.ok_seqs()
        return all(len(got.get(k, [])) >= n for k, n in expected.items())


@contextlib.contextmanager
def orderly_consumer(
    bootstrap: str,
    topic: str,
    listener: Any,
    *,
    group: str | None = None,
    config: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[PushConsumer]:
    options.setdefault("delay_levels", LEVELS)
    options.setdefault("partitions", 1)
    options.setdefault("shutdown_await", 10.0)
    options.setdefault("namespace", new_namespace())
    consumer = PushConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or new_group(),
            "auto.offset.reset": "earliest",
            **FAST_COMMIT,
            **(config or {}),
        },
        **options,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener_orderly(listener)
    with consumer:
        yield consumer


def fails_once(key: str, seq: int, mod: int = 5) -> bool:
    """Deterministic: whether ``key:seq`` fails on its first delivery."""
    return zlib.crc32(f"{key}:{seq}".encode()) % mod == 0


def committed_to_end(bootstrap: str, group: str, topic: str) -> bool:
    ends = end_offsets({"bootstrap.servers": bootstrap}, topic)
    committed = committed_offsets({"bootstrap.servers": bootstrap}, group, topic)
    return all(committed.get(p, -1) >= end for p, end in ends.items())


# --------------------------------------------------------------------------------------------
# order under failures
# --------------------------------------------------------------------------------------------


def test_order_is_kept_per_partition_under_failures(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Suspends, exceptions and ``None`` on first deliveries: each key's messages succeed
    exactly once and in order; a failed batch comes back as the same messages with
    ``reconsume_times + 1`` before anything later of its partition; the partition's calls
    never overlap; the offsets reach the end; no retry topic is used."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("orderly", partitions=3)
    keys = [f"k{i}" for i in range(6)]
    per_key = 30
    kinds = [SUSPEND, "raise", None]
    failures = [0]

    def decide(msgs: list[Any], ctx: Any) -> Any:
        for m in msgs:
            key, seq = m.body.decode().split(":")
            if m.reconsume_times == 0 and fails_once(key, int(seq)):
                failures[0] += 1
                kind = kinds[failures[0] % 3]
                if kind == "raise":
                    raise RuntimeError(f"{key}:{seq} failed")
                return kind
        return SUCCESS

    listener = OrderlyRecorder(decide)
    group = new_group()
    produce_keyed(bs, topic, interleaved(keys, per_key))
    with orderly_consumer(
        bs,
        topic,
        listener,
        group=group,
        consume_message_batch_max_size=3,
        suspend_current_queue_time_millis=50,
    ) as consumer:
        wait_until(lambda: listener.done(dict.fromkeys(keys, per_key)), 60, "every key consumed")
        wait_until(lambda: committed_to_end(bs, group, topic), 30, "offsets at the end")
        info = consumer.running_info()
    assert failures[0] > 3
    assert listener.ok_seqs() == {k: list(range(per_key)) for k in keys}
    assert listener.overlaps == []
    calls = listener.snapshot()
    by_tp: dict[tuple[str, int], list[Call]] = defaultdict(list)
    for call in calls:
        by_tp[call.tp].append(call)
    for tp_calls in by_tp.values():
        for call, nxt in itertools.pairwise(tp_calls):
            assert nxt.began >= call.ended  # one batch of a partition at a time
            if not call.ok:  # the same messages next, one more reconsume time
                assert [s.offset for s in nxt.msgs] == [s.offset for s in call.msgs]
                assert [s.reconsume_times for s in nxt.msgs] == [
                    s.reconsume_times + 1 for s in call.msgs
                ]
        offsets = [s.offset for c in tp_calls if c.ok for s in c.msgs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert read_topic({"bootstrap.servers": bs}, retry_kafka_topic(group)) == []
    assert info["local_retries"] == 0


def test_a_backlog_past_the_flow_limit_drains_through_its_run_instead_of_pausing(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A quick listener on the worker pool behind a backlog many times
    ``pull_threshold_for_queue``: the loop lets the partition's run take what was fetched
    ahead instead of pausing the partition (a pause throws away what librdkafka fetched
    ahead, and the next fetch waits behind the one in flight); every message once, in
    order, and the offset at the end."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("drain", partitions=1)
    n = 4000
    produce_keyed(bs, topic, [("k", i) for i in range(n)])
    seen: list[int] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        seen.extend(int(m.body.decode().split(":")[1]) for m in msgs)
        return SUCCESS

    group = new_group()
    caplog.set_level(logging.DEBUG, logger="adapter.consumer")
    with orderly_consumer(
        bs,
        topic,
        listener,
        group=group,
        consume_message_batch_max_size=32,
        pull_threshold_for_queue=200,
        listener_mode="POOL",
    ):
        wait_until(lambda: len(seen) >= n, 60, "every message consumed")
        wait_until(lambda: committed_to_end(bs, group, topic), 30, "offsets at the end")
    assert seen == list(range(n))
    pauses = [r for r in caplog.records if r.getMessage().split(": ", 1)[-1].startswith("pause ")]
    # a worker that misses a whole drain wait on a loaded machine may still pause it once
    # or twice; pausing whenever the limit is crossed paused it about every 200 messages
    assert len(pauses) <= 2, [r.getMessage() for r in pauses]


# --------------------------------------------------------------------------------------------
# suspend timing
# --------------------------------------------------------------------------------------------


def test_suspend_time_is_the_consumers_or_the_contexts_and_never_shorter(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A suspended batch comes back no sooner than the suspend time after the failing call
    returned: the consumer's ``suspend_current_queue_time_millis`` when the context says
    -1, the context's value when set; nothing of the partition is delivered meanwhile."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("suspend", partitions=1)
    context_ms = {"a": -1, "b": 700}

    def decide(msgs: list[Any], ctx: Any) -> Any:
        key, seq = msgs[0].body.decode().split(":")
        if seq == "0" and msgs[0].reconsume_times < 2:
            ctx.suspend_current_queue_time_millis = context_ms[key]
            return SUSPEND
        return SUCCESS

    listener = OrderlyRecorder(decide)
    produce_keyed(bs, topic, [("a", 0), ("a", 1), ("b", 0), ("b", 1)])
    with orderly_consumer(bs, topic, listener, suspend_current_queue_time_millis=300):
        wait_until(lambda: listener.done({"a": 2, "b": 2}), 30, "both keys consumed")
    calls = listener.snapshot()
    assert [(c.msgs[0].key, c.msgs[0].seq, c.msgs[0].reconsume_times) for c in calls] == [
        ("a", 0, 0),
        ("a", 0, 1),
        ("a", 0, 2),
        ("a", 1, 0),
        ("b", 0, 0),
        ("b", 0, 1),
        ("b", 0, 2),
        ("b", 1, 0),
    ]
    waits = [(calls[i].began - calls[i - 1].ended) for i in (1, 2, 5, 6)]
    for wait, ms in zip(waits, [300, 300, 700, 700], strict=True):
        assert wait >= ms / 1000, waits
        assert wait < ms / 1000 + 1.0, waits  # and not much later either


# --------------------------------------------------------------------------------------------
# the maximum and the DLQ
# --------------------------------------------------------------------------------------------


def test_a_message_at_the_maximum_goes_to_the_dlq_once_and_the_partition_moves_on(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """``max_reconsume_times=2``: a poison message is delivered 3 times, then written once
    to ``%DLQ%<group>`` with the headers of RocketMQ's orderly path (the last delivery's
    count, the consumer's maximum, the DLQ as its last hop); the later messages follow; the
    committed offset reaches the end; no retry topic is used.  Orderly deliveries carry no
    ``CONSUME_START_TIME`` (RocketMQ 4.9.7 sets it on concurrent ones only)."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("dlq", partitions=1)
    stamped: list[bool] = []

    def decide(msgs: list[Any], ctx: Any) -> Any:
        stamped.extend("CONSUME_START_TIME" in m.properties for m in msgs)
        return SUSPEND if msgs[0].body == b"p:0" else SUCCESS

    listener = OrderlyRecorder(decide)
    group = new_group()
    produce_keyed(bs, topic, [("p", 0), ("ok", 0), ("ok", 1)])
    with orderly_consumer(
        bs,
        topic,
        listener,
        group=group,
        max_reconsume_times=2,
        suspend_current_queue_time_millis=50,
    ) as consumer:
        wait_until(lambda: listener.done({"ok": 2}), 30, "the good messages consumed")
        wait_until(lambda: committed_to_end(bs, group, topic), 30, "offsets at the end")
        stats = consumer.stats()[topic]
    calls = listener.snapshot()
    assert [(c.msgs[0].key, c.msgs[0].reconsume_times) for c in calls] == [
        ("p", 0),
        ("p", 1),
        ("p", 2),
        ("ok", 0),
        ("ok", 0),
    ]
    dlq = read_dlq_raw({"bootstrap.servers": bs}, group)
    assert [r.value for r in dlq] == [b"p:0"]
    [entry] = dlq
    assert entry.key == b"p"
    assert entry.text("RMQ_DLQ_REASON") == "MAX_RECONSUME_TIMES"
    assert entry.text("RECONSUME_TIME") == "2"  # the last delivery's, as RocketMQ's orderly path
    assert entry.text("MAX_RECONSUME_TIMES") == "2"
    assert entry.text("REAL_TOPIC") == f"%DLQ%{group}"
    assert entry.text("REAL_QID") is None
    assert entry.text("RMQ_FAILURE_TYPE") == "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    assert entry.text("DLQ_ORIGIN_TOPIC") == topic
    assert entry.text("RETRY_TOPIC") == topic
    assert entry.text("RMQ_GROUP") == group
    assert entry.text("RMQ_ORIGIN_OFFSET") == "0"
    assert stats.dead_lettered == 1
    assert read_topic({"bootstrap.servers": bs}, retry_kafka_topic(group)) == []
    assert stamped and not any(stamped)


def test_the_rest_of_a_batch_is_retried_without_the_message_that_went_to_the_dlq(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A batch of two fails; one message has its own ``MAX_RECONSUME_TIMES=1``: after its
    second delivery it goes to the DLQ (once), and only the other message comes back (it
    is not re-consumed with it, unlike RocketMQ, and not dead-lettered)."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("dlqrest", partitions=1)

    def decide(msgs: list[Any], ctx: Any) -> Any:
        return SUSPEND if any(m.body == b"q:0" for m in msgs) else SUCCESS

    listener = OrderlyRecorder(decide)
    group = new_group()
    produce_keyed(
        bs,
        topic,
        [("q", 0), ("ok", 0), ("ok", 1), ("ok", 2)],
        headers={("q", 0): [("MAX_RECONSUME_TIMES", b"1")]},
    )
    with orderly_consumer(
        bs,
        topic,
        listener,
        group=group,
        consume_message_batch_max_size=2,
        suspend_current_queue_time_millis=50,
    ):
        wait_until(lambda: listener.done({"ok": 3}), 30, "the good messages consumed")
        wait_until(lambda: committed_to_end(bs, group, topic), 30, "offsets at the end")
    calls = listener.snapshot()
    assert [[(s.key, s.seq, s.reconsume_times) for s in c.msgs] for c in calls][:3] == [
        [("q", 0, 0), ("ok", 0, 0)],
        [("q", 0, 1), ("ok", 0, 1)],
        [("ok", 0, 2)],
    ]
    assert listener.ok_seqs() == {"ok": [0, 1, 2]}
    dlq = read_dlq_raw({"bootstrap.servers": bs}, group)
    assert [(r.value, r.text("RECONSUME_TIME"), r.text("MAX_RECONSUME_TIMES")) for r in dlq] == [
        (b"q:0", "1", "1")  # the last delivery's count; its own maximum, kept
    ]


# --------------------------------------------------------------------------------------------
# ordering="key"
# --------------------------------------------------------------------------------------------


def test_key_ordering_lets_other_keys_through_while_one_key_is_suspended(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """``ordering="key"`` on one partition: while key ``a``'s first message is suspended,
    ``b`` and ``c`` are consumed to the end; ``a``'s later messages wait and then follow in
    order; the committed offset stays at ``a``'s message meanwhile, then reaches the end."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("keys", partitions=1)
    release = threading.Event()

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].body == b"a:0" and not release.is_set():
            return SUSPEND
        return SUCCESS

    listener = OrderlyRecorder(decide)
    group = new_group()
    produce_keyed(bs, topic, interleaved(["a", "b", "c"], 10))
    with orderly_consumer(
        bs,
        topic,
        listener,
        group=group,
        ordering="key",
        suspend_current_queue_time_millis=100,
    ) as consumer:
        wait_until(lambda: listener.done({"b": 10, "c": 10}), 30, "b and c consumed")
        assert listener.ok_seqs().get("a", []) == []  # a waits behind a:0

        def attempts() -> int:
            return len([c for c in listener.snapshot() if c.msgs[0].key == "a"])

        wait_until(lambda: attempts() >= 3, 30, "a:0 retried while suspended")
        assert listener.ok_seqs().get("a", []) == []
        time.sleep(0.5)  # several commit intervals: the offset must stay at a:0
        assert committed_offsets({"bootstrap.servers": bs}, group, topic) == {0: 0}
        info = consumer.running_info()
        release.set()
        wait_until(lambda: listener.done({"a": 10}), 30, "a consumed after its release")
        wait_until(lambda: committed_to_end(bs, group, topic), 30, "offsets at the end")
    assert listener.ok_seqs() == {k: list(range(10)) for k in "abc"}
    assert info["local_retries"] == 1


# --------------------------------------------------------------------------------------------
# consume timeout
# --------------------------------------------------------------------------------------------


def test_a_batch_past_the_consume_timeout_counts_as_suspended_and_never_runs_twice_at_once(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A listener that returns SUCCESS only after ``consume_timeout``: the batch is
    suspended; it is delivered again only after the late call returned (plus the suspend
    time), with ``reconsume_times`` 1; the timeout is counted."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("timeout", partitions=1)

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].reconsume_times == 0 and msgs[0].body == b"t:0":
            time.sleep(1.2)
        return SUCCESS

    listener = OrderlyRecorder(decide)
    group = new_group()
    produce_keyed(bs, topic, [("t", 0), ("t", 1)])

    def t1_consumed() -> bool:
        # not ``listener.done``: the late call returned SUCCESS, so the recorder counts it
        # as ok although the consumer suspended it; wait for what comes last, t:1
        return any(c.ok and c.msgs[0].seq == 1 for c in listener.snapshot())

    with orderly_consumer(
        bs,
        topic,
        listener,
        group=group,
        consume_timeout=0.5,
        suspend_current_queue_time_millis=100,
        listener_mode="POOL",
    ) as consumer:
        wait_until(t1_consumed, 30, "t:1 consumed")
        wait_until(lambda: committed_to_end(bs, group, topic), 30, "offsets at the end")
        stats = consumer.stats()[topic]
    calls = listener.snapshot()
    assert [(c.msgs[0].seq, c.msgs[0].reconsume_times) for c in calls] == [(0, 0), (0, 1), (1, 0)]
    assert calls[1].began >= calls[0].ended + 0.1
    assert listener.overlaps == []
    assert stats.timeouts == 1


# --------------------------------------------------------------------------------------------
# rebalance
# --------------------------------------------------------------------------------------------


def test_a_revoke_waits_for_the_running_batch_so_the_next_owner_never_overlaps(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A second member joins while the first is inside a long listener call on every
    partition: the partition that moves is given up only when that call has returned, so
    the new owner's first call on it begins after it; nothing is consumed twice."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("handover", partitions=2)
    group = new_group()
    blocking = threading.Semaphore(0)
    first: set[int] = set()
    lock = threading.Lock()

    def slow_first(msgs: list[Any], ctx: Any) -> Any:
        with lock:
            new = msgs[0].queue_id not in first
            first.add(msgs[0].queue_id)
        if new:
            blocking.release()
            time.sleep(3.0)
        return SUCCESS

    a_listener = OrderlyRecorder(slow_first)
    b_listener = OrderlyRecorder()
    items = [(f"k{p}", s) for s in range(5) for p in range(2)]
    for p in range(2):
        produce_keyed(bs, topic, [it for it in items if it[0] == f"k{p}"], partition=p)
    ns = new_namespace()
    with orderly_consumer(
        bs, topic, a_listener, group=group, namespace=ns, listener_mode="POOL"
    ) as a:
        assert blocking.acquire(timeout=30) and blocking.acquire(timeout=30)
        joined = time.monotonic()
        with orderly_consumer(bs, topic, b_listener, group=group, namespace=ns) as b:
            wait_until(lambda: len(b.assignment) == 1, 30, "one partition moved to b")
            [(_, moved)] = b.assignment

            def consumed() -> int:
                calls = a_listener.snapshot() + b_listener.snapshot()
                return sum(len(c.msgs) for c in calls if c.ok)

            wait_until(lambda: consumed() >= 10, 30, "everything consumed")
        del a
    a_calls = [c for c in a_listener.snapshot() if c.tp[1] == moved]
    b_calls = [c for c in b_listener.snapshot() if c.tp[1] == moved]
    assert a_calls and a_calls[0].ended >= joined + 2.0  # it was still running on join
    if b_calls:
        assert b_calls[0].began >= max(c.ended for c in a_calls)
    seqs = [s.seq for c in sorted(a_calls + b_calls, key=lambda c: c.began) if c.ok for s in c.msgs]
    assert seqs == list(range(5))  # in order, none twice


# --------------------------------------------------------------------------------------------
# broadcasting
# --------------------------------------------------------------------------------------------


def test_broadcasting_keeps_order_per_instance_and_retries_locally(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Any
) -> None:
    """Two broadcasting instances each get every message in order; failures are retried
    locally (no retry topic); at a finite maximum each instance sends the message to the
    DLQ, as RocketMQ 4.9.7's orderly path does in broadcasting too."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("bcast", partitions=2)

    def decide(msgs: list[Any], ctx: Any) -> Any:
        for m in msgs:
            key, seq = m.body.decode().split(":")
            if key == "poison":
                return SUSPEND
            if m.reconsume_times == 0 and fails_once(key, int(seq), 3):
                return SUSPEND
        return SUCCESS

    items = [*interleaved(["x", "y"], 12), ("poison", 0), ("x", 12)]
    listeners = [OrderlyRecorder(decide), OrderlyRecorder(decide)]
    group = new_group()
    produce_keyed(bs, topic, items)
    with contextlib.ExitStack() as stack:
        for i, listener in enumerate(listeners):
            stack.enter_context(
                orderly_consumer(
                    bs,
                    topic,
                    listener,
                    group=group,
                    message_model="BROADCASTING",
                    offset_store_dir=str(tmp_path),
                    instance_name=f"i{i}",
                    max_reconsume_times=2,
                    suspend_current_queue_time_millis=20,
                )
            )
        for listener in listeners:
            wait_until(lambda li=listener: li.done({"x": 13, "y": 12}), 30, "all to each")
        conf = {"bootstrap.servers": bs}
        wait_until(lambda: len(read_dlq_raw(conf, group)) >= 2, 30, "a dead letter from each")
    for listener in listeners:
        assert listener.ok_seqs() == {"x": list(range(13)), "y": list(range(12))}
        poison = [
            s.reconsume_times for c in listener.snapshot() for s in c.msgs if s.key == "poison"
        ]
        assert poison == [0, 1, 2]  # dead-lettered at the maximum
    dlq = read_dlq_raw({"bootstrap.servers": bs}, group)
    assert [(r.value, r.text("RECONSUME_TIME")) for r in dlq] == [(b"poison:0", "2")] * 2


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


def test_bad_orderly_options_and_listeners_name_the_field_and_the_value() -> None:
    conf = {"bootstrap.servers": "localhost:1", "group.id": "g"}
    with pytest.raises(
        ConfigError, match=r"ordering='row': expected one of \['partition', 'key'\]"
    ):
        PushConsumer(conf, ordering="row")
    with pytest.raises(ConfigError, match="suspend_current_queue_time_millis=5"):
        PushConsumer(conf, suspend_current_queue_time_millis=5)
    with pytest.raises(ConfigError, match="suspend_current_queue_time_millis=30001"):
        PushConsumer(conf, suspend_current_queue_time_millis=30_001)
    with pytest.raises(ConfigError, match="max_suspended_keys_per_queue=0"):
        PushConsumer(conf, max_suspended_keys_per_queue=0)
    consumer = PushConsumer(conf)
    with pytest.raises(InvalidInputError, match="listener=42"):
        consumer.register_message_listener_orderly(42)  # type: ignore[arg-type]

    async def async_orderly(msgs: Any, ctx: Any) -> Any:
        return SUCCESS

    with pytest.raises(InvalidInputError, match="not async def"):
        consumer.register_message_listener_orderly(async_orderly)
    consumer.subscribe("t")
    consumer.register_message_listener_orderly(lambda msgs, ctx: SUCCESS)
    assert consumer.orderly and consumer.max_reconsume_times == 2**31 - 1
    consumer.register_message_listener(lambda msgs, ctx: None)
    with pytest.raises(InvalidInputError, match="both a concurrent and an orderly listener"):
        consumer.start()


# --------------------------------------------------------------------------------------------
# a rebalance storm
# --------------------------------------------------------------------------------------------

STORM_PARTITIONS = 4
STORM_KEYS = 16
STORM_FAIL_MOD = 8


def _storm_id(key: int, seq: int) -> str:
    return f"k{key:02d}-{seq:05d}"


def _order_problems(records: list[Record], per_key: int) -> list[str]:
    """Per key, the ``ok`` sequence numbers in log order: each is the next one, or a
    repeat of one first handled by a process killed before the repeat (a crash forces a
    re-read from the committed offset) or whose commit the group refused (a member leaving
    while the group already rebalanced without it: CI saw ILLEGAL_GENERATION then
    REBALANCE_IN_PROGRESS as "a" left while "d" joined); never a gap, never another step
    back."""
    killed: set[int] = set()
    high: dict[str, int] = {}
    first_by: dict[str, int] = {}  # id -> pid that handled it first
    problems = []
    for r in records:
        if r.outcome in ("killed", "commit-refused"):
            killed.add(r.pid)  # what it handled since its last commit may be read again
            continue
        if r.outcome != "ok":
            continue
        key, seq = r.id.split("-")[0], int(r.id.split("-")[1])
        top = high.get(key, -1)
        if seq == top + 1:
            high[key] = seq
            first_by[r.id] = r.pid
        elif seq > top + 1:
            problems.append(f"{key}: {seq} after {top} (a gap)")
        elif first_by.get(r.id) not in killed:
            problems.append(f"{key}: {seq} again after {top}, first handled by a live process")
    for k in range(STORM_KEYS):
        key = f"k{k:02d}"
        if high.get(key, -1) != per_key - 1:
            problems.append(f"{key}: reached {high.get(key, -1)} of {per_key - 1}")
    return problems


def test_rebalance_storm_keeps_every_key_in_order_with_one_owner_at_a_time(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Any, group_protocol: str
) -> None:
    """Orderly consumer processes join, leave (SIGTERM) and crash (SIGKILL) while keyed
    sequences are produced in waves and one message in eight is suspended on its first
    delivery.  At the end every key's sequence was handled with no gap and no reordering,
    repeats only where a crash forced a re-read, and no two live processes ever ran a
    batch of the same partition at the same time."""
    bs = kafka_bootstrap_servers
    topic = kafka_topic_factory("ostorm", partitions=STORM_PARTITIONS)
    group = new_group()
    log = tmp_path / "deliveries.log"
    waves, per_wave_seqs = 8, 3
    per_key = waves * per_wave_seqs
    common: dict[str, Any] = {
        "bootstrap": bs,
        "topic": topic,
        "group": group,
        "namespace": new_namespace(),
        "log": log,
        "fail_mod": STORM_FAIL_MOD,
        "slow": 0.04,  # per listener call of up to 2 messages: the storm runs mid-stream
        "orderly": True,
        "options": {
            "consume_message_batch_max_size": 2,
            "pull_batch_size": 8,
            "suspend_current_queue_time_millis": 100,
            "shutdown_await": 20,
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
        lambda: crash("c"),
        lambda: join("e"),
    ]
    assert len(storm) == waves
    try:
        for wave, event in enumerate(storm):
            seqs = range(wave * per_wave_seqs, (wave + 1) * per_wave_seqs)
            items = [(k, s) for s in seqs for k in range(STORM_KEYS)]
            _produce_storm(bs, topic, items)
            event()
            time.sleep(1.5)  # the storm's rhythm, not a wait for a condition

        def all_ok() -> bool:
            ok = {r.id for r in read_log(log) if r.outcome == "ok"}
            return len(ok) >= STORM_KEYS * per_key

        try:
            wait_until(all_ok, 60, "every id handled after the storm", 0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; events {events}") from None
    finally:
        for proc in procs.values():
            proc.stop(30)
    records = read_log(log)
    assert _order_problems(records, per_key) == [], events
    assert overlaps(records) == [], events
    assert any(r.outcome == "fail" for r in records)
    assert len({r.pid for r in records if r.outcome == "ok"}) >= 3  # the work moved


def _produce_storm(bootstrap: str, topic: str, items: list[tuple[int, int]]) -> None:
    """Keyed records, body = id = ``k<key>-<seq>``, key = ``k<key>``, in order."""
    p = RawProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[Any] = []
    for key, seq in items:
        p.produce(
            topic,
            _storm_id(key, seq).encode(),
            key=f"k{key:02d}".encode(),
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0 and not errors, errors
