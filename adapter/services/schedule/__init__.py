"""The ScheduleService: serves the delay-level topics (see :mod:`.service`), with two
delivery guarantees (:mod:`.delivery`, transactional calls in :mod:`.txn`).  Its options and
stats are in :mod:`.options`, level-topic names in :mod:`.levels`, destination checks in
:mod:`.destinations`, pausing the consumer in :mod:`.pausing`."""

from adapter.services.schedule.options import ScheduleServiceOptionsDict
from adapter.services.schedule.service import (
    INVALID_SCHEDULE_ENTRY,
    DeliveryGuarantee,
    ScheduleService,
    ScheduleServiceOptions,
    ScheduleServiceSettings,
    ScheduleStats,
    level_delay_ms,
    level_topics_pattern,
)

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
