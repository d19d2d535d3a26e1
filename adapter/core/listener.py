"""The listener contract: what a listener is handed and how what it returns is judged.  Pure.

:func:`judge` turns whatever a concurrent listener returned or raised into ``None`` (the
whole batch succeeded: the hot path allocates nothing) or an :class:`Outcome` that says
which messages failed and why.  A misbehaving listener never breaks the consumer: an
exception, ``None``, anything that is not a status, or a context field of the wrong type
all count as ``RECONSUME_LATER``, with a :class:`~adapter.core.codec.Failure` that names
what was wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from adapter.core.breaker import OpenCircuit
from adapter.core.codec import Failure
from adapter.core.routing import (
    BatchOutcome,
    ConsumeConcurrentlyStatus,
    ack_index_clamped,
    split_batch,
)
from adapter.errors import ListenerResultError

_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
_LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """A partition, RocketMQ style: ``topic`` is logical, ``queue_id`` the partition."""

    topic: str
    queue_id: int


class ConsumeConcurrentlyContext:
    """What a concurrent listener may set: ``ack_index`` (the last message done; ``None``:
    all, ``-1``: none) and ``delay_level_when_next_consume`` (0: the broker's choice,
    ``3 + reconsume_times``; > 0: that level; < 0: straight to the DLQ)."""

    __slots__ = ("ack_index", "delay_level_when_next_consume", "message_queue")

    def __init__(
        self,
        message_queue: MessageQueue,
        ack_index: int | None = None,
        delay_level_when_next_consume: int = 0,
    ) -> None:
        self.message_queue = message_queue
        self.ack_index = ack_index
        self.delay_level_when_next_consume = delay_level_when_next_consume

    def __repr__(self) -> str:
        return (
            f"ConsumeConcurrentlyContext(message_queue={self.message_queue!r}, "
            f"ack_index={self.ack_index!r}, "
            f"delay_level_when_next_consume={self.delay_level_when_next_consume!r})"
        )

    def open_circuit(self, reason: str = "the listener opened the circuit") -> None:
        """Fail this batch for a reason that is not the messages' fault (what it calls is
        down): raises :class:`~adapter.core.breaker.OpenCircuit`, so the batch counts as
        ``RECONSUME_LATER`` and the consumer's circuit breaker (if it has one) opens now."""
        raise OpenCircuit(reason)


class ConsumeOrderlyStatus(str, Enum):
    """What an orderly listener says about the batch it was handed."""

    SUCCESS = "SUCCESS"
    """The batch is done: the partition's offset moves past it."""

    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    """Retry the same messages after the suspend time; nothing later in the partition
    (or, with ``ordering="key"``, with the same key) is delivered meanwhile."""


class ConsumeOrderlyContext:
    """What an orderly listener is handed: its ``message_queue``, ``auto_commit`` (always
    True: the offset moves when a batch succeeds) and ``suspend_current_queue_time_millis``
    (-1: the consumer's ``suspend_current_queue_time_millis``; set it to suspend this queue
    for another time before the retry)."""

    __slots__ = ("auto_commit", "message_queue", "suspend_current_queue_time_millis")

    def __init__(self, message_queue: MessageQueue) -> None:
        self.message_queue = message_queue
        self.auto_commit = True
        self.suspend_current_queue_time_millis = -1

    def __repr__(self) -> str:
        return (
            f"ConsumeOrderlyContext(message_queue={self.message_queue!r}, "
            f"suspend_current_queue_time_millis={self.suspend_current_queue_time_millis!r})"
        )

    def open_circuit(self, reason: str = "the listener opened the circuit") -> None:
        """Fail this batch for a reason that is not the messages' fault: raises
        :class:`~adapter.core.breaker.OpenCircuit`, so the batch is suspended and the
        consumer's circuit breaker (if it has one) opens now."""
        raise OpenCircuit(reason)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A batch that did not simply succeed: which messages failed and where they go."""

    split: BatchOutcome
    ack_index: int | None
    delay_level: int
    failure: Failure
    #: what was wrong with the listener's answer, for the log (``None``: nothing)
    problem: str | None = None
    #: what the listener raised (``None``: it returned), for a circuit breaker's ``trip_on``
    error: BaseException | None = None

    @property
    def failed(self) -> range:
        return self.split.failed

    @property
    def succeeded(self) -> range:
        return self.split.succeeded


def timed_out(limit_s: float, size: int) -> Outcome:
    """The outcome of a batch whose listener ran past ``consume_timeout``."""
    return Outcome(
        split_batch(_LATER, None, size),
        None,
        0,
        Failure("ConsumeTimeout", f"listener ran longer than {limit_s}s"),
    )


def judge(result: object, ctx: ConsumeConcurrentlyContext, size: int) -> Outcome | None:
    """What a concurrent listener's ``result`` (a status, anything else, or the exception it
    raised) means for its batch of ``size``; ``None`` when every message succeeded."""
    ack = ctx.ack_index
    level = ctx.delay_level_when_next_consume
    if result is _SUCCESS and ack is None and type(level) is int:
        return None  # the hot path: nothing else to look at
    problem: str | None = None
    failure: Failure | None = None
    error: BaseException | None = None
    if isinstance(result, BaseException):
        failure = Failure.of(result)
        problem = f"listener raised {failure.type}: {result}"
        status = _LATER
        error = result
    elif isinstance(result, ConsumeConcurrentlyStatus):
        status = result
    else:
        err = ListenerResultError(
            "listener result", result, "not a ConsumeConcurrentlyStatus; counted as RECONSUME_LATER"
        )
        problem = str(err)
        failure = Failure("ListenerResultError" if result is not None else "NoneReturned", str(err))
        status = _LATER
    bad = _bad_context(ack, level)
    if bad is not None:  # never let a bad ack_index / level break the consumer
        problem = problem or str(bad)
        failure = failure or Failure("ListenerResultError", str(bad))
        status, ack, level = _LATER, None, 0
    split = split_batch(status, ack, size)
    if not split.failed:
        return None
    if failure is None:
        if level < 0:  # the listener sends these to the DLQ itself: say that, not the index
            failure = Failure(
                "DeadLetterRequested", f"listener set delay_level_when_next_consume={level}"
            )
        elif status is _LATER:
            failure = Failure("RECONSUME_LATER", "listener returned RECONSUME_LATER")
        else:
            failure = Failure("NotAcknowledged", f"CONSUME_SUCCESS with ack_index={ack}")
    return Outcome(split, ack, level, failure, problem, error)


#: Judgements a :class:`Judge` remembers at most (one per shape of answer; a listener gives
#: few: the same status, ``ack_index`` and batch size over and over).
JUDGEMENTS_MAX = 256


class Judge:
    """:func:`judge` with its answers remembered, and what to warn about an ``ack_index``
    outside its batch (:func:`~adapter.core.routing.ack_index_clamped`): for a listener that
    returned a status with well-typed context fields, both depend only on the status, the
    two fields and the batch size, and the outcomes are immutable, so one failing message
    in a hundred does not build the same split, failure text and outcome each time.
    Everything else (an exception, a result that is not a status, a field of the wrong
    type) is judged afresh.  Not thread-safe: one per consumer loop."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[object, int | None, int, int], tuple[Outcome | None, str | None]]
        self._known = {}

    def __call__(
        self, result: object, ctx: ConsumeConcurrentlyContext, size: int
    ) -> tuple[Outcome | None, str | None]:
        """``(judge(result, ctx, size), ack_index_clamped(ctx.ack_index, size))``."""
        ack = ctx.ack_index
        level = ctx.delay_level_when_next_consume
        if (
            type(result) is not ConsumeConcurrentlyStatus
            or (ack is not None and type(ack) is not int)
            or type(level) is not int
        ):
            return judge(result, ctx, size), ack_index_clamped(ack, size)
        key = (result, ack, level, size)
        found = self._known.get(key)
        if found is None:
            found = (judge(result, ctx, size), ack_index_clamped(ack, size))
            if len(self._known) >= JUDGEMENTS_MAX:
                self._known.clear()
            self._known[key] = found
        return found


