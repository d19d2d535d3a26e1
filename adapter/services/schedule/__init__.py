"""The ScheduleService: serves the delay-level topics (see :mod:`.service`), with two
delivery guarantees (:mod:`.delivery`, transactional calls in :mod:`.txn`).  Its options and
stats are in :mod:`.options`, level-topic names in :mod:`.levels`, destination checks in
:mod:`.destinations`, pausing the consumer in :mod:`.pausing`."""

from adapter.services.schedule.levels import level_delay_ms, level_topics_pattern
from adapter.services.schedule.options import (
    DeliveryGuarantee,
    ScheduleServiceOptions,
    ScheduleServiceOptionsDict,
    ScheduleServiceSettings,
    ScheduleStats,
)
from adapter.services.schedule.service import INVALID_SCHEDULE_ENTRY, ScheduleService

__all__ = [
    "INVALID_SCHEDULE_ENTRY",
    "DeliveryGuarantee",
    "ScheduleService",
    "ScheduleServiceOptions",
    "ScheduleServiceOptionsDict",
    "ScheduleServiceSettings",
    "ScheduleStats",
    "level_delay_ms",
    "level_topics_pattern",
]
