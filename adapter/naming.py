"""Public topic naming API (see :mod:`adapter.core.naming` for the mapping rules).

The process's :data:`DEFAULT_REGISTRY` lives here, not in the pure core: :func:`to_kafka`
remembers in it the groups whose Kafka names had to be shortened to a digest (the clients
plan their topics through it), and :func:`from_kafka` reverses those names from it.
"""

from __future__ import annotations

from typing import Final

from adapter.core import naming as _core
from adapter.core.naming import (
    NameRegistry,
    dlq_topic,
    group_of,
    is_dlq_topic,
    is_retry_topic,
    retry_topic,
    schedule_topic,
)

#: the process's registry of digest-shortened names
DEFAULT_REGISTRY: Final = NameRegistry()


def to_kafka(name: str, registry: NameRegistry = DEFAULT_REGISTRY) -> str:
    """Map a logical name to its Kafka topic name (legal, reversible, collision-free)."""
    return _core.to_kafka(name, registry)


def from_kafka(kafka_topic: str, registry: NameRegistry = DEFAULT_REGISTRY) -> str:
    """Map a Kafka topic name back to its logical name."""
    return _core.from_kafka(kafka_topic, registry)


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
