"""What the admin commands read from the cluster: groups and their members, the text of an
assignment, the order the reports list topics in and a partition's replication health."""

from __future__ import annotations

import pytest

from adapter.core.cluster import (
    HEALTH_OK,
    LEADERLESS,
    GroupInfo,
    Member,
    PartitionHealth,
    assignment_text,
    topic_order,
)
from adapter.core.codec import logical_topic
from adapter.core.naming import dlq_topic, retry_topic, to_kafka

pytestmark = pytest.mark.unit

RETRY = to_kafka(retry_topic("billing"))  # rmq.retry.billing
DLQ = to_kafka(dlq_topic("billing"))  # rmq.dlq.billing


def _member(member_id: str, *assignment: tuple[str, int]) -> Member:
    return Member(member_id, f"client-{member_id}", "10.0.0.1", None, assignment)


def test_group_member_by_id() -> None:
    a, b = _member("m-a", ("orders", 0)), _member("m-b", ("orders", 1))
    group = GroupInfo("billing", "Stable", (a, b))
    assert group.member("m-a") is a
    assert group.member("m-b") is b
    assert group.member("m-gone") is None
    assert GroupInfo("billing", "Empty", ()).member("m-a") is None


def test_assignment_text_lists_users_topics_then_retry_then_dlq() -> None:
    assignment = [(DLQ, 0), ("zeta", 2), (RETRY, 1), ("zeta", 0), ("alpha", 3), (RETRY, 0)]
    assert assignment_text(assignment) == "alpha[3] zeta[0,2] %RETRY%billing[0,1] %DLQ%billing[0]"
    assert assignment_text([]) == "-"


def test_assignment_text_orders_by_the_logical_names_it_is_given() -> None:
    # a group this long has its retry topic shortened to a digest: only the group tells
    # its logical name, and the reports order it by that name (after the users' topics)
    group = "g" * 245
    shortened = to_kafka(retry_topic(group))
    assert logical_topic(shortened) != retry_topic(group)
    text = assignment_text([(shortened, 0), ("zeta", 1)], lambda t: logical_topic(t, group))
    assert text == f"zeta[1] %RETRY%{group}[0]"


@pytest.mark.parametrize(
    ("topics", "ordered"),
    [
        (
            [DLQ, RETRY, "zeta", "alpha"],
            ["alpha", "zeta", "%RETRY%billing", "%DLQ%billing"],
        ),
        (
            [to_kafka(dlq_topic("a")), to_kafka(retry_topic("z"))],
            ["%RETRY%z", "%DLQ%a"],
        ),
    ],
)
def test_topic_order_users_then_retry_then_dlq(topics: list[str], ordered: list[str]) -> None:
    assert [logical_topic(t) for t in sorted(topics, key=topic_order)] == ordered


@pytest.mark.parametrize(
    ("leader", "expected"),
    [
        (0, PartitionHealth(0, 3, 3)),
        (1, PartitionHealth(1, 3, 3)),
        (-1, PartitionHealth(None, 3, 3)),
    ],
)
def test_partition_health_of_node_zero_is_a_leader(leader: int, expected: PartitionHealth) -> None:
    health = PartitionHealth.of(leader, [0, 1, 2], [0, 1, 2])
    assert health == expected
    assert health.readable is (leader >= 0)
    assert health.status == (HEALTH_OK if leader >= 0 else LEADERLESS)
