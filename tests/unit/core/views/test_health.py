"""Partition health in the admin views: the classification (ok / under-replicated /
leaderless) from the metadata's leader, replicas and in-sync replicas, and how ``group
progress`` and ``schedule status`` show it (table marker + footnote, JSON fields)."""

from __future__ import annotations

import pytest

from adapter.core.views import (
    HEALTH_OK,
    LEADERLESS,
    UNDER_REPLICATED,
    DlqSize,
    GroupInfo,
    GroupProgress,
    LevelPartition,
    LevelStatus,
    Member,
    PartitionHealth,
    ScheduleStatus,
    build_progress,
    health_notes,
    partition_status,
)

pytestmark = pytest.mark.unit

NOW = 1_795_448_570_000  # 2026-11-23T15:42:50Z
OK = PartitionHealth(1, 3, 3)
UNDER = PartitionHealth(2, 3, 2)
NO_LEADER = PartitionHealth(None, 3, 0)


# --- classification --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("leader", "replicas", "isr", "status"),
    [
        (1, 3, 3, HEALTH_OK),
        (0, 1, 1, HEALTH_OK),  # node id 0 is a leader
        (2, 3, 2, UNDER_REPLICATED),
        (2, 3, 1, UNDER_REPLICATED),
        (-1, 3, 0, LEADERLESS),
        (-1, 1, 1, LEADERLESS),  # leaderless wins even with a full ISR
    ],
)
def test_partition_status(leader: int, replicas: int, isr: int, status: str) -> None:
    assert partition_status(leader, replicas, isr) == status


def test_health_from_metadata_fields() -> None:
    """confluent-kafka's ``PartitionMetadata``: leader ``-1`` when none, node-id lists."""
    assert PartitionHealth.of(2, [2, 3, 1], [2, 3, 1]) == PartitionHealth(2, 3, 3)
    assert PartitionHealth.of(2, [2, 3, 1], [2, 1]).status == UNDER_REPLICATED
    leaderless = PartitionHealth.of(-1, [2], [])
    assert leaderless == PartitionHealth(None, 1, 0)
    assert leaderless.status == LEADERLESS and not leaderless.readable and not leaderless.ok
    assert OK.ok and OK.readable and UNDER.readable and not UNDER.ok
    assert UNDER.describe() == "under-replicated: 2 of 3 replicas in sync, leader 2"
    assert NO_LEADER.describe() == "leaderless: 0 of 3 replicas in sync, no leader"
    assert UNDER.to_json() == {"leader": 2, "replicas": 3, "isr": 2, "status": UNDER_REPLICATED}
    assert NO_LEADER.to_json() == {"leader": None, "replicas": 3, "isr": 0, "status": LEADERLESS}


def test_health_notes_list_only_unhealthy_partitions() -> None:
    assert health_notes([("orders[0]", OK)]) == []
    assert health_notes([("orders[0]", OK), ("orders[1]", UNDER), ("%RETRY%G[0]", NO_LEADER)]) == [
        "unhealthy partitions (2):",
        "  orders[1]    under-replicated: 2 of 3 replicas in sync, leader 2",
        "  %RETRY%G[0]  leaderless: 0 of 3 replicas in sync, no leader; end offset unknown",
    ]


# --- group progress --------------------------------------------------------------------------
M1 = Member("c1-aaa", "c1", "10.0.0.1", None, (("orders", 0), ("orders", 1), ("orders", 2)))
DLQ = DlqSize("%DLQ%G", "rmq.dlq.G", True, 2, 1)


def _progress(
    health: dict[tuple[str, int], PartitionHealth] | None, dlq: DlqSize = DLQ
) -> GroupProgress:
    committed = {("orders", 0): 17, ("orders", 1): 5, ("orders", 2): 4, ("rmq.retry.G", 0): 2}
    ends = {("orders", 0): (0, 20), ("orders", 1): (0, 5), ("rmq.retry.G", 0): (0, 3)}
    if health is None or health.get(("orders", 2), OK).readable:
        ends[("orders", 2)] = (0, 9)
    return build_progress(
        GroupInfo("G", "STABLE", (M1,)),
        committed,
        {"orders": [0, 1, 2], "rmq.retry.G": [0]},
        ends,
        {},
        dlq,
        health=health,
    )


def test_group_progress_of_a_healthy_cluster_looks_as_before() -> None:
    healthy = {tp: OK for tp in [("orders", 0), ("orders", 1), ("orders", 2), ("rmq.retry.G", 0)]}
    with_health = _progress(healthy)
    assert with_health.render() == _progress(None).render()
    assert not any("unhealthy" in line for line in with_health.render())
    row = with_health.to_json()["partitions"][0]
    assert (row["topic"], row["leader"], row["replicas"], row["isr"], row["status"]) == (
        "orders",
        1,
        3,
        3,
        "ok",
    )
    assert "unhealthy" not in with_health.to_json()["dlq"]


