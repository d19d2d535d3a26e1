"""The backlog gauge a ScheduleService serves for consumer groups (``lag_groups``): per
group, its lag on the topics it subscribes and on its retry topic (read from the cluster
by :func:`adapter.io.group_lag.read_group_lag`, as ``rmq-kafka group progress`` reads it)
plus its retries this service holds at the delay levels, due within ``lag_horizon_s``."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapter.core import naming
from adapter.core.engine.schedule import ScheduleEngine
from adapter.core.offsets import ConsumeFromWhere
from adapter.io.admin import AdminSession
from adapter.io.group_lag import read_group_lag
from adapter.services.schedule.options import ScheduleServiceSettings

if TYPE_CHECKING:
    from adapter.io.metrics import BacklogCollector

__all__ = ["LAG_READ_TIMEOUT_S", "GroupBacklog"]

#: One scrape's wait for the cluster per request (a scrape answers within seconds).
LAG_READ_TIMEOUT_S = 10.0


class GroupBacklog:
    """Reads the backlog of ``opts.lag_groups`` when the metrics are scraped (one reading
    at a time; the admin client is created on the first scrape and closed with the
    metrics)."""

    def __init__(
        self, config: Mapping[str, Any], opts: ScheduleServiceSettings, engine: ScheduleEngine
    ) -> None:
        self._config = dict(config)
        self._opts = opts
        self._engine = engine
        self._lock = threading.Lock()
        self._session: AdminSession | None = None
        #: retry topic (logical) -> its group
        self._retry_topics = {naming.retry_topic(g): g for g in opts.lag_groups}

    def collector(self) -> BacklogCollector:
        from adapter.io.metrics import BacklogCollector  # on use (prometheus-client)

        return BacklogCollector(self._opts.lag_groups, self.lags, self.delayed)

    def lags(self, group: str) -> tuple[int, int]:
        """``(lag on its subscribed topics, lag on its retry topic)``."""
        with self._lock:
            if self._session is None:
                self._session = AdminSession(
                    self._config, timeout_s=LAG_READ_TIMEOUT_S, what="backlog gauge"
                )
            where = self._opts.lag_consume_from_where
            lag = read_group_lag(
                self._session,
                group,
                consume_from_where=ConsumeFromWhere(where),
                what=f"backlog of group {group!r}",
            )
            return lag.lags()

    def delayed(self) -> dict[str, int]:
        """Group -> its retries held here at the delay levels, due within the horizon."""
        horizon_ms = int(self._opts.lag_horizon_s * 1000)
        before = self._opts.clock.now_ms() + horizon_ms
        counts = self._engine.due_within(set(self._retry_topics), before)
        return {self._retry_topics[t]: n for t, n in counts.items()}

    def close(self) -> None:
        with self._lock:
            self._session = None
