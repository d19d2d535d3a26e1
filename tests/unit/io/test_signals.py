"""SIGTERM leaves a client's ``with`` block as Ctrl-C does, unless the application handles
SIGTERM itself; the previous handler comes back when the block is left."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from adapter.io.signals import TerminateAsInterrupt

pytestmark = pytest.mark.unit


@pytest.fixture
def default_sigterm() -> Iterator[None]:
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def test_sigterm_raises_keyboard_interrupt_inside_and_the_default_comes_back(
    default_sigterm: None,
) -> None:
    signals = TerminateAsInterrupt()
    signals.enter()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.5)  # let the handler run on this (main) thread
    finally:
        signals.exit()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_application_handler_is_kept(default_sigterm: None) -> None:
    seen: list[int] = []

    def own(signum: int, _frame: Any) -> None:
        seen.append(signum)

    signal.signal(signal.SIGTERM, own)
    signals = TerminateAsInterrupt()
    signals.enter()
    os.kill(os.getpid(), signal.SIGTERM)
    signal.sigtimedwait([], 0.5)
    signals.exit()
    assert seen == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is own


def test_nested_blocks_install_once_and_the_outer_one_restores(default_sigterm: None) -> None:
    outer, inner = TerminateAsInterrupt(), TerminateAsInterrupt()
    outer.enter()
    installed = signal.getsignal(signal.SIGTERM)
    inner.enter()
    assert signal.getsignal(signal.SIGTERM) is installed
    inner.exit()
    assert signal.getsignal(signal.SIGTERM) is installed  # still inside the outer block
    outer.exit()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_off_the_main_thread_nothing_is_installed(default_sigterm: None) -> None:
    signals = TerminateAsInterrupt()
    thread = threading.Thread(target=signals.enter)
    thread.start()
    thread.join()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
