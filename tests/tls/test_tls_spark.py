"""A Spark job over TLS: Spark's Kafka source is a Java client, so the librdkafka settings
the user passes (``security.protocol``, ``ssl.ca.location``, ``sasl.*``) are translated to
``kafka.security.protocol``, ``kafka.ssl.truststore.type=PEM``,
``kafka.ssl.truststore.location``, ``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config``
(:func:`adapter.analytics.session.kafka_options`); the streaming job computes its exact
counts over ``SASL_SSL``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapter import TlsError
from adapter.analytics.dlq_report_job import run_dlq_report
from adapter.analytics.jobs import StreamJobOptions, read_metrics, run_consume_metrics
from adapter.analytics.session import kafka_options
from adapter.analytics.testing import shared_spark
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.embedded import EmbeddedKafka
from adapter.embedded.tls import make_certificates
from adapter.io.trace_sink import KafkaTraceSink
from tests.tls.helpers import cli, properties, uid

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


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that signed nothing the broker has."""
    return make_certificates(tmp_path_factory.mktemp("other-ca")).ca


def _consume_metrics(spark: Any, config: dict[str, Any], out: Path) -> Any:
    opts = StreamJobOptions(output=str(out), trace_topic=f"trace-{uid()}", available_now=True)
    return run_consume_metrics(spark, config, opts)


def _dlq_report(spark: Any, config: dict[str, Any], out: Path) -> Any:
    return run_dlq_report(spark, config, out)


@pytest.mark.parametrize("job", [_consume_metrics, _dlq_report], ids=["stream", "dlq-report"])
def test_a_wrong_ca_fails_the_job_with_the_tls_error_not_javas(
    kafka_tls: EmbeddedKafka,
    other_ca: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    job: Callable[[Any, dict[str, Any], Path], Any],
) -> None:
    """The librdkafka settings that Spark's Kafka source gets are checked first, with the
    same settings through a librdkafka client: a CA that did not sign the broker's
    certificate is a :class:`TlsError` naming certificate verification and the CA file, in
    seconds, and no Java exception reaches the user."""
    spark = shared_spark()
    config = {**kafka_tls.client_config("SASL_SSL"), "ssl.ca.location": str(other_ca)}
    capfd.readouterr()
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        job(spark, config, tmp_path / "out")
    elapsed = time.monotonic() - started
    text = str(info.value)
    assert "TLS handshake" in text and "certificate verification failed" in text, text
    assert f"ssl.ca.location={str(other_ca)!r}" in text, text
    assert elapsed < 15, elapsed
    err = capfd.readouterr().err
    assert "javax.net.ssl" not in err and "SSLHandshakeException" not in err, err[-2000:]
    assert "javax.net.ssl" not in text and "at org.apache" not in text, text
    print(f"{job.__name__}: {elapsed:.1f}s {text[:160]}")


CLI_JOBS = [("stream", "--available-now"), ("dlq-report",)]


@pytest.mark.parametrize("job", CLI_JOBS, ids=lambda j: j[0])
def test_the_cli_job_reports_a_wrong_ca_in_one_line_before_spark_starts(
    kafka_tls: EmbeddedKafka, other_ca: Path, tmp_path: Path, job: tuple[str, ...]
) -> None:
    conf = {**kafka_tls.client_config("SSL"), "ssl.ca.location": str(other_ca)}
    props = properties(tmp_path / "wrong-ca.properties", conf)
    started = time.monotonic()
    out = cli(props, "analytics", *job, "--output", str(tmp_path / "out"))
    elapsed = time.monotonic() - started
    assert out.returncode == 2, out
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("rmq-kafka: error: TLS handshake with "), out.stderr
    assert "certificate verification failed" in last and str(other_ca) in last, last
    assert "Traceback" not in out.stderr and "javax.net.ssl" not in out.stderr
    assert elapsed < 15, elapsed  # no Spark session was started for nothing
    print(f"analytics {job[0]}: {elapsed:.1f}s")
