"""How the ScheduleService's forwards become final: the :class:`Delivery` strategy of each
guarantee, :class:`~adapter.services.schedule.at_least_once.AtLeastOnce` or
:class:`~adapter.services.schedule.exactly_once.ExactlyOnce`, and what both use (the
:class:`Copy` token, the :class:`Host` they report to, committed positions).  Everything
else (what is due, where it goes, what a refusal means) is the same for both and lives in
the service and :mod:`adapter.core`; everything in which the two differ lives in their
modules, one strategy each: the consumer settings they require, their producer, how a loop
pass ends, what a refused copy leads to, how offsets are committed (on revoke and shutdown
too) and closing.

* at-least-once: each forward settles when the broker acknowledges it; offsets are stored
  and committed in the background.  A crash between a forward and the commit forwards the
  entry again (consumers de-duplicate on ``UNIQ_KEY``).
* exactly-once: the forwards of one loop pass and the delay-topic offsets they consume
  commit in one Kafka transaction.  A failed transaction is aborted and its partitions are
  read again from where it began; a producer whose state is unknown is fenced by a fresh
  one with the same ``transactional.id``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from adapter.core import hops
from adapter.core.clock import Clock
from adapter.core.engine.schedule import Entry, ScheduleAction, ScheduleEngine
from adapter.core.omitted_body import OmittedBody
from adapter.core.publishing import Escalation
from adapter.core.types import TP
from adapter.io.offsets import committed_offsets
from adapter.services.schedule.options import ScheduleStats

__all__ = [
    "PRODUCER_NAME",
    "Copy",
    "Delivery",
    "Host",
    "committed_position",
    "omitted_body",
    "purged",
]

log = logging.getLogger("adapter.schedule")

#: What the service's producer is called in logs and errors.
PRODUCER_NAME = "ScheduleService producer"


@dataclass(slots=True, eq=False)
class Copy:
    """What a produced record was for (the token its verdict comes back with)."""

    entry: Entry
    record: hops.OutRecord
    dead_letter: bool = False
    alone: bool = False
    omitted: bool = False
    epoch: int = 0  # exactly-once: the transaction it was produced in


class Host(Protocol):
    """What a delivery needs of the service loop (all on the loop thread)."""

    engine: ScheduleEngine
    stats: ScheduleStats
    clock: Clock

    def apply(self, actions: list[ScheduleAction]) -> None:
        """Carry out the engine's actions (rewinds, pauses, offsets to store)."""

    def refused(self, copy: Copy, err: Any, local: bool) -> tuple[Escalation, str] | None:
        """A copy was refused: count and log it, and say what to do next with the error's
        text (``None``: nothing, the entry is read again anyway)."""

    def dead_letter(self, entry: Entry, reason: str, now_ms: int) -> None:
        """Send ``entry`` to the service's DLQ with ``reason``."""

    def running(self) -> bool:
        """Whether the service loop is running (not stopping)."""


class Delivery(Protocol):
    """What the service asks of a delivery guarantee (all on the service's loop thread)."""

    exactly_once: bool

    @staticmethod
    def configure_consumer(cconf: dict[str, Any]) -> None:
        """Require the consumer settings this guarantee relies on."""

    def start(self, consumer: Any) -> None:
        """Create the producer now (a bad config or a missing ACL fails ``start()``)."""

    def send(self, copy: Copy) -> None:
        """Produce ``copy.record``; its verdict reaches :meth:`on_result` with ``copy``."""

    def on_result(self, copy: Copy, err: Any, local: bool) -> None:
        """The broker's verdict on a copy (``local``: refused before it was sent)."""

    def end_pass(self, forwarded: bool) -> None:
        """End of a loop pass (``forwarded``: it handed entries out): serve
        acknowledgements (at-least-once) or commit the open transaction with its offsets
        once it has gathered long enough (exactly-once)."""

    def linger_s(self) -> float | None:
        """How long the next fetch may wait at most so an open transaction commits in
        time (``None``: nothing is open)."""

    @property
    def transaction_open(self) -> bool: ...

    def store_offsets(self, offsets: tuple[tuple[TP, int], ...]) -> None:
        """Offsets the engine found settled (committed in the background, or not at all
        where they commit with a transaction)."""

    def on_lookup_failed(self) -> None:
        """An entry's destination could not be looked up: it is read again."""

    def settle(self, tps: list[TP]) -> None:
        """``tps`` are about to be given up (revoked, or the service stops): make what was
        forwarded from them final and commit their offsets while they are ours."""

    def in_flight(self) -> int: ...

    def close(self) -> None: ...


def omitted_body(entry: Entry) -> OmittedBody:
    """What replaces an entry's body in a copy sent without it."""
    return OmittedBody(len(entry.value or b""), entry.tp[0], entry.tp[1], entry.offset)


def committed_position(consumer: Any, tp: TP, fallback: int) -> int:
    """Where the group's committed offset of ``tp`` says to read from (the beginning when
    nothing is committed); ``fallback`` when the broker does not answer."""
    found = committed_offsets(consumer, [TopicPartition(tp[0], tp[1])], logger=log)
    if found is None:
        log.error("committed offset of %s[%d] unknown; from %d", *tp, fallback)
        return fallback
    [c] = found
    return int(c.offset) if c.offset >= 0 else OFFSET_BEGINNING


def purged(err: Any) -> bool:
    """Our own abort or fencing removed the record (it is read again, not refused)."""
    return isinstance(err, KafkaError) and err.code() in (
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
    )
