"""A small worker pool for listener calls: one C-level queue, no per-task futures.

``ThreadPoolExecutor.submit`` costs a Future, a work item and a lock per call; a batch of
one message pays that every time.  Here a task is one ``SimpleQueue.put``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("adapter.consumer")

_STOP = object()


class WorkerPool:
    def __init__(self, size: int, name: str) -> None:
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        self._tasks.put((fn, arg))

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is _STOP:
                return
            fn, arg = task
            try:
                fn(arg)
            except BaseException:  # the task reports its own failures; never kill a worker
                log.exception("worker task failed")

    def shutdown(self) -> None:
        """Stop the workers after the tasks already queued (does not wait for them)."""
        for _ in self._threads:
            self._tasks.put(_STOP)
