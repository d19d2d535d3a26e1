"""Delay-topic decisions of the ScheduleService and of senders.  Pure (time is passed in).

A delay-topic entry carries ``RMQ_DUE_MS`` (epoch ms).  The service forwards it to
``REAL_TOPIC`` when due, or waits; ``TIMER_DELIVER_MS`` entries cascade through the levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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


def decide(
    props: Mapping[str, str], *, level_delay_ms: int, now_ms: int, levels: DelayLevels
) -> Decision:
    """What to do with the head entry of a delay topic whose level delay is ``level_delay_ms``.

    ``correctDeliverTimestamp``: a due time further ahead than one level delay is treated
    as now (a clock jump or a forged header must not park a message for ever).
    """
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    if not real_topic:
        return Invalid(f"{PROPERTY_REAL_TOPIC} missing")
    due_raw = props.get(HEADER_DUE_MS)
    due = parse_non_negative(due_raw)
    if due is None:
        return Invalid(f"{HEADER_DUE_MS}={due_raw!r} is not an epoch-ms time")
    qid_raw = props.get(PROPERTY_REAL_QUEUE_ID)
    real_qid = parse_non_negative(qid_raw)
    if qid_raw is not None and real_qid is None:
        return Invalid(f"{PROPERTY_REAL_QUEUE_ID}={qid_raw!r} is not a partition number")
    if due > now_ms + level_delay_ms:
        due = now_ms
    if due > now_ms:
        return Wait(due)
    deliver_raw = props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver_raw is not None:
        deliver = parse_non_negative(deliver_raw)
        if deliver is None:
            return Invalid(f"{PROPERTY_TIMER_DELIVER_MS}={deliver_raw!r} is not an epoch-ms time")
        placement = place_deliver_time(deliver, now_ms, levels)
        if placement is not None:
            return Repark(placement)
    return Forward(real_topic, real_qid)
