"""The records at the head of partitions, as the admin commands show them: a
confluent-kafka message as a :class:`~adapter.core.cluster.Record` (:func:`record_of`) and
the first readable record of each partition of a range (:func:`head_records`, read through
an :class:`~adapter.io.admin.AdminSession`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapter.core.cluster import Record
from adapter.core.headers import HeaderView
from adapter.core.types import TP
from adapter.io.admin import AdminSession


def record_of(kmsg: Any) -> Record:
    """The :class:`Record` of a confluent-kafka message."""
    ts_type, ts = kmsg.timestamp()
    value = kmsg.value()
    return Record(
        kafka_topic=kmsg.topic(),
        partition=kmsg.partition(),
        offset=kmsg.offset(),
        timestamp_ms=ts if ts_type and ts >= 0 else None,
        headers=dict(HeaderView.read(kmsg.headers()).text),
        value_size=len(value) if value is not None else 0,
    )


def head_records(
    session: AdminSession, ranges: Mapping[TP, tuple[int, int]], what: str
) -> dict[TP, Record | None]:
    """The first readable record of each partition at or after its start, before its end;
    ``None`` when there is none (only transaction markers or aborted records)."""
    heads: dict[TP, Record | None] = dict.fromkeys(
        (tp for tp, (start, end) in ranges.items() if end > start), None
    )
    seen: set[TP] = set()

    def visit(kmsg: Any) -> bool:
        tp = (kmsg.topic(), kmsg.partition())
        if tp not in seen:
            seen.add(tp)
            heads[tp] = record_of(kmsg)
        return True

    result = session.read(ranges, visit, what=what)
    for tp in result.unfinished:  # unknown: no EOF, no record within the time limit
        heads.pop(tp, None)
    return heads
