"""A SparkSession with the pinned connectors, and the project's Kafka settings as Spark's
``kafka.*`` source options.

The project speaks librdkafka settings (one confluent-kafka config dict for every client);
Spark's Kafka source speaks the Java client's.  :func:`kafka_options` translates the part
that says where the cluster is and who we are:

====================================== ==================================================
librdkafka                              Spark Kafka source option
====================================== ==================================================
``bootstrap.servers``                   ``kafka.bootstrap.servers``
``security.protocol``                   ``kafka.security.protocol`` (upper-case)
``sasl.mechanism(s)``                   ``kafka.sasl.mechanism``
``sasl.username`` / ``sasl.password``   ``kafka.sasl.jaas.config`` (``PlainLoginModule`` for
                                        PLAIN, ``ScramLoginModule`` for SCRAM-SHA-256/512)
``sasl.kerberos.service.name``          ``kafka.sasl.kerberos.service.name``
``ssl.ca.location``                     ``kafka.ssl.truststore.type=PEM`` + ``...location``
``ssl.ca.pem``                          ``kafka.ssl.truststore.type=PEM`` + ``...certificates``
``ssl.certificate.location`` +          ``kafka.ssl.keystore.type=PEM`` +
``ssl.key.location``                    ``...certificate.chain`` / ``...key`` (file contents)
``ssl.certificate.pem``/``ssl.key.pem`` the same, inline
``ssl.key.password``                    ``kafka.ssl.key.password``
``ssl.keystore.location``/``.password`` ``kafka.ssl.keystore.type=PKCS12`` + location/password
``ssl.endpoint.identification.algorithm`` ``kafka.ssl.endpoint.identification.algorithm``
                                        (``none`` -> empty: no host-name check)
``client.id``                           ``kafka.client.id``
====================================== ==================================================

Settings that have no Java equivalent (callbacks, librdkafka tuning) are left out, and a
security setting we cannot translate raises an :class:`AnalyticsError` naming it, rather
than silently connecting without it.  ``extra`` options given as ``kafka.<key>=value`` are
passed as they are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from adapter.analytics.classes import archive_java_option
from adapter.analytics.jars import AnalyticsError, ensure_spark_jars

__all__ = [
    "LOG4J2_CONFIG",
    "SPARK_DEFAULTS",
    "build_spark_session",
    "jaas_config",
    "jvm_stderr_filter",
    "kafka_options",
    "log_java_options",
    "spark_log_level",
]

log = logging.getLogger("adapter.analytics")

#: Modest defaults: a laptop / CI box (2 cores) runs the jobs next to a broker.
SPARK_DEFAULTS: Final[dict[str, str]] = {
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    # the aggregation's plan has more fields than the default 25: no "Truncated the string
    # representation of a plan" warning
    "spark.sql.debug.maxToStringFields": "200",
    "spark.driver.extraJavaOptions": "",
}

#: The driver JVM's log4j2 configuration (root level ``rmq.spark.logLevel``, ERROR unless
#: given).
LOG4J2_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
#: The Spark log level: quiet unless asked (``-v``), or ``$RMQ_SPARK_LOG_LEVEL``.
QUIET_LEVEL: Final = "ERROR"
VERBOSE_LEVEL: Final = "WARN"


def spark_log_level(verbose: bool = False) -> str:
    """The level of Spark's own logging: ``$RMQ_SPARK_LOG_LEVEL``, else WARN with
    ``verbose``, else ERROR."""
    return os.environ.get("RMQ_SPARK_LOG_LEVEL") or (VERBOSE_LEVEL if verbose else QUIET_LEVEL)


def log_java_options(level: str) -> str:
    """Driver JVM options: our log4j2 configuration at ``level`` (effective from the JVM's
    first line, before ``setLogLevel`` can run)."""
    return f"-Dlog4j2.configurationFile=file:{LOG4J2_CONFIG} -Drmq.spark.logLevel={level}"


_PLAIN_LOGIN: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_LOGIN: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PROTOCOLS: Final = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
#: librdkafka keys that are read (and translated) by :func:`kafka_options`.
_TRANSLATED: Final = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.kerberos.service.name",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.certificate.pem",
        "ssl.key.location",
        "ssl.key.pem",
        "ssl.key.password",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.endpoint.identification.algorithm",
        "client.id",
    }
)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """``sasl.jaas.config`` for a username/password mechanism (PLAIN, SCRAM-SHA-256/512)."""
    mech = mechanism.upper()
    if mech == "PLAIN":
        module = _PLAIN_LOGIN
    elif mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        module = _SCRAM_LOGIN
    else:
        raise AnalyticsError(
            f"sasl.mechanism={mechanism!r}: only PLAIN and SCRAM-SHA-256/512 take "
            "sasl.username/sasl.password; pass kafka.sasl.jaas.config yourself"
        )
    return f"{module} required username={_quote(username)} password={_quote(password)};"


def _read(key: str, path: Any) -> str:
    try:
        return Path(str(path)).read_text(encoding="utf-8")
    except OSError as exc:
        raise AnalyticsError(f"{key}={path!r}: cannot read the file ({exc})") from exc


def kafka_options(
    config: Mapping[str, Any], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Spark Kafka source options (``kafka.*``) carrying ``config``'s cluster and security."""
    conf = {k: v for k, v in config.items() if isinstance(v, str | int | float | bool)}
    bootstrap = conf.get("bootstrap.servers")
    if not bootstrap:
        raise AnalyticsError("bootstrap.servers is required for the Spark Kafka source")
    out: dict[str, str] = {"kafka.bootstrap.servers": str(bootstrap)}
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in _PROTOCOLS:
        raise AnalyticsError(f"security.protocol={protocol!r}: expected one of {_PROTOCOLS}")
    out["kafka.security.protocol"] = protocol
    if "client.id" in conf:
        out["kafka.client.id"] = str(conf["client.id"])

    if protocol.startswith("SASL"):
        mechanism = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI")
        out["kafka.sasl.mechanism"] = mechanism.upper()
        if "sasl.kerberos.service.name" in conf:
            out["kafka.sasl.kerberos.service.name"] = str(conf["sasl.kerberos.service.name"])
        user, password = conf.get("sasl.username"), conf.get("sasl.password")
        if user is not None or password is not None:
            if user is None or password is None:
                raise AnalyticsError("sasl.username and sasl.password go together")
            out["kafka.sasl.jaas.config"] = jaas_config(mechanism, str(user), str(password))

    if protocol.endswith("SSL"):
        if "ssl.ca.location" in conf:
            out["kafka.ssl.truststore.type"] = "PEM"
            out["kafka.ssl.truststore.location"] = str(conf["ssl.ca.location"])
        elif "ssl.ca.pem" in conf:
            out["kafka.ssl.truststore.type"] = "PEM"
            out["kafka.ssl.truststore.certificates"] = str(conf["ssl.ca.pem"])
        cert = conf.get("ssl.certificate.pem") or (
            _read("ssl.certificate.location", conf["ssl.certificate.location"])
            if "ssl.certificate.location" in conf
            else None
        )
        key = conf.get("ssl.key.pem") or (
            _read("ssl.key.location", conf["ssl.key.location"])
            if "ssl.key.location" in conf
            else None
        )
        if (cert is None) != (key is None):
            raise AnalyticsError("a client certificate needs both ssl.certificate.* and ssl.key.*")
        if cert is not None and key is not None:
            out["kafka.ssl.keystore.type"] = "PEM"
            out["kafka.ssl.keystore.certificate.chain"] = str(cert)
            out["kafka.ssl.keystore.key"] = str(key)
            if "ssl.key.password" in conf:
                out["kafka.ssl.key.password"] = str(conf["ssl.key.password"])
        elif "ssl.keystore.location" in conf:
            out["kafka.ssl.keystore.type"] = "PKCS12"
            out["kafka.ssl.keystore.location"] = str(conf["ssl.keystore.location"])
            if "ssl.keystore.password" in conf:
                out["kafka.ssl.keystore.password"] = str(conf["ssl.keystore.password"])
        algo = conf.get("ssl.endpoint.identification.algorithm")
        if algo is not None:
            out["kafka.ssl.endpoint.identification.algorithm"] = (
                "" if str(algo).lower() == "none" else str(algo)
            )

    untranslated = sorted(
        k
        for k in conf
        if k not in _TRANSLATED and k.startswith(("sasl.", "ssl.", "security.", "enable.ssl."))
    )
    if untranslated:
        raise AnalyticsError(
            f"security setting(s) {untranslated} have no Spark Kafka source equivalent here; "
            "pass the Java client's setting as kafka.<key>=<value> instead"
        )
    for key, value in (extra or {}).items():
        if not key.startswith("kafka."):
            raise AnalyticsError(f"{key}: extra Kafka source options must start with 'kafka.'")
        out[key] = str(value)
    return out


