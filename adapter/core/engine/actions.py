"""What the engines ask the I/O loop to do, and the options they run with.  Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from adapter.core.codec import Failure
from adapter.core.delay import DelayLevels
from adapter.core.engine.tracking import Work
from adapter.core.offsets import FlowLimits
from adapter.core.routing import Destination
from adapter.core.types import TP


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """The rules an engine applies (resolved consumer options; times in seconds)."""

    batch_size: int = 1
    max_reconsume_times: int = 16
    levels: DelayLevels = field(default_factory=lambda: DelayLevels.DEFAULT)
    consume_timeout_s: float = 900.0
    send_back_retry_interval_s: float = 5.0
    flow: FlowLimits = field(default_factory=FlowLimits)
    clustering: bool = True
    #: committable offsets are handed out for storing at most this often (they are
    #: committed in the background every ``auto.commit.interval.ms`` anyway; revoke and
    #: shutdown commit what is settled at once)
    store_interval_s: float = 0.02


class TraceInfo(NamedTuple):
    """Where a message was in its listener batch (for traces and logs).  A named tuple:
    one is made per failed message, on the hot path."""

    batch_size: int
    batch_index: int
    ack_index: int | None
    rt_ms: float | None


class Verdicts(Protocol):
    """Who hears the verdicts on copies that are their own delivery callbacks (see
    :meth:`SendBack.__call__`)."""

    #: copies acknowledged since they were last settled (replaced, never kept)
    acked: list[SendBack]

    def refused(self, action: SendBack, err: Any, local: bool) -> None: ...


@dataclass(slots=True, eq=False)
class SendBack:
    """Produce a copy of ``msg`` to ``dest`` (a retry level or the DLQ) and report the
    broker's answer with ``published`` / ``publish_failed``.  Until then ``msg``'s offset
    stays in flight.  ``alone``: in a record batch of its own; ``omit_body``: a dead-letter
    copy without its body.

    One is made per failed message and lives until the broker's verdict, so it carries
    what the verdict and the trace need itself instead of objects of its own: ``offset``
    and ``nbytes`` (the message's offset and body size, read by the engine when it routed
    the message: ``-1`` when not given, then read from ``msg``), and where the message
    was in its listener batch either as ``info`` or, from the concurrent engine, as
    ``batch`` (``(batch_size, ack_index, rt_ms)``, shared by the batch's copies) and
    ``index`` (see :attr:`trace_info`)."""

    tp: TP
    generation: int
    work: Work
    msg: Any
    dest: Destination
    failure: Failure | None
    info: TraceInfo | None = None
    alone: bool = False
    omit_body: bool = False
    offset: int = -1
    nbytes: int = -1
    batch: tuple[int, int | None, float | None] | None = None
    index: int = 0
    #: who hears the broker's verdict when the copy is its own delivery callback
    verdicts: Verdicts | None = None

    def __call__(self, err: Any, _msg: Any = None) -> None:
        """The producer's delivery report on this copy, when it was produced with the copy
        itself as its callback (no object made per copy for it, on the failure path):
        acknowledged, it joins ``verdicts.acked`` (settled together after the poll);
        refused, ``verdicts.refused`` decides what follows."""
        verdicts = self.verdicts
        assert verdicts is not None, "a SendBack called back without verdicts"
        if err is None:
            verdicts.acked.append(self)
        else:
            verdicts.refused(self, err, False)

    @property
    def trace_info(self) -> TraceInfo | None:
        """Where the message was in its listener batch (made when a trace asks)."""
        batch = self.batch
        if batch is None:
            return self.info
        return TraceInfo(batch[0], self.index, batch[1], batch[2])


@dataclass(frozen=True, slots=True)
class RunWork:
    """Hand these batches to the listener (a local retry that became due)."""

    work: Work


@dataclass(frozen=True, slots=True)
class Pause:
    """Stop fetching ``tp`` (flow control)."""

    tp: TP
    reason: str


@dataclass(frozen=True, slots=True)
class Hurry:
    """These partitions reached a flow limit while copies awaiting the broker's verdict
    hold their committable offsets: have every copy in flight sent now (past the producer's
    linger) and its verdict served, for a bounded wait, instead of pausing.  A pause costs
    far more than the acknowledgement: the partition's prefetched records are thrown away,
    and its next fetch waits behind the fetch already in flight to the same broker, which
    may be long-polling idle partitions (the retry topic) for ``fetch.wait.max.ms``.  If
    the verdicts do not settle enough, the engine pauses the partitions at its next tick."""

    tps: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class Drain:
    """These orderly partitions reached a flow limit only because the loop fetched ahead
    of the run under way on each (none of their batches is suspended or waits for a
    dead-letter copy): let the runs take what was fetched, for a bounded wait, before
    fetching more, instead of pausing.  A pause throws away what librdkafka fetched ahead
    for the partition, and its next fetch waits behind the one already in flight to the
    same broker (up to ``fetch.wait.max.ms`` when the other partitions there are idle):
    a fast listener on one partition then sat idle at every pause.  If a partition is
    still over a limit after the wait, the engine pauses it at its next tick (RocketMQ
    delays the next pull of such a queue by 50 ms)."""

    tps: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class Resume:
    """Fetch ``tp`` again."""

    tp: TP


@dataclass(frozen=True, slots=True)
class Dropped:
    """A broadcasting consumer's failed message, dropped (RocketMQ does not retry them)."""

    tp: TP
    msg: Any
    failure: Failure
    info: TraceInfo


@dataclass(frozen=True, slots=True)
class TimedOut:
    """A batch ran past ``consume_timeout``: it counts as ``RECONSUME_LATER`` (its copies
    follow as :class:`SendBack` s) and its late result will be ignored."""

    tp: TP
    msgs: tuple[Any, ...]
    limit_s: float


@dataclass(frozen=True, slots=True)
class StoreOffsets:
    """These committable offsets moved: store them (Kafka's "next offset to read")."""

    offsets: tuple[tuple[TP, int], ...]


Action = SendBack | RunWork | Pause | Hurry | Drain | Resume | Dropped | TimedOut | StoreOffsets


def pause_change(
    tp: tuple[str, int], part: Any, reason: str | None, *, below_half: bool
) -> Pause | Resume | None:
    """Flow control's verdict on a partition: ``Pause`` when it must stop fetching now
    (``reason``: a limit is exceeded; its ``paused`` flag is set), ``Resume`` once it is
    paused and ``below_half`` of every limit, ``None`` when nothing changes.

    The gap between the two is deliberate: resuming a Kafka partition throws away what
    librdkafka had fetched ahead for it, so a partition resumed the moment it dipped under
    a limit was paused again a batch later and fetched everything twice (the SimpleConsumer
    then cycled pause/resume dozens of times per 100 000 messages, at a fraction of its
    throughput).  RocketMQ gets the same effect from waiting 50 ms before the next pull.
    ``part`` is any engine's partition state with a ``paused`` flag."""
    if part.paused:
        if reason is None and below_half:
            part.paused = False
            return Resume(tp)
        return None
    if reason is not None:
        part.paused = True
        return Pause(tp, reason)
    return None


_NONE: list[Action] = []  # returned when nothing is to be done (never mutated)


def store_again(parts: Mapping[TP, Any], dirty: set[TP], tps: list[TP]) -> None:
    """The client refused to store the offsets an engine handed out for ``tps`` (a
    partition between assignments, a rebalance under way): they are handed out again at the
    next tick instead of being taken as stored (nothing else would store them again)."""
    for tp in tps:
        part = parts.get(tp)
        if part is not None:
            part.stored = None
            dirty.add(tp)


def flow_and_offsets(
    parts: Mapping[TP, Any], dirty: set[TP], flow: FlowLimits, *, store: bool
) -> list[Action]:
    """Flow control for the partitions in ``dirty`` and (``store``) their moved offsets, for
    an engine whose partition states track ``count``, ``nbytes``, ``span``, ``paused`` and
    ``take_commit()``; ``dirty`` is cleared once the offsets are taken."""
    actions: list[Action] = _NONE
    offsets: list[tuple[TP, int]] = []
    for tp in dirty:
        part = parts.get(tp)
        if part is None:
            continue
        if store:
            offset = part.take_commit()
            if offset is not None:
                offsets.append((tp, offset))
        if not part.count and not part.paused:
            continue  # nothing in flight: nothing to pause
        count, nbytes, span = part.count, part.nbytes, part.span
        change = pause_change(
            tp,
            part,
            flow.reason(count, nbytes, span),
            below_half=part.paused and flow.below_half(count, nbytes, span),
        )
        if change is not None:
            actions = actions if actions is not _NONE else []
            actions.append(change)
    if store:
        dirty.clear()
    if offsets:
        actions = actions if actions is not _NONE else []
        actions.append(StoreOffsets(tuple(offsets)))
    return actions
