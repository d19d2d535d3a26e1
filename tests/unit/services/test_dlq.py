"""The DLQ cursor: its text round trip and a bad cursor named."""

from __future__ import annotations

import pytest

from adapter.errors import InvalidInputError
from adapter.services.dlq import format_cursor, parse_cursor

pytestmark = pytest.mark.unit


# --- cursor, selection, filter ---------------------------------------------------------------
def test_cursor_round_trip_and_bad_cursor() -> None:
    assert parse_cursor("0-15.1-20") == {0: 15, 1: 20}
    assert format_cursor({1: 20, 0: 15}) == "0-15.1-20"
    for bad in ("zz", "0-", "-1", "0-1.x", "0:1"):
        with pytest.raises(InvalidInputError) as err:
            parse_cursor(bad)
        assert err.value.field == "cursor"
