"""Logical RocketMQ topic names ↔ legal Kafka topic names.  Pure.

Logical names are what users, logs, the CLI and analytics speak:

=========================== ==========================================
logical                     Kafka topic
=========================== ==========================================
``orders``                  ``orders`` (user topics are used as they are)
``%RETRY%<group>``          ``rmq.retry.<escaped group>``
``%DLQ%<group>``            ``rmq.dlq.<escaped group>``
``SCHEDULE_TOPIC_XXXX/L03-10s``  ``rmq.schedule.L03-10s``
``ns%SCHEDULE_TOPIC_XXXX/L03-10s``  ``rmq.schedule.<escaped ns>.L03-10s``
=========================== ==========================================

Escaping (groups and namespaces): ``[A-Za-z0-9-]`` stand for themselves, ``_`` becomes
``__`` and every other character becomes ``_XX`` per UTF-8 byte (upper-case hex).  The
escaped part therefore never holds a ``.``, so two different groups can never collide in
Kafka, not even under Kafka's rule that ``.`` and ``_`` clash in metric names.  Decoding
is unambiguous: after ``_`` comes either ``_`` or two hex digits.

A group whose physical name would exceed 249 characters keeps an escaped prefix and ends
in ``_h<32 hex digits of SHA-256>`` (``_h`` is never produced by escaping).  Such a name
is collision-free (128-bit digest) and is reversed through a :class:`NameRegistry` that
:func:`to_kafka` fills when it is handed one (the public :mod:`adapter.naming` holds the
process's); the adapter also writes the group into the ``RMQ_GROUP`` header of every retry
and DLQ record.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from adapter.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    KAFKA_DLQ_PREFIX,
    KAFKA_RESERVED_PREFIX,
    KAFKA_RETRY_PREFIX,
    KAFKA_SCHEDULE_PREFIX,
    KAFKA_TOPIC_MAX_LENGTH,
    NAMESPACE_SEPARATOR,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
)
from adapter.core.delay import DelayLevels
from adapter.errors import TopicNameError

_LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_HEX = frozenset("0123456789ABCDEF")
_DIGEST_MARK: Final = "_h"
_DIGEST_HEX_CHARS: Final = 32
_LEVEL_SUFFIX = re.compile(r"^L([0-9]{2,})-([0-9]+(?:ms|s|m|h|d))$")


class NameRegistry:
    """Remembers logical names whose Kafka names had to be shortened to a digest.

    A plain map, owned by whoever hands it to :func:`to_kafka` / :func:`from_kafka` (the
    process's is :data:`adapter.naming.DEFAULT_REGISTRY`); each call is one dict operation,
    which needs no lock."""

    __slots__ = ("_by_kafka",)

    def __init__(self) -> None:
        self._by_kafka: dict[str, str] = {}

    def remember(self, kafka_topic: str, logical: str) -> None:
        self._by_kafka[kafka_topic] = logical

    def lookup(self, kafka_topic: str) -> str | None:
        return self._by_kafka.get(kafka_topic)


# --- escaping --------------------------------------------------------------------------------
def escape(text: str) -> str:
    out: list[str] = []
    for ch in text:
        if ch in _PLAIN:
            out.append(ch)
        elif ch == "_":
            out.append("__")
        else:
            out.extend(f"_{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def unescape(text: str, *, field: str = "kafka_topic") -> str:
    raw = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "_":
            if ch not in _PLAIN:
                raise TopicNameError(
                    field, text, f"character {ch!r} cannot appear in an escaped name"
                )
            raw.extend(ch.encode("ascii"))
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt == "_":
            raw.extend(b"_")
            i += 2
        elif len(text) >= i + 3 and text[i + 1] in _HEX and text[i + 2] in _HEX:
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raise TopicNameError(field, text, f"bad escape at position {i}")
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise TopicNameError(field, text, "escaped bytes are not UTF-8") from exc


def _fit(prefix: str, name: str, logical: str, registry: NameRegistry | None) -> str:
    """``prefix + escape(name)``, shortened to a digest form when it is too long."""
    encoded = escape(name)
    if len(prefix) + len(encoded) <= KAFKA_TOPIC_MAX_LENGTH:
        return prefix + encoded
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX_CHARS]
    room = KAFKA_TOPIC_MAX_LENGTH - len(prefix) - len(_DIGEST_MARK) - _DIGEST_HEX_CHARS
    # a readable hint only: digest names are reversed by the registry.  Cut between whole
    # escapes: a dangling "_" would hide the "_h" marker (and collide with a plain name).
    head = ""
    for ch in name:
        piece = escape(ch)
        if len(head) + len(piece) > room:
            break
        head += piece
    kafka_topic = f"{prefix}{head}{_DIGEST_MARK}{digest}"
    if registry is not None:
        registry.remember(kafka_topic, logical)
    return kafka_topic


# --- logical names ---------------------------------------------------------------------------
def check_group(group: str, field: str = "group") -> str:
    if not isinstance(group, str) or not group:
        raise TopicNameError(field, group, "a consumer group must be a non-empty string")
    return group


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: the group's retry topic (logical)."""
    return RETRY_GROUP_TOPIC_PREFIX + check_group(group)


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: the group's dead-letter topic (logical)."""
    return DLQ_GROUP_TOPIC_PREFIX + check_group(group)


def schedule_topic(level: int, delay_levels: DelayLevels, namespace: str | None = None) -> str:
    """The logical name of one level of ``SCHEDULE_TOPIC_XXXX``: ``SCHEDULE_TOPIC_XXXX/L03-10s``.

    The delay is part of the name so that producers and a ScheduleService configured with
    different tables can never mix their messages.
    """
    name = f"{SCHEDULE_TOPIC}/L{delay_levels.check(level):02d}-{delay_levels.token(level)}"
    if namespace:
        qualified = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
        if group_of(qualified) is not None:
            # "%DLQ" + "%" + ... would read back as the DLQ (or retry) topic of a group
            raise TopicNameError(
                "namespace",
                namespace,
                f"a namespace may not make the name start with {RETRY_GROUP_TOPIC_PREFIX!r} "
                f"or {DLQ_GROUP_TOPIC_PREFIX!r}",
            )
        _schedule_kafka_name(namespace, name[len(SCHEDULE_TOPIC) + 1 :])  # fits Kafka's limit?
        return qualified
    return name


def _schedule_kafka_name(namespace: str, suffix: str) -> str:
    """The Kafka name of a namespaced delay-level topic; refuses a namespace that cannot fit."""
    prefix = KAFKA_SCHEDULE_PREFIX + escape(namespace) + "."
    if len(prefix) + len(suffix) > KAFKA_TOPIC_MAX_LENGTH:
        raise TopicNameError(
            "namespace",
            namespace,
            f"too long for a Kafka topic name once escaped ({len(prefix) + len(suffix)} > "
            f"{KAFKA_TOPIC_MAX_LENGTH} characters; non-ASCII characters take 3 per UTF-8 byte)",
        )
    return prefix + suffix


def is_retry_topic(logical: str) -> bool:
    return logical.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(logical: str) -> bool:
    return logical.startswith(DLQ_GROUP_TOPIC_PREFIX)


def group_of(logical: str) -> str | None:
    """The group of a retry or DLQ topic; ``None`` for any other topic."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if logical.startswith(prefix):
            return logical[len(prefix) :]
    return None


# --- logical ↔ Kafka -------------------------------------------------------------------------
def check_user_topic(topic: str, field: str = "topic") -> str:
    """A user topic is used as it is, so it must already be a legal Kafka name."""
    if not isinstance(topic, str) or not topic:
        raise TopicNameError(field, topic, "a topic must be a non-empty string")
    if len(topic) > KAFKA_TOPIC_MAX_LENGTH:
        raise TopicNameError(field, topic, f"longer than {KAFKA_TOPIC_MAX_LENGTH} characters")
    if topic in (".", ".."):
        raise TopicNameError(field, topic, "'.' and '..' are not legal Kafka topic names")
    if not _LEGAL.match(topic):
        raise TopicNameError(field, topic, "Kafka topic names allow only [A-Za-z0-9._-]")
    if topic.replace(".", "_").startswith(KAFKA_RESERVED_PREFIX.replace(".", "_")):
        # Kafka treats '.' and '_' as the same in topic names (metric collisions)
        raise TopicNameError(
            field, topic, f"the prefix {KAFKA_RESERVED_PREFIX!r} (or 'rmq_') is reserved"
        )
    return topic


def to_kafka(name: str, registry: NameRegistry | None = None) -> str:
    """Map a logical name to its Kafka topic name (legal, reversible, collision-free); a
    digest-shortened name is remembered in ``registry`` when one is given."""
    if not isinstance(name, str) or not name:
        raise TopicNameError("topic", name, "a topic must be a non-empty string")
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        group = check_group(name[len(RETRY_GROUP_TOPIC_PREFIX) :], "topic")
        return _fit(KAFKA_RETRY_PREFIX, group, name, registry)
    if name.startswith(DLQ_GROUP_TOPIC_PREFIX):
        group = check_group(name[len(DLQ_GROUP_TOPIC_PREFIX) :], "topic")
        return _fit(KAFKA_DLQ_PREFIX, group, name, registry)
    namespace, _, bare = name.rpartition(NAMESPACE_SEPARATOR)
    if bare.startswith(SCHEDULE_TOPIC + "/"):
        suffix = bare[len(SCHEDULE_TOPIC) + 1 :]
        if not _LEVEL_SUFFIX.match(suffix):
            raise TopicNameError("topic", name, "expected SCHEDULE_TOPIC_XXXX/L<level>-<delay>")
        if namespace:
            return _schedule_kafka_name(namespace, suffix)
        return KAFKA_SCHEDULE_PREFIX + suffix
    return check_user_topic(name)


def from_kafka(kafka_topic: str, registry: NameRegistry | None = None) -> str:
    """Map a Kafka topic name back to its logical name (a digest-shortened one through
    ``registry``)."""
    if not isinstance(kafka_topic, str) or not kafka_topic:
        raise TopicNameError("kafka_topic", kafka_topic, "must be a non-empty string")
    for prefix, logical_prefix in (
        (KAFKA_RETRY_PREFIX, RETRY_GROUP_TOPIC_PREFIX),
        (KAFKA_DLQ_PREFIX, DLQ_GROUP_TOPIC_PREFIX),
    ):
        if kafka_topic.startswith(prefix):
            body = kafka_topic[len(prefix) :]
            mark = body.rfind(_DIGEST_MARK)
            if (
                mark != -1
                and len(body) - mark == len(_DIGEST_MARK) + _DIGEST_HEX_CHARS
                and (_is_digest_mark(body, mark))
            ):
                known = None if registry is None else registry.lookup(kafka_topic)
                if known is None:
                    raise TopicNameError(
                        "kafka_topic",
                        kafka_topic,
                        "a shortened (digest) name whose group is not known in this process; "
                        "read the RMQ_GROUP header of its records",
                    )
                return known
            group = unescape(body)
            if not group or escape(group) != body:
                raise TopicNameError("kafka_topic", kafka_topic, "not a canonical escaped group")
            return logical_prefix + group
    if kafka_topic.startswith(KAFKA_SCHEDULE_PREFIX):
        body = kafka_topic[len(KAFKA_SCHEDULE_PREFIX) :]
        namespace, _, suffix = body.rpartition(".")
        if not _LEVEL_SUFFIX.match(suffix):
            raise TopicNameError("kafka_topic", kafka_topic, "not a schedule topic name")
        logical = f"{SCHEDULE_TOPIC}/{suffix}"
        return f"{unescape(namespace)}{NAMESPACE_SEPARATOR}{logical}" if namespace else logical
    return check_user_topic(kafka_topic, "kafka_topic")


def _is_digest_mark(body: str, mark: int) -> bool:
    """True when the ``_h`` at ``mark`` is the digest marker, not the tail of an escape."""
    # count the underscores right before the mark: an odd run means "_h" is escaped text
    run = 0
    j = mark - 1
    while j >= 0 and body[j] == "_":
        run += 1
        j -= 1
    return run % 2 == 0 and all(c in "0123456789abcdef" for c in body[mark + 2 :])


def schedule_level_of(kafka_topic: str) -> tuple[int, str] | None:
    """``(level, delay token)`` of a Kafka schedule topic, or ``None`` for any other topic."""
    if not kafka_topic.startswith(KAFKA_SCHEDULE_PREFIX):
        return None
    match = _LEVEL_SUFFIX.match(kafka_topic.rpartition(".")[2])
    if match is None:
        return None
    return int(match.group(1)), match.group(2)
