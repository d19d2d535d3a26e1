"""Kafka config dicts and adapter options: validated key by key, unknown keys rejected.

The user's confluent-kafka config dict passes through.  Every client the adapter creates
(consumer, producer, admin, the services' internal clients, Spark) is derived from the same
dict, so the connection and security settings (``security.protocol``, ``sasl.*``,
``ssl.*``) reach all of them.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

import confluent_kafka

from adapter.errors import ConfigError

log = logging.getLogger("adapter")

#: Keys that carry where the cluster is and who we are; copied into every derived client.
CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")
CONNECTION_KEYS = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "client.rack",
        "socket.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "broker.address.family",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "oauthbearer_token_refresh_cb",
        "error_cb",
        "logger",
        "log_level",
        "debug",
    }
)
#: Keys that only make sense on a consumer; dropped when deriving a producer or admin.
CONSUMER_ONLY_PREFIXES = (
    "group.",
    "auto.",
    "enable.auto.",
    "session.",
    "heartbeat.",
    "max.poll.",
    "partition.assignment.",
    "fetch.",
    "queued.",
    "isolation.",
    "check.crcs",
    "enable.partition.eof",
    "on_commit",
    "consume.callback.max.messages",
    "coordinator.",
)

#: Keys that only make sense on a producer; dropped when deriving an admin client.
PRODUCER_ONLY_PREFIXES = (
    "enable.idempotence",
    "transactional.",
    "transaction.",
    "queue.buffering.",
    "batch.",
    "linger.",
    "message.timeout.",
    "delivery.",
    "compression.",
    "acks",
    "request.required.acks",
    "retries",
    "retry.backoff",
    "max.in.flight",
    "sticky.partitioning",
    "partitioner",
    "dr_",
    "on_delivery",
)
PRODUCER_ONLY_KEYS = frozenset({"queue.buffering.max.messages", "enable.gapless.guarantee"})

#: The librdkafka settings users set most, for a suggestion when a name is misspelt
#: (librdkafka itself decides what is known: :func:`check_kafka_names`).
KNOWN_KAFKA_KEYS = CONNECTION_KEYS | {
    "acks",
    "allow.auto.create.topics",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "batch.num.messages",
    "batch.size",
    "compression.type",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.idempotence",
    "enable.partition.eof",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "heartbeat.interval.ms",
    "isolation.level",
    "linger.ms",
    "max.in.flight.requests.per.connection",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "message.max.bytes",
    "message.timeout.ms",
    "metadata.max.age.ms",
    "partition.assignment.strategy",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "request.timeout.ms",
    "retries",
    "retry.backoff.ms",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.password",
    "sasl.username",
    "security.protocol",
    "session.timeout.ms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.endpoint.identification.algorithm",
    "ssl.key.location",
    "ssl.key.password",
    "statistics.interval.ms",
    "topic.metadata.refresh.interval.ms",
    "transactional.id",
    "transaction.timeout.ms",
}

_VALUE_TYPES = (str, int, float, bool)


def check_kafka_config(config: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """A copy of ``config`` after checking its shape (librdkafka checks the names)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{owner} config", config, "must be a dict of confluent-kafka settings")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{owner} config key", key, "keys must be non-empty strings")
        if not (
            isinstance(value, _VALUE_TYPES) or callable(value) or isinstance(value, logging.Logger)
        ):
            raise ConfigError(key, value, "must be a str, int, float, bool or a callback")
        out[key] = value
    if not out.get("bootstrap.servers"):
        raise ConfigError("bootstrap.servers", out.get("bootstrap.servers"), "is required")
    check_kafka_names(out)
    return out


#: librdkafka's words for a setting it does not know, or a value it cannot parse
_NO_SUCH = "No such configuration property"
_INVALID = "Invalid value for configuration property"


def check_kafka_names(config: Mapping[str, Any]) -> None:
    """Refuse a setting librdkafka does not know (``bootstrap.server``) or a value it cannot
    parse, now rather than when the client starts: librdkafka checks the names itself on
    a throw-away producer that has no broker to reach (no connection is made, about a
    tenth of a millisecond).  The error names the setting; a close known name is offered
    where this project knows one."""
    probe = {
        k: v for k, v in config.items() if not callable(v) and not isinstance(v, logging.Logger)
    }
    probe["bootstrap.servers"] = ""
    probe["log_level"] = 0  # the probe's own notices (no broker configured) say nothing
    try:
        confluent_kafka.Producer(probe)
    except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
        text = _error_text(exc)
        key = _quoted(text)
        if key is None or key not in config:
            raise ConfigError("config", None, f"refused by librdkafka: {text}") from None
        if text.startswith(_NO_SUCH):
            near = difflib.get_close_matches(key, sorted(KNOWN_KAFKA_KEYS), n=1, cutoff=0.8)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(key, config[key], f"no such librdkafka setting{hint}") from None
        raise ConfigError(key, config[key], f"librdkafka cannot parse it ({text})") from None


