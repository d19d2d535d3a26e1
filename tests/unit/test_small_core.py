"""Tag filters, message ids, stats, option validation and the config split."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Any

import pytest

from adapter.clients.producer import ProducerSettings
from adapter.clients.push.push_consumer import PushConsumerSettings
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.filter import TagFilter
from adapter.core.ids import MessageIdGenerator
from adapter.core.stats import Reservoir, percentile
from adapter.embedded.broker import EmbeddedKafka
from adapter.errors import AdapterError, ConfigError, InvalidInputError, TopicNameError
from adapter.io.avro import decode_trace
from adapter.io.config import admin_config, build_options, check_kafka_config, producer_config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("expr", "tag", "matches"),
    [
        ("*", None, True),
        ("*", "A", True),
        (None, "A", True),
        ("", "A", True),
        ("TagA || TagB", "TagA", True),
        ("TagA || TagB", "TagB", True),
        ("TagA || TagB", "TagC", False),
        ("TagA||TagB", "TagB", True),
        ("TagA", None, False),
    ],
)
def test_tag_filter(expr: str | None, tag: str | None, matches: bool) -> None:
    assert TagFilter.parse(expr).matches(tag) is matches


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("TagA || ", "empty tag"),
        ("||", "empty tag"),
        ("TagA |||| TagB", "empty tag"),
        (5, "must be a string"),
        ("TagA && TagB", "only '||'"),  # RocketMQ's tag expressions have no AND
        ("TagA | TagB", "only '||'"),
        ("Tag A", "no spaces"),
        ("TagA || *", "'*' alone"),
        ("a = 1", "only '||'"),  # SQL92 filters are another feature
        ("(TagA)", "only '||'"),
    ],
)
def test_bad_tag_expression_names_the_value(expr: object, says: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(says)) as info:
        TagFilter.parse(expr)  # type: ignore[arg-type]
    assert info.value.field == "subExpression" and info.value.value == expr


def test_message_ids_are_unique_across_threads_and_32_hex() -> None:
    gen = MessageIdGenerator(b"\x01" * 10)
    out: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        ids = [next(gen.ids).decode() for _ in range(2000)]
        with lock:
            out.extend(ids)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 8000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in out)
    with pytest.raises(ValueError):
        MessageIdGenerator(b"short")


def test_percentiles_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([], 50) is None
    r = Reservoir(size=10)
    r.extend(float(v) for v in range(100))
    s = r.summary()
    assert s.count == 10 and s.max == 99 and s.p50 == 94


def test_unknown_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        build_options(PushConsumerSettings, {"max_reconsume_time": 3}, "PushConsumer")
    assert info.value.field == "max_reconsume_time"
    assert "max_reconsume_times" in str(info.value)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"consume_message_batch_max_size": -1}, "consume_message_batch_max_size"),
        ({"consume_message_batch_max_size": 2000}, "consume_message_batch_max_size"),
        ({"max_reconsume_times": -2}, "max_reconsume_times"),
        ({"consume_timeout": 0}, "consume_timeout"),
        ({"message_model": "SIDEWAYS"}, "message_model"),
        ({"delay_levels": "1s 5q"}, "messageDelayLevel token 2"),
    ],
)
def test_bad_consumer_options_name_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        build_options(PushConsumerSettings, options, "PushConsumer")
    assert info.value.field == field


def test_bad_producer_options_name_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        build_options(ProducerSettings, {"send_msg_timeout_ms": 0}, "Producer")
    assert info.value.field == "send_msg_timeout_ms"


def test_kafka_config_checks_shape_and_keeps_security_everywhere() -> None:
    with pytest.raises(ConfigError) as info:
        check_kafka_config({"group.id": "g"}, "consumer")
    assert info.value.field == "bootstrap.servers"
    with pytest.raises(ConfigError) as info:
        check_kafka_config({"bootstrap.servers": "x", "linger.ms": [1]}, "producer")
    assert info.value.field == "linger.ms"
    config = {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "secret",
        "ssl.ca.location": "/ca.pem",
        "group.id": "g",
        "auto.offset.reset": "earliest",
        "linger.ms": 7,
        "some.unknown": "kept for librdkafka to reject",
    }
    prod = producer_config(config)
    admin = admin_config(config)
    for derived in (prod, admin):
        for key in (
            "security.protocol",
            "sasl.mechanism",
            "sasl.username",
            "sasl.password",
            "ssl.ca.location",
        ):
            assert derived[key] == config[key]
        assert "group.id" not in derived and "auto.offset.reset" not in derived
        assert derived["some.unknown"] == "kept for librdkafka to reject"
    assert prod["linger.ms"] == 7 and "linger.ms" not in admin


@pytest.mark.parametrize("topic", ["rmq_retry_g", "rmq.anything", "rmq_"])
def test_reserved_prefixes_are_refused_for_user_topics(topic: str) -> None:
    with pytest.raises(TopicNameError) as info:
        naming.to_kafka(topic)
    assert info.value.value == topic


@pytest.mark.parametrize("kafka_topic", ["rmq.retry.", "rmq.retry._41", "rmq.dlq.a_2"])
def test_non_canonical_kafka_names_are_refused(kafka_topic: str) -> None:
    with pytest.raises(TopicNameError):
        naming.from_kafka(kafka_topic)


def test_flow_control_backoff_counts_the_streak_not_all_attempts() -> None:
    from adapter.clients.producer.retrying import (
        FlowControlled,
        RetriableSendFailure,
        send_retrying,
    )
    from adapter.core.backoff import ExponentialBackoff

    sleeps: list[float] = []
    failures = iter(
        [FlowControlled("q"), RetriableSendFailure("r"), FlowControlled("q"), FlowControlled("q")]
    )

    def attempt() -> str:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return "ok"

    retrying = send_retrying(
        retries=4, backoff=ExponentialBackoff(), sleep=sleeps.append, uniform=lambda a, b: 0.0
    )
    assert retrying(attempt) == "ok"
    assert sleeps == [1.0, 0.0, 1.0, 1.6]


@pytest.mark.parametrize(
    "call",
    [
        lambda: MessageIdGenerator(b"short"),
        lambda: EmbeddedKafka("bad name!"),
        lambda: EmbeddedKafka("x", authorizer=True),
        lambda: DelayLevels.DEFAULT.index(timedelta(milliseconds=7)),
        lambda: decode_trace(b"", "no-such-schema"),
    ],
    ids=["message-id-prefix", "broker-name", "broker-authorizer", "delay-index", "trace-schema"],
)
def test_bad_input_errors_share_the_one_root_and_name_the_field(call: Any) -> None:
    """Issue 11 #13: these raised plain ``ValueError`` before; now ``AdapterError``s that
    are still ``ValueError``s and name the field."""
    with pytest.raises(InvalidInputError) as err:
        call()
    assert isinstance(err.value, AdapterError) and isinstance(err.value, ValueError)
    assert err.value.field in str(err.value)


def test_librdkafka_log_lines_go_through_python_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client the project creates logs librdkafka's lines (here: a refused connection to a
    closed local port) under ``adapter.librdkafka`` as warnings, not raw on stderr; a config
    that brings its own ``logger`` keeps it."""
    import logging

    from confluent_kafka import Producer as RawProducer

    from adapter.io.errors import make_client

    caplog.set_level(logging.DEBUG, logger="adapter.librdkafka")
    producer = make_client(
        RawProducer, {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 10}, what="t"
    )
    for _ in range(50):
        producer.poll(0.1)
        if any(r.name == "adapter.librdkafka" for r in caplog.records):
            break
    lines = [r for r in caplog.records if r.name == "adapter.librdkafka"]
    assert lines, "no librdkafka line reached logging"
    assert any("Connection refused" in r.getMessage() for r in lines)
    assert all(r.levelno <= logging.WARNING for r in lines)

    own: list[str] = []

    class Own:
        def log(self, level: int, msg: str, *args: Any) -> None:
            own.append(msg % args)

    other = make_client(
        RawProducer, {"bootstrap.servers": "127.0.0.1:1", "logger": Own()}, what="t"
    )
    for _ in range(50):
        other.poll(0.1)
        if own:
            break
    assert own


