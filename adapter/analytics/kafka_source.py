"""Spark's Kafka source as the jobs read it: its row schema (:data:`KAFKA_SOURCE_SCHEMA`, for
an empty batch) and what its failures mean: a Java stack trace turned into a short error
naming the cause and the settings to check (:func:`spark_kafka_error`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from adapter.analytics.jars import AnalyticsError, SparkAuthenticationError, SparkTlsError

#: The Kafka source's row schema with ``includeHeaders=true`` (for an empty batch).
KAFKA_SOURCE_SCHEMA: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)


#: Java exception names (and texts) that mean the Kafka cluster refused us.
_AUTH_MARKERS: Final = (
    "SaslAuthenticationException",
    "SslAuthenticationException",
    "AuthenticationException",
    "TopicAuthorizationException",
    "GroupAuthorizationException",
    "ClusterAuthorizationException",
    "Authentication failed",
)
_MAX_DETAIL: Final = 400
#: Java's words for a TLS handshake that failed (checked before the authentication markers:
#: the Kafka client wraps it in an ``SslAuthenticationException``)
_TLS_MARKERS: Final = (
    "SSLHandshakeException",
    "SslAuthenticationException",
    "PKIX path",
    "CertPathValidatorException",
    "unable to find valid certification path",
    "SSLException",
)
_JAVA_VERIFY: Final = (
    "PKIX path",
    "CertPathValidatorException",
    "unable to find valid certification path",
    "signature check failed",
    "certificate_unknown",
)


def spark_tls_error(text: str, config: Mapping[str, Any], what: str) -> SparkTlsError:
    """The :class:`SparkTlsError` of Java's report ``text`` of a failed TLS handshake: the
    cause in words and the settings to check, ``ssl.ca.location`` always (it reaches Spark
    as ``kafka.ssl.truststore.location``)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    ca = config.get("ssl.ca.location")
    ca_text = (
        f"ssl.ca.location={ca!r}"
        if ca
        else "ssl.ca.location (not set: Java's default truststore was used)"
    )
    lower = text.lower()
    if "expired" in lower:
        cause = (
            f"certificate verification failed: a certificate has expired (checked with {ca_text})"
        )
    elif any(mark.lower() in lower for mark in _JAVA_VERIFY):
        cause = (
            "certificate verification failed: the broker's certificate is not signed by a CA "
            f"in {ca_text} (or names another host, or has expired)"
        )
    else:
        protocol = config.get("security.protocol", "PLAINTEXT")
        cause = f"check {ca_text}, security.protocol={protocol} and bootstrap.servers"
    # the most telling line: Java's own handshake exception before the Kafka client's
    detail = (
        next(
            (
                ln
                for mark in _TLS_MARKERS
                for ln in lines
                if mark in ln and not ln.startswith("at ")
            ),
            lines[0] if lines else "",
        )
        .removeprefix("Caused by: ")
        .lstrip(": ")
    )
    return SparkTlsError(
        f"TLS handshake with {config.get('bootstrap.servers')} failed in Spark's Kafka source "
        f"({what}): {cause}; Spark gets it as kafka.ssl.truststore.location "
        f"(Java: {detail[:_MAX_DETAIL]})"
    )


def spark_kafka_error(exc: BaseException, config: Mapping[str, Any], what: str) -> AnalyticsError:
    """A short, clear error for a failed Spark job reading Kafka (not a JVM stack trace): a
    failed TLS handshake becomes a :class:`SparkTlsError` naming the cause and
    ``ssl.ca.location``; an authentication or authorization failure a
    :class:`SparkAuthenticationError` naming the cluster, the protocol, the mechanism and
    the user."""
    text = str(exc)
    if any(mark in text for mark in _TLS_MARKERS):
        return spark_tls_error(text, config, what)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    marker = next((m for m in _AUTH_MARKERS if m in text), None)
    if marker is None:
        detail = lines[0] if lines else type(exc).__name__
        return AnalyticsError(f"{what} failed: {detail[:_MAX_DETAIL]}")
    detail = next((ln for ln in lines if marker in ln), lines[0])
    # "org.apache.kafka...SaslAuthenticationException: Authentication failed ..." -> the text
    detail = detail.split(f"{marker}: ", 1)[-1] if f"{marker}: " in detail else detail
    who = f"user {config['sasl.username']!r}" if config.get("sasl.username") else "no user"
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "-"
    return SparkAuthenticationError(
        f"{what}: Spark's Kafka source was refused by {config.get('bootstrap.servers')} "
        f"(security.protocol={config.get('security.protocol', 'PLAINTEXT')}, "
        f"sasl.mechanism={mechanism}, {who}): {marker}: {detail[:_MAX_DETAIL]}. Check "
        "sasl.username/sasl.password (-X or --config-file; they reach Spark as "
        "kafka.sasl.jaas.config) and the principal's ACLs"
    )
