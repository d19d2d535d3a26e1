"""The Docker tier asked for by name (``RMQ_DOCKER_TESTS=1``) has what it needs: a docker
CLI, an engine that answers and Compose.  Skipped when not asked for; when asked for, a
missing part fails this test, naming the part and how to install it (so a run without Docker
never passes as if the tier had run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docker.harness import ROOT, require_docker

pytestmark = pytest.mark.docker


def test_the_docker_tier_has_an_engine_and_compose() -> None:
    require_docker(compose=True)


def test_an_engine_without_compose_fails_naming_compose(tmp_path: Path) -> None:
    """A machine with a Docker engine but neither ``docker compose`` nor ``docker-compose``:
    the tier asked for fails, naming Compose (and not the engine, which answers)."""
    require_docker(compose=False)
    docker = shutil.which("docker")
    assert docker is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the real CLI for everything but its compose plugin
    shim = bin_dir / "docker"
    shim.write_text(
        f'#!/bin/sh\n[ "$1" = compose ] && {{ echo "unknown command: compose" >&2; exit 1; }}\n'
        f'exec {docker} "$@"\n'
    )
    shim.chmod(0o755)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n0",
            "-q",
            f"{__file__}::test_the_docker_tier_has_an_engine_and_compose",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        check=False,
        env={
            **os.environ,
            "RMQ_DOCKER_TESTS": "1",
            "PATH": str(bin_dir),
            "PYTHONPATH": str(ROOT),
        },
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "neither 'docker compose' nor docker-compose is installed" in out
    assert "docker-compose-plugin" in out
    assert "no Docker engine reachable" not in out
