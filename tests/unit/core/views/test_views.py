"""The admin commands' views, pure: lag arithmetic, reset targets and the text/JSON views
(logical names out)."""

from __future__ import annotations

import pytest

from adapter.core.control import ResetTarget
from adapter.core.offsets import StartAt
from adapter.core.views import (
    DlqSize,
    GroupInfo,
    LevelPartition,
    LevelStatus,
    Member,
    ResetResult,
    ResetRow,
    ScheduleStatus,
    build_progress,
    compute_lag,
    reset_offsets,
    subscribed_topics,
)

pytestmark = pytest.mark.unit

NOW = 1_795_448_570_000  # 2026-11-23T15:42:50Z


# --- lag -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("committed", "start", "end", "kw", "lag"),
    [
        (17, 0, 20, {}, 3),
        (20, 0, 20, {}, 0),
        (None, 0, 20, {}, None),  # no committed offset: depends on auto.offset.reset
        (5, 0, None, {}, None),  # the topic is gone
        (3, 10, 20, {}, 10),  # committed below the log start: the rest was deleted
        (19, 0, 20, {"drained": True}, 0),  # only a transaction marker after the commit
        (17, 0, 20, {"head": 18}, 2),  # a marker / aborted record in front of the next one
        (17, 0, 20, {"head": 12}, 3),  # a head behind the commit changes nothing
        (25, 0, 20, {}, 0),  # never negative
        # no committed offset: where the group starts there (a retry topic: its beginning)
        (None, 4, 20, {"first": StartAt.BEGINNING}, 16),
        (None, 4, 20, {"first": StartAt.BEGINNING, "head": 6}, 14),
        (None, 4, 5, {"first": StartAt.BEGINNING, "drained": True}, 0),
        (None, 4, 20, {"first": StartAt.END}, 0),
        (None, 4, 20, {"first": StartAt.TIMESTAMP}, None),  # not known here
        (None, 4, None, {"first": StartAt.BEGINNING}, None),
    ],
)
def test_compute_lag(
    committed: int | None, start: int, end: int | None, kw: dict[str, object], lag: int | None
) -> None:
    assert compute_lag(committed, start, end, **kw) == lag  # type: ignore[arg-type]


# --- reset targets ---------------------------------------------------------------------------
def test_reset_offsets_per_target() -> None:
    ends = {0: (0, 10), 1: (4, 8), 2: (0, 0)}
    assert reset_offsets(ResetTarget.earliest(), ends) == {0: 0, 1: 4, 2: 0}
    assert reset_offsets(ResetTarget.latest(), ends) == {0: 10, 1: 8, 2: 0}
    # a time: the first record at or after it; none that recent -> the end
    at = {0: 3, 1: None, 2: None}
    assert reset_offsets(ResetTarget.at(NOW), ends, at) == {0: 3, 1: 8, 2: 0}
    # clamped into the partition (a stale answer never points outside the log)
    assert reset_offsets(ResetTarget.at(NOW), {0: (5, 10)}, {0: 2}) == {0: 5}


# --- views -----------------------------------------------------------------------------------
M1 = Member("c1-aaa", "c1", "10.0.0.1", None, (("orders", 0), ("rmq.retry.G", 0)))


M2 = Member("c2-bbb", "c2", "10.0.0.2", "static-2", (("orders", 1),))


def test_group_progress_shows_logical_names_lag_owners_and_the_dlq() -> None:
    info = GroupInfo("G", "STABLE", (M1, M2))
    committed = {("orders", 0): 17, ("orders", 1): 5, ("rmq.retry.G", 0): 2, ("gone", 0): 3}
    topics = subscribed_topics(info, committed, "rmq.retry.G", "rmq.dlq.G")
    assert topics == ["gone", "orders", "rmq.retry.G"]
    progress = build_progress(
        info,
        committed,
        {"gone": None, "orders": [0, 1], "rmq.retry.G": [0]},
        {("orders", 0): (0, 20), ("orders", 1): (0, 5), ("rmq.retry.G", 0): (0, 3)},
        {("rmq.retry.G", 0): None},  # only a transaction marker left
        DlqSize("%DLQ%G", "rmq.dlq.G", True, 2, 1),
    )
    rows = {(p.topic, p.partition): p for p in progress.partitions}
    assert rows[("orders", 0)].lag == 3 and rows[("orders", 0)].owner == M1
    assert rows[("%RETRY%G", 0)].lag == 0
    assert rows[("gone", 0)].lag is None and rows[("gone", 0)].end is None
    assert progress.lag == 3
    data = progress.to_json()
    assert data["group"] == "G" and data["state"] == "STABLE" and data["lag"] == 3
    assert data["members"][0]["assignment"] == [
        {"topic": "orders", "partition": 0},
        {"topic": "%RETRY%G", "partition": 0},
    ]
    assert data["dlq"] == {
        "topic": "%DLQ%G",
        "kafka_topic": "rmq.dlq.G",
        "exists": True,
        "size": 2,
        "partitions": 1,
    }
    text = "\n".join(progress.render())
    assert "member c1@10.0.0.1  orders[0] %RETRY%G[0]  (c1-aaa)" in text
    assert "%RETRY%G[0]" in text and "rmq.retry" not in text
    assert "%DLQ%G: 2 message(s) in 1 partition(s)" in text
    assert "total lag 3" in text


def test_reset_result_views() -> None:
    result = ResetResult(
        "G",
        "orders",
        "orders",
        ResetTarget.at(1_795_428_000_000),
        "members",
        (ResetRow(0, 17, 3, M1), ResetRow(1, None, 0, M2)),
        request_id="r1",
        not_applied=(2,),
    )
    lines = result.render()
    assert lines[0] == (
        "reset group G on orders to 2026-11-23T10:00:00.000Z "
        "(applied by the live members, request r1)"
    )
    assert lines[1].split() == ["orders[0]", "17", "→", "3", "by", "c1@10.0.0.1"]
    assert lines[2].split() == ["orders[1]", "-", "→", "0", "by", "c2@10.0.0.2"]
    assert lines[3].split() == ["orders[2]", "NOT", "reset"]
    data = result.to_json()
    assert data["partitions"][0] == {
        "partition": 0,
        "old": 17,
        "new": 3,
        "by": "c1-aaa",
        "by_client_id": "c1",
    }
    assert data["target"] == {
        "kind": "time",
        "time_ms": 1_795_428_000_000,
        "text": "2026-11-23T10:00:00.000Z",
    }
    assert data["not_applied"] == [2]


def test_schedule_status_waiting_oldest_due_and_lag() -> None:
    level3 = LevelStatus(
        3,
        "10s",
        "SCHEDULE_TOPIC_XXXX/L03-10s",
        "rmq.schedule.L03-10s",
        (
            LevelPartition(0, 4, 0, 9, head=4, head_due_ms=NOW - 1500),
            LevelPartition(1, None, 2, 5, head=2, head_due_ms=NOW - 500),  # never committed
            LevelPartition(2, 7, 0, 8, drained=True),  # only a marker left
        ),
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
