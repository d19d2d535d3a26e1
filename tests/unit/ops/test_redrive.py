"""What a redrive selects: a selection needs exactly one kind; a filter matches fields."""

from __future__ import annotations

import pytest

from adapter.core.message import MessageExt
from adapter.errors import InvalidInputError
from adapter.ops.redrive import DlqFilter, Selection
from adapter.services.dlq import HEADER_REDRIVE_COUNT, DeadLetterEntry

pytestmark = pytest.mark.unit


def _entry(offset: int, count: int | None = None, partition: int = 0) -> DeadLetterEntry:
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


def test_selection_needs_exactly_one_kind() -> None:
    with pytest.raises(InvalidInputError, match="exactly one"):
        Selection()
    with pytest.raises(InvalidInputError, match="exactly one"):
        Selection(ids=("a",), all=True)
    with pytest.raises(InvalidInputError, match="ids"):
        Selection(ids=())
    assert Selection(ids=("m0-1",)).chooses(_entry(1))
    assert not Selection(ids=("m0-1",)).chooses(_entry(2))
    assert Selection(all=True).describe() == {"all": True}


def test_filter_matches_fields() -> None:
    e = DeadLetterEntry(_entry(0).message, "orders", "MAX_RECONSUME_TIMES", "ValueError", "no")
    assert DlqFilter(origin_topic="orders", reason="MAX_RECONSUME_TIMES").matches(e)
    assert not DlqFilter(failure_type="TimeoutError").matches(e)
    assert DlqFilter(msg_id="m0-0").matches(e)
    assert DlqFilter(reason="X").to_json() == {"reason": "X"}
