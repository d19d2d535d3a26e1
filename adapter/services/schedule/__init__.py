"""The ScheduleService: serves the delay-level topics (see :mod:`.service`), with two
delivery guarantees (:mod:`.delivery`)."""

from adapter.services.schedule.service import (
    INVALID_SCHEDULE_ENTRY,
    DeliveryGuarantee,
    ScheduleService,
    ScheduleServiceOptions,
    ScheduleServiceOptionsDict,
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
    "ScheduleStats",
    "level_delay_ms",
    "level_topics_pattern",
]
