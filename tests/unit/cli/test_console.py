"""``rmq-kafka console`` takes every client's security settings."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.unit


def test_the_console_command_takes_every_clients_security_settings(tmp_path: Any) -> None:
    """``rmq-kafka console`` reads ``-b``, ``-X`` and ``--config-file`` as every command does;
    the console's clients get them all."""
    from adapter.cli.main import build_parser
    from adapter.cli.options import kafka_config

    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    args = build_parser().parse_args(
        [
            "console",
            "-b",
            "broker:9093",
            "--config-file",
            str(props),
            "-X",
            "ssl.ca.location=/etc/ca.pem",
            "--read-only",
        ]
    )
    assert kafka_config(args) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "ssl.ca.location": "/etc/ca.pem",
        "bootstrap.servers": "broker:9093",
    }
    assert args.host == "127.0.0.1" and args.port == 8088 and args.read_only
    assert args.max_redrives == 3
