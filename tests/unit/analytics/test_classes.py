"""When a local Spark driver maps the class archive (``adapter.analytics.classes``): only
when it exists, and never on top of options that map or write one themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from adapter.analytics.classes import archive_java_option, spark_class_archive
from adapter.embedded.jars import DUMP_OPTION

pytestmark = pytest.mark.unit


def test_mapped_once_it_exists(tmp_path: Path) -> None:
    assert archive_java_option("-Dlog4j2.level=WARN", tmp_path) == ""
    archive = spark_class_archive(tmp_path)
    assert archive.is_relative_to(tmp_path)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert archive_java_option("-Dlog4j2.level=WARN", tmp_path) == (
        f"-XX:SharedArchiveFile={archive}"
    )


@pytest.mark.parametrize("given", [f"{DUMP_OPTION}/tmp/x.jsa", "-XX:SharedArchiveFile=/tmp/y.jsa"])
def test_never_beside_an_archive_option_of_the_callers(tmp_path: Path, given: str) -> None:
    archive = spark_class_archive(tmp_path)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert archive_java_option(f"-Dx=1 {given}", tmp_path) == ""
