"""The Spark driver's class archive (:mod:`adapter.analytics.classes`): made once by the
set-up, mapped by every local driver :func:`~adapter.analytics.session.build_spark_session`
starts. Checked from outside, on the shared test session's driver JVM: its command line
carries the option and the JVM has the archive file mapped (``/proc/<pid>/maps``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from adapter.analytics.classes import ensure_spark_class_archive
from adapter.analytics.testing import shared_spark

pytestmark = pytest.mark.spark


def _child_jvms() -> list[int]:
    """The ``java`` processes this process started (pyspark's driver: ``spark-submit``
    execs it)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if comm == "java" and ppid == os.getpid():
            pids.append(int(stat.parent.name))
    return pids


def test_the_local_driver_maps_the_class_archive_the_set_up_made() -> None:
    archive = ensure_spark_class_archive()  # ./run.sh setup made it: here it is found
    assert archive is not None and archive.stat().st_size > 0
    shared_spark().range(3).count()
    drivers = []
    for pid in _child_jvms():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
            drivers.append((pid, b" ".join(cmdline).decode()))
    assert len(drivers) == 1, drivers
    pid, cmdline = drivers[0]
    assert f"-XX:SharedArchiveFile={archive}" in cmdline
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()
