"""A class-data sharing archive for the Spark driver's JVM: the classes a local Spark session
loads to start and run a query, parsed and verified once and mapped by every later driver.

A local driver spends most of its start-up CPU loading and verifying thousands of classes
from pyspark's jars. Java's class-data sharing (CDS) keeps them, ready, in a file that every
JVM of the same JDK and the same class path maps instead::

    <home>/spark-connectors-<SPARK_VERSION>/classes-<jdk and pyspark key>.jsa

:func:`ensure_spark_class_archive` makes it once (``./run.sh setup`` calls it after the
connector jars): a throw-away session started with ``-XX:ArchiveClassesAtExit`` runs a small
query and its JVM exits. :func:`archive_java_option` is what
:func:`~adapter.analytics.session.build_spark_session` adds to the driver's
``spark.driver.extraJavaOptions`` when the archive exists. Nothing depends on it: without the
archive the JVM loads the classes itself, and a JVM that cannot use the file (another JDK
build, another pyspark) says so and does the same.

``python -m adapter.analytics.classes`` makes the archive and prints its path.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from adapter.analytics.jars import connector_dir, ensure_spark_jars, pyspark_jars_dir
from adapter.embedded.jars import DUMP_OPTION, archive_key, make_class_archive

__all__ = ["archive_java_option", "ensure_spark_class_archive", "spark_class_archive"]

log = logging.getLogger("adapter.analytics")

_DUMP_TIMEOUT_S = 300.0


def spark_class_archive(home: str | os.PathLike[str] | None = None) -> Path:
    """The archive for the ``java`` this process would run and the installed pyspark: its
    name carries both, so neither another JDK nor another pyspark maps one it did not write."""
    jars = pyspark_jars_dir().resolve()
    key = archive_key(str(jars), str(jars.stat().st_mtime_ns))
    return connector_dir(home).parent / f"classes-{key}.jsa"


def archive_java_option(java_options: str, home: str | os.PathLike[str] | None = None) -> str:
    """The driver option that maps the archive, when it exists and ``java_options`` (the
    driver's other options) neither map nor dump one themselves; ``""`` otherwise."""
    if DUMP_OPTION in java_options or "-XX:SharedArchiveFile=" in java_options:
        return ""
    try:
        archive = spark_class_archive(home)
    except Exception:  # no java, no pyspark: the session itself will say so
        return ""
    return f"-XX:SharedArchiveFile={archive}" if archive.is_file() else ""


def ensure_spark_class_archive(home: str | os.PathLike[str] | None = None) -> Path | None:
    """Make the archive once (a local session started, one query, its JVM stopped; ~20 s);
    return it, or ``None`` when it cannot be made (logged: drivers then start without it).
    Another process making it at the same time is not waited for."""
    ensure_spark_jars(home)

    def write(tmp: Path) -> bool:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "adapter.analytics.classes", "--dump", str(tmp)],
                capture_output=True,
                text=True,
                timeout=_DUMP_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            log.warning("no class archive for the Spark driver: its run timed out")
            return False
        if proc.returncode != 0:
            log.warning(
                "no class archive for the Spark driver (exit %s): %s",
                proc.returncode,
                proc.stderr.strip().splitlines()[-1:],
            )
            return False
        return True

    return make_class_archive(spark_class_archive(home), write)


def _dump(path: str) -> None:
    """The throw-away driver: a session whose JVM writes ``path`` as it exits, one query,
    then the JVM stopped and waited for (it writes the archive on its way out)."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName("rmq-kafka-class-archive")
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.level=WARN {DUMP_OPTION}{path}")
        .getOrCreate()
    )
    spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    gateway = spark.sparkContext._gateway
    assert gateway is not None  # a local session's driver runs under this process
    jvm = gateway.proc  # pyspark's Popen of the driver JVM
    spark.stop()
    gateway.shutdown()
    jvm.stdin.close()  # the gateway server exits when its stdin closes
    jvm.wait(timeout=_DUMP_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--dump":
        _dump(args[1])
        return 0
    print(ensure_spark_class_archive())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
