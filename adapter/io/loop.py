"""The one loop every long-running client runs (PushConsumer, ScheduleService, SimpleConsumer).

:class:`ClientLoop` owns what they share and nothing they differ in:

* the lifecycle: ``start()`` (clients are created on the caller's thread, so a bad config
  or an unreachable cluster raises there), ``run()`` (the loop on the caller's thread),
  ``shutdown(timeout)`` and the context manager;
* one timeout contract: ``shutdown(timeout=None)`` waits for the client's own bound
  (``shutdown_timeout``) plus a margin, then raises :class:`~adapter.errors.ShutdownTimeoutError`
  if the loop has still not closed; it never waits for ever;
* errors that reach the user: a loop that dies stores its exception, calls ``on_error``
  (never on a librdkafka thread), and raises it as a :class:`~adapter.errors.ClientLoopError`
  from ``check_alive()`` and from ``shutdown()``; fatal client errors (authentication, a
  fenced producer) raise from ``check_alive()`` too;
* rebalance callbacks: an exception raised in one is kept and re-raised on the loop thread
  after ``consume()`` returns (librdkafka would otherwise swallow it).

The per-client work lives in a :class:`LoopHandler`: ``open()`` creates its clients,
``step()`` is one iteration (fetch, process, store offsets), ``close()`` drains and commits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from adapter.errors import ClientClosedError, ClientLoopError, ShutdownTimeoutError
from adapter.io.errors import FatalErrorWatch

log = logging.getLogger("adapter.loop")

#: Beyond a client's own shutdown bound (its drain), what closing the clients may take: a
#: shutdown returns within ``shutdown_await`` plus this, so the default fits a 30 s grace
#: period (Kubernetes' ``terminationGracePeriodSeconds``) with the close included.
SHUTDOWN_MARGIN_S = 5.0

ErrorCallback = Callable[[BaseException], None]


class LoopHandler(Protocol):
    """What a client kind plugs into the loop."""

    def open(self) -> None:
        """Create the clients (on the caller's thread: errors raise from ``start()``)."""

    def step(self) -> None:
        """One iteration of the loop."""

    def stop_starting(self) -> None:
        """The loop is asked to stop (any thread, a signal handler's included): start no
        new work from now on; ``close()`` follows on the loop's thread."""

    def close(self) -> None:
        """Drain (bounded), commit what is settled and close the clients."""


class ClientLoop:
    """Runs a :class:`LoopHandler` on a thread of its own (or the caller's)."""

    def __init__(
        self,
        name: str,
        handler: LoopHandler,
        *,
        shutdown_timeout: float,
        errors: FatalErrorWatch,
        on_error: ErrorCallback | None = None,
    ) -> None:
        self.name = name
        self._handler = handler
        self._shutdown_timeout = shutdown_timeout
        self.errors = errors
        self.on_error = on_error
        self._running = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened = False
        self._closed = threading.Event()
        self._shut = False  # shutdown() was asked for
        self._in_main = False  # the loop is running (on its thread or the caller's)
        self._callback_error: BaseException | None = None
        #: what stopped the loop, if it died
        self.error: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True from ``start()`` until ``shutdown()`` is asked for (or the loop dies)."""
        return self._running.is_set()

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` was asked for: the clients are never opened again."""
        return self._shut

    def open(self) -> bool:
        """Create the handler's clients once; ``False`` if they already were.  After
        :meth:`shutdown`, :class:`ClientClosedError`."""
        if self._shut or self._closed.is_set():
            raise ClientClosedError(f"{self.name} was shut down; create a new client")
        if self._opened:
            return False
        self._handler.open()
        self._opened = True
        self._running.set()
        return True

    def start(self) -> None:
        """Open the clients and run the loop on a background thread (idempotent)."""
        if not self.open():
            return
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Open the clients and run the loop on this thread until :meth:`stop`."""
        self.open()
        self._main()
        self._raise_error()

    def stop(self) -> None:
        """Ask the loop to finish (safe from a signal handler or any thread): nothing new
        starts from now on."""
        self._running.clear()
        if not self._closed.is_set():
            self._handler.stop_starting()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop, let the handler drain and commit, and wait for the loop to close.

        ``timeout`` (seconds; default: the client's ``shutdown_timeout`` plus a margin for
        closing the clients) bounds the wait; past it :class:`ShutdownTimeoutError` is
        raised and the loop goes on closing in the background.  A loop that died raises its
        error here (once).
        """
        self._shut = True
        self.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            limit = self._shutdown_timeout + SHUTDOWN_MARGIN_S if timeout is None else timeout
            thread.join(limit)
            if thread.is_alive():
                raise ShutdownTimeoutError(self.name, limit)
        elif thread is None and not self._in_main and self._opened and not self._closed.is_set():
            self._close()  # opened but never run
        if thread is None and self._in_main:
            return  # run() is in charge (shutdown from a signal handler): it closes
        self._raise_error()

    def check_alive(self) -> None:
        """Raise what stopped the loop, or a fatal client error that stands now."""
        if self.error is not None:
            raise ClientLoopError(self.name, self.error) from self.error
        current = self.errors.current()
        if current is not None:
            raise current
        if not self._running.is_set():
            raise ClientClosedError(f"{self.name} is not running")

    def _raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise ClientLoopError(self.name, error) from error

    # -- the loop --------------------------------------------------------------------------
    def _main(self) -> None:
        step = self._handler.step
        self._in_main = True
        try:
            while self._running.is_set():
                step()
                if self._callback_error is not None:
                    error, self._callback_error = self._callback_error, None
                    raise error
        except BaseException as exc:
            log.exception("%s: loop failed", self.name)
            self.error = exc
            self._running.clear()
            self._notify(exc)
        finally:
            self._close()
            self._in_main = False

    def _close(self) -> None:
        try:
            self._handler.close()
        except Exception as exc:
            log.exception("%s: closing failed", self.name)
            if self.error is None:
                self.error = exc
                self._notify(exc)
        finally:
            self._closed.set()

    def _notify(self, exc: BaseException) -> None:
        if self.on_error is None:
            return
        try:
            self.on_error(exc)
        except Exception:
            log.exception("%s: on_error callback raised", self.name)

    # -- rebalance callbacks ---------------------------------------------------------------
    def guard(self, callback: Callable[..., None]) -> Callable[..., None]:
        """Wrap a rebalance callback: an exception in it is kept and raised on the loop."""

        def guarded(*args: Any) -> None:
            try:
                callback(*args)
            except Exception as exc:
                log.exception("%s: rebalance callback %s failed", self.name, callback.__name__)
                self._callback_error = self._callback_error or exc

        guarded.__name__ = getattr(callback, "__name__", "callback")
        return guarded
