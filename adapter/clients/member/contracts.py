"""The contracts of a consumer group member (:mod:`adapter.clients.member.group_consumer`): what it
needs of its kind's engine and runner, and the resolved settings it fetches and starts by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from adapter.core.engine import Action, SendBack, Work
from adapter.core.offsets import ConsumeFromWhere
from adapter.core.publishing import Refusal
from adapter.core.types import TP

__all__ = ["CLOSE_S", "REVOKE_DRAIN_S", "Call", "ConsumeSettings", "Engine", "Runner"]

#: How long a rebalance waits for running batches of revoked partitions while running.
REVOKE_DRAIN_S = 2.0
#: What each closing step may take after ``shutdown_await``: flushing the send-backs,
#: then letting the send-back producer go (the final commit and leaving the group take
#: a round trip each), so a shutdown returns within ``shutdown_await`` plus a few seconds.
CLOSE_S = 2.0


@dataclass(frozen=True, slots=True)
class Call:
    """A listener call under way: its partition, the offsets of its batch and when it
    began (the consumer's monotonic clock)."""

    tp: tuple[str, int]
    first: int
    last: int
    began: float

    def describe(self, now: float) -> str:
        span = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.tp[0]}[{self.tp[1]}] offsets {span}, running {now - self.began:.1f}s"


class Engine(Protocol):
    """What :class:`GroupConsumer` needs of an engine (see :mod:`adapter.core.engine`)."""

    def assigned(self, tp: TP) -> None: ...
    def revoked(self, tp: TP) -> None: ...
    def owns(self, tp: TP) -> bool: ...
    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool: ...
    def fetched(
        self, tp: TP, msgs: list[Any], end: int, nbytes: int = 0, *, pooled: bool = False
    ) -> Work | None: ...
    def published(self, action: SendBack) -> None: ...
    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]: ...
    def tick(self, now: float) -> list[Action]: ...
    def committable(self, tp: TP) -> int | None: ...
    def store_failed(self, tps: list[TP]) -> None: ...
    def in_flight(self, tp: TP) -> int: ...
    def paused(self) -> list[TP]: ...
    def local_retries(self) -> int: ...
    def next_due(self) -> float | None: ...


class Runner(Protocol):
    """How a consumer kind hands fetched work to the application."""

    @property
    def inline(self) -> bool:
        """Whether the next work runs on the loop thread now (not watched for timeouts)."""

    def run(self, work: Work) -> None:
        """Run ``work`` now (inline) or hand it over; results reach the group later."""

    def poll(self) -> None:
        """Deliver results that came back from other threads (on the loop thread)."""

    def backlog(self) -> int:
        """Messages handed over and not finished yet."""

    def wait(self, timeout: float) -> None:
        """Block until a result comes back or ``timeout`` passes."""

    def stop_starting(self) -> None:
        """Start no listener call from now on (any thread): the consumer is stopping."""

    def under_way(self) -> list[Call]:
        """The listener calls running on other threads now (a stop waits for these)."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    """How a member fetches and where it starts (resolved consumer options)."""

    clustering: bool = True
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp_ms: int | None = None
    #: records taken per ``consume()`` while the listener runs inline (nothing piles up)
    fetch_size: int = 128
    #: ... and while it runs on workers (RocketMQ's ``pullBatchSize``: flow control counts
    #: what was handed out, so a fetch never overshoots the thresholds by more than this)
    pull_batch_size: int = 32
    soft_backlog: int = 1000
    shutdown_await: float = 20.0
    #: how long a rebalance waits for running batches of revoked partitions while the
    #: consumer runs (shutting down, ``shutdown_await`` applies); orderly consumers wait
    #: for the batch (up to ``consume_timeout``), so a new owner never starts beside it
    revoke_await: float = REVOKE_DRAIN_S
    offset_store_dir: str = ".rmq-offsets"
    instance_name: str = "DEFAULT"
