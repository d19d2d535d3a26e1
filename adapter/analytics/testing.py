"""Test support: one local SparkSession per test process, shared by every analytics test.

pytest fixtures in several modules all call :func:`shared_spark`; the session is built on
first use (``local[2]``, the pinned connector jars, modest memory, a driver JVM tuned for
short lives: :data:`TEST_DRIVER_JAVA_OPTIONS`) and stopped at exit.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from typing import Any

__all__ = ["TEST_DRIVER_JAVA_OPTIONS", "shared_spark"]

#: JVM options of a test driver (the shared session's, and the spark-submit test's): the
#: client compiler only and the serial collector, for a JVM that lives minutes on a busy
#: two-core machine
TEST_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@functools.cache
def shared_spark() -> Any:
    from adapter.analytics.session import SPARK_DEFAULTS, build_spark_session

    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # pandas-on-Spark (assertions)
    warehouse = tempfile.mkdtemp(prefix="rmq-spark-warehouse-")
    spark = build_spark_session(
        "rmq-kafka-analytics-tests",
        master="local[2]",
        conf={
            "spark.sql.warehouse.dir": warehouse,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            # small data: fewer tasks, faster tests
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
            # a test session lives minutes and runs dozens of tiny jobs: the optimising JIT
            # compiler's work is never paid back, and parallel GC threads only compete with
            # the broker for the cores (CHANGELOG.md, "suite time")
            "spark.driver.extraJavaOptions": f"{SPARK_DEFAULTS['spark.driver.extraJavaOptions']}"
            f" {TEST_DRIVER_JAVA_OPTIONS}",
        },
    )
    # at exit: the session stopped, then its warehouse removed (atexit runs last first)
    atexit.register(shutil.rmtree, warehouse, ignore_errors=True)
    atexit.register(spark.stop)
    return spark
