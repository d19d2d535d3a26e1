"""The project's Kafka settings reach Spark's Kafka source as ``kafka.*`` options; the
connector pin matches the pyspark pin."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from adapter.analytics import jars
from adapter.analytics.jars import SPARK_VERSION, AnalyticsError, artifact_name
from adapter.analytics.jobs import StreamJobOptions
from adapter.analytics.session import jaas_config, kafka_options
from adapter.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]


def test_plaintext() -> None:
    assert kafka_options({"bootstrap.servers": "h:9092", "group.id": "x", "linger.ms": 5}) == {
        "kafka.bootstrap.servers": "h:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_sasl_username_password(mechanism: str, module: str) -> None:
    opts = kafka_options(
        {
            "bootstrap.servers": "h:9093",
            "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": mechanism,
            "sasl.username": "alice",
            "sasl.password": 'p"w\\d',
        }
    )
    assert opts["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert opts["kafka.sasl.mechanism"] == mechanism
    assert opts["kafka.sasl.jaas.config"] == (
        f'{module} required username="alice" password="p\\"w\\\\d";'
    )


def test_sasl_ssl_with_pem_files(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n")
    opts = kafka_options(
        {
            "bootstrap.servers": "h:9094",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "p",
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "none",
            "client.id": "me",
        }
    )
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    assert opts["kafka.ssl.keystore.type"] == "PEM"
    assert opts["kafka.ssl.keystore.certificate.chain"] == cert.read_text()
    assert opts["kafka.ssl.keystore.key"] == key.read_text()
    assert opts["kafka.ssl.key.password"] == "kp"
    assert opts["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert opts["kafka.client.id"] == "me"
    assert "ScramLoginModule" in opts["kafka.sasl.jaas.config"]


def test_untranslatable_security_setting_is_an_error() -> None:
    with pytest.raises(AnalyticsError, match=r"sasl\.oauthbearer\.config"):
        kafka_options(
            {
                "bootstrap.servers": "h",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.config": "x",
            }
        )


def test_bad_inputs_name_the_setting() -> None:
    with pytest.raises(AnalyticsError, match=r"bootstrap\.servers"):
        kafka_options({})
    with pytest.raises(AnalyticsError, match=r"security\.protocol"):
        kafka_options({"bootstrap.servers": "h", "security.protocol": "TLS"})
    with pytest.raises(AnalyticsError, match="go together"):
        kafka_options(
            {"bootstrap.servers": "h", "security.protocol": "SASL_SSL", "sasl.username": "u"}
        )
    with pytest.raises(AnalyticsError, match="GSSAPI"):
        jaas_config("GSSAPI", "u", "p")
    with pytest.raises(AnalyticsError, match=r"ssl\.certificate\.location"):
        kafka_options(
            {
                "bootstrap.servers": "h",
                "security.protocol": "SSL",
                "ssl.certificate.location": "/nope/c.pem",
                "ssl.key.location": "/nope/k.pem",
            }
        )


def test_extra_java_options_pass_through() -> None:
    opts = kafka_options({"bootstrap.servers": "h"}, {"kafka.request.timeout.ms": "5000"})
    assert opts["kafka.request.timeout.ms"] == "5000"
    with pytest.raises(AnalyticsError, match=r"kafka\."):
        kafka_options({"bootstrap.servers": "h"}, {"request.timeout.ms": "5000"})


def test_connector_pin_matches_pyspark_pin() -> None:
    """spark-pom.xml, SPARK_VERSION and the `spark` extra name the same Spark version."""
    pom = (Path(jars.__file__).parent / "spark-pom.xml").read_text()
    versions = set(re.findall(r"<version>(\d+\.\d+\.\d+)</version>", pom))
    assert versions == {SPARK_VERSION}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["spark"]
    assert f"pyspark=={SPARK_VERSION}" in extra


def test_artifact_names() -> None:
    assert artifact_name("spark-sql-kafka-0-10_2.13-4.1.1.jar") == "spark-sql-kafka-0-10_2.13"
    assert artifact_name("kafka-clients-3.9.1.jar") == "kafka-clients"
    assert artifact_name("scala-library-2.13.17.jar") == "scala-library"
    assert artifact_name("hadoop-client-api-3.4.2.jar") == "hadoop-client-api"


def test_cached_jars_are_only_what_pyspark_lacks() -> None:
    pytest.importorskip("pyspark")
    found = jars.ensure_spark_jars()
    names = {p.name for p in found}
    assert set(jars.REQUIRED) <= names
    provided = {artifact_name(p.name) for p in jars.pyspark_jars_dir().glob("*.jar")}
    assert not {artifact_name(n) for n in names} & provided
    assert any(n.startswith("kafka-clients-") for n in names)
    assert all(p.is_file() and p.stat().st_size > 0 for p in found)


def test_stream_job_options() -> None:
    with pytest.raises(AnalyticsError, match="sinks"):
        StreamJobOptions(output="/tmp/x", sinks=("kafka",))
    with pytest.raises(AnalyticsError, match="output directory"):
        StreamJobOptions(sinks=("parquet",))
    opts = StreamJobOptions(output="/data/m")
    assert opts.checkpoint_root == "/data/m/_checkpoint"
    console = StreamJobOptions(sinks=("console",))
    assert console.checkpoint and Path(console.checkpoint).is_dir()  # throw-away
    Path(console.checkpoint).rmdir()


def test_cli_parses_the_analytics_commands() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["analytics", "stream", "-b", "h:1", "-X", "security.protocol=SSL", "--available-now",
         "--sink", "console", "--window", "5 minutes", "--kafka-option", "kafka.x=1"]
    )  # fmt: skip
    assert (args.job, args.available_now, args.sink, args.window) == (
        "stream", True, ["console"], "5 minutes"
    )  # fmt: skip
    assert args.X == ["security.protocol=SSL"] and args.kafka_option == ["kafka.x=1"]
    args = parser.parse_args(
        ["analytics", "dlq-report", "--group", "a", "--group", "b", "--output", "o", "--export"]
    )
    assert (args.job, args.group, args.export, args.top_keys) == ("dlq-report", ["a", "b"], True, 3)


#: what Spark's Kafka source raised with a CA that did not sign the broker's certificate
#: (the embedded TLS broker, 2026-11-28), its stack left out
JAVA_WRONG_CA = """py4j.protocol.Py4JJavaError: An error occurred while calling o123.start.
: org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed
Caused by: javax.net.ssl.SSLHandshakeException: PKIX path validation failed: java.security.cert.CertPathValidatorException: signature check failed
\tat java.base/sun.security.ssl.Alert.createSSLException(Alert.java:131)
Caused by: sun.security.validator.ValidatorException: PKIX path validation failed: java.security.cert.CertPathValidatorException: signature check failed
"""  # noqa: E501
TLS_CONF = {
    "bootstrap.servers": "127.0.0.1:9093",
    "security.protocol": "SASL_SSL",
    "ssl.ca.location": "/etc/kafka/ca.pem",
    "sasl.username": "admin",
    "sasl.password": "secret",
}


def test_a_failed_java_tls_handshake_is_a_tls_error_naming_the_ca() -> None:
    from adapter.analytics.jars import SparkTlsError
    from adapter.analytics.kafka_source import spark_kafka_error
    from adapter.errors import AdapterError, TlsError

    error = spark_kafka_error(RuntimeError(JAVA_WRONG_CA), TLS_CONF, "query q")
    assert isinstance(error, SparkTlsError) and isinstance(error, TlsError)
    assert isinstance(error, AnalyticsError) and isinstance(error, AdapterError)
    text = str(error)
    assert text.startswith("TLS handshake with 127.0.0.1:9093 failed in Spark's Kafka source")
    assert "certificate verification failed" in text
    assert "ssl.ca.location='/etc/kafka/ca.pem'" in text and "kafka.ssl.truststore" in text
    assert "SSLHandshakeException" in text and "\tat " not in text and "secret" not in text
    # not the SASL hint it was given before (sasl.username/sasl.password)
    assert "sasl.password" not in text


def test_an_expired_certificate_in_java_words_says_so() -> None:
    from adapter.analytics.kafka_source import spark_kafka_error

    java = (
        "SslAuthenticationException: SSL handshake failed\nCaused by: javax.net.ssl."
        "SSLHandshakeException: PKIX path validation failed: java.security.cert."
        "CertPathValidatorException: validity check failed: NotAfter: ... certificate expired"
    )
    assert "a certificate has expired" in str(spark_kafka_error(RuntimeError(java), TLS_CONF, "q"))


def test_the_connection_check_leaves_spark_own_tls_settings_alone() -> None:
    """``--kafka-option kafka.ssl.*``: Spark gets TLS settings librdkafka does not have, so
    no librdkafka client is tried (nothing is connected to: no broker at this address)."""
    from adapter.analytics.preflight import check_tls

    check_tls(
        {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL"},
        {"kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"},
        timeout_s=30.0,
    )  # returns at once (a connection attempt would take its 2 s to give up)
