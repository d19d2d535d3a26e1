"""Kafka settings are checked by name and value when a client is constructed, not when it
starts: a misspelt key is refused at once, naming it (and a close known name)."""

from __future__ import annotations

from typing import Any

import pytest

from adapter import Producer, PushConsumer, ScheduleService, SimpleConsumer
from adapter.errors import AdapterError, ConfigError
from adapter.io.config import check_kafka_config

pytestmark = pytest.mark.unit

BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


@pytest.mark.parametrize(
    ("key", "value", "suggestion"),
    [
        ("bootstrap.server", "127.0.0.1:1", "bootstrap.servers"),
        ("sesion.timeout.ms", 6000, "session.timeout.ms"),
        ("auto.offset.rest", "earliest", "auto.offset.reset"),
        ("no.such.thing", "x", None),
    ],
)
def test_a_misspelt_setting_is_refused_naming_it(
    key: str, value: Any, suggestion: str | None
) -> None:
    with pytest.raises(ConfigError) as info:
        check_kafka_config({**BASE, key: value}, "consumer")
    assert info.value.field == key
    assert info.value.value == value
    assert "no such librdkafka setting" in str(info.value)
    if suggestion is None:
        assert "did you mean" not in str(info.value)
    else:
        assert f"did you mean {suggestion!r}" in str(info.value)


def test_a_value_librdkafka_cannot_parse_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as info:
        check_kafka_config({**BASE, "session.timeout.ms": "soon"}, "consumer")
    assert (info.value.field, info.value.value) == ("session.timeout.ms", "soon")
    assert "cannot parse" in str(info.value)


def test_known_settings_of_every_client_kind_and_callbacks_pass() -> None:
    config = {
        **BASE,
        "session.timeout.ms": 6000,
        "linger.ms": 5,
        "enable.idempotence": True,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "u",
        "sasl.password": "p",
        "error_cb": lambda err: None,
    }
    assert check_kafka_config(config, "consumer") == config


@pytest.mark.parametrize(
    "make",
    [
        PushConsumer,
        lambda conf: SimpleConsumer(conf, "g"),
        Producer,
        ScheduleService,
    ],
    ids=["PushConsumer", "SimpleConsumer", "Producer", "ScheduleService"],
)
def test_every_client_refuses_a_misspelt_key_when_constructed(make: Any) -> None:
    with pytest.raises(ConfigError) as info:
        make({**BASE, "bootstrap.server": "127.0.0.1:1"})
    assert info.value.field == "bootstrap.server"
    assert isinstance(info.value, AdapterError)
