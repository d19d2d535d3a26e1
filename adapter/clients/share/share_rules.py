"""The SimpleConsumer's decisions on a Kafka share group (KIP-932), kept pure.

A share group keeps what the classic backend keeps in the client: the broker locks each
record it hands out (``share.record.lock.duration.ms``, one value per group), counts its
deliveries, and archives it after ``share.delivery.count.limit`` of them.  RocketMQ's model
differs in four places, and this module holds what the adapter decides there (times in
seconds, ``now`` on a monotonic clock; docs/semantics.md §4.13.1):

* the invisible duration of a ``receive`` is kept by the client inside the group's lock,
  never beyond it (:func:`usable_hold`, :func:`can_hold`): librdkafka cannot renew a lock;
* a message whose invisible duration ran out is released (visible again at once), unless
  it is due for the dead-letter queue (:func:`on_expiry`);
* the adapter dead-letters itself, one delivery before the broker would archive the record
  (:func:`delivery_limit`, :func:`on_arrival`);
* ``consume_from_where`` becomes the group's ``share.auto.offset.reset``, set again as
  time passes (:func:`offset_reset`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from adapter.core.offsets import ConsumeFromWhere
from adapter.errors import ConfigError

#: Deliveries before the DLQ on a share group unless set: one below the broker's default
#: maximum per-group delivery limit (``group.share.max.delivery.count.limit``, 10), since the
#: adapter needs one delivery more than it hands out (:func:`delivery_limit`).
DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS = 9
#: The broker refuses a per-group delivery limit below this (``share.delivery.count.limit``).
MIN_DELIVERY_LIMIT = 2
#: Longest part of a lock kept back for the acknowledgement's trip to the broker.
MAX_ACK_MARGIN_S = 1.0
#: librdkafka refuses these settings on a share consumer (they are group settings there, or
#: meaningless); the adapter drops them from the config it was given for both backends.
NOT_FOR_SHARE_CONSUMER = frozenset(
    {
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.partition.eof",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "heartbeat.interval.ms",
        "isolation.level",
        "partition.assignment.strategy",
        "session.timeout.ms",
    }
)


class Verdict(str, Enum):
    """What the adapter does with a record of a share group."""

    DELIVER = "DELIVER"
    """Hand it to ``receive`` (on arrival)."""
    RELEASE = "RELEASE"
    """Acknowledge it with RELEASE: visible again at once, to any member (on expiry)."""
    DEAD_LETTER = "DEAD_LETTER"
    """Write it to ``%DLQ%<group>``, wait for the broker, then REJECT it."""


def delivery_limit(max_delivery_attempts: int) -> int:
    """The group's ``share.delivery.count.limit`` for ``max_delivery_attempts``: one more,
    so that a record whose last allowed delivery was lost with its consumer (a crash) is
    delivered once more, to be dead-lettered, instead of archived (dropped) by the broker."""
    return max(MIN_DELIVERY_LIMIT, max_delivery_attempts + 1)


def on_arrival(attempt: int, max_delivery_attempts: int) -> Verdict:
    """A record just acquired at the broker's delivery count ``attempt``: delivered
    ``max_delivery_attempts`` times already without an acknowledgement (its holder died, or
    released it unseen) → the DLQ; else deliver."""
    return Verdict.DEAD_LETTER if attempt > max_delivery_attempts else Verdict.DELIVER


def on_expiry(attempt: int, delivery_count: int, max_delivery_attempts: int, limit: int) -> Verdict:
    """A record whose hold ended unacknowledged (invisible duration over, or released by
    the adapter): the DLQ at the last allowed attempt, or when the broker would archive it
    on release (its ``delivery_count`` reached the group's ``limit``); else release."""
    if attempt >= max_delivery_attempts or delivery_count >= limit:
        return Verdict.DEAD_LETTER
    return Verdict.RELEASE


def ack_margin(lock_s: float) -> float:
    """How much of a lock is kept back for an acknowledgement to reach the broker."""
    return min(MAX_ACK_MARGIN_S, lock_s / 10)


def usable_hold(lock_s: float) -> float:
    """The longest invisible duration a receive can promise on a group lock of ``lock_s``."""
    return lock_s - ack_margin(lock_s)


def max_receive_invisible(lock_s: float) -> float:
    """The longest invisible duration ``receive`` accepts: one margin below
    :func:`usable_hold`, so a record acquired by that receive's own poll always fits."""
    return lock_s - 2 * ack_margin(lock_s)


def can_hold(acquired_at: float, lock_s: float, now: float, invisible_s: float) -> bool:
    """Whether a record acquired at ``acquired_at`` can stay invisible until
    ``now + invisible_s`` inside its lock (less the acknowledgement margin)."""
    return acquired_at >= earliest_acquisition(lock_s, now, invisible_s)


def earliest_acquisition(lock_s: float, now: float, invisible_s: float) -> float:
    """The earliest acquisition time of a record that can stay invisible until
    ``now + invisible_s`` (:func:`can_hold`, computed once for a batch of records)."""
    return now + invisible_s - usable_hold(lock_s)


#: How far before ``start()`` a ``CONSUME_FROM_LAST_OFFSET`` group's new share-partitions
#: start (ms): room for the clocks behind record timestamps (producers') and the broker's
#: to differ.
START_SKEW_MS = 2_000
#: How long the reset set at ``start()`` keeps reaching back far enough (ms); each value
#: set later reaches further ahead, by the time passed since the start.
FIRST_REACH_MS = 2_000


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """A share group's ``share.auto.offset.reset`` and when (epoch ms) to set it again
    (``None``: never)."""

    value: str
    refresh_at_ms: int | None


def offset_reset(
    where: ConsumeFromWhere, start_ms: int, timestamp_ms: int, now_ms: int
) -> OffsetReset:
    """The group's ``share.auto.offset.reset`` for a start rule, at ``now_ms``, for a
    consumer started at ``start_ms``: where a share-partition without state starts
    (RocketMQ: a queue without a consume offset).

    The broker applies it when a member first fetches the share-partition: seconds after
    ``start()`` for a topic that existed, whenever it is first fetched for one created
    later.  ``latest`` would then skip what was sent in between, so a start at the end is
    expressed, like a start at a timestamp, as a duration back to a moment
    (``by_duration:PT<n>S``: the first record at or after the broker's now less ``n``):
    ``start_ms`` less :data:`START_SKEW_MS` for ``CONSUME_FROM_LAST_OFFSET``,
    ``timestamp_ms`` for ``CONSUME_FROM_TIMESTAMP``.  Since the broker measures from when it
    reads the value, a value reaches back far enough only for a while (its *reach*: the
    time since the start plus :data:`FIRST_REACH_MS`), and is set again halfway through
    it: the refreshes thin out (about 1, 2.5, 4.75 s ... after the start, a few dozen a
    day).  A share-partition started at the broker's ``t`` begins at most its reach before
    the moment, and never after it.  ``CONSUME_FROM_FIRST_OFFSET`` is ``earliest``, set
    once."""
    if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return OffsetReset("earliest", None)
    target = timestamp_ms if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP else start_ms
    if where is not ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        target -= START_SKEW_MS
    reach = max(0, now_ms - start_ms) + FIRST_REACH_MS
    back_s = -(-max(0, now_ms - target + reach) // 1000)  # whole seconds, rounded up
    return OffsetReset(f"by_duration:PT{back_s}S", now_ms + reach // 2)


def lock_ms(lock_s: float) -> int:
    """A lock duration in seconds as the group config's milliseconds (whole, at least 1)."""
    ms = round(lock_s * 1000)
    if ms < 1:
        raise ConfigError("lock_duration", lock_s, "must be at least 1 ms")
    return ms
