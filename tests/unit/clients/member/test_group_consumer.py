"""GroupConsumer on fake Kafka clients: the fetch/dispatch/apply cycle, offsets stored and
committed only once handled, send-back verdicts and their counters, broadcasting's local
offsets across a restart, lag.  (The real-broker behaviour is in tests/integration.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError

from adapter.clients.member.group_consumer import ConsumeSettings, GroupConsumer
from adapter.clients.push.concurrent_runner import ConcurrentRunner
from adapter.clients.push.orderly_runner import OrderlyRunner
from adapter.constants import HEADER_DUE_MS
from adapter.core.delay import DelayLevels
from adapter.core.engine import ConcurrentEngine, EngineOptions, Pause, Resume
from adapter.core.engine.orderly import OrderlyEngine, OrderlyOptions
from adapter.core.filter import TagFilter
from adapter.core.hops import GroupTopics
from adapter.core.listener import ConsumeOrderlyStatus, ListenerMode
from adapter.core.offsets import ConsumeFromWhere
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.errors import UnknownTopicError
from adapter.io.errors import FatalErrorWatch
from tests.unit.kafka_fakes import (
    Factory,
    FakeAdmin,
    FakeClock,
    FakeConsumer,
    FakeProducer,
    record,
)

pytestmark = pytest.mark.unit

GROUP = "gc-group"
TOPIC = "orders"
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


class Member:
    """A GroupConsumer with an inline concurrent listener, built on fakes."""

    def __init__(
        self,
        *,
        clustering: bool = True,
        fail: set[bytes] | None = None,
        store_dir: Path | None = None,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        existing: dict[tuple[str, int], tuple[int, int]] | None = None,
        slow: dict[bytes, float] | None = None,
        orderly: bool = False,
    ) -> None:
        self.clock = FakeClock()
        #: body -> seconds of the clock the listener takes on it
        self.slow = slow or {}

        def cluster(consumer: FakeConsumer) -> None:  # what exists when the member starts
            for (topic, partition), marks in (existing or {}).items():
                consumer.topics[topic] = max(consumer.topics.get(topic, 0), partition + 1)
                consumer.watermarks[(topic, partition)] = marks

        self.consumers = Factory(FakeConsumer, cluster)
        self.producers = Factory(FakeProducer)
        self.admins = Factory(FakeAdmin)
        self.received: list[bytes] = []
        self.fail = fail or set()
        topics = GroupTopics(GROUP, DelayLevels.DEFAULT)
        self.topics = topics
        options = EngineOptions(batch_size=1, clustering=clustering, store_interval_s=0.0)
        engine: ConcurrentEngine | OrderlyEngine = (
            OrderlyEngine(options, OrderlyOptions()) if orderly else ConcurrentEngine(options)
        )
        filters = {TOPIC: TagFilter.parse("*")}
        if clustering:
            filters[topics.retry_kafka] = TagFilter.parse("*")
        settings = ConsumeSettings(
            clustering=clustering,
            consume_from_where=consume_from_where,
            offset_store_dir=str(store_dir or ".unused"),
            instance_name="unit",
            shutdown_await=0.5,
        )
        self.group = GroupConsumer(
            name="unit member",
            config={"bootstrap.servers": "fake:9092", "group.id": GROUP},
            group=GROUP,
            engine=engine,
            topics=topics,
            filters=filters,
            settings=settings,
            errors=FatalErrorWatch(),
            clock=self.clock,
            consumer_factory=self.consumers,
            producer_factory=self.producers,
            admin_factory=self.admins,
        )
        runner: ConcurrentRunner | OrderlyRunner = (
            OrderlyRunner(self.in_order, self.group, engine, mode=ListenerMode.INLINE, threads=1)
            if isinstance(engine, OrderlyEngine)
            else ConcurrentRunner(
                self.listener, self.group, engine, mode=ListenerMode.INLINE, threads=1
            )
        )
        self.group.bind(runner, guard=lambda f: f, running=lambda: True)

    def listener(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        self.received += [m.body for m in msgs]
        self.clock.advance(sum(self.slow.get(m.body, 0.0) for m in msgs))
        return LATER if any(m.body in self.fail for m in msgs) else OK

    def in_order(self, msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        self.received += [m.body for m in msgs]
        self.clock.advance(sum(self.slow.get(m.body, 0.0) for m in msgs))
        return ConsumeOrderlyStatus.SUCCESS

    @property
    def consumer(self) -> FakeConsumer:
        [consumer] = self.consumers.made
        return consumer

    @property
    def producer(self) -> FakeProducer:
        return self.producers.made[0]

    def steps(self, n: int = 3) -> None:
        for _ in range(n):
            self.clock.advance(0.05)
            self.group.step()


def _opened(**kwargs: Any) -> Member:
    m = Member(**kwargs)
    m.group.open()
    m.consumer.watermarks[(TOPIC, 0)] = (0, 0)
    m.consumer.rebalance("assign", [(TOPIC, 0)])
    return m


def test_a_new_group_starts_where_the_partition_ended_at_start_and_commits_it() -> None:
    m = Member(existing={(TOPIC, 0): (3, 10)})
    m.group.open()
    m.consumer.watermarks[(TOPIC, 0)] = (3, 14)  # four more sent before the assignment came
    m.consumer.rebalance("assign", [(TOPIC, 0)])
    assert m.consumer.assigned == {(TOPIC, 0): 10}  # those four are read
    assert m.consumer.commits == [{(TOPIC, 0): 10}]  # a restart resumes there
    assert m.group.owned() == [(TOPIC, 0)]


def test_a_topic_created_after_start_is_read_from_its_beginning() -> None:
    """The README's pattern: subscribe, start, then send to a topic that did not exist."""
    m = Member()  # TOPIC does not exist when the member starts
    m.group.open()
    m.consumer.topics[TOPIC] = 2
    m.consumer.watermarks[(TOPIC, 0)] = (0, 5)
    m.consumer.watermarks[(TOPIC, 1)] = (0, 3)
    m.consumer.rebalance("assign", [(TOPIC, 0), (TOPIC, 1)])
    assert m.consumer.assigned == {(TOPIC, 0): OFFSET_BEGINNING, (TOPIC, 1): OFFSET_BEGINNING}