def _bad_context(ack: object, level: object) -> ListenerResultError | None:
    """A context field the listener set to something that is not an int."""
    if ack is not None and (isinstance(ack, bool) or not isinstance(ack, int)):
        return ListenerResultError(
            "context.ack_index", ack, "must be an int; the batch counts as RECONSUME_LATER"
        )
    if isinstance(level, bool) or not isinstance(level, int):
        return ListenerResultError(
            "context.delay_level_when_next_consume",
            level,
            "must be an int; the batch counts as RECONSUME_LATER",
        )
    return None


class ListenerMode(str, Enum):
    """Where a push consumer runs its listener."""

    AUTO = "AUTO"
    """Start on the worker pool; once the listener has proven fast (a streak of batches
    under a millisecond) run it on the poll thread, which saves a thread hand-off per
    batch; go back to the pool the moment one batch takes longer than
    ``slow_listener_ms``.  ``async def`` listeners always run on the event loop."""

    INLINE = "INLINE"
    """Always on the poll thread: fastest for quick listeners, but a listener that blocks
    holds up fetching (and one blocking past ``max.poll.interval.ms`` costs a rebalance)."""

    POOL = "POOL"
    """Always on ``consume_thread_max`` worker threads (RocketMQ's model): listeners that
    block (I/O, sleeps) run concurrently; each batch costs a thread hand-off."""


class InlinePolicy:
    """Decides, batch by batch, whether an :attr:`ListenerMode.AUTO` listener runs inline.

    Pure: it only sees the listener times it is told.  ``warmup`` consecutive batches
    faster than ``fast_s`` switch to inline; one batch slower than ``slow_s`` switches back.
    """

    __slots__ = ("_streak", "fast_s", "inline", "mode", "slow_s", "warmup")

    def __init__(
        self,
        mode: ListenerMode = ListenerMode.AUTO,
        *,
        slow_s: float = 0.010,
        fast_s: float = 0.001,
        warmup: int = 64,
    ) -> None:
        self.mode = mode
        self.slow_s = slow_s
        self.fast_s = fast_s
        self.warmup = warmup
        self.inline = mode is ListenerMode.INLINE
        self._streak = 0

    def pooled(self, rt_s: float) -> None:
        """A batch on the pool took ``rt_s``."""
        if self.mode is not ListenerMode.AUTO:
            return
        if rt_s < self.fast_s:
            self._streak += 1
            if self._streak >= self.warmup:
                self.inline = True
        else:
            self._streak = 0

    def ran_inline(self, slowest_s: float) -> None:
        """A run of batches went inline; its slowest batch took ``slowest_s``."""
        if self.mode is ListenerMode.AUTO and slowest_s > self.slow_s:
            self.inline = False
            self._streak = 0
