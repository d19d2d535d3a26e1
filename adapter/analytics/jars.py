"""Spark's Kafka source and Avro functions: pinned connector jars, fetched once, cached.

The connectors (``spark-sql-kafka-0-10`` and ``spark-avro``, Scala 2.13) must match the
pyspark version exactly, so the ``spark`` extra pins pyspark to :data:`SPARK_VERSION` and
``spark-pom.xml`` (package data) pins the connectors to the same version.  They are
fetched the way the embedded broker's jars are: ``mvn dependency:copy-dependencies`` into
a shared cache, once::

    <home>/spark-connectors-<SPARK_VERSION>/jars/*.jar   home = $RMQ_KAFKA_HOME or
                                                         ~/.cache/rmq-kafka

Jars that pyspark already ships (spark-tags, scala-library, hadoop-client, snappy, lz4, ...)
are dropped, so only the connectors and what they need that pyspark lacks (kafka-clients,
commons-pool2, spark-token-provider-kafka) remain.  Spark gets them as local files through
``spark.jars``: no Ivy, no network at run time.

``python -m adapter.analytics.jars`` fetches them and prints the comma-separated list for
``spark-submit --jars``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Final

from adapter.embedded.jars import copy_maven_dependencies, file_lock, kafka_home
from adapter.errors import AdapterError, AuthenticationError, TlsError

__all__ = [
    "SPARK_VERSION",
    "AnalyticsError",
    "SparkAuthenticationError",
    "artifact_name",
    "check_pyspark",
    "connector_dir",
    "ensure_spark_jars",
    "pyspark_jars_dir",
    "spark_jars",
]

#: The pyspark version the connectors are pinned to (``spark`` extra, ``spark-pom.xml``).
SPARK_VERSION: Final = "4.1.1"
SCALA_BINARY: Final = "2.13"
#: Connector jars that must be present after the fetch.
REQUIRED: Final = (
    f"spark-sql-kafka-0-10_{SCALA_BINARY}-{SPARK_VERSION}.jar",
    f"spark-avro_{SCALA_BINARY}-{SPARK_VERSION}.jar",
    f"spark-token-provider-kafka-0-10_{SCALA_BINARY}-{SPARK_VERSION}.jar",
)
_MARKER: Final = ".rmq-spark-complete"
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+)-(?P<version>[0-9][^-]*)\.jar$")

log = logging.getLogger("adapter.analytics")


class AnalyticsError(AdapterError):
    """The analytics path could not be prepared or run (jars, pyspark, a job)."""


class SparkAuthenticationError(AnalyticsError, AuthenticationError):
    """Spark's Kafka source was refused: wrong credentials (SASL/SSL) or a missing ACL."""

    def __init__(self, message: str) -> None:
        AuthenticationError.__init__(self, message)


class SparkTlsError(AnalyticsError, TlsError):
    """Spark's Kafka source could not make its TLS connection (a CA that did not sign the
    broker's certificate, an expired one): Java's exception in the project's words."""

    def __init__(self, message: str) -> None:
        TlsError.__init__(self, message)


def check_pyspark() -> Path:
    """pyspark's own jars dir, after checking pyspark is the pinned version."""
    try:
        import pyspark
    except ImportError as exc:
        raise AnalyticsError(
            f"pyspark is not installed: pip install 'rmq-kafka-adapter[spark]' "
            f"(pyspark=={SPARK_VERSION})"
        ) from exc
    version = str(pyspark.__version__)
    if version != SPARK_VERSION:
        raise AnalyticsError(
            f"pyspark {version} is installed but the Kafka/Avro connectors are pinned to "
            f"{SPARK_VERSION}: pip install pyspark=={SPARK_VERSION}"
        )
    return pyspark_jars_dir()


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def connector_dir(home: str | os.PathLike[str] | None = None) -> Path:
    return kafka_home(home) / f"spark-connectors-{SPARK_VERSION}" / "jars"


def artifact_name(jar_name: str) -> str:
    """A jar's artifact without its version (``kafka-clients-3.9.1.jar`` -> ``kafka-clients``):
    what tells a fetched connector dependency that pyspark already ships."""
    match = _VERSIONED_JAR.match(jar_name)
    return match.group("artifact") if match else jar_name


def _complete(lib: Path) -> list[Path] | None:
    marker = lib / _MARKER
    if not marker.is_file():
        return None
    names = [n for n in marker.read_text(encoding="utf-8").splitlines() if n.strip()]
    jars = [lib / n for n in names]
    if not names or not all(j.is_file() for j in jars):
        return None
    return jars


def ensure_spark_jars(home: str | os.PathLike[str] | None = None) -> list[Path]:
    """The connector jars (local paths) for ``spark.jars``; fetched with Maven only when the
    cache is missing or incomplete.  Safe to call from several processes at once."""
    lib = connector_dir(home)
    jars = _complete(lib)
    if jars is not None:
        return jars
    root = lib.parent
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".lock"):
        jars = _complete(lib)
        if jars is not None:
            return jars
        provided = {artifact_name(p.name) for p in check_pyspark().glob("*.jar")}
        tmp = copy_maven_dependencies(
            resources.files("adapter.analytics").joinpath("spark-pom.xml").read_bytes(),
            root,
            f"jars.tmp-{os.getpid()}",
            what=f"the Spark {SPARK_VERSION} connector jars",
            complete=lambda names: all(r in names for r in REQUIRED),
            error=AnalyticsError,
        )
        fetched = sorted(tmp.glob("*.jar"))
        kept = []
        for jar in fetched:
            if artifact_name(jar.name) in provided:
                jar.unlink()  # pyspark ships its own (newer or equal) copy
            else:
                kept.append(jar.name)
        (tmp / _MARKER).write_text("\n".join(kept) + "\n", encoding="utf-8")
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)
        log.info("Spark connector jars: %s", ", ".join(kept))
    jars = _complete(lib)
    assert jars is not None
    return jars


def spark_jars(home: str | os.PathLike[str] | None = None) -> str:
    """``spark.jars`` / ``spark-submit --jars`` value: comma-separated local paths."""
    return ",".join(str(p) for p in ensure_spark_jars(home))


if __name__ == "__main__":  # pragma: no cover - CLI helper
    print(spark_jars(sys.argv[1] if len(sys.argv) > 1 else None))
