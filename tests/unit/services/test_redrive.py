"""Redriving dead letters, pure: the plan (marks, loop guard), the redrive options, pacing,
and where a DLQ partition's redrive mark moves after a redrive; and how long a redrive waits
for the record an omitted body is read back from (on a fake clock)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from adapter.core.message import MessageExt
from adapter.core.omitted_body import OmittedBody
from adapter.errors import InvalidInputError
from adapter.services.dlq import HEADER_REDRIVE_COUNT, DeadLetterEntry
from adapter.services.redrive import (
    Pacer,
    RedriveResult,
    check_redrive_options,
    plan_redrive,
    read_record_at,
    redrive_marks,
)
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


# --- the redrive plan ------------------------------------------------------------------------
def dead_letter(offset: int, count: int | None = None, partition: int = 0) -> DeadLetterEntry:
    """A DLQ entry of group ``g`` at ``offset``, redriven ``count`` times so far."""
    props = {} if count is None else {HEADER_REDRIVE_COUNT: str(count)}
    msg = MessageExt(
        topic="%DLQ%g",
        body=b"x",
        msg_id=f"m{partition}-{offset}",
        queue_id=partition,
        queue_offset=offset,
        kafka_topic="rmq.dlq.g",
        properties=props,
    )
    return DeadLetterEntry.of(msg)


def test_plan_skips_what_was_redriven_and_what_the_loop_guard_refuses() -> None:
    entries = [
        dead_letter(0),
        dead_letter(1, 3),
        dead_letter(2, 2),
        dead_letter(3, 7),
        dead_letter(0, partition=1),
    ]
    plan = plan_redrive(entries, {0: 1}, max_redrives=3)
    assert [e.message.msg_id for e in plan.already] == ["m0-0"]
    assert [e.message.msg_id for e in plan.guarded] == ["m0-1", "m0-3"]
    assert [e.message.msg_id for e in plan.send] == ["m0-2", "m1-0"]
    forced = plan_redrive(entries, {0: 1}, max_redrives=3, force=True)
    assert not forced.guarded and len(forced.send) == 4
    again = plan_redrive(entries, {0: 1}, again=True)
    assert not again.already and len(again.send) == 5  # no guard without max_redrives


def test_redrive_count_reads_the_header() -> None:
    assert dead_letter(0).redrive_count == 0
    assert dead_letter(0, 4).redrive_count == 4


@pytest.mark.parametrize(
    ("rate", "guard", "field"),
    [(-1, None, "rate"), (0, None, "rate"), (True, None, "rate"), (None, 0, "max_redrives")],
)
def test_bad_redrive_options_name_the_field(rate: Any, guard: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        check_redrive_options(rate, guard)
    assert err.value.field == field


def test_pacer_spaces_sends_at_the_rate() -> None:
    clock = FakeClock(100.0)
    pacer = Pacer(4.0, clock)
    served: list[float] = []

    def serve(s: float) -> None:
        served.append(s)
        clock.advance(s)

    sent_at = []
    for _ in range(5):
        pacer.wait(serve)
        sent_at.append(clock.now)
    assert [round(t - 100.0, 6) for t in sent_at] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert max(served) <= 0.1


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
