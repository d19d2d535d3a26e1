"""docs/testing-your-service.md, run as a user copies it: each ``python`` block starts with
``# file: NAME``; it is written to a directory of its own and run there the way its kind is
run (``pytest`` for ``test_*.py``, ``python`` for a script or a ``unittest`` module with
``unittest.main()``), with the adapter of this checkout.  Opt-in with the Docker tier
(``RMQ_DOCKER_TESTS=1``): the retry stack's blocks start containers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docker.harness import ROOT, require_docker
from tests.docker.test_retry_stack import docker_ids, ensure_images

pytestmark = pytest.mark.docker

DOC = ROOT / "docs" / "testing-your-service.md"


def blocks() -> dict[str, str]:
    found = re.findall(r"```python\n# file: (\S+)\n(.*?)```", DOC.read_text(), re.S)
    return {name: body for name, body in found}


def test_the_page_has_its_four_examples() -> None:
    assert sorted(blocks()) == [
        "stack_script.py",
        "test_embedded.py",
        "test_my_service.py",
        "test_with_unittest.py",
    ]


@pytest.mark.parametrize("name", sorted(blocks()))
def test_the_block_runs_as_written(name: str, tmp_path: Path) -> None:
    require_docker(compose=False)
    ensure_images()
    (tmp_path / name).write_text(blocks()[name])
    body = blocks()[name]
    if name.startswith("test_") and "unittest.main()" not in body:
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n0", "-q", name]
    else:
        cmd = [sys.executable, name]
    pid_label_before = set(docker_ids("container", "io.rmq-kafka.retry-stack"))
    res = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    if name == "stack_script.py":
        assert re.search(r"host: 127\.0\.0\.1:\d+ containers: kafka:19092", out), out
        assert re.search(r"ready in \d+\.\d+s", out), out
    # nothing of the block's stack is left
    assert set(docker_ids("container", "io.rmq-kafka.retry-stack")) <= pid_label_before