def test_a_partition_added_after_start_is_read_from_its_beginning() -> None:
    m = Member(existing={(TOPIC, 0): (0, 7)})
    m.group.open()
    m.consumer.topics[TOPIC] = 2
    m.consumer.watermarks[(TOPIC, 1)] = (0, 2)
    m.consumer.rebalance("assign", [(TOPIC, 0), (TOPIC, 1)])
    assert m.consumer.assigned == {(TOPIC, 0): 7, (TOPIC, 1): OFFSET_BEGINNING}


def test_a_committed_offset_is_where_an_assigned_partition_resumes() -> None:
    m = Member()
    m.group.open()
    m.consumer.group_offsets[(TOPIC, 0)] = 42
    m.consumer.rebalance("assign", [(TOPIC, 0)])
    assert m.consumer.assigned == {(TOPIC, 0): 42}
    assert m.consumer.commits == []


def test_fetched_records_reach_the_listener_and_their_offsets_are_stored() -> None:
    m = _opened()
    m.consumer.queue += [record(TOPIC, 0, i, b"m%d" % i) for i in range(3)]
    m.steps()
    assert m.received == [b"m0", b"m1", b"m2"]
    stored = [s[(TOPIC, 0)] for s in m.consumer.stored if (TOPIC, 0) in s]
    assert stored[-1] == 3  # the next offset to read
    assert m.group.stats.snapshot()[TOPIC].consume_ok == 3


def test_an_inline_listener_call_is_timed_on_the_member_s_clock() -> None:
    """A call that ran past ``consume_timeout`` (900 s) on the member's clock is a timeout,
    sent back as RECONSUME_LATER, though it took no real time; the others are not."""
    m = _opened(slow={b"slow": 901.0, b"quick": 899.0})
    m.consumer.queue += [record(TOPIC, 0, 0, b"slow"), record(TOPIC, 0, 1, b"quick")]
    m.steps()
    stats = m.group.stats.snapshot()[TOPIC]
    assert (stats.timeouts, stats.consume_ok) == (1, 1)
    assert [p.value for p in m.producer.produced] == [b"slow"]  # its copy: sent back


def test_an_inline_orderly_listener_call_is_timed_on_the_member_s_clock() -> None:
    """An orderly call past ``consume_timeout`` on the member's clock is a timeout: its
    partition waits (SUSPEND_CURRENT_QUEUE_A_MOMENT) and the message is handed to it again."""
    m = _opened(orderly=True, slow={b"slow": 901.0})
    m.consumer.queue += [record(TOPIC, 0, 0, b"slow")]
    m.steps()
    assert m.group.stats.snapshot()[TOPIC].timeouts == 1
    m.slow.clear()
    for _ in range(40):  # the suspension (1 s by default) passes on the fake clock
        m.steps(1)
    assert m.received[:2] == [b"slow", b"slow"]
    assert m.group.stats.snapshot()[TOPIC].consume_ok == 1


