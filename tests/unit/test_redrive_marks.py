"""Where a DLQ partition's redrive mark moves after a redrive (pure), and how long a
redrive waits for the record an omitted body is read back from (on a fake clock)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from adapter.core.message import MessageExt
from adapter.core.omitted_body import OmittedBody
from adapter.services.dlq import DeadLetterEntry
from adapter.services.redrive import RedriveResult, read_record_at, redrive_marks
from tests.unit.kafka_fakes import FakeClock

pytestmark = pytest.mark.unit


def entry(partition: int, offset: int) -> DeadLetterEntry:
    msg = MessageExt(
        topic="%DLQ%g",
        body=b"x",
        msg_id=f"m{partition}-{offset}",
        queue_id=partition,
        queue_offset=offset,
        kafka_topic="rmq.dlq.g",
    )
    return DeadLetterEntry.of(msg)


def test_every_entry_sent_moves_each_partition_past_its_last() -> None:
    entries = [entry(0, 3), entry(0, 4), entry(1, 9)]
    assert redrive_marks(entries, RedriveResult(sent=3), {}) == {0: 5, 1: 10}


def test_an_entry_not_sent_holds_its_partition_at_itself() -> None:
    entries = [entry(0, 3), entry(0, 4), entry(0, 5), entry(1, 9)]
    failed = RedriveResult(sent=3, failed=(("m0-4", "%RETRY%g", "refused"),))
    assert redrive_marks(entries, failed, {}) == {0: 4, 1: 10}
    skipped = RedriveResult(sent=2, skipped=(("m0-3", "t[0]@1", "body gone"),))
    assert redrive_marks(entries, skipped, {}) == {1: 10}  # partition 0 stays where it was


def test_marks_never_move_back() -> None:
    # sent again on purpose (again=True): old entries do not pull the mark back
    assert redrive_marks([entry(0, 1)], RedriveResult(sent=1), {0: 7}) == {}
    assert redrive_marks([entry(0, 9)], RedriveResult(sent=1), {0: 7}) == {0: 10}


def test_unanswered_sends_move_nothing() -> None:
    unknown = RedriveResult(sent=1, failed=(("?", "", "1 record(s) not acknowledged"),))
    assert redrive_marks([entry(0, 1), entry(0, 2)], unknown, {}) == {}


class _Reader:
    """A consumer that only ever returns records of another partition; each ``poll`` takes
    a second of the clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.polls = 0

    def get_watermark_offsets(self, _tp: Any, timeout: float) -> tuple[int, int]:
        return 0, 100

    def assign(self, _partitions: Any) -> None:
        pass

    def unassign(self) -> None:
        pass

    def poll(self, _timeout: float) -> Message:
        self.polls += 1
        self.clock.advance(1.0)
        return Message(topic="orders", partition=1, offset=7, value=b"other")


def test_reading_an_omitted_body_gives_up_when_the_clock_passes_the_timeout() -> None:
    clock = FakeClock()
    reader = _Reader(clock)
    where = OmittedBody(size=5, kafka_topic="orders", partition=0, offset=7)
    assert read_record_at(reader, where, 5.0, clock=clock) == "not read within 5 s"
    assert reader.polls == 5
