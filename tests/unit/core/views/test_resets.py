"""``group reset-offset``: the new offset per partition for every target, and the report
of what was reset (old and new offsets, who applied it) in text and JSON."""

from __future__ import annotations

import pytest

from adapter.core.cluster import Member
from adapter.core.control import ResetTarget
from adapter.core.views.resets import ResetResult, ResetRow, reset_offsets

pytestmark = pytest.mark.unit

NOW = 1_795_448_570_000  # 2026-11-23T15:42:50Z
ENDS = {0: (0, 10), 1: (4, 8)}
M1 = Member("c1-aaa", "c1", "10.0.0.1", None, ())
M2 = Member("c2-bbb", "c2", "10.0.0.2", "static-2", (("orders", 1),))


@pytest.mark.parametrize(
    ("target", "offsets"),
    [
        (ResetTarget.earliest(), {0: 0, 1: 4}),
        (ResetTarget.latest(), {0: 10, 1: 8}),
        (ResetTarget.at(NOW), {0: 3, 1: 8}),
    ],
)
def test_only_a_time_target_reads_the_offsets_found_for_the_time(
    target: ResetTarget, offsets: dict[int, int]
) -> None:
    assert reset_offsets(target, ENDS, {0: 3, 1: None}) == offsets


def test_an_admin_reset_in_text_column_by_column() -> None:
    result = ResetResult(
        "G",
        "%RETRY%G",
        "rmq.retry.G",
        ResetTarget.earliest(),
        "admin",
        (ResetRow(0, 1017, 3), ResetRow(1, None, 0), ResetRow(12, 8, 120)),
    )
    assert result.render() == [
        "reset group G on %RETRY%G to earliest (group empty: offsets altered)",
        "  %RETRY%G[0]   1017  →  3",
        "  %RETRY%G[1]      -  →  0",
        "  %RETRY%G[12]     8  →  120",
    ]


def test_a_reset_by_the_live_members_in_text_and_json() -> None:
    result = ResetResult(
        "G",
        "%RETRY%G",
        "rmq.retry.G",
        ResetTarget.latest(),
        "members",
        (ResetRow(0, 17, 30, M1), ResetRow(1, None, 0)),
        request_id="r1",
        not_applied=(2,),
    )
    assert result.render() == [
        "reset group G on %RETRY%G to latest (applied by the live members, request r1)",
        "  %RETRY%G[0]  17  →  30  by c1@10.0.0.1",
        "  %RETRY%G[1]   -  →  0",
        "  %RETRY%G[2]  NOT reset",
    ]
    assert result.to_json() == {
        "group": "G",
        "topic": "%RETRY%G",
        "kafka_topic": "rmq.retry.G",
        "target": {"kind": "latest", "text": "latest"},
        "mode": "members",
        "request_id": "r1",
        "partitions": [
            {"partition": 0, "old": 17, "new": 30, "by": "c1-aaa", "by_client_id": "c1"},
            {"partition": 1, "old": None, "new": 0, "by": None, "by_client_id": None},
        ],
        "not_applied": [2],
    }


def test_reset_offsets_per_target() -> None:
    ends = {0: (0, 10), 1: (4, 8), 2: (0, 0)}
    assert reset_offsets(ResetTarget.earliest(), ends) == {0: 0, 1: 4, 2: 0}
    assert reset_offsets(ResetTarget.latest(), ends) == {0: 10, 1: 8, 2: 0}
    # a time: the first record at or after it; none that recent -> the end
    at = {0: 3, 1: None, 2: None}
    assert reset_offsets(ResetTarget.at(NOW), ends, at) == {0: 3, 1: 8, 2: 0}
    # clamped into the partition (a stale answer never points outside the log)
    assert reset_offsets(ResetTarget.at(NOW), {0: (5, 10)}, {0: 2}) == {0: 5}


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
