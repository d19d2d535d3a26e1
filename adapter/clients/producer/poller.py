"""The poll thread of a producer and who serves delivery reports when.

One poll thread per producer serves delivery reports, runs send callbacks and every
delayed resend (its poll timeout is the next due time of the resend heap).  Nothing sleeps
there.  While a thread keeps calling ``send_async``, that thread serves the reports that
are ready at each call (:meth:`Poller.serve_inline`, as a raw confluent-kafka loop calls
``poll(0)`` after ``produce``) and the poll thread steps aside: a report served on the poll
thread costs a hand-off of the GIL between two busy threads, which costs more throughput
than everything else the send does.  A synchronous send whose record is the only one in
flight flushes it itself (:meth:`Poller.push`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from adapter.clients.producer.inflight import POLL_INTERVAL_S, Resend, ResendHeap
from adapter.core.clock import Clock

log = logging.getLogger("adapter.producer")

#: A synchronous send flushes its record in slices this long and checks its report between
#: (the poll thread may serve it: a flush then waits out its slice for nothing).
FLUSH_SLICE_S = 0.001
#: While ``send_async`` is being called, the poll thread looks this often whether the
#: sender has stopped (then it serves the reports left itself).
SENDER_SERVES_S = 0.005


class Poller:
    """The poll loop of one producer and the state the sending threads share with it.

    ``errors`` takes a fatal ``KafkaError`` a poll raised (it surfaces on the next send);
    ``due`` is the producer's resend heap; ``clock`` the producer's (every wait is measured
    on it).
    """

    __slots__ = (
        "clock",
        "due",
        "errors",
        "flush_waiters",
        "idle",
        "inline_ident",
        "poll_ident",
        "progress",
        "pushers",
        "sends",
        "serving",
        "wake",
    )

    def __init__(self, errors: Callable[[Any], Any], due: ResendHeap[Resend], clock: Clock) -> None:
        self.clock = clock
        self.errors = errors
        self.due = due
        self.poll_ident: int | None = None
        # flush()/shutdown() wait on the poll thread (callbacks stay on it)
        self.progress = threading.Condition()
        self.flush_waiters = 0
        #: ``send_async`` calls so far (only compared: the poll thread steps aside while it
        #: moves) and the lock of the one sender serving reports inline at a time
        self.sends = 0
        self.serving = threading.Lock()
        self.inline_ident: int | None = None  # the thread serving reports inline now
        #: the poll thread's waits: idle it waits on ``wake`` (set by :meth:`kick`, and at
        #: shutdown) instead of polling; while a thread sends it naps on it
        self.idle = False
        self.wake = threading.Event()
        #: threads in a synchronous send that serve their own report (see :meth:`push`)
        self.pushers: set[int] = set()

    def run(self, client: Any, running: threading.Event) -> None:
        """The poll thread's loop, until ``running`` is cleared (and :attr:`wake` set)."""
        self.poll_ident = threading.get_ident()
        sends = -1
        wake = self.wake
        run_due = self.due.run_due
        while running.is_set():
            timeout = run_due()
            try:
                if self.flush_waiters and len(client):
                    client.flush(timeout)  # a flush is waiting: linger.ms does not apply
                elif self.sends != sends:
                    # a thread is sending: it serves the reports (see serve_inline)
                    sends = self.sends
                    wake.wait(min(timeout, SENDER_SERVES_S))
                    wake.clear()
                else:
                    self.idle = True  # before looking: a send from now on wakes us
                    if len(client) and not self.pushers:
                        client.poll(timeout)
                    else:
                        # nothing in flight, or only synchronous sends, which serve their
                        # own reports (two threads polling race for each report): serve
                        # what is ready (errors) and wait to be woken
                        client.poll(0)
                        wake.wait(timeout)
                    self.idle = False
                    wake.clear()
            except KafkaException as exc:  # fatal: surfaced by the next send
                self.errors(exc.args[0])
                log.error("producer error: %s", exc)
            except Exception:  # a bug in a callback must not stop the delivery reports
                log.exception("error in a producer callback")
            if self.flush_waiters:
                with self.progress:
                    self.progress.notify_all()

    def kick(self) -> None:
        """A record (or a flush, a resend) needs the poll thread: wake it if it is idle."""
        if self.idle:
            self.wake.set()

    def stop(self) -> None:
        """Wake the poll thread (at shutdown, once its ``running`` is cleared)."""
        self.wake.set()

    def on_poll_thread(self) -> bool:
        """Whether this thread runs delivery reports now (the poll thread, or a sender
        serving them inline): it must not sleep."""
        return threading.get_ident() in (self.poll_ident, self.inline_ident)

    def serve_inline(self, client: Any) -> None:
        """Serve the delivery reports that are ready, on the sending thread (one thread at
        a time, never inside a callback that sends)."""
        serving = self.serving
        if not serving.acquire(False):
            return
        self.inline_ident = threading.get_ident()
        try:
            client.poll(0)
        except KafkaException as exc:  # fatal: surfaced by the next send
            self.errors(exc.args[0])
            log.error("producer error: %s", exc)
        except Exception:
            log.exception("error in a producer callback")
        finally:
            self.inline_ident = None
            serving.release()

    def push(self, client: Any, done: Callable[[], bool], timeout: float) -> None:
        """A synchronous send does not wait out ``linger.ms``: while its record is the only
        one in flight, this thread flushes it (which sends at once) and serves the reports
        that come meanwhile, until ``done()``; with other records in flight it goes with
        their batches and the poll thread (or a sending thread) serves its report."""
        serving = self.serving
        if client is None or len(client) > 1 or not serving.acquire(False):
            self.pushers.discard(threading.get_ident())
            self.kick()  # the poll thread (or a sending thread) serves it
            return
        self.inline_ident = threading.get_ident()
        try:
            monotonic = self.clock.monotonic
            deadline = monotonic() + timeout
            while not done() and (left := deadline - monotonic()) > 0:
                client.flush(min(left, FLUSH_SLICE_S))
        except KafkaException as exc:  # fatal: surfaced by this send's report or the next
            self.errors(exc.args[0])
        except Exception:
            log.exception("error in a producer callback")
        finally:
            self.inline_ident = None
            serving.release()

    def wait_sent(self, client: Any, timeout: float) -> int:
        """Wait until nothing is queued, in flight or due for a resend, or ``timeout``;
        returns how many messages are left.  Delivery reports stay on the poll thread."""
        deadline = self.clock.monotonic() + max(timeout, 0.0)
        if threading.get_ident() == self.poll_ident:
            # called from a send callback: what it would wait for needs this very thread
            # (and confluent-kafka must not poll from inside its own callback)
            return len(client) + len(self.due)
        with self.progress:
            self.flush_waiters += 1
            self.kick()
            try:
                while True:
                    left = len(client) + len(self.due)
                    remaining = deadline - self.clock.monotonic()
                    if not left or remaining <= 0:
                        return left
                    self.progress.wait(min(remaining, POLL_INTERVAL_S))
            finally:
                self.flush_waiters -= 1
