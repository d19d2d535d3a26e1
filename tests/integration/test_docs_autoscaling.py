"""docs/autoscaling.md as a user reads it: its Python example runs as written against a real
broker and prints what the page says; its KEDA ScaledObject is valid YAML that queries the
gauge the ScheduleService serves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "autoscaling.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), re.S)


def test_the_gauge_example_runs_as_written(kafka_bootstrap_servers: str, tmp_path: Path) -> None:
    [code] = _blocks("python")
    group = f"orders-service-{uuid.uuid4().hex[:8]}"  # its own group on a shared broker
    script = tmp_path / "example.py"
    script.write_text(code.replace('"orders-service"', f'"{group}"'))
    out = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    printed = out.stdout.strip().splitlines()[-1]
    assert printed == f"['rmq_group_backlog{{group=\"{group}\"}} 0.0']"
    said = "['rmq_group_backlog{group=\"orders-service\"} 0.0']"
    assert f"# {said}" in PAGE.read_text()  # what the page says it prints


def test_the_keda_scaled_object_queries_the_gauge() -> None:
    first, second = (yaml.safe_load(b) for b in _blocks("yaml"))
    assert first["kind"] == "ScaledObject" and first["apiVersion"] == "keda.sh/v1alpha1"
    [trigger] = first["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == 'max(rmq_group_backlog{group="orders-service"})'
    float(trigger["metadata"]["threshold"])
    query = second["query"]
    for part in ("topics", "retry", "delayed"):
        assert f'part="{part}"' in query
