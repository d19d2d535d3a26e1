"""Least-privilege ACL sets per role: the Kafka ACLs (resource, pattern, operation) each
component of the project needs, and nothing more, for ``rmq-kafka acl print``.

Pure data (:func:`role_acls`) plus one I/O function (:func:`apply_acls`) that creates them
with the admin client of an :class:`~adapter.io.admin.AdminSession`.  Kafka lets an ACL that
allows ``READ``, ``WRITE``, ``DELETE`` or ``ALTER`` also allow ``DESCRIBE``, so ``DESCRIBE``
is listed only where nothing else is granted; an idempotent producer needs no cluster ACL
on Kafka 3.0 and later (``WRITE`` on a topic is enough).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from adapter.constants import DEFAULT_SCHEDULE_SERVICE_GROUP
from adapter.core import naming
from adapter.core.control import CONTROL_TOPIC
from adapter.core.delay import DelayLevels
from adapter.errors import ConfigError
from adapter.ops.redrive import AUDIT_TOPIC

__all__ = [
    "ROLES",
    "AclSpec",
    "acl_table",
    "apply_acls",
    "role_acls",
    "schedule_prefix",
]

#: the roles ``rmq-kafka acl print --role`` knows
ROLES: Final = ("consumer", "schedule-service", "producer", "console")
#: the consumer group whose committed offsets mark what a DLQ redrive sent (services.redrive)
REDRIVE_GROUP_PREFIX: Final = "rmq-dlq-redrive."
#: the group ids of the admin commands' and the control channel's readers (io.admin)
READER_GROUP_PREFIX: Final = "rmq-ops-reader-"
_RESOURCES: Final = ("TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER")
_PATTERNS: Final = ("LITERAL", "PREFIXED")


@dataclass(frozen=True, slots=True)
class AclSpec:
    """One ALLOW ACL: ``operation`` on the ``resource`` named ``name`` (``pattern``
    ``LITERAL``: that name, ``PREFIXED``: every name starting with it); ``why`` says what
    needs it."""

    resource: str
    name: str
    pattern: str
    operation: str
    why: str

    def __post_init__(self) -> None:
        if self.resource not in _RESOURCES:
            raise ConfigError("resource", self.resource, f"expected one of {_RESOURCES}")
        if self.pattern not in _PATTERNS:
            raise ConfigError("pattern", self.pattern, f"expected one of {_PATTERNS}")

    def line(self, principal: str) -> str:
        return (
            f"ALLOW {principal} {self.operation:<8} {self.resource:<16} {self.pattern:<8} "
            f"{self.name}  # {self.why}"
        )

    def as_json(self, principal: str) -> dict[str, str]:
        return {
            "principal": principal,
            "permission": "ALLOW",
            "operation": self.operation,
            "resource": self.resource,
            "pattern": self.pattern,
            "name": self.name,
            "why": self.why,
        }


def schedule_prefix(namespace: str | None = None) -> str:
    """The Kafka name prefix every delay-level topic of ``namespace`` starts with."""
    first = naming.to_kafka(naming.schedule_topic(1, DelayLevels.DEFAULT, namespace))
    return first[: first.rindex(".") + 1]


def _service_group(namespace: str | None) -> str:
    return (
        f"{DEFAULT_SCHEDULE_SERVICE_GROUP}.{namespace}"
        if namespace
        else DEFAULT_SCHEDULE_SERVICE_GROUP
    )


def _reader_groups() -> AclSpec:
    return AclSpec(
        "GROUP",
        READER_GROUP_PREFIX,
        "PREFIXED",
        "DESCRIBE",
        "the control channel's and admin commands' readers (assign only; librdkafka "
        "looks up their coordinator)",
    )


def _topic(name: str, op: str, why: str, pattern: str = "LITERAL") -> AclSpec:
    return AclSpec("TOPIC", name, pattern, op, why)


def role_acls(
    role: str,
    *,
    group: str | None = None,
    topics: Sequence[str] = (),
    namespace: str | None = None,
    create_topics: bool = True,
    exactly_once: bool = True,
    share: bool = False,
) -> list[AclSpec]:
    """The ACLs ``role`` needs.

    ``consumer``: a consumer group ``group`` subscribed to ``topics`` (PushConsumer,
    orderly, classic SimpleConsumer, the drop-in).  ``schedule-service``: the ScheduleService
    of ``namespace`` forwarding to ``topics`` (every topic when none is given).
    ``producer``: a Producer sending to ``topics`` (and delayed messages).  ``console``:
    the admin commands for ``group`` (progress, reset-offset, dlq list/redrive, msg show,
    schedule status).  ``create_topics=False`` leaves out ``CREATE`` (topics made by an
    operator, the clients' ``auto_create_topics=False``); ``exactly_once=False`` leaves
    out the ScheduleService's transactional id; ``share=True`` (consumer) adds what a
    ``SimpleConsumer(backend="share")`` needs besides: setting (and reading) its share
    group's configuration (start, delivery limit, record lock)."""
    if role not in ROLES:
        raise ConfigError("role", role, f"expected one of {ROLES}")
    kafka_topics = [naming.to_kafka(naming.check_user_topic(t, "topic")) for t in topics]
    levels = schedule_prefix(namespace)
    out: list[AclSpec] = []

    def create(name: str, why: str, pattern: str = "LITERAL") -> None:
        if create_topics:
            out.append(_topic(name, "CREATE", why, pattern))

    if share and role != "consumer":
        raise ConfigError("share", share, "a share group is the consumer role's (--role consumer)")
    if role in ("consumer", "console") and not group:
        raise ConfigError("group", group, f"the {role} role needs --group")
    if role == "consumer":
        assert group is not None
        naming.check_group(group)
        retry = naming.to_kafka(naming.retry_topic(group))
        dlq = naming.to_kafka(naming.dlq_topic(group))
        if not topics:
            raise ConfigError("topic", None, "the consumer role needs the subscribed --topic(s)")
        out.append(AclSpec("GROUP", group, "LITERAL", "READ", "join the group, commit offsets"))
        if share:  # (ALTER_CONFIGS implies DESCRIBE_CONFIGS: reading the lock in force)
            out.append(
                AclSpec(
                    "GROUP",
                    group,
                    "LITERAL",
                    "ALTER_CONFIGS",
                    "set the share group's start, delivery limit and record lock",
                )
            )
        out += [_topic(t, "READ", "the subscribed topic") for t in kafka_topics]
        out.append(_topic(retry, "READ", "consume the group's %RETRY% topic"))
        out.append(_topic(dlq, "WRITE", "send dead letters to %DLQ%"))
        out.append(_topic(levels, "WRITE", "send retries to the delay levels", "PREFIXED"))
        out.append(_topic(CONTROL_TOPIC, "READ", "forced offset resets (group reset --force)"))
        out.append(_topic(CONTROL_TOPIC, "WRITE", "acknowledge resets, circuit state"))
        out.append(_reader_groups())
        create(retry, "create %RETRY% at start")
        create(dlq, "create %DLQ% at start")
        create(levels, "create the delay-level topics at start", "PREFIXED")
        create(CONTROL_TOPIC, "create the control topic on first use")
    elif role == "schedule-service":
        service = _service_group(namespace)
        service_dlq = naming.to_kafka(naming.dlq_topic(service))
        out.append(AclSpec("GROUP", service, "LITERAL", "READ", "the service's consumer group"))
        out.append(_topic(levels, "READ", "read the delay levels", "PREFIXED"))
        retry_prefix = naming.to_kafka(naming.retry_topic("g"))[:-1]
        out.append(_topic(retry_prefix, "WRITE", "forward retries to %RETRY%<group>", "PREFIXED"))
        if kafka_topics:
            out += [_topic(t, "WRITE", "forward delayed messages") for t in kafka_topics]
        else:
            out.append(_topic("*", "WRITE", "forward delayed messages to any topic"))
        out.append(_topic(service_dlq, "WRITE", "records it cannot forward"))
        if exactly_once:
            out.append(
                AclSpec(
                    "TRANSACTIONAL_ID",
                    service,
                    "PREFIXED",
                    "WRITE",
                    "exactly-once forwarding (transactional.id <group>-<uuid>)",
                )
            )
        create(levels, "create the delay-level topics at start", "PREFIXED")
        create(service_dlq, "create its %DLQ% at start")
        create(naming.to_kafka(naming.retry_topic(service)), "create its %RETRY% at start")
    elif role == "producer":
        if not topics:
            raise ConfigError("topic", None, "the producer role needs the --topic(s) it sends to")
        out += [_topic(t, "WRITE", "send messages") for t in kafka_topics]
        out.append(_topic(levels, "WRITE", "send delayed messages", "PREFIXED"))
        create(levels, "create the delay-level topics on the first delayed send", "PREFIXED")
    else:  # console
        assert group is not None
        naming.check_group(group)
        retry = naming.to_kafka(naming.retry_topic(group))
        out.append(_topic("*", "READ", "read and describe every topic (progress, msg show)"))
        out.append(AclSpec("GROUP", group, "LITERAL", "READ", "progress; reset-offset"))
        out.append(
            AclSpec(
                "GROUP",
                _service_group(namespace),
                "LITERAL",
                "DESCRIBE",
                "schedule status: the service's committed offsets",
            )
        )
        out.append(
            AclSpec(
                "GROUP",
                REDRIVE_GROUP_PREFIX + group,
                "LITERAL",
                "READ",
                "dlq list/redrive: what was redriven already",
            )
        )
        out.append(_topic(retry, "WRITE", "dlq redrive (to %RETRY%; --to-origin: the origins)"))
        out.append(_topic(CONTROL_TOPIC, "WRITE", "group reset-offset --force"))
        out.append(_topic(AUDIT_TOPIC, "WRITE", "the redrive audit log"))
        out.append(_reader_groups())
        create(CONTROL_TOPIC, "create the control topic on first use")
        create(AUDIT_TOPIC, "create the audit topic on the first redrive")
    return out


def acl_table(specs: Iterable[AclSpec], principal: str) -> list[str]:
    return [s.line(principal) for s in specs]


def apply_acls(session: Any, specs: Sequence[AclSpec], principal: str) -> int:
    """Create ``specs`` for ``principal`` (``User:name``) with ``session``'s admin client
    (an :class:`~adapter.io.admin.AdminSession`; its principal needs ``ALTER`` on the
    cluster); how many were asked for (creating an existing ACL is no error)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    if ":" not in principal:
        raise ConfigError("principal", principal, "expected a Kafka principal, e.g. User:alice")
    resource = {
        "TOPIC": ResourceType.TOPIC,
        "GROUP": ResourceType.GROUP,
        "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
        "CLUSTER": ResourceType.BROKER,  # librdkafka's name for the cluster resource
    }
    bindings = [
        AclBinding(
            resource[s.resource],
            "kafka-cluster" if s.resource == "CLUSTER" else s.name,
            ResourcePatternType[s.pattern],
            principal,
            "*",
            AclOperation[s.operation],
            AclPermissionType.ALLOW,
        )
        for s in specs
    ]
    if not bindings:
        return 0
    futures = session.admin.create_acls(bindings, request_timeout=session.timeout_s)
    for binding, future in futures.items():
        session.wait(future, f"creating the ACL {binding}")
    return len(bindings)
