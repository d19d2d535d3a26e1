"""What a redrive selects: a selection needs exactly one kind; a filter matches fields."""

from __future__ import annotations

import pytest

from adapter.errors import InvalidInputError
from adapter.ops.redrive import DlqFilter, Selection
from adapter.services.dlq import DeadLetterEntry
from tests.unit.services.test_redrive import dead_letter

pytestmark = pytest.mark.unit


def test_selection_needs_exactly_one_kind() -> None:
    with pytest.raises(InvalidInputError, match="exactly one"):
        Selection()
    with pytest.raises(InvalidInputError, match="exactly one"):
        Selection(ids=("a",), all=True)
    with pytest.raises(InvalidInputError, match="ids"):
        Selection(ids=())
    assert Selection(ids=("m0-1",)).chooses(dead_letter(1))
    assert not Selection(ids=("m0-1",)).chooses(dead_letter(2))
    assert Selection(all=True).describe() == {"all": True}


def test_filter_matches_fields() -> None:
    e = DeadLetterEntry(dead_letter(0).message, "orders", "MAX_RECONSUME_TIMES", "ValueError", "no")
    assert DlqFilter(origin_topic="orders", reason="MAX_RECONSUME_TIMES").matches(e)
    assert not DlqFilter(failure_type="TimeoutError").matches(e)
    assert DlqFilter(msg_id="m0-0").matches(e)
    assert DlqFilter(reason="X").to_json() == {"reason": "X"}
