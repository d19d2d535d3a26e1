"""Consume-trace runs and packs (adapter/core/trace.py): the rules a run keeps on its own.

How runs are made from consumed records and read back through Avro is tested with the
sink's columns (tests/unit/io/test_trace_columns.py); here, the builder, the reader and the
pack planner are driven directly.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from adapter.constants import PROPERTY_ORIGIN_MESSAGE_ID
from adapter.core.message import view_of
from adapter.core.trace import (
    NO_TEXT,
    RUN,
    RUN_FIELDS,
    TS_CREATE,
    TS_LOG_APPEND,
    TS_NONE,
    RunBuilder,
    expand_run,
    plan_packs,
    run_fields,
)
from adapter.errors import ConfigError, InvalidInputError

pytestmark = pytest.mark.unit


def _key(ts_type: int = TS_CREATE, has: tuple[bool, bool, bool] = NO_TEXT) -> tuple[Any, ...]:
    return ("g", 1_000, "orders", "k-orders", 0, 2, None, 1.5, 900, ts_type, has)


def _fields(closed: tuple[Any, ...] | None) -> dict[str, Any]:
    assert closed is not None
    return dict(zip(RUN_FIELDS, closed, strict=True))


def test_the_builder_refuses_a_cap_below_one_naming_it() -> None:
    with pytest.raises(ConfigError) as info:
        RunBuilder(0)
    assert (info.value.field, info.value.value, info.value.reason) == (
        "max_events",
        0,
        "must be >= 1",
    )


def test_a_cap_of_one_makes_a_run_of_every_event() -> None:
    builder = RunBuilder(1)
    assert builder.add(_key(), 10, 1, None, None, [5]) is None
    closed = _fields(builder.add(_key(), 11, 1, None, None, [6]))
    assert (closed["first_offset"], closed["count"]) == (10, 1)
    assert _fields(builder.close())["first_offset"] == 11


def test_closing_leaves_no_run_open() -> None:
    builder = RunBuilder(10)
    builder.add(_key(), 10, 2, None, None, [5, 6])
    assert builder.count == 2
    assert builder.close() is not None
    assert builder.count == 0
    assert builder.close() is None


def test_a_run_without_timestamps_keeps_none_of_what_it_was_given() -> None:
    """Timestamp type 0 (none): the values passed are ignored, the column is empty."""
    builder = RunBuilder(10)
    builder.add(_key(TS_NONE), 10, 2, None, None, [5, 6])
    run = _fields(builder.close())
    assert run["timestamps"] == b""
    assert [e["store_timestamp_ms"] for e in expand_run(run)] == [None, None]


@pytest.mark.parametrize("ts_type", [TS_CREATE, TS_LOG_APPEND])
def test_timestamps_read_back_as_written_negative_ones_included(ts_type: int) -> None:
    """Kafka writes -1 for a record without a timestamp: the column is signed."""
    builder = RunBuilder(10)
    builder.add(_key(ts_type), 10, 2, None, None, [-1, 1_700_000_000_000])
    events = expand_run(_fields(builder.close()))
    assert [e["store_timestamp_ms"] for e in events] == [-1, 1_700_000_000_000]


def test_a_run_read_with_timestamps_its_type_says_are_none_shows_none() -> None:
    """A reader trusts the timestamp type over a column a writer should have left empty."""
    builder = RunBuilder(10)
    builder.add(_key(TS_CREATE), 10, 2, None, None, [5, 6])
    run = _fields(builder.close()) | {"timestamp_type": TS_NONE}
    assert [(e["born_timestamp_ms"], e["store_timestamp_ms"]) for e in expand_run(run)] == [
        (None, None),
        (None, None),
    ]


def test_a_text_column_of_the_wrong_length_is_refused_naming_it() -> None:
    builder = RunBuilder(10)
    builder.add(_key(has=(True, False, False)), 10, 2, None, None, [5, 6], ("a\x1eb", None, None))
    run = _fields(builder.close())
    assert [e["msg_id"] for e in expand_run(run)] == ["a", "b"]
    with pytest.raises(InvalidInputError) as info:
        expand_run(run | {"msg_ids": "a"})
    assert (info.value.field, info.value.value, info.value.reason) == (
        "run",
        1,
        "values in a text column of 2 events",
    )


def test_a_run_grown_batch_by_batch_keeps_every_batchs_text_in_order() -> None:
    """Batches that continue a run add their msg ids and tags to its columns; a column the
    records lack (keys here) stays off."""
    has = (True, True, False)
    builder = RunBuilder(10)
    builder.add(_key(has=has), 10, 2, None, None, [5, 6], ("a\x1eb", "t\x1et", None))
    assert builder.add(_key(has=has), 12, 2, None, None, [7, 8], ("c\x1ed", "u\x1ev", None)) is None
    run = _fields(builder.close())
    assert (run["count"], run["keys"]) == (4, None)
    events = expand_run(run)
    assert [(e["offset"], e["msg_id"], e["tags"], e["keys"]) for e in events] == [
        (10, "a", "t", None),
        (11, "b", "t", None),
        (12, "c", "u", None),
        (13, "d", "v", None),
    ]


def test_an_offsets_column_shorter_than_the_run_is_an_error_not_fewer_events() -> None:
    builder = RunBuilder(10)
    builder.add(_key(), 10, 3, [10, 12, 14], None, [5, 6, 7])
    run = _fields(builder.close())
    assert [e["offset"] for e in expand_run(run)] == [10, 12, 14]
    with pytest.raises(ValueError, match="zip"):
        expand_run(run | {"offsets": "10,12"})


def test_plan_packs_refuses_caps_below_one_naming_them() -> None:
    with pytest.raises(ConfigError) as info:
        plan_packs([1], 0, 10)
    assert (info.value.field, info.value.value, info.value.reason) == (
        "max_events/max_bytes",
        (0, 10),
        "must be >= 1",
    )


@pytest.mark.parametrize(
    ("sizes", "max_events", "max_bytes", "counts", "ends"),
    [
        ([3, 2, 1], 10, 5, None, [2, 3]),  # a pack may fill max_bytes exactly
        ([3, 3], 10, 5, None, [1, 2]),
        ([1, 1, 1], 2, 100, None, [2, 3]),  # and max_events exactly
        ([1, 1, 1], 3, 100, [2, 2, 1], [1, 3]),  # a run counts its events
        ([9], 1, 1, [5], [1]),  # too large alone: still a pack of one
        ([], 1, 1, None, []),
    ],
)
def test_plan_packs_cuts_at_either_cap(
    sizes: list[int], max_events: int, max_bytes: int, counts: list[int] | None, ends: list[int]
) -> None:
    assert plan_packs(sizes, max_events, max_bytes, counts) == ends


def test_an_events_origin_id_is_the_property_a_retried_copy_carries() -> None:
    headers = [("UNIQ_KEY", b"COPY-ID"), (PROPERTY_ORIGIN_MESSAGE_ID, b"FIRST-ID")]
    record = Message(topic="k-orders", partition=0, offset=3, value=b"x", headers=headers)
    batch = [view_of(record, "orders", False, [None])]
    (fields,) = run_fields((RUN, "g", 1_000, batch, [0], None, 1.0, None))
    assert fields[6:8] == ("COPY-ID", "FIRST-ID")