def test_close_commits_exactly_what_was_handled() -> None:
    m = _opened()
    m.consumer.queue += [record(TOPIC, 0, i) for i in range(5)]
    m.steps()
    m.group.close()
    assert m.consumer.commits[-1] == {(TOPIC, 0): 5}
    assert m.consumer.closed


def test_revoke_commits_the_handled_offset_and_forgets_the_partition() -> None:
    m = _opened()
    m.consumer.queue += [record(TOPIC, 0, i) for i in range(2)]
    m.steps()
    m.consumer.rebalance("revoke", [(TOPIC, 0)])
    assert m.consumer.commits[-1] == {(TOPIC, 0): 2}
    assert m.group.owned() == []


def test_a_lost_partition_commits_nothing() -> None:
    m = _opened()
    m.consumer.queue += [record(TOPIC, 0, 0)]
    m.steps()
    before = list(m.consumer.commits)
    m.consumer.rebalance("lost", [(TOPIC, 0)])
    assert m.consumer.commits == before
    assert m.group.owned() == []


def test_an_acknowledged_send_back_settles_the_offset_and_is_counted() -> None:
    m = _opened(fail={b"bad"})
    m.consumer.queue += [record(TOPIC, 0, 0, b"ok"), record(TOPIC, 0, 1, b"bad")]
    m.steps(1)
    [copy] = m.producer.produced
    assert copy.topic == m.topics.level_topic(3)  # the first retry level
    m.steps()  # the verdict (acknowledged) arrives with poll
    stats = m.group.stats
    assert stats.send_backs == {(TOPIC, 3): 1}
    assert stats.snapshot()[TOPIC].sent_back == 1
    assert stats.snapshot()[TOPIC].send_back_failed == 0
    m.group.close()
    assert m.consumer.commits[-1] == {(TOPIC, 0): 2}  # the failed one is settled by its copy


def test_a_copy_is_due_its_levels_delay_after_the_send_back() -> None:
    """The copy of a failed message carries when it is due: the send-back's clock reading
    plus its level's delay (10 s on level 3), not the send-back time itself."""
    m = _opened(fail={b"bad"})
    m.consumer.queue += [record(TOPIC, 0, 0, b"bad")]
    m.steps(1)
    [copy] = m.producer.produced
    assert copy.topic == m.topics.level_topic(3)
    due = [int(v) for k, v in copy.headers if k == HEADER_DUE_MS]
    assert due == [m.clock.now_ms() + DelayLevels.DEFAULT.delay_ms(3)]
    assert DelayLevels.DEFAULT.delay_ms(3) == 10_000


def test_copies_acknowledged_in_one_poll_settle_together_beside_a_refused_one() -> None:
    """The verdicts one poll serves: the acknowledged copies settle (offsets, counters)
    before anything reads them, the refused one among them holds its offset."""
    m = _opened(fail={b"bad-0", b"bad-1", b"bad-3"})
    m.consumer.queue += [record(TOPIC, 0, i, b"bad-%d" % i) for i in range(4)]
    m.consumer.queue += [record(TOPIC, 0, 4, b"ok")]
    no_replicas = KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "not enough replicas")
    m.producer.verdict_of = lambda rec: no_replicas if rec.value == b"bad-1" else None
    m.group.step()  # fetched, run, copies produced, their three verdicts in one poll
    assert [p.value for p in m.producer.produced] == [b"bad-0", b"bad-1", b"bad-3"]
    stats = m.group.stats
    assert stats.send_backs == {(TOPIC, 3): 2}
    st = stats.snapshot()[TOPIC]
    assert (st.sent_back, st.send_back_failed, st.local_retries) == (2, 1, 1)
    assert m.group.engine.committable((TOPIC, 0)) == 1  # held by the refused copy of 1
    m.steps()
    stored = [s[(TOPIC, 0)] for s in m.consumer.stored if (TOPIC, 0) in s]
    assert stored and all(o <= 1 for o in stored)


def test_a_refused_send_back_holds_the_offset_and_counts_a_local_retry() -> None:
    m = _opened(fail={b"bad"})
    m.producer.verdict = KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "not enough replicas")
    m.consumer.queue += [record(TOPIC, 0, 0, b"bad"), record(TOPIC, 0, 1, b"ok")]
    m.steps()
    st = m.group.stats.snapshot()[TOPIC]
    assert st.send_back_failed == 1
    assert st.local_retries == 1
    assert m.group.stats.send_backs == {}
    stored = [s[(TOPIC, 0)] for s in m.consumer.stored if (TOPIC, 0) in s]
    assert all(o == 0 for o in stored)  # nothing past the failed message is committable


