"""Running an orderly listener (``MessageListenerOrderly``): one run per partition at a time.

The :class:`~adapter.core.engine.orderly.OrderlyEngine` hands out at most one run
(:class:`~adapter.core.engine.orderly.OrderlyWork`) per partition; :class:`OrderlyRunner`
calls the listener on its batches one after the other and stops at the first batch that
does not succeed.  Where the run goes follows :class:`~adapter.core.listener.InlinePolicy`
(``listener_mode``), as for concurrent listeners: on the poll thread while the listener is
fast, else on ``consume_thread_max`` workers, one run per worker, so partitions progress in
parallel while each stays in order.

A run on a worker checks before each batch whether its partition is being drained (a
revoke or a shutdown waits for it): if so it stops there, so a revoke waits for one batch,
not for the whole run.
"""

from __future__ import annotations

import logging
import queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapter.clients.member.contracts import Call
from adapter.clients.push.concurrent_runner import Calls, WorkerPool
from adapter.clients.push.failure_log import FailureLog
from adapter.core.codec import Failure
from adapter.core.engine import Work
from adapter.core.engine.actions import Action, Dropped, SendBack, TraceInfo
from adapter.core.engine.orderly import BatchVerdict, OrderlyEngine, OrderlyWork, judge_orderly
from adapter.core.listener import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    InlinePolicy,
    ListenerMode,
    MessageQueue,
)
from adapter.core.message import start_consuming
from adapter.core.trace import TraceStatus

if TYPE_CHECKING:
    from adapter.clients.member.group_consumer import GroupConsumer

log = logging.getLogger("adapter.consumer")

_SUCCESS = ConsumeOrderlyStatus.SUCCESS
OrderlyListener = Callable[[list[Any], ConsumeOrderlyContext], Any]


@dataclass(frozen=True, slots=True)
class _Ran:
    """How a run went: ``succeeded`` batches succeeded, then ``verdict`` (``None``: the run
    ended or was told to stop); listener time in total and of the slowest batch."""

    succeeded: int
    verdict: BatchVerdict | None
    rt_total: float
    slowest: float


