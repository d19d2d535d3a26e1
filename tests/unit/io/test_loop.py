"""ClientLoop with a fake handler: lifecycle, errors that reach the user, and rebalance
callback errors raised on the loop thread."""

from __future__ import annotations

import threading

import pytest

from adapter.errors import ClientClosedError, ClientLoopError, ShutdownTimeoutError
from adapter.io.errors import FatalErrorWatch
from adapter.io.loop import ClientLoop, ErrorCallback

pytestmark = pytest.mark.unit


class Handler:
    def __init__(self, *, fail_at: int | None = None, stop_after: int | None = None) -> None:
        self.events: list[str] = []
        self.steps = 0
        self.fail_at = fail_at
        self.stop_after = stop_after
        self.loop: ClientLoop | None = None
        self.stepped = threading.Event()

    def open(self) -> None:
        self.events.append("open")

    def step(self) -> None:
        self.steps += 1
        self.stepped.set()
        if self.steps == self.fail_at:
            raise RuntimeError("step failed")
        if self.stop_after is not None and self.steps >= self.stop_after:
            assert self.loop is not None
            self.loop.stop()
        threading.Event().wait(0.001)

    def stop_starting(self) -> None:
        self.events.append("stop_starting")

    def close(self) -> None:
        self.events.append("close")


def _loop(handler: Handler, on_error: ErrorCallback | None = None) -> ClientLoop:
    loop = ClientLoop(
        "unit-loop",
        handler,
        shutdown_timeout=1.0,
        errors=FatalErrorWatch(),
        on_error=on_error,
    )
    handler.loop = loop
    return loop


def test_run_steps_until_stopped_then_closes() -> None:
    handler = Handler(stop_after=3)
    loop = _loop(handler)
    loop.run()
    assert handler.steps == 3
    assert handler.events == ["open", "stop_starting", "close"]
    assert not loop.running
    with pytest.raises(ClientClosedError):
        loop.check_alive()


def test_start_runs_on_a_thread_and_shutdown_closes_it() -> None:
    handler = Handler()
    loop = _loop(handler)
    loop.start()
    assert handler.stepped.wait(5)
    loop.check_alive()  # running: nothing to raise
    loop.shutdown()
    assert handler.events == ["open", "stop_starting", "close"]
    with pytest.raises(ClientClosedError):
        loop.check_alive()


def test_a_failing_step_is_reported_once_and_raised_from_shutdown() -> None:
    seen: list[BaseException] = []
    handler = Handler(fail_at=2)
    loop = _loop(handler, on_error=seen.append)
    loop.start()
    for _ in range(500):  # the loop dies on its own thread
        if not loop.running:
            break
        threading.Event().wait(0.01)
    assert not loop.running
    with pytest.raises(ClientLoopError):
        loop.check_alive()
    with pytest.raises(ClientLoopError) as raised:
        loop.shutdown()
    assert str(raised.value.__cause__) == "step failed"
    assert [str(e) for e in seen] == ["step failed"]
    assert handler.events == ["open", "close"]
    loop.shutdown()  # raised once: a second shutdown is quiet


def test_an_error_in_a_rebalance_callback_is_raised_on_the_loop() -> None:
    handler = Handler(stop_after=5)
    loop = _loop(handler)

    def on_assign(*_: object) -> None:
        raise ValueError("bad callback")

    guarded = loop.guard(on_assign)
    assert guarded.__name__ == "on_assign"
    guarded("consumer", [])  # librdkafka would swallow it: kept for the loop
    with pytest.raises(ClientLoopError) as raised:
        loop.run()
    assert isinstance(raised.value.__cause__, ValueError)
    assert handler.steps == 1  # raised right after the step that ran it


def test_shutdown_of_a_loop_opened_but_never_run_closes_the_handler() -> None:
    handler = Handler()
    loop = _loop(handler)
    assert loop.open() is True
    assert loop.open() is False  # once
    loop.shutdown()
    assert handler.events == ["open", "stop_starting", "close"]


def test_shutdown_raises_when_the_loop_does_not_close_in_time() -> None:
    release = threading.Event()

    class Stuck(Handler):
        def close(self) -> None:
            release.wait(5)

    handler = Stuck()
    loop = _loop(handler)
    loop.start()
    assert handler.stepped.wait(5)
    with pytest.raises(ShutdownTimeoutError):
        loop.shutdown(timeout=0.05)
    release.set()
