"""The ScheduleService's two delivery strategies, driven with a fake producer and consumer
and the real (pure) schedule engine: what each one produces, commits and rewinds."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from adapter.constants import HEADER_DUE_MS, PROPERTY_REAL_TOPIC
from adapter.core.engine.schedule import Entry, Mark, Rewind, ScheduleAction, ScheduleEngine
from adapter.core.hops import OutRecord
from adapter.core.publishing import Escalation
from adapter.errors import ConfigError
from adapter.services.schedule import DeliveryGuarantee, ScheduleServiceSettings, ScheduleStats
from adapter.services.schedule.at_least_once import AtLeastOnce
from adapter.services.schedule.delivery import Copy, committed_position, omitted_body, purged
from adapter.services.schedule.exactly_once import ExactlyOnce
from adapter.services.schedule.service_loop import DELIVERIES

pytestmark = pytest.mark.unit

TP = ("rmq.schedule.L01-1s", 0)
NOW = 1_700_000_000_000


class FakeProducer:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.offsets: list[list[tuple[str, int, int]]] = []
        self.fail_commit: KafkaException | None = None

    def init_transactions(self, _timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets: list[Any], _md: Any, _t: float) -> None:
        self.calls.append("offsets")
        self.offsets.append([(o.topic, o.partition, o.offset) for o in offsets])

    def commit_transaction(self, _timeout: float) -> None:
        if self.fail_commit is not None:
            raise self.fail_commit
        self.calls.append("commit")

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append("abort")


class FakePublisher:
    """Stands in for :class:`adapter.io.publisher.Publisher` (same constructor)."""

    def __init__(self, config: Mapping[str, Any], **kw: Any) -> None:
        self.config = config
        self.kw = kw
        self.producer = FakeProducer()
        self.sent: list[tuple[OutRecord, Any, bool]] = []
        self.polls = 0
        self.flushes = 0
        self.closed = False

    def send(self, record: OutRecord, token: Any, *, alone: bool = False) -> None:
        self.sent.append((record, token, alone))

    def poll(self, _timeout: float = 0.0) -> None:
        self.polls += 1

    def flush(self, _timeout: float) -> int:
        self.flushes += 1
        return 0

    def in_flight(self) -> int:
        return len(self.sent)

    def close(self, _timeout: float = 30.0) -> int:
        self.closed = True
        return 0

    def replace_producer(self) -> Any:
        self.producer = FakeProducer()
        return self.producer


class FakeConsumer:
    def __init__(self) -> None:
        self.stored: list[list[tuple[str, int, int]]] = []
        self.committed_offsets: list[list[tuple[str, int, int]]] = []
        self.committed_at = 1  # what the group has committed for every partition

    def committed(self, tps: list[Any], timeout: float) -> list[Any]:
        return [TopicPartition(t.topic, t.partition, self.committed_at) for t in tps]

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def store_offsets(self, *, offsets: list[Any]) -> None:
        self.stored.append([(o.topic, o.partition, o.offset) for o in offsets])

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> None:
        assert asynchronous is False
        self.committed_offsets.append([(o.topic, o.partition, o.offset) for o in offsets])


class FakeClock:
    def __init__(self, now_ms: int = NOW) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000


class FakeHost:
    """The service loop as a delivery sees it."""

    def __init__(self, step: tuple[Escalation, str] | None = None) -> None:
        self.engine = ScheduleEngine(store_interval_ms=0)
        self.engine.assigned(TP, 1_000)
        self.stats = ScheduleStats()
        self.clock = FakeClock()
        self.step = step
        self.applied: list[ScheduleAction] = []
        self.dead_letters: list[tuple[int, str]] = []

    def apply(self, actions: list[ScheduleAction]) -> None:
        self.applied.extend(actions)

    def refused(self, copy: Copy, err: Any, local: bool) -> tuple[Escalation, str] | None:
        if not self.engine.current(copy.entry) or purged(err):
            return None
        return self.step

    def dead_letter(self, entry: Entry, reason: str, now_ms: int) -> None:
        self.dead_letters.append((entry.offset, reason))

    def running(self) -> bool:
        return True


def due_entries(host: FakeHost, *offsets: int) -> list[Entry]:
    headers = [(PROPERTY_REAL_TOPIC, b"orders"), (HEADER_DUE_MS, str(NOW).encode())]
    for offset in offsets:
        host.engine.fetched(TP, offset, b"body", None, headers, NOW)
    return host.engine.due(NOW)


def record(n: int = 0) -> OutRecord:
    return OutRecord("orders", f"v{n}".encode(), None, [], None)


def at_least_once(host: FakeHost, **config: Any) -> tuple[AtLeastOnce, FakePublisher, FakeConsumer]:
    opts = ScheduleServiceSettings(delivery=DeliveryGuarantee.AT_LEAST_ONCE)
    delivery = AtLeastOnce(host, config, opts, make_publisher=FakePublisher)
    consumer = FakeConsumer()
    delivery.start(consumer)
    assert isinstance(delivery.publisher, FakePublisher)
    return delivery, delivery.publisher, consumer


def exactly_once(
    host: FakeHost, config: Mapping[str, Any] | None = None, **options: Any
) -> tuple[ExactlyOnce, FakePublisher, FakeConsumer]:
    opts = ScheduleServiceSettings(group="sched", **options)
    delivery = ExactlyOnce(host, config or {}, opts, make_publisher=FakePublisher)
    consumer = FakeConsumer()
    delivery.start(consumer)
    assert isinstance(delivery.publisher, FakePublisher)
    return delivery, delivery.publisher, consumer


def refused(code: int = KafkaError.MSG_SIZE_TOO_LARGE) -> KafkaError:
    return KafkaError(code, "refused")


# -- choosing and configuring ----------------------------------------------------------------
def test_each_guarantee_has_its_strategy() -> None:
    assert set(DELIVERIES) == set(DeliveryGuarantee)
    assert DELIVERIES[DeliveryGuarantee.AT_LEAST_ONCE] is AtLeastOnce
    assert DELIVERIES[DeliveryGuarantee.EXACTLY_ONCE] is ExactlyOnce


@pytest.mark.parametrize(("mode", "auto_commit"), [(AtLeastOnce, True), (ExactlyOnce, False)])
def test_each_strategy_sets_the_consumer_commit_it_relies_on(mode: Any, auto_commit: bool) -> None:
    cconf: dict[str, Any] = {}
    mode.configure_consumer(cconf)
    assert cconf["enable.auto.commit"] is auto_commit
    with pytest.raises(ConfigError, match=r"enable\.auto\.commit"):
        mode.configure_consumer({"enable.auto.commit": not auto_commit})


def test_at_least_once_producer_settings() -> None:
    _delivery, publisher, _ = at_least_once(FakeHost())
    assert publisher.kw["defaults"] == {"linger.ms": 5, "message.timeout.ms": 300_000}
    assert publisher.kw["transactional_id"] is None


def test_exactly_once_producer_settings_and_registration() -> None:
    _delivery, publisher, _ = exactly_once(FakeHost(), transactional_id="txn-1")
    assert publisher.kw["transactional_id"] == "txn-1"
    assert publisher.kw["defaults"] == {
        "linger.ms": 5,
        "retry.backoff.ms": 10,
        "transaction.timeout.ms": 10_000,
    }
    assert publisher.producer.calls == ["init"]
    # a configured message timeout leaves the transaction timeout to librdkafka
    _, publisher, _ = exactly_once(FakeHost(), {"message.timeout.ms": 30_000})
    assert "transaction.timeout.ms" not in publisher.kw["defaults"]
    assert str(publisher.kw["transactional_id"]).startswith("sched-")


# -- at-least-once ---------------------------------------------------------------------------
def test_at_least_once_settles_each_forward_on_its_acknowledgement() -> None:
    host = FakeHost()
    delivery, publisher, consumer = at_least_once(host)
    [e0, e1] = due_entries(host, 0, 1)
    delivery.send(Copy(e0, record(0)))
    delivery.send(Copy(e1, record(1), alone=True))
    assert [(r.value, alone) for r, _, alone in publisher.sent] == [(b"v0", False), (b"v1", True)]
    assert host.engine.committable(TP) == 0
    delivery.on_result(publisher.sent[0][1], None, False)
    assert host.engine.committable(TP) == 1
    delivery.end_pass(True)
    assert publisher.polls == 1
    assert delivery.linger_s() is None
    assert delivery.transaction_open is False
    delivery.settle([TP])  # revoke or shutdown: flush, then commit what settled
    assert publisher.flushes == 1
    assert consumer.committed_offsets == [[(TP[0], TP[1], 1)]]


def test_at_least_once_stores_the_offsets_the_engine_hands_out() -> None:
    delivery, _, consumer = at_least_once(FakeHost())
    delivery.store_offsets(((TP, 7),))
    assert consumer.stored == [[(TP[0], TP[1], 7)]]


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (Escalation.SEND_ALONE, "alone"),
        (Escalation.DEAD_LETTER, "dead letter"),
        (Escalation.OMIT_BODY, "without body"),
        (Escalation.HOLD, "rewind"),
    ],
)
def test_at_least_once_acts_on_a_refusal_at_once(step: Escalation, expected: str) -> None:
    host = FakeHost((step, "too large"))
    delivery, publisher, _ = at_least_once(host)
    [entry] = due_entries(host, 5)
    delivery.send(Copy(entry, record()))
    delivery.on_result(publisher.sent[0][1], refused(), False)
    if expected == "alone":
        _, again, alone = publisher.sent[1]
        assert alone and again.alone and again.record == record()
    elif expected == "dead letter":
        assert host.dead_letters == [(5, "forward failed permanently: too large")]
    elif expected == "without body":
        _, again, _ = publisher.sent[1]
        assert again.dead_letter and again.omitted
        assert again.record.value != record().value
    else:
        assert host.applied == [Rewind(TP, 5)]
        assert len(publisher.sent) == 1


def test_a_purged_or_outdated_verdict_changes_nothing() -> None:
    host = FakeHost((Escalation.HOLD, "x"))
    delivery, publisher, _ = at_least_once(host)
    [entry] = due_entries(host, 0)
    delivery.send(Copy(entry, record()))
    delivery.on_result(publisher.sent[0][1], KafkaError(KafkaError._PURGE_QUEUE), False)
    assert host.applied == []
    host.engine.revoked(TP)
    host.engine.assigned(TP, 1_000)
    delivery.on_result(publisher.sent[0][1], refused(), False)
    assert host.applied == []


# -- exactly-once ----------------------------------------------------------------------------
def test_exactly_once_commits_forwards_with_their_offsets_in_one_transaction() -> None:
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host)
    [e0, e1] = due_entries(host, 3, 4)
    delivery.send(Copy(e0, record(0)))
    delivery.send(Copy(e1, record(1)))
    assert delivery.transaction_open
    assert delivery.linger_s() == 0.005
    assert [tok.epoch for _, tok, _ in publisher.sent] == [1, 1]
    delivery.end_pass(False)  # nothing more came: commit now
    producer = publisher.producer
    assert producer.calls == ["init", "begin", "offsets", "commit"]
    assert producer.offsets == [[(TP[0], TP[1], 5)]]
    assert host.stats.transactions_committed == 1
    assert host.engine.inflight(TP) == 0
    assert not delivery.transaction_open
    assert delivery.linger_s() is None


def test_exactly_once_lingers_while_forwards_keep_coming() -> None:
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host, txn_linger_ms=60_000)
    [entry] = due_entries(host, 0)
    delivery.send(Copy(entry, record()))
    delivery.end_pass(True)
    assert "commit" not in publisher.producer.calls
    delivery.end_pass(False)
    assert publisher.producer.calls[-1] == "commit"


def test_exactly_once_commits_once_it_lingered_txn_linger_ms_on_the_services_clock() -> None:
    """Forwards keep coming: the transaction commits once ``txn_linger_ms`` passed on the
    service's clock since its first pass ended (no real time passes here)."""
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host, txn_linger_ms=60_000)
    [e0, e1] = due_entries(host, 0, 1)
    delivery.send(Copy(e0, record(0)))
    delivery.end_pass(True)  # the linger starts
    host.clock.now += 59_999
    delivery.send(Copy(e1, record(1)))
    delivery.end_pass(True)
    assert "commit" not in publisher.producer.calls
    host.clock.now += 1
    delivery.end_pass(True)
    assert publisher.producer.calls[-1] == "commit"
    assert not delivery.transaction_open


