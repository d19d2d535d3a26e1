"""Pausing the ScheduleService's consumer: the one place that pauses, resumes and rewinds
(seek + pause) its level partitions, as the engine asks (the idea of Spring Kafka's
``ContainerPartitionPausingBackOffManager``).

*When* a partition is paused and until when is the engine's decision
(:class:`~adapter.core.engine.schedule.ScheduleEngine` holds a rewound partition for
``retry_after_ms`` and pauses a full buffer); this class carries it out on the consumer,
counts the pauses and knows which partitions are paused now and why.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from adapter.core.engine.actions import Pause, Resume
from adapter.core.engine.schedule import Rewind
from adapter.core.types import TP
from adapter.services.schedule.options import ScheduleStats

__all__ = ["PartitionPauser"]


class PartitionPauser:
    """Pauses and resumes ``consumer``'s partitions; counts pauses in ``stats.pauses``."""

    def __init__(self, consumer: Any, stats: ScheduleStats) -> None:
        self.consumer = consumer
        self.stats = stats
        self._paused: dict[TP, str] = {}  # why each paused partition is paused

    def apply(self, action: Pause | Resume | Rewind) -> None:
        """Carry out one of the engine's flow actions."""
        if isinstance(action, Rewind):
            self.rewind(action.tp, action.offset)
        elif isinstance(action, Resume):
            self.resume(action.tp)
        else:
            self.pause(action.tp, action.reason)

    def rewind(self, tp: TP, offset: int) -> None:
        """Fetch ``tp`` again from ``offset``, once the engine's hold is over (paused until
        the engine's :class:`~adapter.core.engine.actions.Resume`)."""
        tpo = TopicPartition(tp[0], tp[1], offset)
        self.consumer.pause([tpo])
        self.consumer.seek(tpo)
        self.stats.pauses += 1
        self._paused[tp] = f"rewound to {offset}, held"

    def pause(self, tp: TP, reason: str) -> None:
        self.consumer.pause([TopicPartition(*tp)])
        self.stats.pauses += 1
        self._paused[tp] = reason

    def resume(self, tp: TP) -> None:
        self.consumer.resume([TopicPartition(*tp)])
        self._paused.pop(tp, None)

    def forget(self, tps: list[TP]) -> None:
        """``tps`` were assigned or given up: a partition never inherits a pause
        (:func:`~adapter.io.polling.apply_assignment` resumes what it assigns)."""
        for tp in tps:
            self._paused.pop(tp, None)

    def paused(self) -> dict[TP, str]:
        """The partitions paused now, and why (a snapshot)."""
        return dict(self._paused)
