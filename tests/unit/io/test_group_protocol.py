"""The consumer group protocol (``group.protocol``): which settings the adapter adds for each,
and the settings the consumer protocol (KIP-848) refuses, named at construction."""

from __future__ import annotations

from typing import Any

import pytest

from adapter import ConfigError, PushConsumer, ScheduleService, SimpleConsumer
from adapter.io.config import (
    NOT_FOR_CONSUMER_PROTOCOL,
    check_group_protocol,
    set_rebalance_protocol,
)
from adapter.io.polling import is_cooperative
from adapter.kafka import Consumer as DropInConsumer

BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g1"}
NEW = {**BASE, "group.protocol": "consumer"}
REFUSED: dict[str, Any] = {
    "partition.assignment.strategy": "cooperative-sticky",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "group.protocol.type": "consumer",
}


def test_every_setting_librdkafka_refuses_under_the_consumer_protocol_is_listed() -> None:
    assert set(REFUSED) == set(NOT_FOR_CONSUMER_PROTOCOL)


def test_classic_gets_the_cooperative_assignor_unless_the_user_chose_one() -> None:
    conf: dict[str, Any] = dict(BASE)
    assert set_rebalance_protocol(conf) == "classic"
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert is_cooperative(conf)
    chosen = {**BASE, "group.protocol": "CLASSIC", "partition.assignment.strategy": "range"}
    assert set_rebalance_protocol(chosen) == "classic"
    assert chosen["partition.assignment.strategy"] == "range"
    assert not is_cooperative(chosen)


def test_the_consumer_protocol_gets_no_assignor_and_is_incremental() -> None:
    conf: dict[str, Any] = dict(NEW)
    assert set_rebalance_protocol(conf) == "consumer"
    assert "partition.assignment.strategy" not in conf
    assert is_cooperative(conf)


@pytest.mark.parametrize(("key", "value"), sorted(REFUSED.items()))
def test_a_refused_setting_names_the_key_the_value_and_the_cause(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        check_group_protocol({**NEW, key: value})
    text = str(info.value)
    assert key in text and str(value) in text and "group.protocol=consumer" in text
    check_group_protocol({**BASE, key: value})  # classic takes it


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"group\.protocol.*'share'.*classic, consumer"):
        check_group_protocol({**BASE, "group.protocol": "share"})


@pytest.mark.parametrize(
    "make",
    [
        PushConsumer,
        lambda conf: SimpleConsumer(conf, subscription={"t": "*"}),
        ScheduleService,
        DropInConsumer,
    ],
    ids=["push", "simple", "schedule-service", "drop-in"],
)
def test_every_client_refuses_a_refused_setting_at_construction(make: Any) -> None:
    """Before: librdkafka's ``Failed to create consumer: partition.assignment.strategy is
    not supported`` at ``start()``, naming no key the user set (the adapter had added it)."""
    with pytest.raises(ConfigError, match=r"session\.timeout\.ms.*6000.*group\.protocol=consumer"):
        make({**NEW, "session.timeout.ms": 6000})
