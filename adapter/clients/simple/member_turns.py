"""``MemberTurns``: the classic SimpleConsumer's group member, taken in turns by the loop
thread and by a receiving thread that reads librdkafka itself."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from adapter.clients.member.group_consumer import GroupConsumer


class MemberTurns:
    """The group member, taken in turns by the loop thread (a whole ``step``) and by a
    receiving thread that reads librdkafka itself (:meth:`fetch`).

    One at a time: the member's state, and the rebalance callbacks a ``consume`` serves on
    whichever thread calls it, never run on two threads at once, so a callback served on a
    receiving thread finds the member as the loop would.  The loop hands its turn over
    only while it sleeps at the top of a step (:meth:`wait`), never inside a callback,
    while it drains partitions or while closing.  Lock order: this lock, then the
    consumer's.
    """

    def __init__(self, member: GroupConsumer) -> None:
        self.member = member
        self.lock = threading.Lock()
        #: the holder is the loop thread at the top of a step: a wait may hand the turn over
        self.yielding = False
        #: what a receiving thread's read raised: the loop raises it (and stops) as if it
        #: had met it itself
        self.error: BaseException | None = None

    def open(self) -> None:
        with self.lock:
            self.member.open()

    def step(self) -> None:
        with self.lock:
            error, self.error = self.error, None
            if error is not None:
                raise error
            self.yielding = True
            try:
                self.member.step()
            finally:
                self.yielding = False

    def stop_starting(self) -> None:
        self.member.stop_starting()  # flags only: no lock (any thread, a signal's too)

    def close(self) -> None:
        with self.lock:
            self.member.close()

    def guard(
        self, loop_guard: Callable[[Callable[..., None]], Callable[..., None]]
    ) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """The loop's callback guard, and no hand-over while a rebalance callback runs."""

        def wrap(callback: Callable[..., None]) -> Callable[..., None]:
            guarded = loop_guard(callback)

            def in_callback(*args: Any) -> None:
                saved, self.yielding = self.yielding, False
                try:
                    guarded(*args)
                finally:
                    self.yielding = saved

            in_callback.__name__ = guarded.__name__
            return in_callback

        return wrap

    def fetch(self, size: int) -> bool:
        """On a receiving thread: hand the engine what librdkafka holds now, unless the
        loop is mid-step (``False``: nothing was read)."""
        lock = self.lock
        if not lock.acquire(False):
            return False
        try:
            self.member.fetch_now(size)
        except Exception as exc:
            self.error = self.error or exc
        finally:
            lock.release()
        return True

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """The loop sleeps on ``event``; at the top of a step it hands its turn over
        meanwhile (not while it drains partitions it is about to reset)."""
        if not self.yielding or self.member.draining:
            return event.wait(timeout)
        self.yielding = False
        self.lock.release()
        try:
            return event.wait(timeout)
        finally:
            self.lock.acquire()
            self.yielding = True
