"""The orderly rules that need no partition state: the options of an orderly consumer (what
stays in order, the suspend time and its bounds, the maximum of reconsumes) and how a
listener's answer for a batch is judged (succeeded, or suspended: returned so, raised, timed
out, or answered something that is no status).  The state machine is :mod:`.orderly`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from adapter.core.codec import Failure
from adapter.core.listener import ConsumeOrderlyStatus
from adapter.errors import ConfigError, ListenerResultError

__all__ = [
    "ORDERLY_UNLIMITED",
    "SUSPEND_MAX_MS",
    "SUSPEND_MIN_MS",
    "BatchVerdict",
    "Judged",
    "Ordering",
    "OrderlyOptions",
    "judge_orderly",
    "orderly_max_reconsume_times",
    "suspend_ms_of",
]

#: An orderly consumer's ``max_reconsume_times=-1``: unlimited (RocketMQ: Integer.MAX_VALUE).
ORDERLY_UNLIMITED = 2**31 - 1
#: RocketMQ clamps every suspend time to this range (``submitConsumeRequestLater``).
SUSPEND_MIN_MS = 10
SUSPEND_MAX_MS = 30_000

_SUCCESS = ConsumeOrderlyStatus.SUCCESS
_SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


class Ordering(str, Enum):
    """What an orderly consumer keeps in order."""

    PARTITION = "partition"
    """RocketMQ's rule: a whole partition, one batch at a time; a suspended batch holds
    the partition."""

    KEY = "key"
    """Per Kafka record key inside a partition: a suspended batch holds only its keys;
    other keys of the partition go on.  Keyless messages count as one key."""


def orderly_max_reconsume_times(value: int) -> int:
    """An orderly consumer's maximum: ``-1`` is unlimited (RocketMQ 4.x), ``>= 0`` bounds it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError("max_reconsume_times", value, "must be an int")
    if value == -1:
        return ORDERLY_UNLIMITED
    if value < 0:
        raise ConfigError("max_reconsume_times", value, "must be >= 0, or -1 for unlimited")
    return value


@dataclass(frozen=True, slots=True)
class OrderlyOptions:
    """The orderly rules on top of :class:`EngineOptions`."""

    #: the consumer's ``suspend_current_queue_time_millis``
    suspend_ms: int = 1000
    ordering: Ordering = Ordering.PARTITION
    #: ``ordering=KEY``: a partition pauses while more of its keys than this are suspended
    max_suspended_keys: int = 100
    #: messages handed to one run at most (rounded down to whole batches, at least one)
    work_max: int = 256
    #: a message at its maximum goes to ``%DLQ%<group>``, in broadcasting too (RocketMQ
    #: 4.9.7's orderly path sends it back in either message model); ``False``: it is
    #: dropped (a group reading its own DLQ never dead-letters into it)
    dead_letters: bool = True


@dataclass(frozen=True, slots=True)
class BatchVerdict:
    """How the batch that stopped a run ended: what the listener returned (or raised),
    the context's ``suspend_current_queue_time_millis`` and how long it ran."""

    result: object
    suspend_ms: object = -1
    rt_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Judged:
    """A :class:`BatchVerdict` judged: ``failure`` is ``None`` when the batch succeeded."""

    failure: Failure | None
    suspend_ms: int = 0
    #: what was wrong with the listener's answer, for the log (``None``: nothing)
    problem: str | None = None


def suspend_ms_of(value: object, default_ms: int) -> tuple[int, str | None]:
    """The suspend time for a context value: ``-1`` is ``default_ms``; the result is clamped
    to [10, 30 000] ms (RocketMQ).  A value that is not an int gives ``default_ms`` and a
    problem to log."""
    problem = None
    if isinstance(value, bool) or not isinstance(value, int):
        problem = str(
            ListenerResultError(
                "context.suspend_current_queue_time_millis",
                value,
                "must be an int; the consumer's suspend time is used",
            )
        )
        value = default_ms
    elif value == -1:
        value = default_ms
    return min(max(value, SUSPEND_MIN_MS), SUSPEND_MAX_MS), problem


def judge_orderly(verdict: BatchVerdict, *, timeout_s: float, default_suspend_ms: int) -> Judged:
    """What an orderly listener's answer means for its batch (see the module docstring)."""
    result = verdict.result
    problem: str | None = None
    if verdict.rt_s > timeout_s:
        failure = Failure(
            "ConsumeTimeout",
            f"listener ran {verdict.rt_s:.3f}s, longer than consume_timeout={timeout_s}s",
        )
    elif result is _SUCCESS:
        return Judged(None)
    elif isinstance(result, BaseException):
        failure = Failure.of(result)
        problem = f"listener raised {failure.type}: {result}"
    elif result is _SUSPEND:
        failure = Failure(_SUSPEND.value, f"listener returned {_SUSPEND.value}")
    else:
        err = ListenerResultError(
            "listener result",
            result,
            f"not a ConsumeOrderlyStatus; counted as {_SUSPEND.value}",
        )
        problem = str(err)
        failure = Failure("ListenerResultError" if result is not None else "NoneReturned", problem)
    ms, bad = suspend_ms_of(verdict.suspend_ms, default_suspend_ms)
    return Judged(failure, ms, problem or bad)
