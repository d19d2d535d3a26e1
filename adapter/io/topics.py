"""Topic provisioning: a group's retry and DLQ topics and the delay-level topics."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.cimpl import NewTopic

from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.errors import ConfigError, KafkaClientError
from adapter.io.config import admin_config, check_kafka_config
from adapter.io.errors import client_error, make_client

log = logging.getLogger("adapter.topics")

DAY_MS = 86_400_000
MAX_MESSAGE_BYTES = "max.message.bytes"
#: Bytes a retry, forward or DLQ copy may add to the record it copies (its headers).
HOP_HEADER_ROOM = 8192


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """One topic to ensure: its logical and Kafka names, partitions and configs."""

    logical: str
    kafka_topic: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def plan_topics(
    *,
    groups: Iterable[str] = (),
    delay_levels: DelayLevels = DelayLevels.DEFAULT,
    namespace: str | None = None,
    partitions: int = 3,
    include_schedule: bool = True,
    max_message_bytes: int | None = None,
) -> list[TopicPlan]:
    """What ``topics ensure`` creates.  Retention stays well above the longest delay.

    ``max_message_bytes``: the largest record the user's topics take (their
    ``max.message.bytes``); every planned topic then takes that plus
    :data:`HOP_HEADER_ROOM` bytes, room for the retry / DLQ headers a copy carries.
    ``None`` leaves the broker's default.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError("partitions", partitions, "must be an int >= 1")
    size: dict[str, str] = {}
    if max_message_bytes is not None:
        if (
            isinstance(max_message_bytes, bool)
            or not isinstance(max_message_bytes, int)
            or max_message_bytes < 1
        ):
            raise ConfigError("max_message_bytes", max_message_bytes, "must be an int >= 1")
        size = {MAX_MESSAGE_BYTES: str(max_message_bytes + HOP_HEADER_ROOM)}
    longest = max(delay_levels.delays_ms)
    schedule_retention = str(max(7 * DAY_MS, 4 * longest))
    plans: list[TopicPlan] = []
    if include_schedule:
        for level in delay_levels.levels():
            logical = naming.schedule_topic(level, delay_levels, namespace)
            plans.append(
                TopicPlan(
                    logical,
                    naming.to_kafka(logical),
                    partitions,
                    {"retention.ms": schedule_retention, "cleanup.policy": "delete", **size},
                )
            )
    for group in groups:
        retry = naming.retry_topic(group)
        dlq = naming.dlq_topic(group)
        plans.append(
            TopicPlan(
                retry, naming.to_kafka(retry), partitions, {"retention.ms": str(7 * DAY_MS), **size}
            )
        )
        plans.append(
            TopicPlan(
                dlq, naming.to_kafka(dlq), partitions, {"retention.ms": str(30 * DAY_MS), **size}
            )
        )
    return plans


def ensure_topics(
    config: Mapping[str, Any],
    plans: Iterable[TopicPlan],
    *,
    replication_factor: int | None = None,
    timeout_s: float = 30.0,
) -> dict[str, bool]:
    """Create the planned topics that do not exist; ``{logical: created}``.  Idempotent.

    A topic that exists keeps its configs, except ``max.message.bytes``: a planned value
    above the topic's current one raises it (never lowers it).
    """
    admin = make_client(
        AdminClient, admin_config(check_kafka_config(config, "admin")), what="admin client"
    )
    return ensure_with(admin, plans, replication_factor=replication_factor, timeout_s=timeout_s)


