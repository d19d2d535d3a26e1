"""Public topic naming API (see :mod:`adapter.core.naming` for the mapping rules)."""

from adapter.core.naming import (
    DEFAULT_REGISTRY,
    NameRegistry,
    dlq_topic,
    from_kafka,
    group_of,
    is_dlq_topic,
    is_retry_topic,
    retry_topic,
    schedule_topic,
    to_kafka,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "NameRegistry",
    "dlq_topic",
    "from_kafka",
    "group_of",
    "is_dlq_topic",
    "is_retry_topic",
    "retry_topic",
    "schedule_topic",
    "to_kafka",
]
