"""A share group's configuration, set through the admin client when a
``SimpleConsumer(backend="share")`` starts: where a share-partition without state starts,
the delivery limit, and (when given) the record lock; and the lock in force read back.

Group configs are dynamic broker configs of resource type GROUP: they apply to every
member, and may be set before the group has any (docs/semantics.md §4.13.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from adapter.core.offsets import ConsumeFromWhere
from adapter.core.share import auto_offset_reset, lock_ms
from adapter.errors import ConfigError
from adapter.io.config import admin_config

__all__ = [
    "BROKER_DEFAULT_LOCK_S",
    "GROUP_LIMIT",
    "GROUP_LOCK",
    "GROUP_RESET",
    "configure_share_group",
    "share_group_configs",
]

GROUP_LOCK = "share.record.lock.duration.ms"
GROUP_LIMIT = "share.delivery.count.limit"
GROUP_RESET = "share.auto.offset.reset"
#: The broker's default record lock (``group.share.record.lock.duration.ms``), assumed
#: when a group's lock cannot be read.
BROKER_DEFAULT_LOCK_S = 30.0
#: How long an admin request may take (seconds).
_ADMIN_TIMEOUT_S = 30.0


def share_group_configs(
    where: ConsumeFromWhere,
    timestamp_ms: int,
    now_ms: int,
    delivery_limit: int,
    lock_s: float | None,
) -> dict[str, str]:
    """The group configs a consumer sets at start (the lock only when it was given)."""
    wanted = {
        GROUP_RESET: auto_offset_reset(where, timestamp_ms, now_ms),
        GROUP_LIMIT: str(delivery_limit),
    }
    if lock_s is not None:
        wanted[GROUP_LOCK] = str(lock_ms(lock_s))
    return wanted


def configure_share_group(
    config: Mapping[str, Any], group: str, wanted: Mapping[str, str], given: Mapping[str, Any]
) -> float:
    """Set ``wanted`` on ``group`` (other group configs are left as they are) and return
    the record lock in force, in seconds.  A refusal raises :class:`ConfigError` naming
    the option behind it (``given``: the options as the application gave them)."""
    admin = AdminClient(admin_config(config))
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in wanted.items()
        ],
    )
    try:
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(timeout=_ADMIN_TIMEOUT_S)
    except confluent_kafka.KafkaException as exc:
        name = "max_delivery_attempts" if GROUP_LIMIT in str(exc) else "lock_duration"
        raise ConfigError(
            name,
            given.get(name),
            f"the broker refused the share group's configuration {dict(wanted)}: {exc}",
        ) from exc
    if GROUP_LOCK in wanted:
        return int(wanted[GROUP_LOCK]) / 1000
    lock_s = BROKER_DEFAULT_LOCK_S
    for fut in admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values():
        entry = fut.result(timeout=_ADMIN_TIMEOUT_S).get(GROUP_LOCK)
        if entry is not None:
            lock_s = int(entry.value) / 1000
    return lock_s