def test_exactly_once_leaves_offsets_to_the_transaction() -> None:
    delivery, _, consumer = exactly_once(FakeHost())
    delivery.store_offsets(((TP, 7),))
    assert consumer.stored == []


def test_a_copy_sent_alone_gets_a_transaction_of_its_own() -> None:
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host)
    [e0, e1] = due_entries(host, 0, 1)
    delivery.send(Copy(e0, record(0)))
    delivery.send(Copy(e1, record(1), alone=True))
    assert publisher.producer.calls == [
        "init",
        *("begin", "offsets", "commit"),  # its neighbour's
        *("begin", "offsets", "commit"),  # its own
    ]
    assert [tok.epoch for _, tok, _ in publisher.sent] == [1, 2]
    assert host.stats.transactions_committed == 2


def test_a_refusal_marks_the_entry_and_aborts_the_transaction() -> None:
    host = FakeHost((Escalation.DEAD_LETTER, "too large"))
    delivery, publisher, _ = exactly_once(host)
    [e0, e1] = due_entries(host, 0, 1)
    delivery.send(Copy(e0, record(0)))
    delivery.send(Copy(e1, record(1)))
    delivery.on_result(publisher.sent[1][1], refused(), False)
    delivery.settle([TP])  # revoke: finish the transaction while the partition is ours
    assert publisher.producer.calls == ["init", "begin", "abort"]
    assert host.stats.transactions_aborted == 1
    assert host.applied == [Rewind(TP, 0)]  # read again at once, from where it began
    host.engine.tick(NOW)  # the hold (none: the cause is known) is over
    again = [host.engine.fetched(TP, offset, b"b", None, [], NOW) for offset in (0, 1)]
    assert [e.mark if e else "not taken" for e in again] == [
        None,
        Mark(alone=False, refused="too large"),
    ]


