"""A share group's configuration, set through the admin client when a
``SimpleConsumer(backend="share")`` starts: where a share-partition without state starts,
the delivery limit, and (when given) the record lock; and the lock in force read back.

Group configs are dynamic broker configs of resource type GROUP: they apply to every
member, and may be set before the group has any (docs/semantics.md §4.13.1).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from adapter.clients.share.share_rules import OffsetReset, lock_ms, offset_reset
from adapter.core.offsets import ConsumeFromWhere
from adapter.errors import AuthenticationError, ConfigError
from adapter.io.config import admin_config
from adapter.io.errors import AUTH_CODES, make_client, permission_hint

__all__ = [
    "BROKER_DEFAULT_LOCK_S",
    "GROUP_LIMIT",
    "GROUP_LOCK",
    "GROUP_RESET",
    "ResetRefresher",
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
#: How long a refresh may take (seconds): a later one comes anyway.
_REFRESH_TIMEOUT_S = 10.0
#: After a refresh failed, the next try comes this soon (seconds), doubling up to the max.
_RETRY_FIRST_S, _RETRY_MAX_S = 0.5, 30.0

log = logging.getLogger("adapter.simple")


class _Clock(Protocol):
    def now_ms(self) -> int: ...


def share_group_configs(
    reset: str,
    delivery_limit: int,
    lock_s: float | None,
) -> dict[str, str]:
    """The group configs a consumer sets at start (the lock only when it was given)."""
    wanted = {GROUP_RESET: reset, GROUP_LIMIT: str(delivery_limit)}
    if lock_s is not None:
        wanted[GROUP_LOCK] = str(lock_ms(lock_s))
    return wanted


def _set_group_configs(
    admin: AdminClient, group: str, wanted: Mapping[str, str], timeout_s: float
) -> None:
    """Set ``wanted`` on ``group``'s configs (the others left as they are); raises what the
    broker answered."""
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in wanted.items()
        ],
    )
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=timeout_s)


def configure_share_group(
    config: Mapping[str, Any], group: str, wanted: Mapping[str, str], given: Mapping[str, Any]
) -> float:
    """Set ``wanted`` on ``group`` (other group configs are left as they are) and return
    the record lock in force, in seconds.  A refusal raises :class:`ConfigError` naming
    the option behind it (``given``: the options as the application gave them)."""
    admin = make_client(AdminClient, admin_config(config), what="share group admin")
    try:
        _set_group_configs(admin, group, wanted, _ADMIN_TIMEOUT_S)
    except confluent_kafka.KafkaException as exc:
        refused = _refused(exc, group, "ALTER_CONFIGS", f"setting its configuration {dict(wanted)}")
        if refused is not None:
            raise refused from exc
        name = "max_delivery_attempts" if GROUP_LIMIT in str(exc) else "lock_duration"
        raise ConfigError(
            name,
            given.get(name),
            f"the broker refused the share group's configuration {dict(wanted)}: {exc}",
        ) from exc
    if GROUP_LOCK in wanted:
        return int(wanted[GROUP_LOCK]) / 1000
    lock_s = BROKER_DEFAULT_LOCK_S
    try:
        for fut in admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values():
            entry = fut.result(timeout=_ADMIN_TIMEOUT_S).get(GROUP_LOCK)
            if entry is not None:
                lock_s = int(entry.value) / 1000
    except confluent_kafka.KafkaException as exc:
        refused = _refused(exc, group, "DESCRIBE_CONFIGS", f"reading its {GROUP_LOCK}")
        if refused is not None:
            raise refused from exc
        raise
    return lock_s


def _refused(
    exc: confluent_kafka.KafkaException, group: str, operation: str, doing: str
) -> AuthenticationError | None:
    """The error naming the missing permission when ``exc`` is an authorization refusal."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, confluent_kafka.KafkaError) or err.code() not in AUTH_CODES:
        return None
    return AuthenticationError(
        f"share group {group!r}: {doing} was refused: {err.str()}"
        f"{permission_hint(err.code(), group, operation)}",
        kafka_error=err,
    )


class ResetRefresher:
    """Sets the group's ``share.auto.offset.reset`` again when :func:`offset_reset` says,
    for as long as the consumer runs, so that a share-partition first fetched at any time
    starts where ``consume_from_where`` said at ``start()`` (docs/semantics.md §4.13.1).

    On a thread of its own: an admin request may take seconds, and must not hold up
    receives and acknowledgements.  A refused or failed request is logged and tried again
    (0.5 s, doubling up to 30 s); the value set before keeps reaching back for a while."""

    def __init__(
        self,
        config: Mapping[str, Any],
        group: str,
        where: ConsumeFromWhere,
        *,
        start_ms: int,
        timestamp_ms: int,
        clock: _Clock,
    ) -> None:
        self._config = config
        self._group = group
        self._where = where
        self._start_ms = start_ms
        self._timestamp_ms = timestamp_ms
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def first(self) -> OffsetReset:
        """The value to set at start, with the rest of the group's configs."""
        return offset_reset(self._where, self._start_ms, self._timestamp_ms, self._start_ms)

    def start(self, first: OffsetReset) -> None:
        """Refresh from ``first``'s ``refresh_at_ms`` on (nothing to do when it has none)."""
        if first.refresh_at_ms is None:
            return
        self._thread = threading.Thread(
            target=self._run,
            args=(first.refresh_at_ms,),
            name=f"rmq-share-reset-{self._group}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop refreshing.  Waits at most a second: a request in flight (the broker
        unreachable) must not hold up the consumer's shutdown; the thread ends with it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _run(self, due_ms: int) -> None:
        admin = make_client(AdminClient, admin_config(self._config), what="share group admin")
        retry_s = _RETRY_FIRST_S
        while not self._stop.wait(max(0, due_ms - self._clock.now_ms()) / 1000):
            plan = offset_reset(
                self._where, self._start_ms, self._timestamp_ms, self._clock.now_ms()
            )
            try:
                _set_group_configs(
                    admin, self._group, {GROUP_RESET: plan.value}, _REFRESH_TIMEOUT_S
                )
            except Exception as exc:
                log.warning(
                    "share group %s: setting %s=%s failed (trying again in %.1f s): %s",
                    self._group,
                    GROUP_RESET,
                    plan.value,
                    retry_s,
                    exc,
                )
                due_ms = self._clock.now_ms() + int(retry_s * 1000)
                retry_s = min(_RETRY_MAX_S, retry_s * 2)
                continue
            retry_s = _RETRY_FIRST_S
            assert plan.refresh_at_ms is not None  # only a start at the first offset has none
            due_ms = plan.refresh_at_ms
