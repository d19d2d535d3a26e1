"""A Spark job over TLS: Spark's Kafka source is a Java client, so the librdkafka settings
the user passes (``security.protocol``, ``ssl.ca.location``, ``sasl.*``) are translated to
``kafka.security.protocol``, ``kafka.ssl.truststore.type=PEM``,
``kafka.ssl.truststore.location``, ``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config``
(:func:`adapter.analytics.session.kafka_options`); the streaming job computes its exact
counts over ``SASL_SSL``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from adapter.analytics.jobs import StreamJobOptions, read_metrics, run_consume_metrics
from adapter.analytics.session import kafka_options
from adapter.analytics.testing import shared_spark
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.embedded import EmbeddedKafka
from adapter.io.trace_sink import KafkaTraceSink
from tests.tls.helpers import uid

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

MINUTE = 60_000


def _events(n: int, at: int, status: TraceStatus) -> list[TraceEvent]:
    tag = uid()
    return [
        TraceEvent(at + i, "consumer", "g", "orders", 0, i, f"{tag}-{i}", f"{tag}-{i}", status, 0)
        for i in range(n)
    ]


def test_the_trace_metrics_job_reads_over_sasl_ssl(
    kafka_tls: EmbeddedKafka, tmp_path: Path
) -> None:
    config = kafka_tls.client_config("SASL_SSL")
    options = kafka_options(config)
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == str(kafka_tls.ca_location)
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-256"
    assert "ScramLoginModule" in options["kafka.sasl.jaas.config"]

    topic = f"trace-tls-{uid()}"
    t0 = (int(time.time() * 1000) // MINUTE - 10) * MINUTE
    events = (
        _events(7, t0 + 1_000, TraceStatus.SUCCESS)
        + _events(2, t0 + 2_000, TraceStatus.RETRY)
        + _events(1, t0 + 5 * MINUTE, TraceStatus.SUCCESS)  # moves the watermark past t0
    )
    with KafkaTraceSink(config, topic) as sink:
        for event in events:
            sink(event)
        assert sink.flush(30) == 0
    assert sink.delivered == len(events)

    spark = shared_spark()
    opts = StreamJobOptions(
        output=str(tmp_path / "out"), trace_topic=topic, watermark="10 seconds",
        available_now=True,
    )  # fmt: skip
    progress = run_consume_metrics(spark, config, opts)
    assert progress[0]["input_rows"] >= 1
    # the window the watermark passed is final; the drain run writes the newest one too,
    # provisional (a later run completes it)
    final = read_metrics(spark, str(tmp_path / "out"), final_only=True).collect()
    assert [(r.group, r.topic, r.consumed, r.succeeded, r.retried) for r in final] == [
        ("g", "orders", 9, 7, 2)
    ]
    rows = read_metrics(spark, str(tmp_path / "out")).collect()
    assert sorted((r.consumed, r.provisional) for r in rows) == [(1, True), (9, False)]