def ensure_with(
    admin: Any,
    plans: Iterable[TopicPlan],
    *,
    replication_factor: int | None = None,
    timeout_s: float = 30.0,
) -> dict[str, bool]:
    """:func:`ensure_topics` with an ``AdminClient`` the caller already has."""
    plans = list(plans)
    if not plans:
        return {}
    new = [
        NewTopic(
            p.kafka_topic,
            num_partitions=p.partitions,
            replication_factor=-1 if replication_factor is None else replication_factor,
            config=p.config,
        )
        for p in plans
    ]
    futures = admin.create_topics(new, request_timeout=timeout_s, operation_timeout=timeout_s)
    result: dict[str, bool] = {}
    for plan in plans:
        try:
            futures[plan.kafka_topic].result(timeout=timeout_s + 5)
            result[plan.logical] = True
            log.info("created topic %s (%s)", plan.logical, plan.kafka_topic)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                result[plan.logical] = False
                continue
            raise client_error(exc, what=f"creating topic {plan.logical}") from exc
    _wait_visible(admin, [p.kafka_topic for p in plans], timeout_s)
    existing = [p for p in plans if not result[p.logical] and MAX_MESSAGE_BYTES in p.config]
    if existing:
        _raise_size_limits(admin, existing, timeout_s)
    return result


def topic_max_message_bytes(
    config: Mapping[str, Any], topic: str, *, timeout_s: float = 30.0
) -> int:
    """The ``max.message.bytes`` in force for ``topic`` (its own or the broker's default)."""
    admin = make_client(
        AdminClient, admin_config(check_kafka_config(config, "admin")), what="admin client"
    )
    return _max_message_bytes(admin, [naming.to_kafka(topic)], timeout_s)[naming.to_kafka(topic)]


def _max_message_bytes(admin: Any, kafka_topics: list[str], timeout_s: float) -> dict[str, int]:
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in kafka_topics]
    futures = admin.describe_configs(resources, request_timeout=timeout_s)
    out: dict[str, int] = {}
    for res, fut in futures.items():
        try:
            entries = fut.result(timeout=timeout_s + 5)
        except KafkaException as exc:
            raise client_error(exc, what=f"describing topic {res.name}") from exc
        out[res.name] = int(entries[MAX_MESSAGE_BYTES].value)
    return out


def _raise_size_limits(admin: Any, plans: list[TopicPlan], timeout_s: float) -> None:
    current = _max_message_bytes(admin, [p.kafka_topic for p in plans], timeout_s)
    for plan in plans:
        want = int(plan.config[MAX_MESSAGE_BYTES])
        if current[plan.kafka_topic] >= want:
            continue
        res = ConfigResource(
            ResourceType.TOPIC,
            plan.kafka_topic,
            incremental_configs=[
                ConfigEntry(
                    MAX_MESSAGE_BYTES,
                    str(want),
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        try:
            admin.incremental_alter_configs([res])[res].result(timeout=timeout_s + 5)
        except KafkaException as exc:
            raise client_error(exc, what=f"raising max.message.bytes of {plan.logical}") from exc
        log.info(
            "raised max.message.bytes of %s from %d to %d",
            plan.logical,
            current[plan.kafka_topic],
            want,
        )


def _wait_visible(admin: Any, kafka_topics: list[str], timeout_s: float) -> None:
    """Poll metadata until every topic has its partitions and leaders (no fixed sleeps)."""
    missing = set(kafka_topics)
    deadline = time.monotonic() + timeout_s
    while missing:
        md = admin.list_topics(timeout=timeout_s)
        for name in list(missing):
            tmd = md.topics.get(name)
            if (
                tmd is not None
                and tmd.error is None
                and tmd.partitions
                and all(p.leader >= 0 for p in tmd.partitions.values())
            ):
                missing.discard(name)
        if missing and time.monotonic() > deadline:
            raise KafkaClientError(f"topics not visible after {timeout_s}s: {sorted(missing)}")
        if missing:
            admin.poll(0.05)


def ensure_group_topics(
    config: Mapping[str, Any],
    group: str,
    *,
    delay_levels: DelayLevels = DelayLevels.DEFAULT,
    namespace: str | None = None,
    partitions: int = 3,
    max_message_bytes: int | None = None,
) -> dict[str, bool]:
    """The group's ``%RETRY%`` and ``%DLQ%`` topics plus every delay-level topic
    (``max_message_bytes``: see :func:`plan_topics`)."""
    return ensure_topics(
        config,
        plan_topics(
            groups=[group],
            delay_levels=delay_levels,
            namespace=namespace,
            partitions=partitions,
            max_message_bytes=max_message_bytes,
        ),
    )
