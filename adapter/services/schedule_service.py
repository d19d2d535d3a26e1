"""Deprecated: ``ScheduleService`` lives in :mod:`adapter.services.schedule` (or import it from
:mod:`adapter`).  Importing this module still works and warns once."""

import warnings

from adapter.services.schedule import (
    INVALID_SCHEDULE_ENTRY,
    DeliveryGuarantee,
    ScheduleService,
    ScheduleServiceSettings,
    ScheduleStats,
)

warnings.warn(
    "adapter.services.schedule_service is deprecated: import from adapter.services.schedule",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "INVALID_SCHEDULE_ENTRY",
    "DeliveryGuarantee",
    "ScheduleService",
    "ScheduleServiceSettings",
    "ScheduleStats",
]
