"""PushConsumer behaviour on a real broker, one test per rule of docs/semantics.md §2-5.

Every test uses its own topic, group and namespace (delay topics), and waits by polling
with deadlines.  The ScheduleService runs beside the consumer wherever a retry has to come
back.  The short ladder is ``100ms 200ms 300ms 400ms 500ms 600ms`` (first retry: level 3).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from adapter import (
    ConfigError,
    InvalidDelayLevelError,
    InvalidInputError,
    Message,
    MessageModel,
    PushConsumer,
)
from adapter.core import naming
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.services.dlq import read_dlq
from tests.support.consumer_helpers import (
    LADDER,
    LATER,
    LEVELS,
    OK,
    Delivery,
    Pair,
    RecordingListener,
    end_offsets,
    new_group,
    produce_raw,
    read_topic,
    retry_kafka_topic,
    running_pair,
    send,
    send_bodies,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: Commit stored offsets often, so tests can watch the committed offset move.
FAST_COMMIT = {"auto.commit.interval.ms": 100}


def _dlq_count(pair: Pair) -> int:
    """Records in the group's DLQ topic (its end offsets)."""
    return sum(end_offsets(pair.conf, naming.to_kafka(naming.dlq_topic(pair.group))).values())


def _retry_settled(pair: Pair, records: int) -> bool:
    """The retry topic holds ``records`` records and the group's committed offset is past
    the last.  (The ScheduleService forwards in transactions, so commit markers take
    offsets too: the retry topic's end offset is not its record count.)"""
    got = pair.retry_records()
    if len(got) != records:
        return False
    committed = pair.committed(retry_kafka_topic(pair.group))
    return all(committed.get(r.partition, -1) > r.offset for r in got)


def _bodies(listener: RecordingListener) -> list[bytes]:
    return [d.body for d in listener.snapshot()]


# 1 ------------------------------------------------------------------------------------------
def test_all_success_consumes_each_message_once_and_commits_to_the_end(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("ok", partitions=3)
    bodies = [f"m{i}" for i in range(60)]
    send(
        bootstrap,
        [Message(topic=topic, body=b.encode(), partition=i % 3) for i, b in enumerate(bodies)],
    )
    listener = RecordingListener()
    with running_pair(
        bootstrap, topic, listener, service=False, consume_message_batch_max_size=4
    ) as pair:
        wait_until(lambda: len(listener) >= len(bodies), what="all 60 messages")
    # after a clean shutdown: nothing twice, everything committed, nothing sent back
    counts = listener.count()
    assert sorted(counts) == sorted(b.encode() for b in bodies)
    assert set(counts.values()) == {1}
    assert all(d.reconsume_times == 0 and d.topic == topic for d in listener.snapshot())
    for batch in listener.batches:
        assert 1 <= len(batch) <= 4
        assert len({d.queue_id for d in batch}) == 1  # a batch never mixes partitions
    assert pair.committed() == pair.end_offsets() == {0: 20, 1: 20, 2: 20}
    assert sum(pair.end_offsets(retry_kafka_topic(pair.group)).values()) == 0
    assert _dlq_count(pair) == 0
    stats = pair.topic_stats()
    assert (stats.consume_ok, stats.consume_failed, stats.sent_back) == (60, 0, 0)


# 2 ------------------------------------------------------------------------------------------
def _ack_index_attempt(bootstrap: str, topic: str) -> tuple[RecordingListener, Pair] | None:
    """Consume a, b, c, d (one batch of 4) acknowledging up to index 1; ``None`` when the
    first batch was not the four of them."""

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].reconsume_times == 0 and len(msgs) == 4:
            ctx.ack_index = 1  # a and b done; c and d failed
        return OK

    send_bodies(bootstrap, topic, ["a", "b", "c", "d"], tags="T", keys=["k"])
    listener = RecordingListener(decide)
    with running_pair(bootstrap, topic, listener, consume_message_batch_max_size=4) as pair:
        wait_until(lambda: listener.batches, what="the first batch")
        if len(listener.batches[0]) != 4:
            return None
        wait_until(lambda: len(listener.of("c")) + len(listener.of("d")) >= 4, what="retries")
        wait_until(lambda: _retry_settled(pair, 2), what="the retries committed")
    return listener, pair


