"""Unit tests for topic naming: :mod:`adapter.naming` (public) and :mod:`adapter.core.naming`.

Physical Kafka names must be legal (``[A-Za-z0-9._-]``, at most 249 characters), reversible
and collision-free, also under Kafka's rule that ``.`` and ``_`` clash.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from adapter.constants import KAFKA_DLQ_PREFIX, KAFKA_RETRY_PREFIX, KAFKA_TOPIC_MAX_LENGTH
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.naming import escape, schedule_level_of, unescape
from adapter.errors import InvalidDelayLevelError, TopicNameError
from adapter.naming import (
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

pytestmark = pytest.mark.unit

LEGAL = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
DEFAULT = DelayLevels.DEFAULT


def kafka_clash_key(name: str) -> str:
    """Kafka refuses a topic whose name equals an existing one after ``.`` → ``_``."""
    return name.replace(".", "_")


def assert_legal(kafka_name: str) -> None:
    assert LEGAL.match(kafka_name), kafka_name
    assert kafka_name not in (".", "..")
    assert len(kafka_name) <= KAFKA_TOPIC_MAX_LENGTH


def is_digest_form(prefix: str, group: str) -> bool:
    return len(prefix) + len(escape(group)) > KAFKA_TOPIC_MAX_LENGTH


# Any unicode, including lone surrogates (escape/unescape use "surrogatepass").
any_char = st.characters(exclude_categories=())
tricky_char = st.sampled_from(["a", "Z", "0", "-", "_", ".", "%", "|", "/", " ", "h", "é", "😀"])
groups = st.one_of(
    st.text(any_char, min_size=1, max_size=40),
    st.text(tricky_char, min_size=1, max_size=40),
)
long_groups = st.text(
    st.one_of(tricky_char, any_char), min_size=KAFKA_TOPIC_MAX_LENGTH - 30, max_size=420
)
hex32 = st.text(st.sampled_from("0123456789abcdef"), min_size=32, max_size=32)


# --- logical names ----------------------------------------------------------------------------
class TestLogicalNames:
    def test_retry_and_dlq(self) -> None:
        assert retry_topic("g") == "%RETRY%g"
        assert dlq_topic("g") == "%DLQ%g"
        assert retry_topic("my.group_1") == "%RETRY%my.group_1"

    @pytest.mark.parametrize("bad", ["", None, 5])
    def test_bad_group(self, bad: object) -> None:
        with pytest.raises(TopicNameError) as info:
            retry_topic(bad)  # type: ignore[arg-type]
        assert info.value.value == bad
        with pytest.raises(TopicNameError):
            dlq_topic(bad)  # type: ignore[arg-type]

    def test_predicates_and_group_of(self) -> None:
        assert is_retry_topic("%RETRY%g")
        assert not is_retry_topic("%DLQ%g")
        assert not is_retry_topic("orders")
        assert is_dlq_topic("%DLQ%g")
        assert not is_dlq_topic("%RETRY%g")
        assert group_of("%RETRY%g.1") == "g.1"
        assert group_of("%DLQ%x%y") == "x%y"
        assert group_of("orders") is None
        assert group_of("SCHEDULE_TOPIC_XXXX/L03-10s") is None

    def test_schedule_topic(self) -> None:
        assert schedule_topic(3, DEFAULT) == "SCHEDULE_TOPIC_XXXX/L03-10s"
        assert schedule_topic(1, DEFAULT) == "SCHEDULE_TOPIC_XXXX/L01-1s"
        assert schedule_topic(18, DEFAULT) == "SCHEDULE_TOPIC_XXXX/L18-2h"
        assert schedule_topic(3, DEFAULT, namespace="ns") == "ns%SCHEDULE_TOPIC_XXXX/L03-10s"
        assert schedule_topic(3, DEFAULT, namespace=None) == "SCHEDULE_TOPIC_XXXX/L03-10s"

    def test_schedule_topic_custom_table(self) -> None:
        table = DelayLevels.parse("250ms 1500ms 1d")
        assert schedule_topic(1, table) == "SCHEDULE_TOPIC_XXXX/L01-250ms"
        assert schedule_topic(2, table) == "SCHEDULE_TOPIC_XXXX/L02-1500ms"
        assert schedule_topic(3, table) == "SCHEDULE_TOPIC_XXXX/L03-1d"

    def test_schedule_topic_three_digit_level(self) -> None:
        table = DelayLevels(tuple(range(1, 101)))
        assert schedule_topic(100, table) == "SCHEDULE_TOPIC_XXXX/L100-100ms"
        kafka = to_kafka(schedule_topic(100, table))
        assert kafka == "rmq.schedule.L100-100ms"
        assert schedule_level_of(kafka) == (100, "100ms")

    @pytest.mark.parametrize("level", [0, 19, -3])
    def test_schedule_topic_bad_level(self, level: int) -> None:
        with pytest.raises(InvalidDelayLevelError) as info:
            schedule_topic(level, DEFAULT)
        assert info.value.value == level

    def test_same_level_different_tables_have_different_names(self) -> None:
        a = to_kafka(schedule_topic(1, DelayLevels.parse("1s")))
        b = to_kafka(schedule_topic(1, DelayLevels.parse("2s")))
        assert a != b


# --- physical names: examples ----------------------------------------------------------------
class TestToKafkaExamples:
    @pytest.mark.parametrize(
        ("logical", "kafka"),
        [
            ("%RETRY%g", "rmq.retry.g"),
            ("%DLQ%g", "rmq.dlq.g"),
            ("%RETRY%Ab-9", "rmq.retry.Ab-9"),
            ("%RETRY%a.b", "rmq.retry.a_2Eb"),
            ("%RETRY%a_b", "rmq.retry.a__b"),
            ("%RETRY%a b", "rmq.retry.a_20b"),
            ("%RETRY%a%b", "rmq.retry.a_25b"),
            ("%RETRY%é", "rmq.retry._C3_A9"),
            ("%DLQ%😀", "rmq.dlq._F0_9F_98_80"),
            ("%RETRY%\ud800", "rmq.retry._ED_A0_80"),
            ("SCHEDULE_TOPIC_XXXX/L03-10s", "rmq.schedule.L03-10s"),
            ("ns%SCHEDULE_TOPIC_XXXX/L03-10s", "rmq.schedule.ns.L03-10s"),
            ("my.ns%SCHEDULE_TOPIC_XXXX/L01-1s", "rmq.schedule.my_2Ens.L01-1s"),
            ("orders", "orders"),
            ("a.b_c-D9", "a.b_c-D9"),
        ],
    )
    def test_mapping_and_reverse(self, logical: str, kafka: str) -> None:
        assert to_kafka(logical) == kafka
        assert from_kafka(kafka) == logical
        assert from_kafka(kafka, NameRegistry()) == logical  # no digest: no registry needed

    def test_retry_and_dlq_of_same_group_differ(self) -> None:
        for group in ["g", "a.b", "x" * 300]:
            r, d = to_kafka(retry_topic(group)), to_kafka(dlq_topic(group))
            assert r != d
            assert kafka_clash_key(r) != kafka_clash_key(d)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("a.b", "a_b"),
            ("a_2Eb", "a.b"),
            ("a__b", "a_b"),
            ("a_b", "a__b"),
            ("_", "__"),
            ("a-b", "a_b"),
            ("A", "a"),
            ("é", "_C3_A9"),
            ("_h" + "0" * 32, "h" + "0" * 32),
            ("x_h" + "a" * 32, "x.h" + "a" * 32),
            ("%", "_25"),
            ("\ud83d\ude00", "😀"),  # lone surrogates vs the real code point
        ],
    )
    def test_known_tricky_pairs_never_clash(self, a: str, b: str) -> None:
        assert a != b
        for make in (retry_topic, dlq_topic):
            ka, kb = to_kafka(make(a)), to_kafka(make(b))
            assert ka != kb
            assert kafka_clash_key(ka) != kafka_clash_key(kb)
            assert from_kafka(ka, NameRegistry()) == make(a)
            assert from_kafka(kb, NameRegistry()) == make(b)

    @pytest.mark.parametrize(
        "group", ["_h" + "0123456789abcdef" * 2, "q_h" + "f" * 32, "__h" + "1" * 32]
    )
    def test_group_looking_like_a_digest_is_not_taken_for_one(self, group: str) -> None:
        kafka = to_kafka(retry_topic(group))
        # reversed without any registry: it is escaped text, not a digest marker
        assert from_kafka(kafka, NameRegistry()) == retry_topic(group)

    def test_escaped_names_hold_no_dot(self) -> None:
        kafka = to_kafka(retry_topic("a.b.c"))
        assert "." not in kafka[len(KAFKA_RETRY_PREFIX) :]


# --- physical names: properties --------------------------------------------------------------
class TestToKafkaProperties:
    @given(groups)
    @example("a.b")
    @example("_h" + "0" * 32)
    @example("\udfff")
    @example("a|b/c d")
    def test_group_names_legal_and_round_trip(self, group: str) -> None:
        registry = NameRegistry()
        for make in (retry_topic, dlq_topic):
            logical = make(group)
            kafka = to_kafka(logical, registry)
            assert_legal(kafka)
            assert from_kafka(kafka, registry) == logical

    @given(groups)
    def test_escape_round_trip(self, group: str) -> None:
        escaped = escape(group)
        assert re.fullmatch(r"[A-Za-z0-9_-]*", escaped)
        assert unescape(escaped) == group

    @given(groups, groups)
    @settings(max_examples=300)
    def test_distinct_groups_never_share_a_topic(self, a: str, b: str) -> None:
        assume(a != b)
        registry = NameRegistry()
        names = {
            to_kafka(retry_topic(a), registry),
            to_kafka(retry_topic(b), registry),
            to_kafka(dlq_topic(a), registry),
            to_kafka(dlq_topic(b), registry),
        }
        assert len(names) == 4
        assert len({kafka_clash_key(n) for n in names}) == 4

    @given(groups)
    def test_group_topics_never_clash_with_schedule_topics(self, group: str) -> None:
        schedule = {
            kafka_clash_key(to_kafka(schedule_topic(lv, DEFAULT))) for lv in DEFAULT.levels()
        }
        for make in (retry_topic, dlq_topic):
            assert kafka_clash_key(to_kafka(make(group))) not in schedule


# --- long groups: the digest form -------------------------------------------------------------
class TestLongGroups:
    @pytest.mark.parametrize("make", [retry_topic, dlq_topic])
    def test_exactly_at_the_limit_is_not_shortened(self, make: object) -> None:
        prefix = KAFKA_RETRY_PREFIX if make is retry_topic else KAFKA_DLQ_PREFIX
        group = "g" * (KAFKA_TOPIC_MAX_LENGTH - len(prefix))
        kafka = to_kafka(make(group), NameRegistry())  # type: ignore[operator]
        assert kafka == prefix + group
        assert len(kafka) == KAFKA_TOPIC_MAX_LENGTH
        assert from_kafka(kafka, NameRegistry()) == make(group)  # type: ignore[operator]

    def test_one_over_the_limit_is_shortened_to_a_digest(self) -> None:
        group = "g" * (KAFKA_TOPIC_MAX_LENGTH - len(KAFKA_RETRY_PREFIX) + 1)
        registry = NameRegistry()
        kafka = to_kafka(retry_topic(group), registry)
        assert_legal(kafka)
        digest = hashlib.sha256(group.encode()).hexdigest()[:32]
        assert kafka.endswith("_h" + digest)
        assert kafka.startswith(KAFKA_RETRY_PREFIX + "ggg")
        assert from_kafka(kafka, registry) == retry_topic(group)
        assert registry.lookup(kafka) == retry_topic(group)

    @pytest.mark.parametrize("length", [249, 250, 300, 1000, 5000])
    def test_long_group_round_trips_via_registry_only(self, length: int) -> None:
        group = "grp." * (length // 4 + 1)
        group = group[:length]
        registry = NameRegistry()
        for make in (retry_topic, dlq_topic):
            kafka = to_kafka(make(group), registry)
            assert_legal(kafka)
            assert from_kafka(kafka, registry) == make(group)
            with pytest.raises(TopicNameError) as info:
                from_kafka(kafka, NameRegistry())
            assert info.value.value == kafka
            assert "RMQ_GROUP" in str(info.value)

    def test_default_registry_is_filled_by_to_kafka(self) -> None:
        group = "default-registry-" + "z" * 300
        kafka = to_kafka(retry_topic(group))
        assert DEFAULT_REGISTRY.lookup(kafka) == retry_topic(group)
        assert from_kafka(kafka) == retry_topic(group)

    def test_long_groups_sharing_a_prefix_differ(self) -> None:
        base = "p" * 400
        a, b = to_kafka(retry_topic(base + "a")), to_kafka(retry_topic(base + "b"))
        assert a != b
        assert kafka_clash_key(a) != kafka_clash_key(b)

    def test_to_kafka_is_deterministic(self) -> None:
        group = "é" * 200
        assert to_kafka(retry_topic(group), NameRegistry()) == to_kafka(
            retry_topic(group), NameRegistry()
        )

    @pytest.mark.parametrize(
        "group",
        # the digest form keeps an escaped prefix of the group; a cut in the middle of an
        # escape ("__" or "_XX") would leave a dangling "_" before the "_h" marker
        ["a" * n + "_" * 300 for n in range(4)] + ["a" * n + "é" * 150 for n in range(4)],
    )
    def test_digest_names_cut_between_escapes(self, group: str) -> None:
        registry = NameRegistry()
        kafka = to_kafka(retry_topic(group), registry)
        assert_legal(kafka)
        assert from_kafka(kafka, registry) == retry_topic(group)
        with pytest.raises(TopicNameError):
            from_kafka(kafka, NameRegistry())

    @given(long_groups)
    @settings(max_examples=200)
    def test_long_group_property(self, group: str) -> None:
        registry = NameRegistry()
        for prefix, make in ((KAFKA_RETRY_PREFIX, retry_topic), (KAFKA_DLQ_PREFIX, dlq_topic)):
            kafka = to_kafka(make(group), registry)
            assert_legal(kafka)
            assert from_kafka(kafka, registry) == make(group)
            if is_digest_form(prefix, group):
                with pytest.raises(TopicNameError):
                    from_kafka(kafka, NameRegistry())
                # no other group's plain (escaped) name can be this digest name
                body = kafka[len(prefix) :]
                try:
                    other = unescape(body)
                except TopicNameError:
                    continue
                assert to_kafka(make(other), NameRegistry()) != kafka
            else:
                assert from_kafka(kafka, NameRegistry()) == make(group)

    @given(long_groups, long_groups)
    @settings(max_examples=100)
    def test_distinct_long_groups_never_share_a_topic(self, a: str, b: str) -> None:
        assume(a != b)
        registry = NameRegistry()
        ka, kb = to_kafka(retry_topic(a), registry), to_kafka(retry_topic(b), registry)
        assert ka != kb
        assert kafka_clash_key(ka) != kafka_clash_key(kb)

    @given(groups, long_groups)
    def test_short_and_long_groups_never_share_a_topic(self, a: str, b: str) -> None:
        assume(a != b)
        ka, kb = to_kafka(retry_topic(a), NameRegistry()), to_kafka(retry_topic(b), NameRegistry())
        assert kafka_clash_key(ka) != kafka_clash_key(kb)

    @given(hex32, st.text(tricky_char, max_size=20))
    def test_group_ending_in_digest_like_text_is_plain(self, digest: str, head: str) -> None:
        group = head + "_h" + digest
        kafka = to_kafka(retry_topic(group), NameRegistry())
        assert from_kafka(kafka, NameRegistry()) == retry_topic(group)


# --- schedule topics ----------------------------------------------------------------------------
def _accepted_namespace(namespace: str) -> bool:
    """Whether ``schedule_topic`` takes the namespace (refusals have their own tests)."""
    try:
        schedule_topic(3, DEFAULT, namespace)
    except TopicNameError:
        return False
    return True


class TestScheduleTopics:
    @pytest.mark.parametrize("namespace", [None, "ns", "my.ns", "a_b", "x%y", "with space", "é"])
    @pytest.mark.parametrize("level", [1, 3, 18])
    def test_round_trip(self, namespace: str | None, level: int) -> None:
        logical = schedule_topic(level, DEFAULT, namespace)
        kafka = to_kafka(logical)
        assert_legal(kafka)
        assert kafka.startswith("rmq.schedule.")
        assert from_kafka(kafka) == logical
        assert schedule_level_of(kafka) == (level, DEFAULT.token(level))

    @pytest.mark.parametrize("namespace", ["%DLQ", "%RETRY", "%DLQ%x", "%RETRY%%"])
    def test_namespace_that_reads_as_retry_or_dlq_is_refused(self, namespace: str) -> None:
        with pytest.raises(TopicNameError) as info:
            schedule_topic(3, DEFAULT, namespace)
        assert info.value.field == "namespace"
        assert info.value.value == namespace

    @pytest.mark.parametrize("namespace", ["%DLQx", "%RETRY_", "DLQ", "a%DLQ"])
    def test_namespace_near_the_prefixes_is_fine(self, namespace: str) -> None:
        kafka = to_kafka(schedule_topic(3, DEFAULT, namespace))
        assert from_kafka(kafka) == schedule_topic(3, DEFAULT, namespace)

    @example(namespace="%DLQ", level=1)
    @example(namespace="\U00010000" * 40, level=1)  # 480 characters once escaped
    @given(st.text(any_char, min_size=1, max_size=40), st.integers(min_value=1, max_value=18))
    def test_namespace_property(self, namespace: str, level: int) -> None:
        suffix = "." + schedule_topic(level, DEFAULT).rpartition("/")[2]
        escaped_length = len("rmq.schedule.") + len(escape(namespace)) + len(suffix)
        if group_of(f"{namespace}%") is not None or escaped_length > KAFKA_TOPIC_MAX_LENGTH:
            # refused: reads as a retry/DLQ name (see above) or cannot fit Kafka's 249 characters
            with pytest.raises(TopicNameError) as info:
                schedule_topic(level, DEFAULT, namespace)
            assert info.value.field == "namespace"
            assert info.value.value == namespace
            return
        logical = schedule_topic(level, DEFAULT, namespace)
        kafka = to_kafka(logical)
        assert_legal(kafka)
        assert from_kafka(kafka) == logical
        assert schedule_level_of(kafka) == (level, DEFAULT.token(level))

    @given(st.text(any_char, min_size=1, max_size=20), st.text(any_char, min_size=1, max_size=20))
    def test_distinct_namespaces_distinct_topics(self, a: str, b: str) -> None:
        assume(a != b and _accepted_namespace(a) and _accepted_namespace(b))
        ka, kb = to_kafka(schedule_topic(3, DEFAULT, a)), to_kafka(schedule_topic(3, DEFAULT, b))
        assert kafka_clash_key(ka) != kafka_clash_key(kb)
        bare = to_kafka(schedule_topic(3, DEFAULT))
        assert kafka_clash_key(ka) != kafka_clash_key(bare)

    def test_levels_have_distinct_topics(self) -> None:
        names = {to_kafka(schedule_topic(lv, DEFAULT)) for lv in DEFAULT.levels()}
        assert len(names) == 18

    @pytest.mark.parametrize(
        "bad",
        [
            "SCHEDULE_TOPIC_XXXX/foo",
            "SCHEDULE_TOPIC_XXXX/L3-10s",
            "SCHEDULE_TOPIC_XXXX/L03-10x",
            "SCHEDULE_TOPIC_XXXX/L03-",
            "ns%SCHEDULE_TOPIC_XXXX/",
        ],
    )
    def test_bad_schedule_logical_names(self, bad: str) -> None:
        with pytest.raises(TopicNameError) as info:
            to_kafka(bad)
        assert info.value.value == bad

    def test_namespace_too_long(self) -> None:
        namespace = "n" * 240
        with pytest.raises(TopicNameError) as info:
            schedule_topic(3, DEFAULT, namespace)
        assert info.value.field == "namespace"
        assert info.value.value == namespace
        assert "too long" in str(info.value)

    def test_non_ascii_namespace_counts_its_escaped_length(self) -> None:
        fits = "é" * 38  # "_C3_A9" each: rmq.schedule. (13) + 228 + ".L10-6m" (7) = 248
        assert len(to_kafka(schedule_topic(10, DEFAULT, fits))) == 248
        with pytest.raises(TopicNameError) as info:
            schedule_topic(10, DEFAULT, fits + "é")
        assert info.value.field == "namespace"

    def test_too_long_namespace_in_a_logical_name_is_refused_by_to_kafka(self) -> None:
        logical = "n" * 240 + "%" + schedule_topic(3, DEFAULT)
        with pytest.raises(TopicNameError) as info:
            to_kafka(logical)
        assert info.value.field == "namespace"
        assert info.value.value == "n" * 240

    @pytest.mark.parametrize("bad", ["rmq.schedule.foo", "rmq.schedule.ns.L3-10s", "rmq.schedule."])
    def test_bad_schedule_kafka_names(self, bad: str) -> None:
        with pytest.raises(TopicNameError) as info:
            from_kafka(bad)
        assert info.value.value == bad

    @pytest.mark.parametrize(
        ("kafka", "expected"),
        [
            ("rmq.schedule.L03-10s", (3, "10s")),
            ("rmq.schedule.ns.L18-2h", (18, "2h")),
            ("rmq.schedule.L01-250ms", (1, "250ms")),
            ("rmq.schedule.foo", None),
            ("orders", None),
            ("rmq.retry.L03-10s", None),
            ("L03-10s", None),
        ],
    )
    def test_schedule_level_of(self, kafka: str, expected: tuple[int, str] | None) -> None:
        assert schedule_level_of(kafka) == expected


# --- user topics ----------------------------------------------------------------------------------
class TestUserTopics:
    @pytest.mark.parametrize(
        "topic",
        ["orders", "a.b", "a_b", "A-Z.0_9", "x" * 249, "SCHEDULE_TOPIC_XXXX", "rmq", "rmqx.a"],
    )
    def test_legal_topics_pass_through(self, topic: str) -> None:
        assert to_kafka(topic) == topic
        assert from_kafka(topic) == topic

    @pytest.mark.parametrize(
        "topic",
        [
            "with space",
            "x" * 250,
            ".",
            "..",
            "rmq.mine",
            "rmq.",
            "a/b",
            "a%b",
            "tab\there",
            "é",
            "a|b",
        ],
    )
    def test_illegal_topics_raise_naming_the_value(self, topic: str) -> None:
        with pytest.raises(TopicNameError) as info:
            to_kafka(topic)
        assert info.value.value == topic
        assert repr(topic) in str(info.value)

    @pytest.mark.parametrize("topic", ["with space", "x" * 250, ".", "..", "a/b"])
    def test_from_kafka_rejects_illegal_names(self, topic: str) -> None:
        with pytest.raises(TopicNameError) as info:
            from_kafka(topic)
        assert info.value.value == topic

    def test_reserved_prefix_message(self) -> None:
        with pytest.raises(TopicNameError, match="reserved"):
            to_kafka("rmq.mine")

    @pytest.mark.parametrize("bad", ["", None, 3, b"orders"])
    def test_non_strings(self, bad: object) -> None:
        with pytest.raises(TopicNameError):
            to_kafka(bad)  # type: ignore[arg-type]
        with pytest.raises(TopicNameError):
            from_kafka(bad)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", ["%RETRY%", "%DLQ%"])
    def test_empty_group_in_logical_name(self, bad: str) -> None:
        with pytest.raises(TopicNameError):
            to_kafka(bad)


# --- from_kafka on names the adapter never produces -------------------------------------------
class TestFromKafkaRejects:
    @pytest.mark.parametrize(
        "kafka",
        [
            "rmq.retry.a.b",  # '.' is never produced by escaping
            "rmq.retry.a_2e",  # lower-case hex is not an escape
            "rmq.retry.a_",  # dangling escape
            "rmq.retry.a_G1",
            "rmq.dlq._FF",  # not UTF-8
            "rmq.unknown.x",  # reserved prefix
        ],
    )
    def test_bad_physical_names(self, kafka: str) -> None:
        with pytest.raises(TopicNameError) as info:
            from_kafka(kafka, NameRegistry())
        # the message names the offending name (or its escaped part)
        body = kafka.split(".", 2)[2]
        assert body in str(info.value)

    def test_unescape_names_the_field(self) -> None:
        with pytest.raises(TopicNameError) as info:
            unescape("a_Z", field="group")
        assert info.value.field == "group"


@pytest.mark.parametrize("topic", ["rmq_retry_g", "rmq.anything", "rmq_"])
def test_reserved_prefixes_are_refused_for_user_topics(topic: str) -> None:
    with pytest.raises(TopicNameError) as info:
        naming.to_kafka(topic)
    assert info.value.value == topic


@pytest.mark.parametrize("kafka_topic", ["rmq.retry.", "rmq.retry._41", "rmq.dlq.a_2"])
def test_non_canonical_kafka_names_are_refused(kafka_topic: str) -> None:
    with pytest.raises(TopicNameError):
        naming.from_kafka(kafka_topic)
