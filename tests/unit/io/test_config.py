"""The Kafka config checks and the configs every client derives from the user's."""

from __future__ import annotations

import pytest

from adapter.errors import ConfigError
from adapter.io.config import admin_config, check_kafka_config, producer_config

pytestmark = pytest.mark.unit


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
