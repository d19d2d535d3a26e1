"""``rmq-kafka bench`` without ``-b`` measures on an embedded broker it starts for the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_two_benches_at_once_each_run_on_a_broker_of_their_own(tmp_path: Path) -> None:
    """Two benches started together on one machine both finish with their rows: neither
    one's fresh broker stops the other's, and neither leaves its broker's data behind."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env["RMQ_KAFKA_HOME"] = str(tmp_path / "home")
    args = ["bench", "--no-spark", "--only", "sendback", "--messages", "200"]
    args += ["--repeats", "1", "--no-warm-up"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "adapter.cli", *args, "--json", str(tmp_path / f"{i}.json")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=150)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for i in range(2):
        rows = json.loads((tmp_path / f"{i}.json").read_text())["results"]
        assert [r["scenario"].split(",")[0] for r in rows] == ["send-back of a failed message"]
    assert list((tmp_path / "home" / "instances").iterdir()) == []
