"""The test side of a child process that reports JSON status lines on stdout.

Used by the fault tests that need a real process to ``kill -9`` (``_procs.py`` runs a
ScheduleService, ``consumer_procs.py`` a PushConsumer).  A reader thread follows the child's
stdout; every line that parses as a JSON object is appended to :attr:`ChildProcess.history`
(non-JSON lines are ignored).  stderr goes to a temporary file, shown by :meth:`log_tail` in
failure messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

Status = dict[str, Any]


#: The repository root: where ``python -m tests.support.<module>`` finds the package.
ROOT = Path(__file__).resolve().parents[2]


class ChildProcess:
    """Start ``argv``, follow its status lines, and stop, kill or wait for it."""

    def __init__(self, argv: list[str], name: str, *, stdin: bool = False) -> None:
        self.argv = argv
        self.name = name
        self.stdin = stdin  # a pipe the test writes to (``proc.stdin``)
        self.proc: subprocess.Popen[str] | None = None
        self.history: list[Status] = []
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
            mode="w+", prefix=f"rmq-{name}-", suffix=".log", delete=False
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Self:
        if self.proc is not None:  # a second child would outlive kill() and close()
            raise RuntimeError(f"{self.name} was already started")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            cwd=ROOT,  # children run as ``python -m tests.support.<module>``
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-out", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                status = json.loads(line)
            except ValueError:
                continue
            if isinstance(status, dict):
                with self._cond:
                    self.history.append(status)
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no commit, no flush."""
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (clean shutdown); SIGKILL if it does not exit within ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to end by itself; every status line it printed is read."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout}s:\n{self.log_tail()}"
            ) from None
        if self._reader is not None:
            self._reader.join(30)  # a starved reader thread still drains the pipe
        return code

    def close(self) -> None:
        self.kill()
        if self._reader is not None:
            self._reader.join(5)
        with contextlib.suppress(Exception):
            self._log.close()
            os.unlink(self._log.name)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- observation -----------------------------------------------------------------------
    @property
    def latest(self) -> Status:
        """The last status line (``{}`` before the first)."""
        with self._cond:
            return self.history[-1] if self.history else {}

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the child wrote to stderr."""
        with contextlib.suppress(Exception):
            self._log.flush()
            return "\n".join(Path(self._log.name).read_text().splitlines()[-lines:])
        return ""

    def wait_for(
        self, predicate: Callable[[Status], bool], timeout: float, what: str = "condition"
    ) -> Status:
        """Block until ``predicate(latest status)`` holds; fail (with the child's log) on
        timeout or if the child exits first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                status = self.history[-1] if self.history else {}
                if status and predicate(status):
                    return dict(status)
                if self.proc is not None and self.proc.poll() is not None:
                    raise AssertionError(
                        f"{self.name} exited ({self.proc.returncode}) before {what}; "
                        f"last status {status}\n{self.log_tail()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.name}: no {what} within {timeout}s; last status {status}\n"
                        f"{self.log_tail()}"
                    )
                self._cond.wait(min(left, 0.2))