class OrderlyRunner:
    """Runs orderly work through the listener (see the module docstring)."""

    def __init__(
        self,
        listener: OrderlyListener,
        group: GroupConsumer,
        engine: OrderlyEngine,
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
        self._done: queue.SimpleQueue[tuple[OrderlyWork, _Ran]] = queue.SimpleQueue()
        self._on_workers = 0  # runs handed to workers and not back yet
        self._queues: dict[tuple[str, int], MessageQueue] = {}
        self._timeout = engine.options.consume_timeout_s
        self._default_ms = engine.orderly.suspend_ms
        self._clock = group.clock
        self._failures = FailureLog(log, group.name, group.clock.monotonic)
        self._next: deque[OrderlyWork] = deque()  # runs to start (no recursion on chains)
        self._starting = False
        self._calls = Calls()
        self._stopping = False

    # -- Runner ----------------------------------------------------------------------------
    @property
    def inline(self) -> bool:
        return self._policy.inline

    def run(self, work: Work) -> None:
        assert isinstance(work, OrderlyWork)
        self._next.append(work)
        if self._starting:
            return  # a run that just ended chained this one: started by the loop below
        self._starting = True
        try:
            while self._next:
                nxt = self._next.popleft()
                if self._policy.inline:
                    self._finish(nxt, self._execute(nxt, pooled=False), inline=True)
                else:
                    self._submit(nxt)
        finally:
            self._starting = False

    def stop_starting(self) -> None:
        """Start no run and no further batch from now on (the consumer is stopping): a run
        on a worker ends after the batch it is on; its partition's offset stays there."""
        self._stopping = True

    def under_way(self) -> list[Call]:
        """The runs on workers now (each named by its partition and offsets)."""
        return self._calls.snapshot()

    def poll(self) -> None:
        done = self._done
        while True:
            try:
                work, ran = done.get_nowait()
            except queue.Empty:
                return
            self._on_workers -= 1
            self._finish(work, ran, inline=False)

    def backlog(self) -> int:
        """Runs on workers (each is one partition's stream; per-partition flow control
        bounds what waits behind them)."""
        return self._on_workers

    def wait(self, timeout: float) -> None:
        try:
            work, ran = self._done.get(timeout=timeout)
        except queue.Empty:
            return
        self._on_workers -= 1
        self._finish(work, ran, inline=False)
        self.poll()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    # -- running ---------------------------------------------------------------------------
    def _queue(self, tp: tuple[str, int]) -> MessageQueue:
        mq = self._queues.get(tp)
        if mq is None:
            mq = self._queues[tp] = MessageQueue(self._group.names.resolve(tp[0])[0], tp[1])
        return mq

    def _execute(self, work: OrderlyWork, *, pooled: bool) -> _Ran:
        """Call the listener on the batches of ``work`` in order; stop at the first that does
        not succeed in time (or, on a worker, when the partition is being drained)."""
        listener = self._listener
        msgs = work.msgs
        size = work.size
        start_consuming(msgs, self._clock.now_ms(), shared=work.fresh, listed=False)
        mq = self._queue(work.tp)
        ctx = ConsumeOrderlyContext(mq)
        limit = self._timeout
        group = self._group
        tp = work.tp
        perf = self._clock.monotonic  # the system clock's: time.monotonic, no wrapper
        first = t0 = perf()
        slowest = 0.0
        for index in range(work.nbatches):
            if pooled and (self._stopping or tp in group.draining):
                return _Ran(index, None, t0 - first, slowest)
            batch = [msgs[index]] if size == 1 else msgs[index * size : (index + 1) * size]
            try:
                result: Any = listener(batch, ctx)
            except Exception as exc:
                result = exc
            t1 = perf()
            rt = t1 - t0
            t0 = t1
            slowest = max(slowest, rt)
            if result is not _SUCCESS or rt > limit:
                verdict = BatchVerdict(result, ctx.suspend_current_queue_time_millis, rt)
                return _Ran(index, verdict, t1 - first, slowest)
            if ctx.suspend_current_queue_time_millis != -1:
                ctx = ConsumeOrderlyContext(mq)  # set on a success: not carried over
        return _Ran(work.nbatches, None, t0 - first, slowest)

    def _submit(self, work: OrderlyWork) -> None:
        pool = self._pool
        if pool is None:
            pool = self._pool = WorkerPool(
                self._threads, f"rmq-orderly-{self._group.group}", self._task
            )
        self._on_workers += 1
        pool.submit(work)

    def _task(self, work: OrderlyWork) -> None:
        """On a worker: run the batches; the outcome goes back to the loop."""
        if self._stopping:  # never started: the partition's offset stays where it is
            self._done.put((work, _Ran(0, None, 0.0, 0.0)))
            return
        msgs = work.msgs
        key = self._calls.begin(
            Call(work.tp, msgs[0].queue_offset, msgs[-1].queue_offset, self._clock.monotonic())
        )
        try:
            ran = self._execute(work, pooled=True)
        except BaseException as exc:  # never lose a run: its partition would stay blocked
            ran = _Ran(0, BatchVerdict(exc), 0.0, 0.0)
        self._done.put((work, ran))
        self._calls.end(key)  # after the outcome is handed over (see Calls)

    def _finish(self, work: OrderlyWork, ran: _Ran, *, inline: bool) -> None:
        """On the loop thread: account for the run and tell the engine."""
        policy = self._policy
        batches = ran.succeeded + (ran.verdict is not None)
        if inline:
            policy.ran_inline(ran.slowest)
        else:
            for _ in range(min(batches, policy.warmup)):
                policy.pooled(ran.slowest)
        engine = self._engine
        if not engine.is_current(work):
            return  # revoked meanwhile: the next owner reads it again
        group = self._group
        ok = min(len(work.msgs), ran.succeeded * work.size)
        failed_batch: list[Any] = []
        failure: Failure | None = None
        verdict = ran.verdict
        if verdict is not None:
            judged = judge_orderly(
                verdict, timeout_s=self._timeout, default_suspend_ms=self._default_ms
            )
            if judged.failure is None:
                ok = min(len(work.msgs), ok + work.size)
            else:
                failure = judged.failure
                failed_batch = work.msgs[ok : ok + work.size]
                self._report(work, failed_batch, failure.type, judged.problem, verdict)
        if batches:
            topic = work.msgs[0].topic
            group.stats.batches(
                topic,
                ok=ok,
                failed=len(failed_batch),
                rt_total_s=ran.rt_total,
                rt_max_s=ran.slowest,
                n=batches,
            )
            group.stats.listener_seconds[topic].observe(ran.rt_total / batches)
            if group.trace is not None:
                self._trace_successes(work, ok, ran.rt_total / batches * 1000)
        chain = not group.halted and work.tp not in group.draining
        actions = engine.completed(
            work, ran.succeeded, verdict, self._clock.monotonic(), chain=chain
        )
        if failure is not None and verdict is not None and group.trace is not None:
            self._trace_suspended(failed_batch, actions, failure, verdict.rt_s * 1000)
        if actions:
            group.apply(actions)

    def _report(
        self,
        work: OrderlyWork,
        batch: list[Any],
        failure_type: str,
        problem: str | None,
        verdict: BatchVerdict,
    ) -> None:
        group = self._group
        st = group.stats.topic(batch[0].topic)
        st.local_retries += 1
        if failure_type == "ConsumeTimeout":
            st.timeouts += 1
            log.warning(
                "%s: orderly listener ran %.1fs on %s, past consume_timeout=%ss; counted as "
                "SUSPEND_CURRENT_QUEUE_A_MOMENT (the partition waited for it)",
                group.name,
                verdict.rt_s,
                work.tp,
                self._timeout,
            )
        elif problem is not None:
            result = verdict.result
            self._failures.report(problem, result if isinstance(result, BaseException) else None)

    def _trace_successes(self, work: OrderlyWork, ok: int, rt_ms: float) -> None:
        group = self._group
        size = work.size
        total = len(work.msgs)
        for i, msg in enumerate(work.msgs[:ok]):
            start = i - i % size
            info = TraceInfo(min(size, total - start), i - start, None, rt_ms)
            group.emit(msg, TraceStatus.SUCCESS, info)

    def _trace_suspended(
        self, batch: list[Any], actions: list[Action], failure: Failure, rt_ms: float
    ) -> None:
        """A RETRY trace event for each message of a suspended batch that is retried
        locally (dead letters are traced when the broker has them)."""
        gone = {a.msg.queue_offset for a in actions if isinstance(a, SendBack | Dropped)}
        for i, msg in enumerate(batch):
            if msg.queue_offset not in gone:
                info = TraceInfo(len(batch), i, None, rt_ms)
                self._group.emit(msg, TraceStatus.RETRY, info, failure)


__all__ = ["OrderlyListener", "OrderlyRunner"]
