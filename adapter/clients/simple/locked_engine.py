"""``LockedEngine``: the pull engine behind the classic SimpleConsumer's lock, as the group
member's loop thread calls it (the application's threads take the same lock for their
calls: ``receive``, ``ack``, ``change_invisible_duration``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from adapter.core.engine import Action, SendBack, Work
from adapter.core.engine.pull import PullEngine
from adapter.core.publishing import Refusal
from adapter.core.types import TP


class LockedEngine:
    """The pull engine behind the consumer's lock (the loop thread's calls)."""

    def __init__(self, engine: PullEngine, lock: threading.Lock) -> None:
        self.engine = engine
        self._lock = lock

    def assigned(self, tp: TP) -> None:
        with self._lock:
            self.engine.assigned(tp)

    def revoked(self, tp: TP) -> None:
        with self._lock:
            self.engine.revoked(tp)

    def owns(self, tp: TP) -> bool:
        with self._lock:
            return self.engine.owns(tp)

    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool:
        return False

    def fetched(
        self, tp: TP, msgs: list[Any], end: int, nbytes: int = 0, *, pooled: bool = False
    ) -> Work | None:
        with self._lock:
            return self.engine.fetched(tp, msgs, end, nbytes, pooled=pooled)

    def published(self, action: SendBack) -> None:
        with self._lock:
            self.engine.published(action)

    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]:
        with self._lock:
            return self.engine.publish_failed(action, refusal, now)

    def tick(self, now: float) -> list[Action]:
        with self._lock:
            return self.engine.tick(now)

    def committable(self, tp: TP) -> int | None:
        with self._lock:
            return self.engine.committable(tp)

    def store_failed(self, tps: list[TP]) -> None:
        with self._lock:
            self.engine.store_failed(tps)

    def in_flight(self, tp: TP) -> int:
        with self._lock:
            return self.engine.in_flight(tp)

    def paused(self) -> list[TP]:
        with self._lock:
            return self.engine.paused()

    def local_retries(self) -> int:
        # introspection only: messages visible again wait for ``receive``, not for a timer
        # (the loop's timers come from ``next_due``)
        return 0

    def next_due(self) -> float | None:
        with self._lock:
            return self.engine.next_due()
