"""Running a push consumer's listener: inline on the poll thread or on worker threads.

A thread hand-off per batch costs more than everything else a fast listener does (a no-op
listener runs at nearly twice the rate inline; BENCHMARKS.md), while a listener that blocks
needs threads.
:class:`ConcurrentRunner` therefore lets :class:`~adapter.core.listener.InlinePolicy`
choose per fetched run (``listener_mode``): on the poll thread while the listener is fast,
on ``consume_thread_max`` workers as soon as it is not.  Inline runs report to the engine
once per run; pooled batches report one by one through a queue the loop drains.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from adapter.clients.member.contracts import Call
from adapter.clients.push.failure_log import FailureLog
from adapter.core.engine import ConcurrentEngine, Work
from adapter.core.listener import (
    ConsumeConcurrentlyContext,
    InlinePolicy,
    Judge,
    ListenerMode,
    MessageQueue,
    Outcome,
)
from adapter.core.message import start_consuming
from adapter.core.routing import ConsumeConcurrentlyStatus

if TYPE_CHECKING:
    from adapter.clients.member.group_consumer import GroupConsumer

log = logging.getLogger("adapter.consumer")

_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
_STOP = object()
#: the result of a batch a worker did not start because the consumer is stopping
SKIPPED = object()
Listener = Callable[[list[Any], ConsumeConcurrentlyContext], Any]


class Calls:
    """The listener calls under way on worker threads (registered by the worker itself).

    A worker hands its result over *before* it takes its call off this list, so once the
    list is empty every result is waiting for the loop: a drain that sees it empty and
    then polls the results misses none."""

    def __init__(self) -> None:
        self._calls: dict[int, Call] = {}
        self._keys = itertools.count()  # next() on it is atomic: workers call begin at once

    def begin(self, call: Call) -> int:
        key = next(self._keys)
        self._calls[key] = call
        return key

    def end(self, key: int) -> None:
        self._calls.pop(key, None)

    def snapshot(self) -> list[Call]:
        return sorted(self._calls.copy().values(), key=lambda c: (c.tp, c.first))


class WorkerPool:
    """Listener threads fed by one C-level queue (no future per task)."""

    def __init__(self, size: int, name: str, task: Callable[[Any], None]) -> None:
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._task = task
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def submit(self, item: Any) -> None:
        self._tasks.put(item)

    def _work(self) -> None:
        task = self._task
        while True:
            item = self._tasks.get()
            if item is _STOP:
                return
            try:
                task(item)
            except BaseException:  # the task reports its own failures; never lose a worker
                log.exception("listener task failed")

    def shutdown(self) -> None:
        """Stop the workers once the tasks already queued are done (does not wait)."""
        for _ in self._threads:
            self._tasks.put(_STOP)


class ConcurrentRunner:
    """Runs fetched work through a concurrent listener (see the module docstring)."""

    def __init__(
        self,
        listener: Listener,
        group: GroupConsumer,
        engine: ConcurrentEngine,
        *,
        mode: ListenerMode,
        threads: int,
    ) -> None:
        self._listener = listener
        self._group = group
        self._engine = engine
        self._policy = InlinePolicy(mode)
        self._threads = threads
        self._pool: WorkerPool | None = None
        self._done: queue.SimpleQueue[
            tuple[Work, int, Any, ConsumeConcurrentlyContext | None, float]
        ]
        self._done = queue.SimpleQueue()
        self._backlog = 0
        self._queues: dict[tuple[str, int], MessageQueue] = {}
        self._timeout = engine.options.consume_timeout_s
        self._clock = group.clock
        self._failures = FailureLog(log, group.name, group.clock.monotonic)
        self._judgements = Judge()
        self._calls = Calls()
        self._stopping = False

    # -- Runner ----------------------------------------------------------------------------
    @property
    def inline(self) -> bool:
        return self._policy.inline

    def stop_starting(self) -> None:
        """Start no listener call from now on (the consumer is stopping): batches queued
        for a worker come back unstarted, their offsets stay uncommitted and the next owner
        of their partition reads them again.  Safe from any thread."""
        self._stopping = True

    def under_way(self) -> list[Call]:
        """The listener calls running on workers now."""
        return self._calls.snapshot()

    def run(self, work: Work) -> None:
        if self._policy.inline:
            self._run_inline(work)
        else:
            self._submit(work)

    def poll(self) -> None:
        done = self._done
        while True:
            try:
                item = done.get_nowait()
            except queue.Empty:
                return
            self._complete(*item)

    def backlog(self) -> int:
        return self._backlog

    def wait(self, timeout: float) -> None:
        try:
            item = self._done.get(timeout=timeout)
        except queue.Empty:
            return
        self._complete(*item)
        self.poll()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    # -- inline ----------------------------------------------------------------------------
    def _queue(self, tp: tuple[str, int]) -> MessageQueue:
        mq = self._queues.get(tp)
        if mq is None:
            mq = self._queues[tp] = MessageQueue(self._group.names.resolve(tp[0])[0], tp[1])
        return mq

    def _run_inline(self, work: Work) -> None:
        """Call the listener on this thread for every batch of ``work``; report once."""
        listener = self._listener
        msgs = work.msgs
        size = work.size
        start_consuming(msgs, self._clock.now_ms(), shared=True)
        mq = self._queue(work.tp)
        ctx = ConsumeConcurrentlyContext(mq)
        limit = self._timeout
        failures: list[tuple[int, Outcome | None, float]] | None = None
        perf = self._clock.monotonic  # the system clock's: time.monotonic, no wrapper
        first = t0 = perf()
        slowest = 0.0
        # each batch a new list (the listener may keep or change it), cut in C: at batch 1
        # (RocketMQ's default) ``zip`` pairs each message with nothing and ``list`` makes the
        # pair its batch, so the loop below does no indexing or slicing of its own
        batches: Iterator[list[Any]] = (
            map(list, zip(msgs))
            if size == 1
            else (msgs[i : i + size] for i in range(0, len(msgs), size))
        )
        for index, batch in enumerate(batches):
            try:
                result = listener(batch, ctx)
            except Exception as exc:
                result = exc
            t1 = perf()
            rt = t1 - t0
            t0 = t1
            if rt > slowest:  # noqa: PLR1730 - max() would be a call per batch
                slowest = rt
            if (
                result is not _SUCCESS
                or ctx.ack_index is not None
                or ctx.delay_level_when_next_consume != 0
                or rt > limit
            ):
                if failures is None:
                    failures = []
                failures.append((index, self._judge(result, ctx, len(batch)), rt))
                ctx = ConsumeConcurrentlyContext(mq)
        self._policy.ran_inline(slowest)
        self._account(work, range(work.nbatches), len(msgs), failures or (), t0 - first, slowest)
        actions = self._engine.settle_run(work, failures or (), self._clock.monotonic())
        if actions:
            self._group.apply(actions)

    def _judge(self, result: Any, ctx: ConsumeConcurrentlyContext, size: int) -> Outcome | None:
        outcome, clamped = self._judgements(result, ctx, size)
        if clamped is not None:
            self._failures.report(clamped)
        if outcome is not None and outcome.problem is not None:
            exc = result if isinstance(result, BaseException) else None
            self._failures.report(outcome.problem, exc)
        return outcome

    def _account(  # noqa: PLR0917
        self,
        work: Work,
        indices: range,
        total: int,
        failures: Any,
        rt_total: float,
        slowest: float,
    ) -> None:
        """Stats (and SUCCESS traces) for the batches ``indices`` of ``work`` that just ran
        (``total`` messages)."""
        group = self._group
        failed = 0
        limit = self._timeout
        failed_at: dict[int, Outcome | None] = {}
        topic = work.msgs[0].topic
        st = group.stats.topic(topic)
        for index, outcome, rt in failures:
            failed_at[index] = outcome
            if rt > limit:
                failed += work.batch_len(index)
                st.timeouts += 1
                log.warning(
                    "%s: listener ran %.1fs, past consume_timeout=%ss; counted as RECONSUME_LATER",
                    group.name,
                    rt,
                    limit,
                )
            elif outcome is not None:
                failed += len(outcome.failed)
        batches = len(indices)
        group.stats.batches(
            topic,
            ok=total - failed,
            failed=failed,
            rt_total_s=rt_total,
            rt_max_s=slowest,
            n=batches,
        )
        group.stats.listener_seconds[topic].observe(rt_total / batches)
        if group.trace is not None:
            self._trace_successes(work, indices, failed_at, rt_total / batches)

    def _trace_successes(
        self, work: Work, indices: range, failed_at: dict[int, Outcome | None], rt_s: float
    ) -> None:
        group = self._group
        if not failed_at and work.origin is None:  # all fetched ones succeeded: one hand-over
            msgs, size = work.msgs, work.size
            lo, hi = indices.start * size, min(indices.stop * size, len(msgs))
            whole = lo + (hi - lo) // size * size
            group.emit_batches(msgs[lo:whole], size, rt_s * 1000)
            if whole < hi:  # the run's last batch is shorter
                group.emit_successes(msgs[whole:hi], range(hi - whole), None, rt_s * 1000)
            return
        for index in indices:
            batch = work.batch(index)
            if index in failed_at:
                outcome = failed_at[index]
                ok = range(0) if outcome is None else outcome.succeeded
                ack = None if outcome is None else outcome.ack_index
            else:
                ok, ack = range(len(batch)), None
            group.emit_successes(batch, ok, ack, rt_s * 1000)  # one hand-over per batch

    # -- pool ------------------------------------------------------------------------------
    def _submit(self, work: Work) -> None:
        pool = self._pool
        if pool is None:
            pool = self._pool = WorkerPool(
                self._threads, f"rmq-consume-{self._group.group}", self._task
            )
        for index in range(work.nbatches):
            self._backlog += work.batch_len(index)
            pool.submit((work, index))

    def _task(self, item: tuple[Work, int]) -> None:
        """On a worker: call the listener; what it returns or raises goes back."""
        work, index = item
        if self._stopping:
            self._done.put((work, index, SKIPPED, None, 0.0))
            return
        batch = work.batch(index)
        start_consuming(batch, self._clock.now_ms(), shared=False)
        ctx = ConsumeConcurrentlyContext(self._queue(work.tp))
        begin = self._clock.monotonic()
        key = self._calls.begin(Call(work.tp, batch[0].queue_offset, batch[-1].queue_offset, begin))
        if work.started is not None:
            work.started[index] = begin  # waiting for a worker does not count as running
        try:
            result: Any = self._listener(batch, ctx)
        except Exception as exc:
            result = exc
        self._done.put((work, index, result, ctx, self._clock.monotonic() - begin))
        self._calls.end(key)  # after the result is handed over (see Calls)

    def _complete(
        self,
        work: Work,
        index: int,
        result: Any,
        ctx: ConsumeConcurrentlyContext | None,
        rt: float,
    ) -> None:
        size = work.batch_len(index)
        self._backlog -= size
        if ctx is None:  # SKIPPED: never started, so it stays in flight for the next owner
            return
        self._policy.pooled(rt)
        if work.done is not None and work.done[index]:
            log.info(
                "%s: late result for a timed-out batch on %s ignored", self._group.name, work.tp
            )
            return
        if not self._engine.is_current(work):
            return  # revoked meanwhile: the next owner reads it again
        outcome = self._judge(result, ctx, size)
        failures = [(index, outcome, rt)] if outcome is not None or rt > self._timeout else ()
        self._account(work, range(index, index + 1), size, failures, rt, rt)
        actions = self._engine.completed(work, index, outcome, self._clock.monotonic(), rt)
        if actions:
            self._group.apply(actions)
