"""The Publisher on a fake producer: what it produces, how each verdict comes back, and the
second producer for records sent alone."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from adapter.core.hops import OutRecord
from adapter.io.publisher import Publisher
from tests.unit.kafka_fakes import Factory, FakeProducer

pytestmark = pytest.mark.unit


def _publisher(**kwargs: Any) -> tuple[Publisher, Factory, list[tuple[Any, Any, bool]]]:
    results: list[tuple[Any, Any, bool]] = []
    producers = Factory(FakeProducer)
    publisher = Publisher(
        {"bootstrap.servers": "fake:9092"},
        what="unit publisher",
        on_result=lambda token, err, local: results.append((token, err, local)),
        producer_factory=producers,
        **kwargs,
    )
    return publisher, producers, results


RECORD = OutRecord("dest", b"v", b"k", [("h", b"1")], None)


def test_a_record_is_produced_with_its_headers_and_acknowledged_on_poll() -> None:
    publisher, producers, results = _publisher(defaults={"linger.ms": 5})
    publisher.send(RECORD, "token-1")
    [producer] = producers.made
    [produced] = producer.produced
    assert (produced.topic, produced.value, produced.key) == ("dest", b"v", b"k")
    assert produced.headers == [("h", b"1")]
    assert publisher.in_flight() == 1
    assert results == []  # verdicts arrive on poll, on the caller's thread
    publisher.poll(0)
    assert results == [("token-1", None, False)]
    assert publisher.in_flight() == 0
    assert producer.config["enable.idempotence"] is True
    assert producer.config["linger.ms"] == 5


def test_a_broker_refusal_reaches_the_callback() -> None:
    publisher, _, results = _publisher()
    publisher.producer.verdict = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    publisher.send(RECORD, "t")
    publisher.poll(0)
    [(token, err, local)] = results
    assert (token, err.code(), local) == ("t", KafkaError.MSG_SIZE_TOO_LARGE, False)


def test_a_record_refused_before_sending_is_reported_as_local() -> None:
    publisher, _, results = _publisher()
    publisher.producer.refuse = [KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC))]
    publisher.send(RECORD, "t")
    [(token, err, local)] = results
    assert (token, err.code(), local) == ("t", KafkaError._UNKNOWN_TOPIC, True)


def test_a_full_queue_is_served_once_then_reported() -> None:
    publisher, _, results = _publisher()
    producer = publisher.producer
    producer.refuse = [BufferError("full")]
    publisher.send(RECORD, "retried")
    assert len(producer.produced) == 1  # served delivery reports, then it fit
    producer.refuse = [BufferError("full"), BufferError("still full")]
    publisher.send(RECORD, "dropped")
    [(_, err, _)] = [r for r in results if r[0] == "dropped"]
    assert err.code() == KafkaError._QUEUE_FULL


def test_a_record_sent_alone_goes_through_a_producer_of_single_record_batches() -> None:
    publisher, producers, results = _publisher(transactional_id="txn-1")
    publisher.send(RECORD, "batched")
    publisher.send(RECORD, "alone", alone=True)
    batching, single = producers.made
    assert batching.config["transactional.id"] == "txn-1"
    assert "transactional.id" not in single.config
    assert (single.config["batch.num.messages"], single.config["linger.ms"]) == (1, 0)
    assert [p.topic for p in single.produced] == ["dest"]
    assert publisher.in_flight() == 2
    assert publisher.close(1.0) == 0
    assert sorted(r[0] for r in results) == ["alone", "batched"]


def test_replace_producer_purges_the_old_one() -> None:
    publisher, producers, _ = _publisher()
    publisher.send(RECORD, "t")
    fresh = publisher.replace_producer()
    old, new = producers.made
    assert fresh is new
    assert old.pending == []
    assert publisher.in_flight() == 0


def test_with_on_delivered_the_delivery_reports_go_there_and_local_refusals_to_on_result() -> None:
    delivered: list[tuple[Any, Any]] = []
    publisher, _, results = _publisher(
        on_delivered=lambda token, err, _msg: delivered.append((token, err))
    )
    publisher.send(RECORD, "acked")
    assert delivered == []  # verdicts arrive on poll, on the caller's thread
    publisher.poll(0)
    publisher.producer.verdict = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    publisher.send(RECORD, "refused by the broker")
    publisher.producer.refuse = [KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC))]
    publisher.send(RECORD, "refused before sending")
    publisher.poll(0)
    assert [(token, err if err is None else err.code()) for token, err in delivered] == [
        ("acked", None),
        ("refused by the broker", KafkaError.MSG_SIZE_TOO_LARGE),
    ]
    [(token, err, local)] = results
    assert (token, err.code(), local) == ("refused before sending", KafkaError._UNKNOWN_TOPIC, True)


def test_on_served_follows_every_poll_and_flush_once_their_verdicts_are_in() -> None:
    """A client that settles the verdicts of a poll together is told when they are all
    in: after each poll and flush, with the reports they served already delivered."""
    delivered: list[Any] = []
    served: list[int] = []
    publisher, _, _ = _publisher(
        on_delivered=lambda token, err, _msg: delivered.append(token),
        on_served=lambda: served.append(len(delivered)),
    )
    publisher.send(RECORD, "a")
    publisher.send(RECORD, "b")
    publisher.poll(0)
    assert served == [2]
    publisher.send(RECORD, "c")
    publisher.flush(1.0)
    assert served == [2, 3]


def test_batching_is_the_producers_produce() -> None:
    """What a caller that produces many records inline uses: the records it produces
    with it get their verdicts on the caller's own callbacks, on poll."""
    delivered: list[tuple[Any, Any]] = []
    publisher, producers, _ = _publisher(on_delivered=lambda *_: None)
    produce = publisher.batching()
    produce(
        "dest", b"v", None, -1, lambda *report: delivered.append(report), None, 0, [("h", b"1")]
    )
    [producer] = producers.made
    assert [(p.topic, p.headers) for p in producer.produced] == [("dest", [("h", b"1")])]
    assert delivered == []
    publisher.poll(0)
    assert delivered == [(None, None)]
