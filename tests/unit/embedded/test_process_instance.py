"""Instances that belong to one process: the orphans of a dead process are reaped, nothing
else is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from adapter.embedded.process_instance import reap_orphans

pytestmark = pytest.mark.unit


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_only_the_instances_of_a_dead_process_of_the_prefix_are_reaped(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    names = [
        f"bench-{dead}",
        f"bench-{dead}-cluster",
        f"bench-{alive}",
        "bench-x",
        "bench",
        f"benchmark-{dead}",
        f"pytest-{dead}-tls",
    ]
    for name in names:
        (tmp_path / name).mkdir()
    reap_orphans(tmp_path, "bench")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
    reap_orphans(tmp_path, "pytest")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:6])
