"""Where ``ScheduleService`` used to live; it is :mod:`adapter.services.schedule` now."""

from adapter.services.schedule import (
    INVALID_SCHEDULE_ENTRY,
    DeliveryGuarantee,
    ScheduleService,
    ScheduleServiceOptions,
    ScheduleStats,
)

__all__ = [
    "INVALID_SCHEDULE_ENTRY",
    "DeliveryGuarantee",
    "ScheduleService",
    "ScheduleServiceOptions",
    "ScheduleStats",
]