def test_a_verdict_on_an_ended_transaction_is_ignored() -> None:
    host = FakeHost((Escalation.HOLD, "x"))
    delivery, publisher, _ = exactly_once(host)
    [e0, e1] = due_entries(host, 0, 1)
    delivery.send(Copy(e0, record(0)))
    delivery.end_pass(False)
    delivery.send(Copy(e1, record(1)))
    delivery.on_result(publisher.sent[0][1], refused(), False)  # epoch 1, now 2
    delivery.end_pass(False)
    assert publisher.producer.calls[-1] == "commit"
    assert host.stats.transactions_aborted == 0


def test_a_failed_lookup_aborts_the_open_transaction() -> None:
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host)
    delivery.on_lookup_failed()  # nothing open: nothing to abort
    [entry] = due_entries(host, 0)
    delivery.send(Copy(entry, record()))
    delivery.on_lookup_failed()
    host.engine.revoked(TP)  # so the abort reads no committed position
    delivery.end_pass(False)
    assert publisher.producer.calls == ["init", "begin", "abort"]
    assert host.stats.transactions_aborted == 1


def test_an_unknown_outcome_fences_the_producer() -> None:
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host)
    [entry] = due_entries(host, 3)
    delivery.send(Copy(entry, record()))
    old = publisher.producer
    old.fail_commit = KafkaException(KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    delivery.end_pass(False)
    assert publisher.producer is not old
    assert publisher.producer.calls == ["init"]  # the fresh producer registered
    assert host.stats.transactions_aborted == 1
    # the commit may have gone through: read again from the committed position (1, not
    # where the transaction began), after a hold
    assert host.applied == [Rewind(TP, 1)]
    assert host.engine.held() == [TP]


def test_close_commits_the_open_transaction_and_closes_the_producer() -> None:
    host = FakeHost()
    delivery, publisher, _ = exactly_once(host)
    [entry] = due_entries(host, 0)
    delivery.send(Copy(entry, record()))
    delivery.close()
    assert publisher.producer.calls[-1] == "commit"
    assert publisher.closed


def test_omitted_body_names_where_the_entry_was() -> None:
    host = FakeHost()
    [entry] = due_entries(host, 9)
    body = omitted_body(entry)
    assert (body.size, body.kafka_topic, body.partition, body.offset) == (4, TP[0], TP[1], 9)


# -- committed positions ---------------------------------------------------------------------
class CommittedConsumer:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def committed(self, tps: list[Any], timeout: float) -> list[Any]:
        return [SimpleNamespace(offset=self.offset)]


@pytest.mark.parametrize(("committed", "expected"), [(17, 17), (-1001, OFFSET_BEGINNING)])
def test_committed_position(committed: int, expected: int) -> None:
    """The committed offset; the beginning when none is committed."""
    assert committed_position(CommittedConsumer(committed), TP, 5) == expected
