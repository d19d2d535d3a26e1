"""docs/security.md's snippets, run as a user copies them: the shell lines (a TLS broker of
its own, started and stopped here), then the Python example against it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from adapter.embedded import EmbeddedKafka
from tests.tls.helpers import uid

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _unique(text: str, run: str) -> str:
    for name in ("tls-demo", "orders-service"):
        text = text.replace(name, f"{name}-{run}")
    return re.sub(r"(?<![\w-])orders(?![\w-])", f"orders-{run}", text)


def test_the_trying_it_snippets_run_as_written(tmp_path: Path) -> None:
    section = _section("Trying it on the embedded broker")
    [shell] = re.findall(r"```sh\n(.*?)```", section, re.S)
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    run = uid()
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    name = f"tls-demo-{run}"
    try:
        for line in _unique(shell, run).strip().splitlines():
            words = shlex.split(line)
            assert words[0] == "rmq-kafka", line
            out = subprocess.run(
                [sys.executable, "-m", "adapter.cli", *words[1:]],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
            )  # fmt: skip
            assert out.returncode == 0, (line, out.stderr[-3000:])
        assert (tmp_path / "client.properties").is_file()
        script = tmp_path / "example.py"
        script.write_text(_unique(code, run), encoding="utf-8")
        out = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        expected = code.strip().splitlines()[-1].removeprefix("# ")
        assert out.stdout.strip().splitlines()[-1] == expected, out.stdout
    finally:
        broker = EmbeddedKafka.existing(name)
        broker.stop()
        shutil.rmtree(broker.instance_dir, ignore_errors=True)