@pytest.mark.parametrize(
    ("typed", "validated"),
    [
        ("adapter.clients.push.push_consumer:PushConsumerOptions", "PushConsumerSettings"),
        ("adapter.clients.producer:ProducerOptions", "ProducerSettings"),
        ("adapter.clients.simple.simple_consumer:SimpleConsumerOptions", "SimpleOptions"),
        ("adapter.services.schedule.service:ScheduleServiceOptions", "ScheduleServiceSettings"),
        ("adapter.kafka:DropInOptions", "DropInSettings"),
    ],
)
def test_typed_options_name_exactly_the_validated_options(typed: str, validated: str) -> None:
    """What mypy and editors see (the ``TypedDict`` behind ``**options``) is exactly what
    the client accepts (the dataclass that validates them): no option missing, none extra."""
    import dataclasses
    import importlib
    import typing

    module_name, typed_name = typed.split(":")
    module = importlib.import_module(module_name)
    keys = set(typing.get_type_hints(getattr(module, typed_name)))
    fields = {f.name for f in dataclasses.fields(getattr(module, validated))}
    assert keys == fields, (sorted(keys - fields), sorted(fields - keys))


def test_the_drop_in_module_stands_in_for_confluent_kafka() -> None:
    """``from adapter.kafka import KafkaError`` failed: the names a confluent-kafka consumer
    module imports are there, and are confluent-kafka's own."""
    import confluent_kafka

    import adapter.kafka as ck

    for name in (
        "KafkaError",
        "KafkaException",
        "TopicPartition",
        "Message",
        "Producer",
        "OFFSET_BEGINNING",
        "OFFSET_END",
        "OFFSET_STORED",
        "OFFSET_INVALID",
        "TIMESTAMP_CREATE_TIME",
    ):
        assert getattr(ck, name) is getattr(confluent_kafka, name), name
    assert issubclass(ck.Consumer, confluent_kafka.Consumer)