def test_ack_index_marks_the_rest_of_the_batch_failed(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    # The four records are in the log before the consumer starts, so its first fetch
    # returns them together.  Should the broker still split them, try a fresh topic.
    for _attempt in range(3):
        topic = kafka_topic_factory("ack")
        outcome = _ack_index_attempt(kafka_bootstrap_servers, topic)
        if outcome is not None:
            break
    else:
        pytest.fail("the four records never arrived in one batch")
    listener, pair = outcome

    first = listener.batches[0]
    assert [d.body for d in first] == [b"a", b"b", b"c", b"d"]
    assert [d.queue_offset for d in first] == [0, 1, 2, 3]
    assert listener.count() == {b"a": 1, b"b": 1, b"c": 2, b"d": 2}
    originals = {d.body: d for d in first}
    again = [d for d in listener.snapshot() if d.reconsume_times > 0]
    assert sorted(d.body for d in again) == [b"c", b"d"]
    for d in again:
        assert d.reconsume_times == 1
        assert d.topic == topic  # resetRetryTopic
        assert d.kafka_topic == retry_kafka_topic(pair.group)
        assert d.properties["RETRY_TOPIC"] == topic
        assert d.msg_id == originals[d.body].msg_id
        assert d.properties["ORIGIN_MESSAGE_ID"] == originals[d.body].msg_id
        assert d.tags == "T" and d.keys == "k"
    assert pair.committed() == {0: 4}
    stats = pair.topic_stats()
    assert (stats.consume_ok, stats.consume_failed, stats.sent_back) == (4, 2, 2)


# 3 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("outcome", "failure_type"),
    [
        ("RECONSUME_LATER", None),
        ("exception", "RuntimeError"),
        ("None", None),
        ("not-a-status", None),
    ],
)
def test_every_kind_of_failure_is_retried(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    outcome: str,
    failure_type: str | None,
) -> None:
    topic = kafka_topic_factory("fail")
    send_bodies(kafka_bootstrap_servers, topic, ["x"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].reconsume_times >= 2:
            return OK
        if outcome == "exception":
            raise RuntimeError("listener blew up")
        return {"RECONSUME_LATER": LATER, "None": None, "not-a-status": "ok"}[outcome]

    listener = RecordingListener(decide)
    with running_pair(kafka_bootstrap_servers, topic, listener) as pair:
        wait_until(lambda: len(listener) >= 3, what="two retries")
        wait_until(lambda: _retry_settled(pair, 2), what="the retries committed")
    seen = listener.snapshot()
    assert [d.reconsume_times for d in seen] == [0, 1, 2]
    assert all(d.topic == topic and d.body == b"x" for d in seen)
    for retried in seen[1:]:
        reason = retried.properties.get("RMQ_FAILURE_TYPE")
        assert reason, retried.properties  # the retry copy says why the last attempt failed
        if failure_type is not None:
            assert reason == failure_type
    stats = pair.topic_stats()
    assert (stats.consume_ok, stats.consume_failed, stats.sent_back) == (1, 2, 2)
    assert _dlq_count(pair) == 0


# 4 ------------------------------------------------------------------------------------------
def test_delay_level_when_next_consume_picks_the_level_or_the_dlq(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("lvl")
    send_bodies(kafka_bootstrap_servers, topic, ["level6", "level99", "dlq-now", "plain"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        if m.reconsume_times > 0:
            return OK
        if m.body == b"level6":
            ctx.delay_level_when_next_consume = 6  # 600 ms instead of level 3 (300 ms)
            return LATER
        if m.body == b"level99":
            ctx.delay_level_when_next_consume = 99  # clamped to the highest level (6)
            return LATER
        if m.body == b"dlq-now":
            ctx.delay_level_when_next_consume = -1
            return LATER
        return LATER  # plain: the system picks level 3 + 0

    listener = RecordingListener(decide)
    traces: list[TraceEvent] = []
    with running_pair(kafka_bootstrap_servers, topic, listener, trace_sink=traces.append) as pair:
        for body in ("level6", "level99", "plain"):
            wait_until(lambda b=body: len(listener.of(b)) == 2, what=f"{body} retry")
        wait_until(lambda: _dlq_count(pair) == 1, what="the dead letter")
        wait_until(lambda: pair.topic_stats().dead_lettered == 1, what="the DLQ acknowledgement")
    highest = LADDER[6].total_seconds()
    for body, least in (("level6", highest), ("level99", highest), ("plain", 0.3)):
        first, second = listener.of(body)
        assert second.reconsume_times == 1
        assert second.at - first.at >= least - 0.02, (body, second.at - first.at)
    retry_levels = {e.msg_id: e.delay_level for e in traces if e.status is TraceStatus.RETRY}
    ids = {d.body: d.msg_id for d in listener.snapshot()}
    assert retry_levels == {ids[b"level6"]: 6, ids[b"level99"]: 6, ids[b"plain"]: 3}
    [entry] = read_dlq(pair.conf, pair.group)
    assert entry.message.body == b"dlq-now"
    assert entry.reason == "LISTENER_REQUESTED" and entry.origin_topic == topic
    assert len(listener.of("dlq-now")) == 1  # straight to the DLQ, no retry first


# 5 ------------------------------------------------------------------------------------------
def test_poison_message_gets_max_plus_one_deliveries_then_one_dlq_copy(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("poison")
    send(
        bootstrap,
        [
            Message(
                topic=topic,
                body=b"poison",
                keys=["order-1", "order-2"],
                tags="TagP",
                properties={"tenant": "t9", "trace-id": "abc"},
            ),
            *(Message(topic=topic, body=f"fine{i}".encode()) for i in range(5)),
        ],
    )

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].body == b"poison":
            raise ValueError("cannot parse order 'poison'")
        return OK

    listener = RecordingListener(decide)
    # a slower ladder (levels 3..5 wait 1 s) leaves room to watch the partition move on
    levels = "100ms 200ms 1s 1s 1s 1s"
    with running_pair(
        bootstrap, topic, listener, max_reconsume_times=3, delay_levels=levels, config=FAST_COMMIT
    ) as pair:
        wait_until(lambda: listener.of("poison"), what="the poison's first delivery")
        # the partition is not blocked: new messages behind the poison are consumed and the
        # committed offset passes the poison while it is still on its retry ladder
        send_bodies(bootstrap, topic, [f"late{i}" for i in range(5)])
        wait_until(lambda: all(listener.of(f"late{i}") for i in range(5)), 10, "messages behind it")
        wait_until(lambda: pair.committed() == {0: 11}, 10, "commit past the poison")
        assert len(listener.of("poison")) < 4 and _dlq_count(pair) == 0
        wait_until(lambda: _dlq_count(pair) >= 1, what="the dead letter")
        wait_until(lambda: pair.topic_stats().dead_lettered == 1, what="the DLQ acknowledgement")
    poison = listener.of("poison")
    assert [d.reconsume_times for d in poison] == [0, 1, 2, 3]
    # the messages fetched with it went by before its first retry (the late ones were sent
    # after its first delivery: when they come depends on the machine's load, and the
    # commit past the poison above already shows they were not held behind it)
    last_fine = max(d.at for d in listener.snapshot() if d.body.startswith(b"fine"))
    assert last_fine < poison[1].at
    assert all(n == 1 for b, n in listener.count().items() if b != b"poison")

    [raw] = pair.dlq()  # exactly one copy
    keys = [k for k, _ in raw.headers]
    assert len(keys) == len(set(keys)), keys  # headers replaced, never appended
    assert raw.value == b"poison"
    assert raw.header("RMQ_DLQ_REASON") == b"MAX_RECONSUME_TIMES"
    assert raw.header("DLQ_ORIGIN_TOPIC") == topic.encode()
    [entry] = read_dlq(pair.conf, pair.group)
    m = entry.message
    assert m.body == b"poison" and m.keys == "order-1 order-2" and m.tags == "TagP"
    assert m.properties["tenant"] == "t9" and m.properties["trace-id"] == "abc"
    assert m.msg_id == poison[0].msg_id
    assert entry.reason == "MAX_RECONSUME_TIMES" and entry.origin_topic == topic
    assert entry.failure_type == "ValueError"
    assert entry.failure_message == "cannot parse order 'poison'"
    assert m.reconsume_times == 4 and m.properties["RMQ_GROUP"] == pair.group


# 6 ------------------------------------------------------------------------------------------
def test_per_message_max_reconsume_times_overrides_the_group_maximum(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("permax")
    cases = {"cap0": "0", "cap1": "1", "plain": None, "cap4": "4"}  # group maximum: 2
    send(
        kafka_bootstrap_servers,
        [
            Message(
                topic=topic,
                body=body.encode(),
                properties={} if cap is None else {"MAX_RECONSUME_TIMES": cap},
            )
            for body, cap in cases.items()
        ],
    )
    listener = RecordingListener(lambda msgs, ctx: LATER)
    with running_pair(kafka_bootstrap_servers, topic, listener, max_reconsume_times=2) as pair:
        wait_until(lambda: _dlq_count(pair) == 4, what="four dead letters")
        wait_until(lambda: pair.topic_stats().dead_lettered == 4, what="the DLQ acknowledgements")
    expected = {"cap0": 1, "cap1": 2, "plain": 3, "cap4": 5}
    for body, deliveries in expected.items():
        assert [d.reconsume_times for d in listener.of(body)] == list(range(deliveries)), body
    dead = read_dlq(pair.conf, pair.group)
    assert sorted(e.message.body for e in dead) == sorted(b.encode() for b in cases)
    assert {e.reason for e in dead} == {"MAX_RECONSUME_TIMES"}


# 7 ------------------------------------------------------------------------------------------
def test_consume_timeout_redelivers_and_ignores_the_late_result(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter.consumer")
    topic = kafka_topic_factory("slow")
    send_bodies(kafka_bootstrap_servers, topic, ["slow"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].reconsume_times == 0:
            time.sleep(2.5)  # past consume_timeout (1 s); this late CONSUME_SUCCESS is ignored
        return OK

    listener = RecordingListener(decide)
    with running_pair(kafka_bootstrap_servers, topic, listener, consume_timeout=1.0) as pair:
        wait_until(lambda: len(listener) >= 2, what="the redelivery after the timeout")
        wait_until(lambda: listener.returned >= 2, what="the late result")
        wait_until(
            lambda: any("late result" in r.getMessage() for r in caplog.records),
            10,
            "the late result to be processed",
        )
        wait_until(lambda: _retry_settled(pair, 1), what="the retry committed")
    seen = listener.snapshot()
    assert [d.reconsume_times for d in seen] == [0, 1]
    assert seen[1].properties.get("RMQ_FAILURE_TYPE")
    stats = pair.topic_stats()
    assert stats.timeouts == 1
    assert stats.sent_back == 1  # one send-back for the timed-out delivery, none for the late OK
    assert (stats.consume_ok, stats.consume_failed) == (1, 1)
    assert len(pair.retry_records()) == 1
    assert _dlq_count(pair) == 0
    assert pair.committed() == pair.end_offsets() == {0: 1}


def test_consume_timeout_counts_from_the_listener_call_not_from_the_queue(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A batch waiting for a free worker is not "running past consume_timeout" (RocketMQ
    measures from CONSUME_START_TIME): only the slow call times out."""
    topic = kafka_topic_factory("queued")
    send_bodies(kafka_bootstrap_servers, topic, ["slow", "queued"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].body == b"slow" and msgs[0].reconsume_times == 0:
            time.sleep(2.5)  # holds the only worker past consume_timeout
        return OK

    listener = RecordingListener(decide)
    with running_pair(
        kafka_bootstrap_servers, topic, listener, consume_timeout=1.0, consume_thread_max=1
    ) as pair:
        wait_until(lambda: len(listener.of("slow")) >= 2, what="the slow message's retry")
        wait_until(lambda: listener.of("queued"), what="the queued message")
        wait_until(lambda: listener.returned >= 3, what="every listener call")
        wait_until(lambda: _retry_settled(pair, 1), what="the retry committed")
    assert [d.reconsume_times for d in listener.of("slow")] == [0, 1]
    assert [d.reconsume_times for d in listener.of("queued")] == [0]  # handled once, in time
    stats = pair.topic_stats()
    assert (stats.timeouts, stats.sent_back, stats.consume_ok) == (1, 1, 2)
    assert pair.committed() == pair.end_offsets() == {0: 2}


# 8 ------------------------------------------------------------------------------------------
def test_tag_filter_skips_other_tags_and_commits_past_them(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("tags")
    tags = ["TagA", "TagC", "TagB", None, "TagC", "TagA", "TagC"]  # ends with filtered ones
    send(
        kafka_bootstrap_servers,
        [Message(topic=topic, body=f"{i}-{t}".encode(), tags=t) for i, t in enumerate(tags)],
    )
    listener = RecordingListener()
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        expression="TagA || TagB",
        service=False,
        config=FAST_COMMIT,
    ) as pair:
        wait_until(lambda: len(listener) >= 3, what="the matching messages")
        wait_until(lambda: pair.committed() == {0: 7}, 15, "the commit past the filtered ones")
    assert sorted(_bodies(listener)) == [b"0-TagA", b"2-TagB", b"5-TagA"]
    assert {d.tags for d in listener.snapshot()} == {"TagA", "TagB"}
    assert pair.committed() == pair.end_offsets() == {0: 7}
    assert sum(pair.end_offsets(retry_kafka_topic(pair.group)).values()) == 0  # not "failed"


# 9 ------------------------------------------------------------------------------------------
def test_malformed_headers_from_a_plain_producer_are_consumed_and_retried(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("bad")
    bad_bytes = b"\xff\xfe-not-utf8\xc3"
    produce_raw(
        kafka_bootstrap_servers,
        topic,
        [
            (b"no-headers", None),  # offset 0
            (b"bad-count", [("RECONSUME_TIME", b"lots")]),
            (b"bad-utf8", [("note", bad_bytes), ("plain", b"v")]),
            (b"dup", [("TAGS", b"A"), ("TAGS", b"B")]),
            (b"null", [("nullable", None), ("kept", b"k")]),
            (None, [("x", b"1")]),  # offset 5: null value
            (b"bad-max", [("MAX_RECONSUME_TIMES", b"many")]),
        ],
        partition=0,
    )

    def decide(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        if m.body == b"bad-utf8" and m.reconsume_times < 2:
            return LATER  # travels the ladder twice
        if m.body in (b"bad-count", b"null", b"dup") and m.reconsume_times == 0:
            raise KeyError(m.body)
        return OK

    listener = RecordingListener(decide)
    with running_pair(kafka_bootstrap_servers, topic, listener) as pair:
        wait_until(lambda: len(listener) >= 12, what="every record and the retries")
        pair.consumer.check_alive()  # no fatal error
        send_bodies(kafka_bootstrap_servers, topic, ["after"])  # and it keeps consuming
        wait_until(lambda: listener.of("after"), what="a message after the bad ones")
        wait_until(lambda: _retry_settled(pair, 5), what="the retries committed")
    first = {d.body: d for d in listener.snapshot() if d.reconsume_times == 0}
    none_hdr = first[b"no-headers"]
    assert none_hdr.msg_id == f"{topic}:0:0" and none_hdr.raw_headers == ()
    assert first[b"bad-count"].header_errors  # noted, read as 0
    assert first[b"dup"].tags == "B" and first[b"dup"].header_errors
    assert "nullable" not in first[b"null"].properties
    assert first[b"null"].properties["kept"] == "k"
    assert first[b""].msg_id == f"{topic}:0:5"
    assert first[b"bad-max"].header_errors
    assert len(listener.of("bad-max")) == 1
    assert "\ufffd" in first[b"bad-utf8"].properties["note"]

    retried = [d for d in listener.of("bad-utf8") if d.reconsume_times > 0]
    assert [d.reconsume_times for d in retried] == [1, 2]
    for d in retried:
        assert ("note", bad_bytes) in d.raw_headers  # byte-exact on every hop
        assert ("plain", b"v") in d.raw_headers
        keys = [k for k, _ in d.raw_headers]
        assert len(keys) == len(set(keys)), keys
        assert d.topic == topic and d.msg_id == f"{topic}:0:2"
    [count_retry] = [d for d in listener.of("bad-count") if d.reconsume_times > 0]
    assert count_retry.reconsume_times == 1 and count_retry.properties["RECONSUME_TIME"] == "1"
    [null_retry] = [d for d in listener.of("null") if d.reconsume_times > 0]
    assert "nullable" not in null_retry.properties and null_retry.properties["kept"] == "k"
    [dup_retry] = [d for d in listener.of("dup") if d.reconsume_times > 0]
    assert [v for k, v in dup_retry.raw_headers if k == "TAGS"] == [b"B"]  # one value now
    # the copies on the retry topic hold the same bytes
    stored = [
        r for r in read_topic(pair.conf, retry_kafka_topic(pair.group)) if r.value == b"bad-utf8"
    ]
    assert len(stored) == 2 and all(r.header("note") == bad_bytes for r in stored)
    assert pair.committed() == pair.end_offsets() == {0: 8}


# 10 -----------------------------------------------------------------------------------------
def test_broadcasting_every_instance_gets_everything_and_failures_are_dropped(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    topic = kafka_topic_factory("bcast", partitions=2)
    group = new_group()

    def decide(msgs: list[Any], ctx: Any) -> Any:
        return LATER if msgs[0].body == b"fail" else OK

    def make(i: int, listener: RecordingListener) -> PushConsumer:
        c = PushConsumer(
            {**conf, "group.id": group},
            message_model=MessageModel.BROADCASTING,
            instance_name=f"inst-{i}",
            offset_store_dir=str(tmp_path),
            delay_levels=LEVELS,
        )
        c.subscribe(topic)
        c.register_message_listener(listener)
        return c

    def warmed(listener: RecordingListener) -> bool:
        return {d.queue_id for d in listener.snapshot() if d.body.startswith(b"warm")} == {0, 1}

    listeners = [RecordingListener(decide) for _ in range(2)]
    consumers = [make(i, lst) for i, lst in enumerate(listeners)]
    try:
        for c in consumers:
            c.start()
        wait_until(lambda: all(len(c.assignment) == 2 for c in consumers), what="assignment")
        # a new instance starts at the log end once it has resolved it: send warm-up
        # messages to both partitions until both instances receive them
        deadline = time.monotonic() + 30
        for n in range(1000):
            assert time.monotonic() < deadline, "broadcast consumers never started reading"
            send(bootstrap, [Message(topic=topic, body=b"warm%d" % n, partition=p) for p in (0, 1)])
            try:
                wait_until(lambda: all(warmed(lst) for lst in listeners), 1.0, "warm-up")
                break
            except AssertionError:
                continue
        send(
            bootstrap,
            [
                Message(topic=topic, body=b"one", partition=0),
                Message(topic=topic, body=b"two", partition=1),
                Message(topic=topic, body=b"fail", partition=1),
            ],
        )
        for lst in listeners:
            wait_until(
                lambda lst=lst: {b"one", b"two", b"fail"} <= set(_bodies(lst)),
                what="every message in every instance",
            )
    finally:
        for c in consumers:
            c.shutdown()
    for i, lst in enumerate(listeners):
        real = {b: n for b, n in lst.count().items() if not b.startswith(b"warm")}
        assert real == {b"one": 1, b"two": 1, b"fail": 1}, i  # the failure is not retried
        stats = consumers[i].stats()[topic]
        assert stats.consume_failed == 1 and stats.sent_back == 0 and stats.dead_lettered == 0
    assert read_dlq(conf, group) == []
    assert sum(end_offsets(conf, naming.to_kafka(naming.retry_topic(group))).values()) == 0
    assert sorted(p.name for p in tmp_path.rglob("*.json")) == ["inst-0.json", "inst-1.json"]

    # a restarted instance resumes from its local offsets: it gets what was sent while it
    # was down, and nothing it had already received
    send(
        bootstrap,
        [Message(topic=topic, body=b"while-down-%d" % p, partition=p) for p in (0, 1)],
    )
    again = RecordingListener()
    c = make(0, again)
    c.start()
    try:
        wait_until(
            lambda: {b"while-down-0", b"while-down-1"} <= set(_bodies(again)),
            what="the messages sent while the instance was down",
        )
        send(bootstrap, [Message(topic=topic, body=b"after", partition=0)])
        wait_until(lambda: again.of("after"), what="a new message")
    finally:
        c.shutdown()
    assert sorted(_bodies(again)) == [b"after", b"while-down-0", b"while-down-1"]


# 11 -----------------------------------------------------------------------------------------
def test_stats_count_outcomes_and_consume_rt(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("stats")
    send_bodies(kafka_bootstrap_servers, topic, ["ok1", "ok2", "slow", "bad"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        body = msgs[0].body
        if body == b"slow":
            time.sleep(0.3)
        return LATER if body == b"bad" else OK

    listener = RecordingListener(decide)
    with running_pair(kafka_bootstrap_servers, topic, listener, max_reconsume_times=1) as pair:
        wait_until(
            lambda: pair.topic_stats() and pair.topic_stats().dead_lettered == 1, what="the DLQ ack"
        )
        wait_until(lambda: listener.returned >= 5, what="every listener call")
    stats = pair.consumer.stats()
    assert set(stats) == {topic}  # retries count under the original topic
    s = stats[topic]
    assert s.consume_ok == 3  # ok1, ok2, slow
    assert s.consume_failed == 2  # bad, twice
    assert (s.sent_back, s.dead_lettered, s.send_back_failed, s.timeouts) == (1, 1, 0, 0)
    assert s.rt_count == 5  # one per listener call
    assert 300 <= s.rt_max_ms < 10_000
    assert s.rt_total_ms >= s.rt_max_ms
    assert s.consume_rt_avg_ms == pytest.approx(s.rt_total_ms / 5)
    assert s.consume_rt_avg_ms >= 300 / 5


# 12 -----------------------------------------------------------------------------------------
def test_flow_control_bounds_the_messages_in_flight(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("flow")
    total, threshold, pull_batch = 600, 50, 16
    produce_raw(kafka_bootstrap_servers, topic, [(b"m%d" % i, None) for i in range(total)])
    gate = threading.Event()

    def decide(msgs: list[Any], ctx: Any) -> Any:
        assert gate.wait(60)
        return OK

    listener = RecordingListener(decide)
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        service=False,
        pull_threshold_for_queue=threshold,
        pull_batch_size=pull_batch,
        consume_thread_max=4,
    ) as pair:

        def in_flight() -> int:  # fetched from Kafka and handed out, not yet settled
            return pair.consumer.in_flight().get((topic, 0), 0)

        wait_until(lambda: in_flight() > threshold, 20, "the threshold to be reached")
        samples = []
        end = time.monotonic() + 2.0
        while time.monotonic() < end:  # a measuring window, not a wait
            samples.append(in_flight())
            time.sleep(0.02)
        assert max(samples) <= threshold + pull_batch, max(samples)
        assert len(listener) <= 4  # only the workers hold messages; nothing else ran
        gate.set()
        wait_until(lambda: len(listener) >= total, 60, "everything after the release")
    assert len(set(_bodies(listener))) == total and len(listener) == total
    assert pair.committed() == pair.end_offsets() == {0: total}


# 13 -----------------------------------------------------------------------------------------
BAD_OPTIONS = [
    ({"consume_message_batch_max_size": -1}, "consume_message_batch_max_size", -1),
    ({"consume_message_batch_max_size": 0}, "consume_message_batch_max_size", 0),
    ({"pull_batch_size": "32"}, "pull_batch_size", "32"),
    ({"max_reconsume_times": -2}, "max_reconsume_times", -2),
    ({"consume_timeout": 0}, "consume_timeout", 0),
    ({"message_model": "FANOUT"}, "message_model", "FANOUT"),
    ({"pull_threshold_for_queue": 0}, "pull_threshold_for_queue", 0),
]


@pytest.mark.parametrize(("options", "name", "value"), BAD_OPTIONS)
def test_bad_options_name_the_field_and_the_value(
    kafka_bootstrap_servers: str, options: dict[str, Any], name: str, value: Any
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap_servers, "group.id": new_group()}
    with pytest.raises(ConfigError) as info:
        PushConsumer(conf, **options)
    assert info.value.field == name and info.value.value == value
    assert name in str(info.value) and repr(value) in str(info.value)


def test_bad_configuration_and_subscriptions_get_clear_errors(
    kafka_bootstrap_servers: str,
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap_servers, "group.id": new_group()}
    # an unknown option is named, with the close match suggested
    with pytest.raises(ConfigError) as info:
        PushConsumer(conf, max_reconsume_time=3)
    assert info.value.field == "max_reconsume_time"
    assert "'max_reconsume_times'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        PushConsumer(conf, consume_thread_maximum=4)
    assert "consume_thread_maximum" in str(info.value) and "consume_thread_max" in str(info.value)
    # no group
    for bad in ({}, {"group.id": ""}):
        with pytest.raises(ConfigError) as info:
            PushConsumer({"bootstrap.servers": kafka_bootstrap_servers, **bad})
        assert info.value.field == "group.id"
    # a bad delay table names the token
    with pytest.raises(InvalidDelayLevelError) as info_lvl:
        PushConsumer(conf, delay_levels="1s 5x 10s")
    assert "'5x'" in str(info_lvl.value)
    # bad tag expressions
    consumer = PushConsumer(conf)
    for expr in ("TagA || ", "|| TagB", "TagA ||  || TagB"):
        with pytest.raises(InvalidInputError) as info_sub:
            consumer.subscribe("orders", expr)
        assert info_sub.value.field == "subExpression" and info_sub.value.value == expr
        assert repr(expr) in str(info_sub.value)
    with pytest.raises(InvalidInputError) as info_sub:
        consumer.subscribe("orders", 42)  # type: ignore[arg-type]
    assert info_sub.value.value == 42
    with pytest.raises(InvalidInputError) as info_sub:
        consumer.subscribe("bad topic name")
    assert "bad topic name" in str(info_sub.value)
    with pytest.raises(InvalidInputError) as info_sub:
        consumer.start()  # no subscription and no listener
    consumer.subscribe("orders", "TagA || TagB")
    with pytest.raises(InvalidInputError) as info_sub:
        consumer.start()
    assert info_sub.value.field == "listener"
    # an unknown librdkafka property is refused when the client is constructed, naming it
    with pytest.raises(ConfigError) as info:
        PushConsumer({**conf, "no.such.property": "1"}, namespace=f"ns{uuid.uuid4().hex[:8]}")
    assert info.value.field == "no.such.property"
    assert "no such librdkafka setting" in str(info.value)


# 14 -----------------------------------------------------------------------------------------
def test_trace_events_for_success_retry_and_dlq(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("trace")
    send_bodies(kafka_bootstrap_servers, topic, ["ok", "flaky", "dead", "now", "lvl5"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        if m.body == b"now":
            ctx.delay_level_when_next_consume = -1
            return LATER
        if m.body == b"dead":
            return LATER
        if m.reconsume_times == 0 and m.body == b"flaky":
            raise RuntimeError("flaky")
        if m.reconsume_times == 0 and m.body == b"lvl5":
            ctx.delay_level_when_next_consume = 5
            return LATER
        return OK

    listener = RecordingListener(decide)
    traces: list[TraceEvent] = []
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        max_reconsume_times=1,
        trace_sink=traces.append,
    ) as pair:
        wait_until(
            lambda: pair.topic_stats() and pair.topic_stats().dead_lettered == 2,
            what="two DLQ acks",
        )
        wait_until(lambda: pair.topic_stats().consume_ok == 3, what="three successes")
    events = list(traces)
    by_id: dict[str, Delivery] = {d.msg_id: d for d in listener.snapshot()}
    got: dict[bytes, list[tuple[Any, ...]]] = {}
    for e in events:
        assert e.source == "consumer" and e.group == pair.group and e.topic == topic
        assert e.origin_msg_id == e.msg_id  # the first delivery's id, kept across hops
        got.setdefault(by_id[e.msg_id].body, []).append(
            (e.status, e.reconsume_times, e.delay_level, e.dlq_reason)
        )
    S, R, D = TraceStatus.SUCCESS, TraceStatus.RETRY, TraceStatus.DLQ
    assert got == {
        b"ok": [(S, 0, None, None)],
        b"flaky": [(R, 0, 3, None), (S, 1, None, None)],
        b"dead": [(R, 0, 3, None), (D, 1, None, "MAX_RECONSUME_TIMES")],
        b"now": [(D, 0, None, "LISTENER_REQUESTED")],
        b"lvl5": [(R, 0, 5, None), (S, 1, None, None)],
    }
    failures = {
        (by_id[e.msg_id].body, e.status): e.failure_type
        for e in events
        if e.status is not TraceStatus.SUCCESS
    }
    assert failures[(b"flaky", R)] == "RuntimeError"
    assert failures[(b"dead", R)] == failures[(b"lvl5", R)] == "RECONSUME_LATER"
    assert all(failures.values())
    assert all(e.consume_rt_ms is not None and e.consume_rt_ms >= 0 for e in events)


# 15 -----------------------------------------------------------------------------------------
#: What a careless listener can do to its arguments (each once, on the first delivery).
MISBEHAVIOUR: dict[str, Any] = {
    "ack_index-str": lambda msgs, ctx: setattr(ctx, "ack_index", "1"),
    "level-None": lambda msgs, ctx: setattr(ctx, "delay_level_when_next_consume", None),
    "level-str": lambda msgs, ctx: setattr(ctx, "delay_level_when_next_consume", "3"),
    "list-cleared": lambda msgs, ctx: msgs.clear(),
}


@pytest.mark.parametrize("misbehaviour", list(MISBEHAVIOUR))
def test_a_misbehaving_listener_never_stops_the_consumer(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, misbehaviour: str
) -> None:
    """docs/semantics.md §5: a bad value from the listener is logged and counted as
    RECONSUME_LATER; the consumer keeps consuming.
    (A bad ``ack_index`` or level used to kill the poll loop.)"""
    topic = kafka_topic_factory("mis")
    send_bodies(kafka_bootstrap_servers, topic, ["first"])

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].reconsume_times == 0:
            MISBEHAVIOUR[misbehaviour](msgs, ctx)
        return OK

    retried = misbehaviour != "list-cleared"  # clearing its own list is not a failure
    listener = RecordingListener(decide)
    with running_pair(kafka_bootstrap_servers, topic, listener) as pair:
        wait_until(lambda: listener.of("first"), what="the first delivery")
        send_bodies(kafka_bootstrap_servers, topic, ["second"])
        for body in ("first", "second"):
            wait_until(
                lambda b=body: len(listener.of(b)) == (2 if retried else 1),
                what=f"{body} handled",
            )
        pair.consumer.check_alive()  # the poll loop is still running
        wait_until(lambda: pair.topic_stats().consume_ok == 2, what="both done")
    for body in ("first", "second"):
        seen = listener.of(body)
        assert [d.reconsume_times for d in seen] == ([0, 1] if retried else [0])
        if retried:
            assert seen[1].properties["RMQ_FAILURE_TYPE"] == "ListenerResultError"
    assert pair.committed() == pair.end_offsets() == {0: 2}


# 16 -----------------------------------------------------------------------------------------
def test_broadcasting_start_offset_is_fixed_at_start_and_kept_when_nothing_arrived(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    """A broadcasting instance with no local offsets starts at the log end as of start()
    and stores it (RocketMQ's correctTagsOffset): a message sent right after start() is
    received, and an instance that received nothing still resumes there after a restart.
    (It used to store nothing, so a restart skipped what was sent while it was down.)"""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("bcidle")
    group = new_group()

    def make(name: str, listener: RecordingListener) -> PushConsumer:
        c = PushConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group},
            message_model=MessageModel.BROADCASTING,
            instance_name=name,
            offset_store_dir=str(tmp_path),
        )
        c.subscribe(topic)
        c.register_message_listener(listener)
        return c

    send_bodies(bootstrap, topic, ["before-any-start"])
    idle = make("idle", RecordingListener())
    idle.start()
    try:
        wait_until(lambda: list(tmp_path.rglob("idle.json")), what="the start offset stored")
    finally:
        idle.shutdown()
    send_bodies(bootstrap, topic, ["while-down"])
    again = RecordingListener()
    fresh = RecordingListener()
    consumers = [make("idle", again), make("fresh", fresh)]
    try:
        for c in consumers:
            c.start()
        send_bodies(bootstrap, topic, ["right-after-start"])  # no warm-up needed
        wait_until(lambda: again.of("right-after-start"), what="the restarted instance")
        wait_until(lambda: fresh.of("right-after-start"), what="the new instance")
    finally:
        for c in consumers:
            c.shutdown()
    assert [d.body for d in again.snapshot()] == [b"while-down", b"right-after-start"]
    assert [d.body for d in fresh.snapshot()] == [b"right-after-start"]
