"""``msg show``'s pure parts: which records belong to a message, what each hop means, and the
journey in time order with logical names."""

from __future__ import annotations

import pytest

from adapter.core.views import Record
from adapter.errors import InvalidInputError
from adapter.ops.journey import Matcher, classify, journeys

pytestmark = pytest.mark.unit

T0 = 1_795_448_570_000  # 2026-11-23T15:42:50Z
G = "orders-service"


def rec(topic: str, p: int, o: int, ts: int | None, **headers: str) -> Record:
    return Record(topic, p, o, ts, dict(headers))


def raw(**headers: str) -> list[tuple[str, bytes | None]]:
    return [(k, v.encode()) for k, v in headers.items()]


# --- matching --------------------------------------------------------------------------------
def test_matcher_by_id_finds_the_message_and_its_copies() -> None:
    m = Matcher(msg_id="ID1")
    assert m.matches("orders", 0, 5, raw(UNIQ_KEY="ID1"))
    assert m.matches("rmq.dlq.g", 0, 5, raw(UNIQ_KEY="OTHER", ORIGIN_MESSAGE_ID="ID1"))
    assert m.matches("rmq.dlq.g", 0, 5, raw(DLQ_ORIGIN_MESSAGE_ID="ID1"))
    assert not m.matches("orders", 0, 5, raw(UNIQ_KEY="ID10"))
    assert not m.matches("orders", 0, 5, None)
    assert not m.matches("orders", 0, 5, [("UNIQ_KEY", None)])


def test_matcher_by_the_id_of_a_plain_record() -> None:
    m = Matcher(msg_id="orders:1:17")
    assert m.matches("orders", 1, 17, None)  # a plain Kafka record: no headers at all
    assert m.matches("orders", 1, 17, raw(tenant="t1"))
    assert m.matches("rmq.retry.g", 0, 3, raw(UNIQ_KEY="orders:1:17"))  # its retry copy
    assert not m.matches("orders", 1, 18, None)
    assert not m.matches("orders", 1, 17, raw(UNIQ_KEY="X"))  # it has an id of its own