def test_repeated_librdkafka_lines_are_written_once_then_summarised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker that is down made librdkafka repeat "Connect ... failed" every second: about
    60 identical warnings before the client gave up."""
    import logging

    from adapter.io.errors import LibrdkafkaLog

    now = [0.0]
    log = LibrdkafkaLog(logging.getLogger("t.rdkafka"), every_s=30, clock=lambda: now[0])
    line = "%s [%s] %s"
    with caplog.at_level(logging.DEBUG, "t.rdkafka"):
        for i in range(60):
            now[0] = float(i)
            log.log(
                logging.ERROR, line, "FAIL", "rdkafka#producer-1", f"Connect failed (after {i}ms)"
            )
        log.log(logging.ERROR, line, "FAIL", "rdkafka#producer-1", "Authentication failed")
        # another client's first such line is its own news (it was hidden when an earlier
        # client, even one of an earlier test, had written it in the last 30 s)
        log.log(logging.ERROR, line, "FAIL", "rdkafka#producer-12", "Connect failed (after 3ms)")
    texts = [r.getMessage() for r in caplog.records]
    assert texts[0] == "FAIL [rdkafka#producer-1] Connect failed (after 0ms)"
    assert texts[1].endswith("(29 more like it in the last 30 s)")
    assert "Authentication failed" in texts[2]
    assert texts[3:] == ["FAIL [rdkafka#producer-12] Connect failed (after 3ms)"]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize("port", [-1, 65536, "9100", True])
def test_a_bad_metrics_port_names_the_field_for_every_client(port: object) -> None:
    from adapter.clients.push.push_options import PushConsumerSettings
    from adapter.services.schedule.options import ScheduleServiceSettings

    for settings in (PushConsumerSettings, ScheduleServiceSettings):
        with pytest.raises(ConfigError, match="metrics_port"):
            settings(metrics_port=port)  # type: ignore[arg-type]
    assert PushConsumerSettings(metrics_port=0).metrics_port == 0
    assert ScheduleServiceSettings(metrics_port=65535).metrics_port == 65535