def build_spark_session(
    app_name: str = "rmq-kafka-analytics",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    verbose: bool = False,
) -> Any:
    """A SparkSession with the connector jars on ``spark.jars`` (local files, no Ivy).

    ``master`` defaults to ``$SPARK_MASTER`` or ``local[2]``.  Under ``spark-submit`` the
    driver JVM is already running, so its ``--master`` and ``--jars`` are used (and the jars
    are checked: ``--jars "$(python -m adapter.analytics.jars)"``).

    Quiet unless ``verbose``: Spark and its JVM log at ERROR (:func:`spark_log_level`),
    through :data:`LOG4J2_CONFIG` from the JVM's start; a local driver binds to 127.0.0.1
    (``SPARK_LOCAL_IP`` and ``spark.driver.host``, unless set) rather than warning that the
    host name resolves to a loopback address.
    """
    from pyspark.sql import SparkSession

    level = spark_log_level(verbose)
    builder = SparkSession.builder.appName(app_name)
    settings = dict(SPARK_DEFAULTS)
    settings.update(conf or {})
    if not _under_spark_submit():
        chosen = master or os.environ.get("SPARK_MASTER") or "local[2]"
        builder = builder.master(chosen)
        if chosen.startswith("local"):  # one machine: the loopback address is the right one
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            settings.setdefault("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        jars = ",".join(str(p) for p in ensure_spark_jars())
        existing = settings.get("spark.jars")
        settings["spark.jars"] = f"{existing},{jars}" if existing else jars
        # the driver JVM starts here: quiet from its first line, and on about half the CPU
        # with the class archive
        options = f"{log_java_options(level)} {settings.get('spark.driver.extraJavaOptions', '')}"
        archive = archive_java_option(options.strip())
        settings["spark.driver.extraJavaOptions"] = f"{options.strip()} {archive}".strip()
    else:
        # spark-submit has started the driver JVM: its --jars are what the driver can load
        settings.pop("spark.driver.memory", None)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if verbose or _under_spark_submit() or SparkSession.getActiveSession() is not None:
        session = builder.getOrCreate()
    else:  # the driver JVM starts here: its stderr through a filter
        with jvm_stderr_filter():
            session = builder.getOrCreate()
    session.sparkContext.setLogLevel(level)
    if _under_spark_submit():
        given = " ".join(
            str(session.conf.get(key, "") or "") for key in ("spark.jars", "spark.jars.packages")
        )
        if "spark-sql-kafka-0-10" not in given or "spark-avro" not in given:
            raise AnalyticsError(
                "spark-submit needs the Kafka and Avro connectors on the driver: run it with "
                '--jars "$(python -m adapter.analytics.jars)" (the pinned, cached jars)'
            )
    return session


#: Lines a driver JVM writes to stderr that say nothing a user can act on: Spark's launcher
#: always adds ``--add-modules=jdk.incubator.vector`` and the JVM then warns, whatever the
#: log configuration.
JVM_NOISE: Final = ("WARNING: Using incubator modules: jdk.incubator.vector",)


@contextlib.contextmanager
def jvm_stderr_filter(noise: tuple[str, ...] = JVM_NOISE) -> Iterator[None]:
    """While inside, a child process started (the driver JVM) gets a pipe as its stderr;
    a daemon thread copies what it writes to this process's stderr, less the ``noise``
    lines, for as long as the child lives.  This process's stderr is the same again on
    leaving."""
    try:
        original = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError as exc:  # no stderr to filter (a detached process): nothing to do
        log.debug("no stderr filter for the Spark driver: %s", exc)
        yield
        return

    def copy() -> None:
        with os.fdopen(read_end, "rb") as pipe, os.fdopen(original, "wb", 0) as out:
            for line in pipe:
                if line.decode("utf-8", "replace").rstrip("\r\n") not in noise:
                    out.write(line)

    threading.Thread(target=copy, name="spark-driver-stderr", daemon=True).start()
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_end)  # the child keeps its own copy


def _under_spark_submit() -> bool:
    """True when this Python process was started by ``spark-submit`` (its JVM is up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or os.environ.get("SPARK_ENV_LOADED") == "1"