def _error_text(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    text = arg.str() if hasattr(arg, "str") else str(arg)
    return str(text)


def _quoted(text: str) -> str | None:
    first = text.find('"')
    last = text.find('"', first + 1)
    return text[first + 1 : last] if 0 <= first < last else None


def admin_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """An admin-client config: every key but the consumer- and producer-only ones, so that
    librdkafka still rejects unknown names (and security settings pass through)."""
    return {
        k: v
        for k, v in producer_config(config).items()
        if k in CONNECTION_KEYS or k.startswith(CONNECTION_PREFIXES) or not _is_producer_only(k)
    }


def _is_producer_only(key: str) -> bool:
    return key.startswith(PRODUCER_ONLY_PREFIXES) or key in PRODUCER_ONLY_KEYS


def producer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A producer config derived from any client config (consumer-only keys dropped)."""
    return {
        k: v
        for k, v in config.items()
        if not k.startswith(CONSUMER_ONLY_PREFIXES) and k not in ("group.id", "group.instance.id")
    }


def require_setting(config: dict[str, Any], key: str, value: Any, why: str) -> None:
    """Set ``key`` to ``value``; a user value that differs is an error naming both."""
    current = config.get(key, value)
    if _normalise(current) != _normalise(value):
        raise ConfigError(key, current, f"the adapter needs {value!r} here: {why}")
    config[key] = value


def _normalise(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


T = TypeVar("T")


def build_options(cls: Callable[..., T], options: Mapping[str, Any], owner: str) -> T:
    """Create an options dataclass from keyword options, rejecting unknown names."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    for name in options:
        if name not in known:
            hint = difflib.get_close_matches(name, sorted(known), n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(name, options[name], f"unknown {owner} option{extra}")
    return cls(**options)


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "must be an int")
    if minimum is not None and value < minimum:
        raise ConfigError(name, value, f"must be >= {minimum}")
    return value


def check_port(name: str, value: Any) -> int | None:
    """A TCP port to listen on (0: any free one), or None."""
    if value is None:
        return None
    check_int(name, value, minimum=0)
    if value > 65535:
        raise ConfigError(name, value, "must be <= 65535")
    return int(value)


def check_seconds(name: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, value, "must be a number of seconds")
    if positive and value <= 0:
        raise ConfigError(name, value, "must be > 0")
    return float(value)


#: The rebalance protocols of ``group.protocol``: ``classic`` (the group's leader assigns
#: partitions; the adapter asks for ``cooperative-sticky``) and ``consumer`` (KIP-848: the
#: broker assigns partitions, incrementally; Kafka >= 4.0).
GROUP_PROTOCOLS = ("classic", "consumer")
#: Settings librdkafka refuses on a member of a ``group.protocol=consumer`` group, and why:
#: the broker holds them for the whole group there.
NOT_FOR_CONSUMER_PROTOCOL = {
    "partition.assignment.strategy": (
        "the broker assigns partitions under group.protocol=consumer; a member may ask for "
        "one of the broker's assignors with group.remote.assignor (uniform, range)"
    ),
    "session.timeout.ms": (
        "the session timeout is the group's under group.protocol=consumer: the broker's "
        "group.consumer.session.timeout.ms, or the group config consumer.session.timeout.ms"
    ),
    "heartbeat.interval.ms": (
        "the heartbeat interval is the group's under group.protocol=consumer: the broker's "
        "group.consumer.heartbeat.interval.ms, or the group config consumer.heartbeat.interval.ms"
    ),
    "group.protocol.type": "group.protocol=consumer has one protocol type, set by the client",
}


def group_protocol(config: Mapping[str, Any]) -> str:
    """The group protocol a consumer config asks for (``classic`` unless set)."""
    value = config.get("group.protocol", "classic")
    protocol = value.lower() if isinstance(value, str) else value
    if protocol not in GROUP_PROTOCOLS:
        raise ConfigError("group.protocol", value, f"must be one of {', '.join(GROUP_PROTOCOLS)}")
    return str(protocol)


def check_group_protocol(config: Mapping[str, Any]) -> str:
    """The group protocol of a consumer config, checked: under ``consumer`` a setting the
    new protocol refuses is an error naming it (before librdkafka's, which does not say
    which key or why, and comes only at ``start()``)."""
    protocol = group_protocol(config)
    if protocol == "consumer":
        for key, why in NOT_FOR_CONSUMER_PROTOCOL.items():
            if key in config:
                raise ConfigError(
                    key, config[key], f"not allowed with group.protocol=consumer: {why}"
                )
    return protocol


def set_rebalance_protocol(config: dict[str, Any]) -> str:
    """Complete a group member's config for its rebalance protocol (checked as by
    :func:`check_group_protocol`) and return it: under ``classic`` the cooperative-sticky
    assignor unless the user chose one; under ``consumer`` nothing (the broker assigns)."""
    protocol = check_group_protocol(config)
    if protocol == "classic":
        config.setdefault("partition.assignment.strategy", "cooperative-sticky")
    return protocol
