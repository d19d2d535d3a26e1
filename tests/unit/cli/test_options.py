"""The CLI's shared Kafka options (``kafka_config``): the file, then ``-X``, then ``-b``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from adapter.cli import build_parser, kafka_config
from adapter.errors import AdapterError

pytestmark = pytest.mark.unit


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["topics", "ensure", *argv])


def test_kafka_config_reads_the_file_then_x_then_b(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# comment\nsecurity.protocol = SASL_SSL\nlinger.ms=5\n", "utf-8")
    config = kafka_config(
        _args("--config-file", str(props), "-X", "linger.ms=7", "-b", "h1:9092,h2:9092")
    )
    assert config == {
        "security.protocol": "SASL_SSL",
        "linger.ms": "7",
        "bootstrap.servers": "h1:9092,h2:9092",
    }


def test_kafka_config_refuses_a_setting_without_a_value() -> None:
    with pytest.raises(AdapterError, match="-X expects key=value"):
        kafka_config(_args("-X", "linger.ms", "-b", "h:9092"))
