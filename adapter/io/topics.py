"""Topic provisioning: a group's retry and DLQ topics and the delay-level topics."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
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
from adapter.errors import (
    AuthenticationError,
    BrokerUnavailableError,
    ConfigError,
    KafkaClientError,
    TlsError,
)
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import admin_config, check_kafka_config
from adapter.io.errors import (
    FatalErrorWatch,
    client_error,
    make_client,
    permission_hint,
    wait_metadata,
)
from adapter.naming import DEFAULT_REGISTRY

log = logging.getLogger("adapter.topics")

DAY_MS = 86_400_000
MAX_MESSAGE_BYTES = "max.message.bytes"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
DEFAULT_REPLICATION_FACTOR = "default.replication.factor"
#: The replication factor the adapter's topics take on a cluster of three brokers or more
#: (Kafka's own for its internal topics), and the in-sync replicas a write then needs: one
#: broker may be down without a write being refused.
CLUSTER_REPLICATION_FACTOR = 3
CLUSTER_MIN_INSYNC_REPLICAS = 2
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
                retry,
                naming.to_kafka(retry, DEFAULT_REGISTRY),
                partitions,
                {"retention.ms": str(7 * DAY_MS), **size},
            )
        )
        plans.append(
            TopicPlan(
                dlq,
                naming.to_kafka(dlq, DEFAULT_REGISTRY),
                partitions,
                {"retention.ms": str(30 * DAY_MS), **size},
            )
        )
    return plans


@dataclass(frozen=True, slots=True)
class Replication:
    """How an adapter topic is replicated: its replication factor, and the topic-level
    ``min.insync.replicas`` it sets (``None``: the broker's default)."""

    factor: int
    min_insync: int | None = None

    def topic_config(self) -> dict[str, str]:
        return {} if self.min_insync is None else {MIN_INSYNC_REPLICAS: str(self.min_insync)}


def plan_replication(
    brokers: int,
    *,
    broker_factor: int = 1,
    broker_min_insync: int = 1,
    factor: int | None = None,
    min_insync: int | None = None,
) -> Replication:
    """The replication of an adapter topic on a cluster of ``brokers`` whose defaults are
    ``broker_factor`` (``default.replication.factor``) and ``broker_min_insync``.

    Unless given, the factor is the broker's default raised to 3 where the cluster has 3
    brokers or more (Kafka's default of 1 would lose the retry ladder with one disk), and a
    factor of 3 or more gets ``min.insync.replicas`` 2 where the broker's default is lower.
    A factor above the broker count, or an in-sync minimum above the factor, is refused."""
    for name, value in (("replication_factor", factor), ("min_insync_replicas", min_insync)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(name, value, "must be an int >= 1")
    if factor is None:
        factor = min(max(broker_factor, min(CLUSTER_REPLICATION_FACTOR, brokers)), brokers)
    elif factor > brokers:
        raise ConfigError(
            "replication_factor",
            factor,
            f"is above the {brokers} broker(s) the cluster has: Kafka would refuse the topic",
        )
    if min_insync is None:
        if factor >= CLUSTER_REPLICATION_FACTOR and broker_min_insync < CLUSTER_MIN_INSYNC_REPLICAS:
            min_insync = CLUSTER_MIN_INSYNC_REPLICAS
    elif min_insync > factor:
        raise ConfigError(
            "min_insync_replicas",
            min_insync,
            f"is above the replication factor {factor}: every write would be refused "
            "(NOT_ENOUGH_REPLICAS)",
        )
    return Replication(factor, min_insync)


def cluster_replication(
    admin: Any,
    timeout_s: float,
    *,
    factor: int | None = None,
    min_insync: int | None = None,
    watch: FatalErrorWatch | None = None,
    where: str | None = None,
) -> Replication:
    """:func:`plan_replication` for the cluster behind ``admin``.  The brokers' defaults
    are read where the principal may describe them (else Kafka's defaults are assumed).
    With the ``watch`` that is ``admin``'s ``error_cb``, a failed TLS handshake raises its
    :class:`~adapter.errors.TlsError` within about a second."""
    try:
        md = wait_metadata(
            admin,
            timeout_s,
            watch=watch,
            serve=lambda: admin.poll(0),
            where=where,
            what="reading the cluster's brokers",
        )
    except KafkaException as exc:
        raise client_error(exc, what="reading the cluster's brokers") from exc
    brokers = max(1, len(md.brokers))
    broker_factor, broker_min_insync = 1, 1
    if factor is None or min_insync is None:
        try:
            res = ConfigResource(ResourceType.BROKER, str(next(iter(md.brokers))))
            entries = admin.describe_configs([res], request_timeout=timeout_s)[res].result(
                timeout=timeout_s + 5
            )
            broker_factor = int(entries[DEFAULT_REPLICATION_FACTOR].value)
            broker_min_insync = int(entries[MIN_INSYNC_REPLICAS].value)
        except Exception as exc:  # no DescribeConfigs on the cluster: Kafka's defaults
            log.debug("broker defaults not readable (%s); assuming Kafka's", exc)
    return plan_replication(
        brokers,
        broker_factor=broker_factor,
        broker_min_insync=broker_min_insync,
        factor=factor,
        min_insync=min_insync,
    )


def unreplicated(md: Any, kafka_topics: Iterable[str]) -> list[tuple[str, int]]:
    """``(topic, brokers)`` for each of ``kafka_topics`` that has a single replica on a
    cluster of more than one broker (one broker down stops it)."""
    brokers = len(md.brokers)
    if brokers <= 1:
        return []
    out = []
    for name in kafka_topics:
        tmd = md.topics.get(name)
        if tmd is not None and tmd.partitions and min(map(_replicas, tmd.partitions.values())) == 1:
            out.append((name, brokers))
    return out


def _replicas(partition: Any) -> int:
    return len(partition.replicas)


def warn_unreplicated(md: Any, kafka_topics: Iterable[str]) -> None:
    for name, brokers in unreplicated(md, kafka_topics):
        log.warning(
            "adapter topic %s has replication factor 1 on a cluster of %d brokers: while its "
            "broker is down nothing can be sent to it or read from it. Recreate it with "
            "`rmq-kafka topics ensure --replication-factor 3` (after deleting it when it is "
            "empty) or raise its replication with kafka-reassign-partitions",
            name,
            brokers,
        )


def ensure_topics(
    config: Mapping[str, Any],
    plans: Iterable[TopicPlan],
    *,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    timeout_s: float = 30.0,
) -> dict[str, bool]:
    """Create the planned topics that do not exist; ``{logical: created}``.  Idempotent.

    A new topic is replicated as :func:`plan_replication` says (3 copies, 2 in sync, on a
    cluster of three brokers or more; a single broker's default on one).  A topic that
    exists keeps its configs, except ``max.message.bytes``: a planned value above the topic's
    current one raises it (never lowers it); one with a single replica on a multi-broker
    cluster is logged as a warning.
    """
    config = check_kafka_config(config, "admin")
    conf = admin_config(config)
    watch = FatalErrorWatch(conf.get("error_cb"), config=conf)
    conf["error_cb"] = watch
    admin = make_client(AdminClient, conf, what="admin client")
    try:
        return ensure_with(
            admin,
            plans,
            replication_factor=replication_factor,
            min_insync_replicas=min_insync_replicas,
            timeout_s=timeout_s,
            watch=watch,
            where=str(config["bootstrap.servers"]),
        )
    except TlsError:
        raise  # it names the broker and why already
    except BrokerUnavailableError as exc:
        if "cannot reach any broker at" in str(exc):
            raise  # no broker answered at all: said where within seconds
        # say where we looked: the usual cause is a wrong bootstrap address
        raise BrokerUnavailableError(
            f"cannot reach any broker at {config['bootstrap.servers']} ({exc})",
            kafka_error=exc.kafka_error,
        ) from exc


def ensure_with(
    admin: Any,
    plans: Iterable[TopicPlan],
    *,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    timeout_s: float = 30.0,
    watch: FatalErrorWatch | None = None,
    where: str | None = None,
) -> dict[str, bool]:
    """:func:`ensure_topics` with an ``AdminClient`` the caller already has (``watch``: its
    ``error_cb``, if a :class:`FatalErrorWatch`, for fail-fast on TLS failures; ``where``:
    the bootstrap address, to say within seconds that no broker answers there)."""
    plans = list(plans)
    if not plans:
        return {}
    replication = cluster_replication(
        admin,
        timeout_s,
        factor=replication_factor,
        min_insync=min_insync_replicas,
        watch=watch,
        where=where,
    )
    new = [
        NewTopic(
            p.kafka_topic,
            num_partitions=p.partitions,
            replication_factor=replication.factor,
            config={**replication.topic_config(), **p.config},
        )
        for p in plans
    ]
    futures = admin.create_topics(new, request_timeout=timeout_s, operation_timeout=timeout_s)
    result: dict[str, bool] = {}
    for plan in plans:
        try:
            futures[plan.kafka_topic].result(timeout=timeout_s + 5)
            result[plan.logical] = True
            log.debug("created topic %s (%s)", plan.logical, plan.kafka_topic)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                result[plan.logical] = False
                continue
            what = f"creating topic {plan.logical}"
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                what += (
                    f": the principal needs CREATE on TOPIC {plan.kafka_topic!r} (an ACL "
                    "on the name or a prefix of it; see rmq-kafka acl print), or the topic "
                    "made beforehand"
                )
            raise client_error(exc, what=what) from exc
    created = [p.logical for p in plans if result[p.logical]]
    if created:  # one line at INFO; each topic at DEBUG
        shown = ", ".join(created[:3]) + (
            f" and {len(created) - 3} more" if len(created) > 3 else ""
        )
        log.info("created %d topic(s): %s", len(created), shown)
    md = wait_visible(admin, [p.kafka_topic for p in plans], timeout_s)
    warn_unreplicated(md, [p.kafka_topic for p in plans if not result[p.logical]])
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


_TOPIC_AUTHZ = KafkaError.TOPIC_AUTHORIZATION_FAILED
#: How long metadata may refuse a topic to this principal before that is its answer: ACLs
#: created a moment ago may not have reached every broker yet.
AUTHORIZATION_GRACE_S = 2.0


def wait_visible(
    admin: Any,
    kafka_topics: list[str],
    timeout_s: float,
    *,
    monotonic: Callable[[], float] = SYSTEM_CLOCK.monotonic,
) -> Any:
    """Poll metadata until every topic has its partitions and leaders (no fixed sleeps);
    return the last metadata.  A topic whose metadata is refused to this principal (it may
    create it but not describe it) fails after :data:`AUTHORIZATION_GRACE_S`, naming the
    topic and the permission."""
    missing = set(kafka_topics)
    started = monotonic()
    deadline = started + timeout_s
    md = None
    probed = False  # asked once by name, after the grace: not again every 50 ms
    while missing or md is None:
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
        now = monotonic()
        if missing and not probed and now - started >= AUTHORIZATION_GRACE_S:
            # a listing of every topic leaves out those the principal may not describe:
            # asked by name, the broker says why
            probed = True
            name = min(missing)
            one = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
            if one is not None and one.error is not None and one.error.code() == _TOPIC_AUTHZ:
                raise AuthenticationError(
                    f"topic {name!r} was created but its metadata is refused to this principal"
                    + permission_hint(
                        _TOPIC_AUTHZ, name, "DESCRIBE (READ or WRITE on it implies DESCRIBE)"
                    )
                )
        if missing and now > deadline:
            raise KafkaClientError(f"topics not visible after {timeout_s}s: {sorted(missing)}")
        if missing:
            admin.poll(0.05)
    return md


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
