"""Delay-topic decisions of the ScheduleService and of senders.  Pure (time is passed in).

A delay-topic entry carries ``RMQ_DUE_MS`` (epoch ms).  The service forwards it to
``REAL_TOPIC`` when due, or waits; ``TIMER_DELIVER_MS`` entries cascade through the levels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from adapter.constants import (
    HEADER_DUE_MS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
)
from adapter.core.delay import DelayLevels
from adapter.core.headers import parse_non_negative


@dataclass(frozen=True, slots=True)
class Placement:
    """Park a message on ``level`` until ``due_ms``."""

    level: int
    due_ms: int


def place_delay_level(level: int, now_ms: int, levels: DelayLevels) -> Placement:
    """A scheduled message of ``level`` (clamped to the highest level)."""
    clamped = levels.clamp(level)
    return Placement(clamped, now_ms + levels.delay_ms(clamped))


def place_deliver_time(deliver_ms: int, now_ms: int, levels: DelayLevels) -> Placement | None:
    """Where an absolute delivery time parks next (``None``: deliver now).

    The largest level that does not overshoot; when the rest is shorter than every level,
    the shortest level with the exact delivery time as its due time.  Never early.
    """
    remaining = deliver_ms - now_ms
    if remaining <= 0:
        return None
    level = levels.largest_level_within(remaining)
    if level is None:
        shortest = min(levels.levels(), key=levels.delay_ms)
        return Placement(shortest, deliver_ms)
    return Placement(level, now_ms + levels.delay_ms(level))


@dataclass(frozen=True, slots=True)
class Forward:
    """Due: send to ``real_topic`` (logical), partition ``real_queue_id`` when given."""

    real_topic: str
    real_queue_id: int | None


@dataclass(frozen=True, slots=True)
class Wait:
    """Not due: pause the partition until ``due_ms``."""

    due_ms: int


@dataclass(frozen=True, slots=True)
class Repark:
    """A timer message not yet at its delivery time: park it again."""

    placement: Placement


@dataclass(frozen=True, slots=True)
class Invalid:
    """The entry cannot be scheduled; it goes to the service's dead-letter topic."""

    reason: str


Decision = Forward | Wait | Repark | Invalid


class EntryInfo(NamedTuple):
    """What a delay-topic entry's headers say, read once when it is fetched.

    ``due_ms`` is when it may go: its ``RMQ_DUE_MS``, but never later than one level delay
    after the service first saw it.  The due time comes from the sender's clock; a sender
    whose clock runs ahead must not park a message for ever, nor (the old rule: "too far
    ahead means now") remove the delay altogether.  ``problem`` says why the entry cannot
    be scheduled (it goes to the service's DLQ).
    """

    real_topic: str | None
    real_qid: int | None
    due_ms: int
    deliver_ms: int | None
    problem: str | None = None


_WANTED = frozenset(
    {PROPERTY_REAL_TOPIC, HEADER_DUE_MS, PROPERTY_REAL_QUEUE_ID, PROPERTY_TIMER_DELIVER_MS}
)


def read_entry(headers: Iterable[tuple[str, bytes | None]] | None, *, level_delay_ms: int,
               seen_ms: int) -> EntryInfo:  # fmt: skip
    """Read the four headers an entry is scheduled by (the last value of each wins)."""
    found: dict[str, bytes | None] = {}
    for key, value in headers or ():
        if key in _WANTED:
            found[key] = value
    return entry_info(
        {k: v.decode("utf-8", "replace") for k, v in found.items() if v is not None},
        level_delay_ms=level_delay_ms,
        seen_ms=seen_ms,
    )


def entry_info(props: Mapping[str, str], *, level_delay_ms: int, seen_ms: int) -> EntryInfo:
    """:func:`read_entry` from decoded properties."""
    latest = seen_ms + level_delay_ms
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    if not real_topic:
        return EntryInfo(None, None, seen_ms, None, f"{PROPERTY_REAL_TOPIC} missing")
    due_raw = props.get(HEADER_DUE_MS)
    due = parse_non_negative(due_raw)
    if due is None:
        problem = f"{HEADER_DUE_MS}={due_raw!r} is not an epoch-ms time"
        return EntryInfo(real_topic, None, seen_ms, None, problem)
    qid_raw = props.get(PROPERTY_REAL_QUEUE_ID)
    real_qid = parse_non_negative(qid_raw)
    if qid_raw is not None and real_qid is None:
        problem = f"{PROPERTY_REAL_QUEUE_ID}={qid_raw!r} is not a partition number"
        return EntryInfo(real_topic, None, seen_ms, None, problem)
    deliver_raw = props.get(PROPERTY_TIMER_DELIVER_MS)
    deliver: int | None = None
    if deliver_raw is not None:
        deliver = parse_non_negative(deliver_raw)
        if deliver is None:
            problem = f"{PROPERTY_TIMER_DELIVER_MS}={deliver_raw!r} is not an epoch-ms time"
            return EntryInfo(real_topic, real_qid, seen_ms, None, problem)
    return EntryInfo(real_topic, real_qid, min(due, latest), deliver)


def decide_due(info: EntryInfo, *, now_ms: int, levels: DelayLevels) -> Decision:
    """What to do with an entry whose due time has come: forward it, park a timer entry
    again (``TIMER_DELIVER_MS`` not reached), or dead-letter it."""
    if info.problem is not None or info.real_topic is None:
        return Invalid(info.problem or f"{PROPERTY_REAL_TOPIC} missing")
    if info.deliver_ms is not None:
        placement = place_deliver_time(info.deliver_ms, now_ms, levels)
        if placement is not None:
            return Repark(placement)
    return Forward(info.real_topic, info.real_qid)


def decide(
    props: Mapping[str, str],
    *,
    level_delay_ms: int,
    now_ms: int,
    levels: DelayLevels,
    seen_ms: int | None = None,
) -> Decision:
    """What to do with the head entry of a delay topic whose level delay is ``level_delay_ms``
    (first seen at ``seen_ms``, default now): :class:`Wait` until its due time, or what
    :func:`decide_due` says.  An invalid entry is dead-lettered at once."""
    info = entry_info(
        props, level_delay_ms=level_delay_ms, seen_ms=now_ms if seen_ms is None else seen_ms
    )
    if info.problem is None and info.due_ms > now_ms:
        return Wait(info.due_ms)
    return decide_due(info, now_ms=now_ms, levels=levels)
