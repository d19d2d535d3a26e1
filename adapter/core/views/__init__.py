"""What the admin commands report: pure data, the arithmetic (lag, waiting entries, reset
targets) and the rendering (text lines and JSON).  No clients, no clock reads.

Every topic is shown by its logical name (``orders``, ``%RETRY%g``, ``%DLQ%g``,
``SCHEDULE_TOPIC_XXXX/L03-10s``); JSON adds the Kafka name as ``kafka_topic``.

One module per report (:mod:`.progress`, :mod:`.resets`, :mod:`.schedule`), over what was read
from the cluster (:mod:`adapter.core.cluster`), partition health (:mod:`.health`) and the
text helpers (:mod:`.text`); every name is importable from here.  Presentation: it belongs to
the ops layer, over the core's data.
"""

from __future__ import annotations

from adapter.core.cluster import (
    HEALTH_OK,
    LEADERLESS,
    UNDER_REPLICATED,
    GroupInfo,
    Logical,
    Member,
    PartitionHealth,
    Record,
    assignment_text,
    partition_status,
)
from adapter.core.views.health import health_notes
from adapter.core.views.progress import (
    DlqSize,
    GroupProgress,
    PartitionProgress,
    build_progress,
    compute_lag,
    start_rule,
    subscribed_topics,
)
from adapter.core.views.resets import ResetResult, ResetRow, reset_offsets
from adapter.core.views.schedule import LevelPartition, LevelStatus, ScheduleStatus
from adapter.core.views.text import format_span_ms

__all__ = [
    "HEALTH_OK",
    "LEADERLESS",
    "UNDER_REPLICATED",
    "DlqSize",
    "GroupInfo",
    "GroupProgress",
    "LevelPartition",
    "LevelStatus",
    "Logical",
    "Member",
    "PartitionHealth",
    "PartitionProgress",
    "Record",
    "ResetResult",
    "ResetRow",
    "ScheduleStatus",
    "assignment_text",
    "build_progress",
    "compute_lag",
    "format_span_ms",
    "health_notes",
    "partition_status",
    "reset_offsets",
    "start_rule",
    "subscribed_topics",
]
