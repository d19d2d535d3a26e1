"""librdkafka's log lines go through Python logging, repeated ones summarised."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.unit


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
