"""``group progress``: the rows :func:`build_progress` assembles, the start rule without a
committed offset, the topics shown, and the report's text and JSON, column by column."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.core.breaker import CircuitState
from adapter.core.circuit_status import CircuitStatus, MemberCircuit
from adapter.core.cluster import GroupInfo, Member, PartitionHealth
from adapter.core.offsets import ConsumeFromWhere, StartAt
from adapter.core.views.progress import (
    DlqSize,
    GroupProgress,
    PartitionProgress,
    build_progress,
    compute_lag,
    start_rule,
    subscribed_topics,
)

pytestmark = pytest.mark.unit

NOW = 1_795_448_570_000  # 2026-11-23T15:42:50Z
RETRY = "rmq.retry.G"
DLQ = "rmq.dlq.G"

OK = PartitionHealth(1, 3, 3)
UNDER = PartitionHealth(2, 3, 2)
LEADERLESS = PartitionHealth(None, 3, 0)

M1 = Member("c1-aaa", "c1", "10.0.0.1", None, (("orders", 0), (RETRY, 0)))
M2 = Member("c2-bbb", "c2", "10.0.0.2", "static-2", (("orders", 1),))
INFO = GroupInfo("G", "STABLE", (M1, M2))

OPEN = MemberCircuit(
    CircuitStatus("G", "c1-aaa", CircuitState.OPEN, NOW - 30_000, 4, 60.0, 2, NOW - 1_000),
    stale=False,
    age_s=1.0,
    read_ms=NOW,
)


def _progress(**kw: Any) -> GroupProgress:
    """orders[0] owned by c1 (lag 3), orders[1] owned by c2 (committed below the log start:
    counted from it), orders[2] owned by nobody and never committed (the group starts at the
    beginning there), orders[3] leaderless; the retry topic has a transaction marker in
    front of the next record."""
    args: dict[str, Any] = {
        "info": INFO,
        "committed": {("orders", 0): 17, ("orders", 1): 2, (RETRY, 0): 2},
        "partitions": {"orders": [0, 1, 2, 3], RETRY: [0]},
        "ends": {
            ("orders", 0): (0, 20),
            ("orders", 1): (8, 10),
            ("orders", 2): (1, 1000),
            (RETRY, 0): (0, 7),
        },
        "heads": {(RETRY, 0): 4},
        "dlq": DlqSize("%DLQ%G", DLQ, True, 5, 2, ((1, LEADERLESS),)),
        "health": {
            ("orders", 0): OK,
            ("orders", 1): UNDER,
            ("orders", 2): OK,
            ("orders", 3): LEADERLESS,
            (RETRY, 0): OK,
        },
        "circuits": {"c1-aaa": OPEN},
        "first": start_rule(RETRY, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
    }
    args.update(kw)
    return build_progress(**args)


def test_the_report_in_text_column_by_column() -> None:
    assert _progress().render() == [
        "group G  state STABLE  members 2",
        "  member c1@10.0.0.1  orders[0] %RETRY%G[0]  (c1-aaa)",
        "    circuit open since 2026-11-23T15:42:20.000Z (30 s), 4 message(s) held",
        "  member c2@10.0.0.2  orders[1]  (c2-bbb)",
        "topic[partition]  committed   end  lag  owner",
        "orders[0]                17    20    3  c1@10.0.0.1",
        "orders[1]                 2    10    2  c2@10.0.0.2  under-replicated",
        "orders[2]                 -  1000  999  -",
        "orders[3]                 -     -    -  -            leaderless",
        "%RETRY%G[0]               2     7    3  c1@10.0.0.1",
        "total lag 1007 (+ unknown on 1 leaderless partition(s))",
        "%DLQ%G: 5+? message(s) in 2 partition(s)",
        "unhealthy partitions (3):",
        "  orders[1]  under-replicated: 2 of 3 replicas in sync, leader 2",
        "  orders[3]  leaderless: 0 of 3 replicas in sync, no leader; end offset unknown",
        "  %DLQ%G[1]  leaderless: 0 of 3 replicas in sync, no leader; end offset unknown",
    ]


def test_a_healthy_group_without_a_dlq_reads_as_it_always_did() -> None:
    progress = build_progress(
        GroupInfo("G", "EMPTY", ()),
        {("orders", 0): 1},
        {"orders": [0]},
        {("orders", 0): (0, 4)},
        {},
        DlqSize("%DLQ%G", DLQ, False, 0, 0),
    )
    assert progress.render() == [
        "group G  state EMPTY  members 0",
        "topic[partition]  committed  end  lag  owner",
        "orders[0]                 1    4    3  -",
        "total lag 3",
        "%DLQ%G: no such topic (nothing dead-lettered yet)",
    ]


def test_the_report_in_json_field_by_field() -> None:
    data = _progress().to_json()
    assert data["members"] == [
        {
            "member_id": "c1-aaa",
            "client_id": "c1",
            "host": "10.0.0.1",
            "group_instance_id": None,
            "assignment": [
                {"topic": "orders", "partition": 0},
                {"topic": "%RETRY%G", "partition": 0},
            ],
            "circuit": OPEN.to_json(),
        },
        {
            "member_id": "c2-bbb",
            "client_id": "c2",
            "host": "10.0.0.2",
            "group_instance_id": "static-2",
            "assignment": [{"topic": "orders", "partition": 1}],
            "circuit": None,
        },
    ]
    assert data["partitions"][1] == {
        "topic": "orders",
        "kafka_topic": "orders",
        "partition": 1,
        "committed": 2,
        "start": 8,
        "end": 10,
        "lag": 2,
        "owner": "c2-bbb",
        "owner_client_id": "c2",
        "leader": 2,
        "replicas": 3,
        "isr": 2,
        "status": "under-replicated",
    }
    assert data["partitions"][2] == {
        "topic": "orders",
        "kafka_topic": "orders",
        "partition": 2,
        "committed": None,
        "start": 1,
        "end": 1000,
        "lag": 999,
        "owner": None,
        "owner_client_id": None,
        "leader": 1,
        "replicas": 3,
        "isr": 3,
        "status": "ok",
    }
    assert data["partitions"][4]["kafka_topic"] == RETRY
    assert data["partitions"][4]["topic"] == "%RETRY%G"
    assert (data["group"], data["state"], data["lag"]) == ("G", "STABLE", 1007)
    assert data["dlq"]["unhealthy"] == [
        {"partition": 1, "leader": None, "replicas": 3, "isr": 0, "status": "leaderless"}
    ]


def test_lag_of_sums_the_known_lags_on_the_topics_asked() -> None:
    progress = _progress()
    assert progress.lag_of(["orders"]) == 3 + 2 + 999  # orders[3]: unknown, not counted
    assert progress.lag_of(iter([RETRY])) == 3
    assert progress.lag_of(["orders", RETRY]) == progress.lag == 1007
    assert progress.lag_of([]) == 0


def test_rows_without_a_start_rule_or_a_probe_leave_what_they_cannot_know() -> None:
    rows = _progress(first=None, heads={}).partitions
    # no start rule: a partition never committed has an unknown lag
    assert [r.lag for r in rows] == [3, 2, None, None, 5]


@pytest.mark.parametrize("where", [None, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET])
def test_a_retry_partition_never_committed_counts_from_its_beginning(
    where: ConsumeFromWhere | None,
) -> None:
    """Whatever the start rule of the users' topics, every record of the group's own retry
    topic is owed to it: without a committed offset its lag runs from the log start."""
    rows = _progress(
        committed={("orders", 0): 17},
        ends={("orders", 0): (0, 20), ("orders", 2): (1, 1000), (RETRY, 0): (2, 7)},
        heads={},
        first=start_rule(RETRY, where),
    ).partitions
    by_tp = {(r.kafka_topic, r.partition): r.lag for r in rows}
    assert by_tp[(RETRY, 0)] == 5
    assert by_tp[("orders", 2)] == (None if where is None else 0)


def test_a_topic_that_does_not_exist_shows_its_committed_partitions_only() -> None:
    rows = _progress(
        partitions={"gone": None, "orders": [0]}, committed={("gone", 4): 3}
    ).partitions
    assert [(r.kafka_topic, r.partition, r.committed) for r in rows] == [
        ("gone", 4, 3),
        ("orders", 0, None),
    ]
    assert rows[0].health is None and rows[0].to_json()["status"] is None


def test_rows_are_ordered_by_the_logical_names_given() -> None:
    names = {"t-retry": "%RETRY%G", "t-user": "orders"}
    progress = build_progress(
        GroupInfo("G", "STABLE", ()),
        {},
        {"t-retry": [0], "t-user": [1, 0]},
        {},
        {},
        DlqSize("%DLQ%G", DLQ, False, 0, 0),
        names.__getitem__,
    )
    assert [(r.topic, r.partition) for r in progress.partitions] == [
        ("orders", 0),
        ("orders", 1),
        ("%RETRY%G", 0),
    ]


@pytest.mark.parametrize(
    ("kafka_topic", "where", "start"),
    [
        (RETRY, None, StartAt.BEGINNING),  # the retry topic: always from its beginning
        (RETRY, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, StartAt.BEGINNING),
        ("orders", None, None),  # not known
        ("orders", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, StartAt.END),
        ("orders", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, StartAt.BEGINNING),
        ("orders", ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, StartAt.TIMESTAMP),
    ],
)
def test_start_rule(
    kafka_topic: str, where: ConsumeFromWhere | None, start: StartAt | None
) -> None:
    assert start_rule(RETRY, where)(kafka_topic) is start


def test_subscribed_topics_users_first_then_retry_and_never_the_dlq() -> None:
    info = GroupInfo("G", "STABLE", (Member("m", "c", "h", None, (("zeta", 0),)),))
    committed = [("alpha", 0), (DLQ, 0), ("alpha", 1)]
    assert subscribed_topics(info, committed, RETRY, DLQ) == ["alpha", "zeta", RETRY]


def test_a_partition_row_without_an_owner_or_metadata() -> None:
    row = PartitionProgress("orders", "orders", 0, 4, 0, 9)
    assert row.to_json() == {
        "topic": "orders",
        "kafka_topic": "orders",
        "partition": 0,
        "committed": 4,
        "start": 0,
        "end": 9,
        "lag": 5,
        "owner": None,
        "owner_client_id": None,
        "leader": None,
        "replicas": None,
        "isr": None,
        "status": None,
    }


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
