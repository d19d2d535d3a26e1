"""``schedule status``: the report an operator reads, line by line and column by column
(alignment included), and its JSON field by field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapter.core.cluster import GroupInfo, Member, PartitionHealth
from adapter.core.views.schedule import LevelPartition, LevelStatus, ScheduleStatus

pytestmark = pytest.mark.unit

NOW = 1_795_448_570_000  # 2026-11-23T15:42:50Z
UNDER = PartitionHealth(2, 3, 2)

M1 = Member("svc-a", "svc-1", "10.0.0.1", None, (("rmq.schedule.L03-10s", 0),))
M2 = Member("svc-b", "svc-2", "10.0.0.2", None, (("rmq.schedule.L18-2h", 0),))

LEVEL1 = LevelStatus(
    1, "1s", "SCHEDULE_TOPIC_XXXX/L01-1s", "rmq.schedule.L01-1s", (LevelPartition(0, 3, 0, 3),)
)
LEVEL3 = LevelStatus(
    3,
    "10s",
    "SCHEDULE_TOPIC_XXXX/L03-10s",
    "rmq.schedule.L03-10s",
    (
        LevelPartition(0, 4, 0, 9, head=4, head_due_ms=NOW - 1500),
        LevelPartition(1, None, 2, 5, head=2, head_due_ms=NOW - 500),  # never committed
    ),
)
LEVEL18 = LevelStatus(
    18,
    "2h",
    "SCHEDULE_TOPIC_XXXX/L18-2h",
    "rmq.schedule.L18-2h",
    (LevelPartition(0, 120, 100, 1320, head=120, head_due_ms=NOW - 7_380_000, health=UNDER),),
)


def _status(namespace: str | None = "prod") -> ScheduleStatus:
    info = GroupInfo("rmq-schedule-service", "STABLE", (M1, M2))
    return ScheduleStatus(namespace, info, (LEVEL1, LEVEL3, LEVEL18), NOW)


def test_the_report_in_text_column_by_column() -> None:
    assert _status().render() == [
        "ScheduleService group rmq-schedule-service  namespace prod  state STABLE  "
        "members: svc-1@10.0.0.1, svc-2@10.0.0.2",
        "level  topic                        waiting  oldest due                lag",
        "    1  SCHEDULE_TOPIC_XXXX/L01-1s         0  -                         -",
        "    3  SCHEDULE_TOPIC_XXXX/L03-10s        8  2026-11-23T15:42:48.500Z  1.5s",
        "   18  SCHEDULE_TOPIC_XXXX/L18-2h      1200  2026-11-23T13:39:50.000Z  2h03m  "
        "under-replicated",
        "total waiting 1208",
        "unhealthy partitions (1):",
        "  SCHEDULE_TOPIC_XXXX/L18-2h[0]  under-replicated: 2 of 3 replicas in sync, leader 2",
    ]


def test_without_a_namespace_the_heading_names_none() -> None:
    assert _status(None).render()[0] == (
        "ScheduleService group rmq-schedule-service  state STABLE  "
        "members: svc-1@10.0.0.1, svc-2@10.0.0.2"
    )


def test_the_report_in_json_field_by_field() -> None:
    data = _status().to_json()
    assert data["levels"][0] == {
        "level": 1,
        "delay": "1s",
        "topic": "SCHEDULE_TOPIC_XXXX/L01-1s",
        "kafka_topic": "rmq.schedule.L01-1s",
        "waiting": 0,
        "oldest_due_ms": None,  # nothing waits: no due time, no lag
        "oldest_due": None,
        "lag_ms": None,
        "partitions": [
            {
                "partition": 0,
                "committed": 3,
                "start": 0,
                "end": 3,
                "waiting": 0,
                "head_offset": None,
                "head_due_ms": None,
                "leader": None,
                "replicas": None,
                "isr": None,
                "status": None,
            }
        ],
    }
    assert data["levels"][2] == {
        "level": 18,
        "delay": "2h",
        "topic": "SCHEDULE_TOPIC_XXXX/L18-2h",
        "kafka_topic": "rmq.schedule.L18-2h",
        "waiting": 1200,
        "oldest_due_ms": NOW - 7_380_000,
        "oldest_due": "2026-11-23T13:39:50.000Z",
        "lag_ms": 7_380_000,
        "partitions": [
            {
                "partition": 0,
                "committed": 120,
                "start": 100,
                "end": 1320,
                "waiting": 1200,
                "head_offset": 120,
                "head_due_ms": NOW - 7_380_000,
                "leader": 2,
                "replicas": 3,
                "isr": 2,
                "status": "under-replicated",
            }
        ],
    }
    assert data["levels"][1]["partitions"][1]["committed"] is None
    assert data["levels"][1]["partitions"][1]["waiting"] == 3  # from the log start
    del data["levels"]
    assert data == {
        "namespace": "prod",
        "group": "rmq-schedule-service",
        "state": "STABLE",
        "members": [M1.to_json(), M2.to_json()],
        "service_seen": True,
        "now_ms": NOW,
        "waiting": 1208,
    }


def test_schedule_status_waiting_oldest_due_and_lag() -> None:
    # LEVEL3 and a partition with only a transaction marker left
    level3 = replace(
        LEVEL3, partitions=(*LEVEL3.partitions, LevelPartition(2, 7, 0, 8, drained=True))
    )
    level1 = LevelStatus(
        1, "1s", "SCHEDULE_TOPIC_XXXX/L01-1s", "rmq.schedule.L01-1s", (LevelPartition(0, 3, 0, 3),)
    )
    assert [p.waiting for p in level3.partitions] == [5, 3, 0]
    assert level3.waiting == 8 and level3.oldest_due_ms == NOW - 1500
    assert level3.lag_ms(NOW) == 1500 and level3.lag_ms(NOW - 2000) == 0
    assert level1.waiting == 0 and level1.oldest_due_ms is None and level1.lag_ms(NOW) is None
    status = ScheduleStatus(
        None, GroupInfo("rmq-schedule-service", "EMPTY", ()), (level1, level3), NOW
    )
    assert status.waiting == 8
    text = status.render()
    assert text[0] == "ScheduleService group rmq-schedule-service  state EMPTY  members: none"
    assert text[2].split() == ["1", "SCHEDULE_TOPIC_XXXX/L01-1s", "0", "-", "-"]
    assert text[3].split() == [
        "3",
        "SCHEDULE_TOPIC_XXXX/L03-10s",
        "8",
        "2026-11-23T15:42:48.500Z",
        "1.5s",
    ]
    data = status.to_json()
    assert data["levels"][1]["lag_ms"] == 1500
    assert data["levels"][1]["oldest_due"] == "2026-11-23T15:42:48.500Z"
    assert data["levels"][1]["partitions"][1]["waiting"] == 3
    assert data["service_seen"] is True and not any("no ScheduleService" in t for t in text)


def test_schedule_status_before_any_service_ran_shows_what_waits_and_says_why() -> None:
    """No member and no committed offset: the entries wait for a service that never ran; the
    status shows them all, from each partition's start, and says so (it is not an error)."""
    level2 = LevelStatus(
        2,
        "5s",
        "SCHEDULE_TOPIC_XXXX/L02-5s",
        "rmq.schedule.L02-5s",
        (LevelPartition(0, None, 0, 3, head=0, head_due_ms=NOW - 4000),),
    )
    status = ScheduleStatus(None, GroupInfo("svc", "DEAD", ()), (level2,), NOW)
    assert status.waiting == 3 and not status.service_seen
    text = status.render()
    assert text[-1] == (
        "no ScheduleService has run in group svc: what waits here is forwarded once one starts "
        "(rmq-kafka schedule-service run)"
    )
    assert status.to_json()["service_seen"] is False
    member = Member("m-1", "svc-1", "/127.0.0.1", None, ())
    live = ScheduleStatus(None, GroupInfo("svc", "STABLE", (member,)), (level2,), NOW)
    assert live.service_seen and "no ScheduleService" not in live.render()[-1]
