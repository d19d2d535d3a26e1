"""``RMQ_KAFKA_JVM_OPTS``: extra JVM options for the embedded nodes (``./run.sh test`` starts
its short-lived brokers with the client compiler only); the class archive every node and
storage format maps once it exists."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from adapter.embedded import EmbeddedKafka
from adapter.embedded.classes import DUMP_OPTION, class_archive
from adapter.embedded.jars import JVM_OPTS_ENV, jvm_options, make_class_archive
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit


def test_none_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JVM_OPTS_ENV, raising=False)
    assert jvm_options() == []


def test_split_as_a_shell_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_OPTS_ENV, "-XX:TieredStopAtLevel=1  '-Dx=a b'")
    assert jvm_options() == ["-XX:TieredStopAtLevel=1", "-Dx=a b"]


def test_an_unsplittable_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_OPTS_ENV, "-Dx='unclosed")
    with pytest.raises(ConfigError, match=JVM_OPTS_ENV):
        jvm_options()


def test_every_node_command_carries_them_before_the_class_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(JVM_OPTS_ENV, "-XX:TieredStopAtLevel=1")
    node = EmbeddedKafka("jvm-opts", instances_dir=tmp_path, brokers=3).node(2)
    cmd = node.java_cmd(tmp_path / "lib", "256m", "kafka.Kafka", "server.properties")
    assert "-XX:TieredStopAtLevel=1" in cmd
    assert cmd.index("-XX:TieredStopAtLevel=1") < cmd.index("-cp")
    assert cmd[-2:] == ["kafka.Kafka", "server.properties"]


def test_a_class_archive_is_mapped_once_it_exists(tmp_path: Path) -> None:
    lib = tmp_path / "kafka-x" / "lib"
    lib.mkdir(parents=True)
    node = EmbeddedKafka("cds", instances_dir=tmp_path).node(1)
    before = node.java_cmd(lib, "256m", "kafka.Kafka", "server.properties")
    assert not [o for o in before if o.startswith("-XX:SharedArchiveFile=")]

    archive = class_archive(lib)
    assert archive.parent == lib.parent  # beside the jars it was made from
    archive.write_bytes(b"")
    for main in ("kafka.Kafka", "kafka.tools.StorageTool"):  # nodes and formats
        cmd = node.java_cmd(lib, "256m", main)
        assert f"-XX:SharedArchiveFile={archive}" in cmd
        assert cmd.index(f"-XX:SharedArchiveFile={archive}") < cmd.index("-cp")


def test_a_node_that_writes_the_archive_maps_none_and_its_format_writes_none(
    tmp_path: Path,
) -> None:
    lib = tmp_path / "kafka-x" / "lib"
    lib.mkdir(parents=True)
    class_archive(lib).write_bytes(b"")
    dump = DUMP_OPTION + str(tmp_path / "new.jsa")
    node = EmbeddedKafka("cds", instances_dir=tmp_path, jvm_options=[dump]).node(1)
    cmd = node.java_cmd(lib, "256m", "kafka.Kafka", "server.properties")
    assert dump in cmd
    assert not [o for o in cmd if o.startswith("-XX:SharedArchiveFile=")]
    fmt = node.java_cmd(lib, "256m", "kafka.tools.StorageTool", "format")
    assert dump not in fmt


def test_an_archive_is_made_once_whole_and_never_waited_for(tmp_path: Path) -> None:
    archive = tmp_path / "classes-x.jsa"
    calls: list[Path] = []

    def fails(tmp: Path) -> bool:
        calls.append(tmp)
        tmp.write_bytes(b"half")  # a JVM that died while writing
        return False

    assert make_class_archive(archive, fails) is None
    assert not archive.exists() and not calls[0].exists()  # nothing half-made is left

    def writes(tmp: Path) -> bool:
        calls.append(tmp)
        assert not archive.exists()  # written aside, moved into place whole
        tmp.write_bytes(b"classes")
        return True

    assert make_class_archive(archive, writes) == archive
    assert archive.read_bytes() == b"classes"
    assert make_class_archive(archive, writes) == archive  # made once
    assert len(calls) == 2


def test_an_archive_another_process_is_making_is_not_waited_for(tmp_path: Path) -> None:
    archive = tmp_path / "classes-x.jsa"
    with (tmp_path / "classes-x.jsa.lock").open("a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        # a lock of another open file description: as if another process held it
        assert make_class_archive(archive, lambda tmp: pytest.fail("not its turn")) is None
