"""librdkafka's lines about a broker still starting up (retried by librdkafka itself) are
INFO, not the warnings a newcomer reads first; real trouble stays a warning."""

from __future__ import annotations

import logging

import pytest

from adapter.io.errors import LibrdkafkaLog

pytestmark = pytest.mark.unit


def test_a_coordinator_still_loading_is_info_and_a_refused_connection_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines = LibrdkafkaLog(logging.getLogger("t.rdk"))
    with caplog.at_level(logging.DEBUG, "t.rdk"):
        lines.log(
            logging.WARNING,
            "%s [%s] %s",
            "GETPID",
            "rdkafka#producer-3",
            "[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
            "Broker: Coordinator load in progress: retrying",
        )
        lines.log(
            logging.ERROR,
            "%s [%s] %s",
            "FAIL",
            "rdkafka#producer-3",
            "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
        )
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]
