"""Unit tests of :mod:`adapter.core.naming`: exact error texts, the length boundaries and the
digest-marker rules (the mapping itself is covered through :mod:`adapter.naming` in
``tests/unit/test_naming.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from adapter.constants import KAFKA_RETRY_PREFIX, KAFKA_SCHEDULE_PREFIX, KAFKA_TOPIC_MAX_LENGTH
from adapter.core.delay import DelayLevels
from adapter.core.naming import (
    NameRegistry,
    check_group,
    check_user_topic,
    from_kafka,
    retry_topic,
    schedule_topic,
    to_kafka,
    unescape,
)
from adapter.errors import TopicNameError

pytestmark = pytest.mark.unit

DEFAULT = DelayLevels.DEFAULT
_SUFFIX = "L03-10s"
#: the longest namespace whose level-3 schedule topic still fits Kafka's limit
_ROOM = KAFKA_TOPIC_MAX_LENGTH - len(KAFKA_SCHEDULE_PREFIX) - len(".") - len(_SUFFIX)
_DIGEST_ROOM = KAFKA_TOPIC_MAX_LENGTH - len(KAFKA_RETRY_PREFIX) - len("_h") - 32


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: unescape("a.b"),
            "kafka_topic='a.b': character '.' cannot appear in an escaped name",
        ),
        (
            lambda: unescape("a.b", field="group"),
            "group='a.b': character '.' cannot appear in an escaped name",
        ),
        (lambda: unescape("_4"), "kafka_topic='_4': bad escape at position 0"),
        (lambda: unescape("ab_4"), "kafka_topic='ab_4': bad escape at position 2"),
        (lambda: unescape("_FF"), "kafka_topic='_FF': escaped bytes are not UTF-8"),
        (lambda: check_group(""), "group='': a consumer group must be a non-empty string"),
        (lambda: retry_topic(None), "group=None: a consumer group must be a non-empty string"),
        (
            lambda: schedule_topic(3, DEFAULT, "%DLQ"),
            "namespace='%DLQ': a namespace may not make the name start with '%RETRY%' or '%DLQ%'",
        ),
        (
            lambda: schedule_topic(3, DEFAULT, "n" * (_ROOM + 1)),
            f"namespace={'n' * (_ROOM + 1)!r}: too long for a Kafka topic name once escaped "
            "(250 > 249 characters; non-ASCII characters take 3 per UTF-8 byte)",
        ),
        (lambda: check_user_topic(5), "topic=5: a topic must be a non-empty string"),
        (lambda: check_user_topic(""), "topic='': a topic must be a non-empty string"),
        (
            lambda: check_user_topic("x" * 250),
            f"topic={'x' * 250!r}: longer than 249 characters",
        ),
        (
            lambda: check_user_topic(".."),
            "topic='..': '.' and '..' are not legal Kafka topic names",
        ),
        (
            lambda: check_user_topic("a b"),
            "topic='a b': Kafka topic names allow only [A-Za-z0-9._-]",
        ),
        (lambda: to_kafka(""), "topic='': a topic must be a non-empty string"),
        (lambda: to_kafka(7), "topic=7: a topic must be a non-empty string"),
        (lambda: to_kafka("%RETRY%"), "topic='': a consumer group must be a non-empty string"),
        (lambda: to_kafka("%DLQ%"), "topic='': a consumer group must be a non-empty string"),
        (
            lambda: to_kafka("SCHEDULE_TOPIC_XXXX/L3"),
            "topic='SCHEDULE_TOPIC_XXXX/L3': expected SCHEDULE_TOPIC_XXXX/L<level>-<delay>",
        ),
        (lambda: from_kafka(""), "kafka_topic='': must be a non-empty string"),
        (
            lambda: from_kafka("rmq.retry._61"),
            "kafka_topic='rmq.retry._61': not a canonical escaped group",
        ),
        (
            lambda: from_kafka("rmq.schedule.bogus"),
            "kafka_topic='rmq.schedule.bogus': not a schedule topic name",
        ),
        (
            lambda: from_kafka("a b"),
            "kafka_topic='a b': Kafka topic names allow only [A-Za-z0-9._-]",
        ),
        # "_h" followed by 32 characters that are not all lower-case hex is no digest marker
        (
            lambda: from_kafka("rmq.retry.a_h" + "X" * 32),
            f"kafka_topic={'a_h' + 'X' * 32!r}: bad escape at position 1",
        ),
        (
            lambda: from_kafka("rmq.retry.a_hZ" + "0" * 31),
            f"kafka_topic={'a_hZ' + '0' * 31!r}: bad escape at position 1",
        ),
    ],
)
def test_errors_read_field_value_cause(call: Callable[[], object], message: str) -> None:
    with pytest.raises(TopicNameError) as info:
        call()
    assert str(info.value) == message


def test_a_digest_name_without_its_registry_entry_is_refused_by_name() -> None:
    kafka = to_kafka("%RETRY%" + "g" * 300)
    for registry in (None, NameRegistry()):
        with pytest.raises(TopicNameError) as info:
            from_kafka(kafka, registry)
        assert str(info.value) == (
            f"kafka_topic={kafka!r}: a shortened (digest) name whose group is not known in "
            "this process; read the RMQ_GROUP header of its records"
        )


def test_unescape_reads_plain_characters_and_doubled_underscores() -> None:
    assert unescape("ab__c_2E") == "ab_c."
    assert unescape("a____b") == "a__b"


def test_a_namespace_exactly_at_the_limit_fits() -> None:
    logical = schedule_topic(3, DEFAULT, "n" * _ROOM)
    assert to_kafka(logical) == f"{KAFKA_SCHEDULE_PREFIX}{'n' * _ROOM}.{_SUFFIX}"
    assert len(to_kafka(logical)) == KAFKA_TOPIC_MAX_LENGTH


def test_a_digest_name_uses_the_whole_limit() -> None:
    """The readable head of a shortened name is as long as the limit allows."""
    kafka = to_kafka("%RETRY%" + "a" * 300)
    assert len(kafka) == KAFKA_TOPIC_MAX_LENGTH
    assert kafka.startswith(KAFKA_RETRY_PREFIX + "a" * _DIGEST_ROOM + "_h")


@pytest.mark.parametrize(
    "group",
    [
        # the head holds "_h" (an escaped "_" then "h") before the real digest marker
        "_h" + "x" * 300,
        # the head ends in an escaped "_" ("__"), right before the marker
        "a" * (_DIGEST_ROOM - 2) + "_" + "b" * 100,
        "a" * (_DIGEST_ROOM - 4) + "__" + "b" * 100,
    ],
)
def test_digest_names_are_found_whatever_the_head_holds(group: str) -> None:
    registry = NameRegistry()
    kafka = to_kafka("%RETRY%" + group, registry)
    assert len(kafka) == KAFKA_TOPIC_MAX_LENGTH
    assert from_kafka(kafka, registry) == "%RETRY%" + group
