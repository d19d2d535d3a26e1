"""Before a Spark job reads Kafka: the TLS handshake checked with the same settings through
a librdkafka admin client.

Spark's Kafka source is a Java client: a CA that did not sign the broker's certificate
makes it print Java's stack trace (``SSLHandshakeException ... PKIX path validation
failed``) and fail the query, after the Spark session was built for nothing.  The same
librdkafka settings the job gets (:func:`adapter.analytics.session.kafka_options` translates
them for Spark) are tried first: a TLS failure is the :class:`~adapter.errors.TlsError`
every other client of the project gives (the cause and ``ssl.ca.location`` named), within
seconds.  Anything else (a broker not reachable yet, a refused login) is left to Spark's
own source, which reports it as before."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from adapter.errors import AdapterError, AuthenticationError, TlsError
from adapter.io.config import admin_config, check_kafka_config
from adapter.io.errors import FatalErrorWatch, make_client, wait_metadata

__all__ = ["PREFLIGHT_TIMEOUT_S", "check_tls"]

log = logging.getLogger("adapter.analytics")

#: how long the check waits for the cluster's metadata before it leaves the rest to Spark
PREFLIGHT_TIMEOUT_S: Final = 10.0


class _Refused(Exception):
    """The check met a failure that is not TLS: Spark's source reports it."""


def _own_tls(kafka_extra: Mapping[str, str] | None) -> bool:
    """Spark's source gets TLS settings librdkafka does not have (``--kafka-option
    kafka.ssl.truststore.location=...``): the librdkafka settings prove nothing then."""
    return any(
        key.startswith("kafka.ssl.") or key == "kafka.security.protocol"
        for key in (kafka_extra or {})
    )


def check_tls(
    config: Mapping[str, Any],
    kafka_extra: Mapping[str, str] | None = None,
    *,
    what: str = "analytics",
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
) -> None:
    """Raise the :class:`~adapter.errors.TlsError` of a TLS connection that cannot be made
    with ``config`` (a wrong CA, an expired certificate, a TLS client at a plaintext
    listener or a plaintext client at a TLS one); return once a broker answered, or on any
    other failure (left to Spark's source)."""
    if _own_tls(kafka_extra):
        return
    conf = admin_config(check_kafka_config(config, what))
    watch = FatalErrorWatch(conf.get("error_cb"), config=conf)
    conf["error_cb"] = watch
    admin = make_client(AdminClient, conf, what=f"{what}: admin client")

    def serve() -> None:
        admin.poll(0)
        if isinstance(watch.current(), AuthenticationError):
            raise _Refused

    try:
        wait_metadata(
            admin,
            timeout_s,
            watch=watch,
            serve=serve,
            where=conf.get("bootstrap.servers"),
            what=f"{what}: checking the connection Spark's Kafka source will make",
        )
    except TlsError:
        raise
    except (_Refused, KafkaException, AdapterError) as exc:
        tls = watch.tls()
        if tls is not None:
            raise tls from None
        log.debug("%s: the connection check left it to Spark (%s)", what, exc)
