"""The README's code, run as a user copies it: each ``python`` block of "Using it" runs
against the real broker and does what its last comment says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.simple_backends import share_backend_unsupported

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def _using_it() -> str:
    text = README.read_text()
    section = text[text.index("## Using it\n") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _run_as_written(
    code: str, names: tuple[str, ...], bootstrap: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """Run a README example as a script against ``bootstrap``; its fixed ``names`` (quoted
    strings: groups, topics) made unique so that runs do not meet on a shared broker.
    Fails the test when the script fails."""
    run = uuid.uuid4().hex[:8]
    for name in names:
        code = code.replace(f'"{name}"', f'"{name}-{run}"')
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    out = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_the_using_it_example_runs_as_written_and_loses_nothing(
    kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    """Subscribe, then send to a topic that does not exist yet: every message is handled
    (a new group on a new topic reads it from its first message), the retried one too."""
    out = _run_as_written(
        _using_it(), ("orders-service", "orders"), kafka_bootstrap_servers, tmp_path
    )
    assert (
        out.stdout.strip().splitlines()[-1] == "[b'at-a-time', b'flaky', b'in-10s', b'order-1']"
    ), (
        out.stdout,
        out.stderr[-3000:],
    )


def _share_example() -> str:
    text = README.read_text()
    section = text[text.index("### SimpleConsumer (RocketMQ 5)\n") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return next(b for b in blocks if 'backend="share"' in b)


@pytest.mark.skipif(share_backend_unsupported(), reason="the share backend needs Kafka 4.3+")
def test_the_share_backend_example_runs_as_written(
    kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    """The share-group SimpleConsumer example: subscribe, start, send to a new topic; every
    message is received once, at its first attempt."""
    out = _run_as_written(
        _share_example(), ("invoice-workers", "invoices"), kafka_bootstrap_servers, tmp_path
    )
    lines = sorted(line for line in out.stdout.splitlines() if line.startswith("invoice-"))
    assert lines == [f"invoice-{i} attempt 1" for i in range(3)], out.stdout
