"""Where a DLQ partition's redrive mark moves after a redrive.  Pure."""

from __future__ import annotations

import pytest

from adapter.core.message import MessageExt
from adapter.services.dlq import DeadLetterEntry
from adapter.services.redrive import RedriveResult, redrive_marks

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