def test_group_progress_marks_under_replicated_and_leaderless_partitions() -> None:
    health = {
        ("orders", 0): OK,
        ("orders", 1): UNDER,
        ("orders", 2): NO_LEADER,
        ("rmq.retry.G", 0): OK,
    }
    progress = _progress(health)
    rows = {(p.topic, p.partition): p for p in progress.partitions}
    assert rows[("orders", 2)].end is None and rows[("orders", 2)].lag is None
    assert progress.lag == 3 + 0 + 1  # the known lags
    lines = progress.render()
    table = {line.split()[0]: line.split() for line in lines[2:6]}
    assert table["orders[0]"] == ["orders[0]", "17", "20", "3", "c1@10.0.0.1"]
    assert table["orders[1]"] == ["orders[1]", "5", "5", "0", "c1@10.0.0.1", "under-replicated"]
    assert table["orders[2]"] == ["orders[2]", "4", "-", "-", "c1@10.0.0.1", "leaderless"]
    assert "total lag 4 (+ unknown on 1 leaderless partition(s))" in lines
    assert lines[-3:] == [
        "unhealthy partitions (2):",
        "  orders[1]  under-replicated: 2 of 3 replicas in sync, leader 2",
        "  orders[2]  leaderless: 0 of 3 replicas in sync, no leader; end offset unknown",
    ]
    data = {(r["topic"], r["partition"]): r for r in progress.to_json()["partitions"]}
    assert {k: data[("orders", 1)][k] for k in ("leader", "replicas", "isr", "status")} == {
        "leader": 2,
        "replicas": 3,
        "isr": 2,
        "status": "under-replicated",
    }
    assert data[("orders", 2)]["status"] == "leaderless" and data[("orders", 2)]["leader"] is None
    assert data[("orders", 2)]["end"] is None and data[("orders", 2)]["lag"] is None


def test_group_progress_of_a_missing_topic_has_no_health() -> None:
    progress = build_progress(
        GroupInfo("G", "EMPTY", ()),
        {("gone", 0): 3},
        {"gone": None},
        {},
        {},
        DlqSize("%DLQ%G", "rmq.dlq.G", False, 0, 0),
    )
    [row] = progress.to_json()["partitions"]
    assert (row["leader"], row["replicas"], row["isr"], row["status"]) == (None, None, None, None)


def test_group_progress_names_an_unhealthy_dlq_partition() -> None:
    dlq = DlqSize("%DLQ%G", "rmq.dlq.G", True, 2, 2, unhealthy=((1, NO_LEADER),))
    progress = _progress({("orders", 0): OK}, dlq)
    lines = progress.render()
    assert "%DLQ%G: 2+? message(s) in 2 partition(s)" in lines
    assert lines[-1].split()[:2] == ["%DLQ%G[1]", "leaderless:"]
    assert progress.to_json()["dlq"]["unhealthy"] == [
        {"partition": 1, "leader": None, "replicas": 3, "isr": 0, "status": "leaderless"}
    ]


# --- schedule status -------------------------------------------------------------------------
def test_schedule_status_marks_levels_and_lists_unhealthy_partitions() -> None:
    level1 = LevelStatus(
        1,
        "1s",
        "SCHEDULE_TOPIC_XXXX/L01-1s",
        "rmq.schedule.L01-1s",
        (LevelPartition(0, 3, 0, 3, health=OK),),
    )
    level2 = LevelStatus(
        2,
        "5s",
        "SCHEDULE_TOPIC_XXXX/L02-5s",
        "rmq.schedule.L02-5s",
        (
            LevelPartition(0, 4, 0, 9, head=4, head_due_ms=NOW - 1500, health=UNDER),
            LevelPartition(1, 2, None, None, health=NO_LEADER),  # offsets not asked
        ),
    )
    assert [p.waiting for p in level2.partitions] == [5, None]
    assert level2.waiting == 5 and not level2.waiting_known and level1.waiting_known
    assert (level1.marker, level2.marker) == ("", LEADERLESS)
    status = ScheduleStatus(
        None, GroupInfo("rmq-schedule-service", "EMPTY", ()), (level1, level2), NOW
    )
    lines = status.render()
    assert lines[2].split() == ["1", "SCHEDULE_TOPIC_XXXX/L01-1s", "0", "-", "-"]
    assert lines[3].split() == [
        "2",
        "SCHEDULE_TOPIC_XXXX/L02-5s",
        "5+?",
        "2026-11-23T15:42:48.500Z",
        "1.5s",
        "leaderless",
    ]
    assert lines[4] == "total waiting 5 (+ unknown: leaderless)"
    assert lines[5:] == [
        "unhealthy partitions (2):",
        "  SCHEDULE_TOPIC_XXXX/L02-5s[0]  under-replicated: 2 of 3 replicas in sync, leader 2",
        "  SCHEDULE_TOPIC_XXXX/L02-5s[1]  leaderless: 0 of 3 replicas in sync, no leader; "
        "end offset unknown",
    ]
    data = status.to_json()
    p0, p1 = data["levels"][1]["partitions"]
    assert (p0["status"], p0["replicas"], p0["isr"], p0["leader"]) == ("under-replicated", 3, 2, 2)
    assert (p1["status"], p1["end"], p1["waiting"]) == ("leaderless", None, None)
    assert data["levels"][0]["partitions"][0]["status"] == "ok"
    assert data["waiting"] == 5


def test_schedule_status_of_a_healthy_cluster_looks_as_before() -> None:
    def level(health: PartitionHealth | None) -> LevelStatus:
        return LevelStatus(
            1,
            "1s",
            "SCHEDULE_TOPIC_XXXX/L01-1s",
            "rmq.schedule.L01-1s",
            (LevelPartition(0, 3, 0, 7, head=3, head_due_ms=NOW - 10, health=health),),
        )

    info = GroupInfo("rmq-schedule-service", "EMPTY", ())
    with_health = ScheduleStatus(None, info, (level(OK),), NOW)
    assert with_health.render() == ScheduleStatus(None, info, (level(None),), NOW).render()
    assert with_health.render()[-1] == "total waiting 4"
