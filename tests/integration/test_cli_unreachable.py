"""Every operator command pointed at an address where no broker listens says so in
seconds, naming the address: no raw ``KafkaError``, no 30 s wait."""

from __future__ import annotations

import socket
import time

import pytest

from adapter.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there


@pytest.mark.parametrize(
    "argv",
    [
        ["dlq", "list", "--group", "g"],
        ["dlq", "redrive", "--group", "g"],
        ["schedule", "status"],
        ["group", "progress", "--group", "g"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_command_without_a_reachable_broker_says_so_within_seconds(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    where = _closed_port()
    started = time.monotonic()
    code = main([*argv, "-b", where])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code != 0
    assert f"cannot reach any broker at {where}" in err, err
    assert "KafkaError{" not in err, err
    assert took < 10, f"took {took:.1f}s"
