"""``RMQ_KAFKA_JVM_OPTS``: extra JVM options for the embedded nodes (``./run.sh test`` starts
its short-lived brokers with the client compiler only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapter.embedded import EmbeddedKafka
from adapter.embedded.jars import JVM_OPTS_ENV, jvm_options
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