def test_matcher_by_key() -> None:
    m = Matcher(key="order-1")
    assert m.matches("orders", 0, 0, raw(KEYS="order-1"))
    assert m.matches("orders", 0, 0, raw(KEYS="a order-1 b"))
    assert not m.matches("orders", 0, 0, raw(KEYS="order-10"))
    assert not m.matches("orders", 0, 0, raw(UNIQ_KEY="order-1"))
    assert not m.matches("orders", 0, 0, None)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({}, "--id/--key"),
        ({"msg_id": "a", "key": "b"}, "--id/--key"),
        ({"msg_id": ""}, "--id"),
        ({"key": " k"}, "--key"),
        ({"key": "a b"}, "--key"),
    ],
)
def test_matcher_refuses_bad_queries(kw: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        Matcher(**kw)
    assert info.value.field == field


# --- classification --------------------------------------------------------------------------
def journey_records() -> list[Record]:
    """A message that failed twice in group G and was dead-lettered, given out of order."""
    due1, due2 = T0 + 10_000, T0 + 40_000
    common = {"UNIQ_KEY": "ID1", "KEYS": "order-1", "TAGS": "TagA"}
    hop = {**common, "ORIGIN_MESSAGE_ID": "ID1", "RMQ_GROUP": G, "RETRY_TOPIC": "orders"}
    return [
        rec(
            "rmq.dlq.orders-service",
            0,
            0,
            T0 + 45_000,
            **hop,
            RECONSUME_TIME="3",
            RMQ_DLQ_REASON="MAX_RECONSUME_TIMES",
            RMQ_FAILURE_TYPE="ValueError",
            RMQ_FAILURE_MESSAGE="downstream says no",
        ),
        rec("rmq.retry.orders-service", 2, 5, T0 + 10_020, **hop, RECONSUME_TIME="1"),
        rec(
            "rmq.schedule.L03-10s",
            1,
            7,
            T0 + 5,
            **hop,
            RECONSUME_TIME="1",
            REAL_TOPIC=f"%RETRY%{G}",
            RMQ_DUE_MS=str(due1),
            DELAY="3",
            RMQ_FAILURE_TYPE="ValueError",
            RMQ_FAILURE_MESSAGE="downstream says no",
        ),
        rec("orders", 1, 17, T0, **common),
        rec(
            "rmq.schedule.L04-30s",
            0,
            2,
            T0 + 10_030,
            **hop,
            RECONSUME_TIME="2",
            REAL_TOPIC=f"%RETRY%{G}",
            RMQ_DUE_MS=str(due2),
            DELAY="4",
            RMQ_FAILURE_TYPE="ReconsumeLater",
        ),
        rec("rmq.retry.orders-service", 0, 9, T0 + 40_010, **hop, RECONSUME_TIME="2"),
    ]


def test_a_failed_message_journey_in_time_order_with_logical_names() -> None:
    [journey] = journeys(journey_records())
    assert journey.msg_id == "ID1" and journey.keys == "order-1" and journey.tags == "TagA"
    assert [h.kind for h in journey.hops] == [
        "sent",
        "failed",
        "retry",
        "failed",
        "retry",
        "dead-lettered",
    ]
    assert [h.text for h in journey.hops] == [
        "sent to orders[1]@17",
        "failed in group orders-service (RECONSUME_TIME=1, ValueError: downstream says no) → "
        "parked on level 3 (SCHEDULE_TOPIC_XXXX/L03-10s[1]@7) due at 2026-11-23T15:43:00.000Z",
        "forwarded to %RETRY%orders-service[2]@5 (RECONSUME_TIME=1)",
        "failed in group orders-service (RECONSUME_TIME=2, ReconsumeLater) → parked on level 4 "
        "(SCHEDULE_TOPIC_XXXX/L04-30s[0]@2) due at 2026-11-23T15:43:30.000Z",
        "forwarded to %RETRY%orders-service[0]@9 (RECONSUME_TIME=2)",
        "dead-lettered to %DLQ%orders-service[0]@0 (MAX_RECONSUME_TIMES, RECONSUME_TIME=3, "
        "ValueError: downstream says no)",
    ]
    assert journey.outcome == "dead-lettered"
    lines = journey.render()
    assert lines[0] == "message ID1 (keys order-1, tags TagA): 6 hop(s), dead-lettered"
    assert lines[1] == "  2026-11-23T15:42:50.000Z  sent to orders[1]@17"
    data = journey.to_json()
    assert data["hops"][1]["level"] == 3 and data["hops"][1]["group"] == G
    assert data["hops"][1]["topic"] == "SCHEDULE_TOPIC_XXXX/L03-10s"
    assert data["hops"][1]["kafka_topic"] == "rmq.schedule.L03-10s"
    assert data["hops"][-1]["reason"] == "MAX_RECONSUME_TIMES"


def test_equal_timestamps_keep_the_order_a_message_moves_in() -> None:
    records = [
        rec(
            "rmq.dlq.g",
            0,
            0,
            T0,
            UNIQ_KEY="X",
            RMQ_GROUP="g",
            RMQ_DLQ_REASON="LISTENER_REQUESTED",
            RECONSUME_TIME="1",
        ),
        rec("orders", 0, 0, T0, UNIQ_KEY="X"),
    ]
    [journey] = journeys(records)
    assert [h.kind for h in journey.hops] == ["sent", "dead-lettered"]


def test_scheduled_messages_redrives_and_namespaces() -> None:
    sched = classify(
        rec(
            "rmq.schedule.ns1.L02-5s",
            0,
            1,
            T0,
            UNIQ_KEY="S",
            REAL_TOPIC="orders",
            RMQ_DUE_MS=str(T0 + 5000),
            DELAY="2",
        )
    )
    assert sched.kind == "scheduled" and sched.level == 2
    assert sched.text == (
        "scheduled on level 2 (ns1%SCHEDULE_TOPIC_XXXX/L02-5s[0]@1) for orders, "
        "due at 2026-11-23T15:42:55.000Z"
    )
    delivered = classify(rec("orders", 0, 4, T0 + 5003, UNIQ_KEY="S", RMQ_DUE_MS=str(T0 + 5000)))
    assert delivered.text == (
        "delivered to orders[0]@4 (scheduled, due at 2026-11-23T15:42:55.000Z)"
    )
    redriven = classify(rec("rmq.retry.g", 1, 3, T0, UNIQ_KEY="S", RECONSUME_TIME="0"))
    assert redriven.kind == "redriven" and redriven.text == "redriven to %RETRY%g[1]@3 for group g"
    to_origin = classify(rec("orders", 0, 9, T0, UNIQ_KEY="S", RMQ_GROUP="g", RECONSUME_TIME="0"))
    assert to_origin.kind == "redriven" and to_origin.text == "redriven to orders[0]@9 for group g"
    invalid = classify(
        rec(
            "rmq.dlq.rmq-schedule-service",
            0,
            0,
            T0,
            UNIQ_KEY="S",
            RMQ_DLQ_REASON="INVALID_SCHEDULE_ENTRY",
        )
    )
    assert invalid.text == (
        "dead-lettered to %DLQ%rmq-schedule-service[0]@0 (INVALID_SCHEDULE_ENTRY, RECONSUME_TIME=?)"
    )


def test_records_are_grouped_by_message() -> None:
    records = [
        rec("orders", 0, 0, T0 + 1, UNIQ_KEY="A", KEYS="k"),
        rec("orders", 0, 1, T0, UNIQ_KEY="B", KEYS="k"),
        rec("rmq.retry.g", 0, 0, T0 + 2, UNIQ_KEY="A", ORIGIN_MESSAGE_ID="A", RECONSUME_TIME="1"),
        rec("orders", 1, 2, None),  # a plain record: its own id, no timestamp
    ]
    found = journeys(records)
    assert [j.msg_id for j in found] == ["orders:1:2", "B", "A"]
    assert [len(j.hops) for j in found] == [1, 1, 2]
    assert found[0].render()[1].startswith("  -  ")


def test_malformed_headers_never_break_a_journey() -> None:
    hop = classify(
        rec(
            "rmq.schedule.L03-10s",
            0,
            0,
            T0,
            UNIQ_KEY="X",
            RECONSUME_TIME="many",
            RMQ_DUE_MS="soon",
            REAL_TOPIC="%RETRY%g",
            RMQ_FAILURE_MESSAGE="x" * 500,
            RMQ_FAILURE_TYPE="E",
        )
    )
    assert hop.reconsume_times is None and hop.due_ms is None
    assert "RECONSUME_TIME=?" in hop.text and "due at -" in hop.text
    assert hop.failure is not None and len(hop.failure) < 100
