"""The failure rows' raw baseline produces the same copies as ours: the same header names,
in the same order, as a first send-back of the adapter (a fair baseline, not a smaller
record)."""

from __future__ import annotations

import pytest

from adapter.bench.harness import RawCopyHeaders
from adapter.core import hops
from adapter.core.codec import Failure
from adapter.core.delay import DelayLevels
from adapter.core.message import MessageExt
from adapter.core.routing import route_failed

pytestmark = pytest.mark.unit


class Record:
    """The three things the raw loop reads of a confluent-kafka record."""

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 41

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


def test_the_raw_copy_carries_the_headers_of_our_first_send_back() -> None:
    levels = DelayLevels.parse("1s 2s 3s 4s 5s")
    topics = hops.GroupTopics("g", levels, "bench")
    msg = MessageExt(
        topic="t",
        body=b"x",
        msg_id="t:0:41",
        queue_id=0,
        queue_offset=41,
        kafka_topic="t",
        born_timestamp=1_700_000_000_000,
    )
    dest = route_failed(
        reconsume_times=0, max_reconsume_times=16, delay_level_when_next_consume=0, levels=levels
    )
    ours = hops.send_back(msg, dest, topics, now_ms=0, failure=Failure("NotAcknowledged", "x"))
    raw = RawCopyHeaders("t", "g", "%RETRY%g")(Record())
    assert [name for name, _ in raw] == [name for name, _ in ours.headers]
    assert dict(raw)["UNIQ_KEY"] == b"t:0:41" == dict(ours.headers)["UNIQ_KEY"]
    assert len(raw) == 13
