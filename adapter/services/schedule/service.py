"""``ScheduleService``: serves the delay-level topics (RocketMQ's ScheduleMessageService).

One consumer group reads every delay-level topic of its namespace (by pattern, so a level
topic of any delay table is served: the delay is part of its name).  Entries of a level
partition become due in order; the service keeps fetching while entries wait (up to a
bound), forwards each to its ``REAL_TOPIC`` when due, and never early
(:mod:`adapter.core.engine.schedule` has the rules).  How forwards become final is the
:mod:`~adapter.services.schedule.delivery` guarantee: at-least-once or exactly-once; this
module does not branch on it.

Entries that cannot be scheduled (no ``REAL_TOPIC``, a bad due time, a destination that
does not exist or refuses them for good) go to ``%DLQ%<service group>`` with
``RMQ_DLQ_REASON=INVALID_SCHEDULE_ENTRY`` and the reason in ``RMQ_FAILURE_MESSAGE``.

The loop itself (consuming, forwarding, dead-lettering, rebalances) is
:class:`~adapter.services.schedule.service_loop.ServiceLoop`; the options and stats live in
:mod:`.options`, the level-topic names in :mod:`.levels`, destination checks in
:mod:`.destinations` and pausing in :mod:`.pausing`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Unpack

from adapter.core.types import TP
from adapter.io.config import build_options, check_group_protocol, check_kafka_config
from adapter.io.errors import FatalErrorWatch
from adapter.io.loop import ClientLoop
from adapter.io.signals import StartsInWith, TerminateAsInterrupt
from adapter.io.topics import ensure_topics, plan_topics
from adapter.services.schedule.backlog import GroupBacklog
from adapter.services.schedule.options import (
    ScheduleServiceOptions,
    ScheduleServiceSettings,
    ScheduleStats,
)
from adapter.services.schedule.service_loop import ServiceLoop
from adapter.telemetry import state as telemetry

__all__ = ["INVALID_SCHEDULE_ENTRY", "ScheduleService"]

log = logging.getLogger("adapter.schedule")

INVALID_SCHEDULE_ENTRY = "INVALID_SCHEDULE_ENTRY"


class ScheduleService(StartsInWith):
    """Forwards delay-level entries to their real topics when due.  Scales as a group."""

    def __init__(
        self, config: Mapping[str, Any], **options: Unpack[ScheduleServiceOptions]
    ) -> None:
        self.options = build_options(ScheduleServiceSettings, options, "ScheduleService")
        self._config = check_kafka_config(config, "ScheduleService")
        check_group_protocol(self._config)  # a refused setting fails here, not at start()
        self.group = self.options.group_id
        self.stats = ScheduleStats()
        self._errors = FatalErrorWatch(self._config.get("error_cb"), config=self._config)
        self._handler = ServiceLoop(
            self._config, self.group, self.options, self.stats, self._errors
        )
        self._loop = ClientLoop(
            "rmq-schedule-service",
            self._handler,
            shutdown_timeout=self.options.shutdown_timeout,
            errors=self._errors,
            on_error=self._died,
        )
        loop = self._loop
        self._handler.bind(guard=loop.guard, running=lambda: loop.running)
        #: what stopped the service loop, if it died
        self.error: BaseException | None = None
        self._metrics: Any = None
        self._signals = TerminateAsInterrupt()
        self._backlog: GroupBacklog | None = None

    def _died(self, exc: BaseException) -> None:
        self.error = exc
        if self.options.on_error is not None:
            self.options.on_error(exc)

    # -- lifecycle -------------------------------------------------------------------------
    def _prepare(self) -> None:
        if self.options.auto_create_topics:
            ensure_topics(
                self._config,
                plan_topics(
                    groups=[self.group],
                    delay_levels=self.options.levels,
                    namespace=self.options.namespace,
                    partitions=self.options.partitions,
                ),
            )

    def start(self) -> ScheduleService:
        """Run the service on a background thread (idempotent)."""
        if self._loop.running:
            return self
        self._prepare()
        self._loop.start()
        self._expose_metrics()
        return self

    def _expose_metrics(self) -> None:
        opts = self.options
        if self._metrics is not None or (
            opts.metrics_port is None and opts.metrics_registry is None and not telemetry.metered()
        ):
            return
        from adapter.io.metrics import Collectors, ScheduleCollector  # on use
        from adapter.telemetry.reporting import report

        handler = self._handler
        collector: Any = ScheduleCollector(
            self.group, self.stats, handler.engine, lambda t: handler.level(t)[0]
        )
        if opts.lag_groups:
            self._backlog = GroupBacklog(self._config, opts, handler.engine)
            collector = Collectors(collector, self._backlog.collector())
        self._metrics = report(
            collector,
            registry=opts.metrics_registry,
            port=opts.metrics_port,
            addr=opts.metrics_addr,
        )

    @property
    def metrics_endpoint(self) -> str | None:
        """Where the metrics are served (``metrics_port``)."""
        return None if self._metrics is None else self._metrics.endpoint

    def run(self) -> None:
        """Run the service on this thread until :meth:`shutdown` (e.g. from a signal
        handler); raises what stopped it."""
        self._prepare()
        self._expose_metrics()
        try:
            self._loop.run()
        finally:
            self._close_metrics()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop, finish what is in flight (exactly-once: commit the open transaction),
        commit and close; ``timeout`` bounds the wait (default ``shutdown_timeout`` plus a
        margin).  A service whose loop died raises that error here."""
        try:
            self._loop.shutdown(timeout)
        finally:
            self._close_metrics()

    def _close_metrics(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._backlog is not None:
            self._backlog.close()
            self._backlog = None

    def check_alive(self) -> None:
        """Raise what stopped the service loop, or a fatal client error that stands now."""
        self._loop.check_alive()

    # -- figures ---------------------------------------------------------------------------
    @property
    def assignment(self) -> set[TP]:
        return set(self._handler.engine.partitions)

    def running_info(self) -> dict[str, Any]:
        """A snapshot for diagnostics: per partition entries waiting and the oldest due
        time, forwards in flight, held partitions, the open transaction."""
        h = self._handler
        delivery = h.delivery
        return {
            "group": self.group,
            "running": self._loop.running,
            "error": None if self.error is None else repr(self.error),
            "in_flight": delivery.in_flight() if delivery is not None else 0,
            "forwards_unsettled": h.engine.inflight(),
            "transaction_open": delivery is not None and delivery.transaction_open,
            "held": [f"{t}[{p}]" for t, p in h.engine.held()],
            "waiting": {
                f"{t}[{p}]": {"entries": n, "oldest_due_ms": due}
                for (t, p), (n, due) in sorted(h.engine.waiting().items())
            },
        }