def test_pause_and_resume_actions_reach_the_consumer() -> None:
    m = _opened()
    m.group.apply([Pause((TOPIC, 0), "count"), Resume((TOPIC, 0))])
    assert m.consumer.paused == [(TOPIC, 0)]
    assert m.consumer.resumed[-1] == (TOPIC, 0)


def test_broadcasting_fails_to_open_on_a_missing_topic(tmp_path: Path) -> None:
    m = Member(clustering=False, store_dir=tmp_path)
    with pytest.raises(UnknownTopicError):
        m.group.open()


def test_broadcast_offsets_survive_a_restart(tmp_path: Path) -> None:
    def opened() -> Member:
        m = Member(clustering=False, store_dir=tmp_path)
        m.consumers.cls = _with_topic
        m.group.open()
        return m

    m = opened()
    assert m.consumer.subscribed == []  # broadcasting assigns itself: no group membership
    assert m.consumer.assigned == {(TOPIC, 0): 7, (TOPIC, 1): 7}  # the log end, remembered
    m.consumer.queue += [record(TOPIC, 0, 7), record(TOPIC, 0, 8), record(TOPIC, 1, 7)]
    m.steps()
    assert m.consumer.commits == []  # broadcasting never commits to the group
    m.group.close()
    again = opened()
    assert again.consumer.assigned == {(TOPIC, 0): 9, (TOPIC, 1): 8}


def _with_topic(config: dict[str, Any]) -> FakeConsumer:
    consumer = FakeConsumer(config)
    consumer.topics = {TOPIC: 2}
    consumer.watermarks = {(TOPIC, 0): (0, 7), (TOPIC, 1): (0, 7)}
    return consumer


def test_lag_is_the_end_minus_the_handled_offset() -> None:
    m = _opened()
    m.admins.cls = _admin_with_ends
    m.group.track_lag = True
    m.consumer.queue += [record(TOPIC, 0, i) for i in range(4)]
    m.steps(1)  # handles the records, asks for the end offsets
    assert m.group.lag() == {}  # no end offsets known yet
    m.clock.advance(2.0)
    m.group.step()  # collects the answer
    assert m.group.lag() == {(TOPIC, 0): 6}


def _admin_with_ends(config: dict[str, Any]) -> FakeAdmin:
    admin = FakeAdmin(config)
    admin.ends[(TOPIC, 0)] = (0, 10)
    return admin


@pytest.mark.parametrize(
    ("holder", "again"),
    [(None, True), ("member-1", True), ("member-2", False)],
    ids=["held_by_nobody", "held_by_this_member_in_the_groups_view_only", "held_by_another"],
)
def test_a_subscribed_topic_no_other_member_holds_makes_the_member_rejoin(
    holder: str | None, again: bool
) -> None:
    """Under broker bounces a member knew its retry topic and still read none of it for
    minutes (a metadata refresh changed nothing): found unheld at two checks in a row and
    held by no other member of the group, the member leaves and joins the group again
    (unsubscribe, then subscribe: a subscribe() alone with the same topics is no rejoin in
    librdkafka, and twelve of them left a frozen-broker run's retry topic unread). Held by
    another member (more members than partitions), it is left alone."""
    from adapter.constants import SUBSCRIPTION_CHECK_S

    m = Member(existing={(TOPIC, 0): (0, 0)})
    m.group.open()
    retry = m.topics.retry_kafka
    m.consumer.topics[retry] = 1  # the retry topic exists ...
    m.consumer.rebalance("assign", [(TOPIC, 0)])  # ... but the group left it out
    members: dict[str, list[tuple[str, int]]] = {"member-1": [(TOPIC, 0)]}
    if holder is not None:
        members.setdefault(holder, []).append((retry, 0))
    m.admins.setup = lambda admin: setattr(admin, "members", members)
    calls = m.consumer.subscribe_calls
    m.clock.advance(SUBSCRIPTION_CHECK_S)
    m.steps(1)  # the first check: a metadata refresh only
    m.clock.advance(SUBSCRIPTION_CHECK_S)
    m.steps(1)
    assert m.admins.made == []
    m.clock.advance(SUBSCRIPTION_CHECK_S)
    m.steps(1)  # unheld at two checks in a row: the group is asked
    [admin] = m.admins.made
    assert admin.describes == 1
    if again:
        assert m.consumer.subscribe_calls == calls + 1
        assert m.consumer.subscriptions[-2:] == [[], sorted([TOPIC, retry])]
    else:
        assert m.consumer.subscribe_calls == calls
