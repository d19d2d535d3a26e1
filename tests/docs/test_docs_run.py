"""The documentation's code, run as a reader runs it: on each page (README.md and docs/),
every ``python`` block that is not an excerpt and every shell block that runs ``rmq-kafka``
run in order, against a real broker, and do what their last comment says.

Each page is one test (its blocks in order; the pages spread over the workers), on the
worker's broker, with the page's topic and group names made unique; a page that starts its
own broker (``rmq-kafka kafka start``) gets it on a free port, in a home of its own, and uses
it for the rest of the page.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.doc_snippets import ROOT, Block, blocks, names_to_rename, pages, rename
from tests.support.simple_backends import share_backend_unsupported

pytestmark = pytest.mark.integration

RUNNABLE = {p: [b for b in blocks(p) if b.runnable] for p in pages()}
PAGES = [p for p, found in RUNNABLE.items() if found]
TIMEOUT_S = 150


@dataclass
class PageRun:
    """What running one page's blocks gave: one line per block, and the first failure."""

    page: str
    done: list[str] = field(default_factory=list)
    failure: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_block(block: Block, code: str, env: dict[str, str], tmp: Path) -> str | None:
    """Run one block; ``None`` when it did what it says, else why not."""
    if block.lang == "python":
        script = tmp / f"block-{block.line}.py"
        script.write_text(code, encoding="utf-8")
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    try:
        out = subprocess.run(
            argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        return f"{block.where}: still running after {TIMEOUT_S} s; output: {exc.stdout!r}"
    if out.returncode != 0:
        return f"{block.where}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    expected = block.expected_last_line
    if expected is not None:
        expected = rename(expected, env["_DOC_NAMES"].split(), env["_DOC_SUFFIX"])
        last = (out.stdout.strip().splitlines() or [""])[-1]
        if last != expected:
            return f"{block.where}: printed {last!r}, the page says {expected!r}\n{out.stdout}"
    return None


def _run_page(page: Path, bootstrap: str, tmp: Path) -> PageRun:
    run = PageRun(str(page.relative_to(ROOT)))
    names = names_to_rename(page)
    suffix = uuid.uuid4().hex[:8]
    tmp.mkdir(parents=True)
    bin_dir = str(Path(sys.executable).parent)  # rmq-kafka and python of this environment
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "_DOC_NAMES": " ".join(names),
        "_DOC_SUFFIX": suffix,
    }
    port: int | None = None
    try:
        for block in RUNNABLE[page]:
            if 'backend="share"' in block.code and share_backend_unsupported():
                run.done.append(f"{block.where}: skipped (the share backend needs Kafka 4.3+)")
                continue
            code = rename(block.code, names, suffix)
            if block.lang != "python" and re.search(r"rmq-kafka kafka start\b", code):
                # the page's own broker: a free port, a home of its own, used from here on
                port = port or _free_port()
                env["RMQ_KAFKA_HOME"] = str(tmp / "home")
                env["KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{port}"
            if port is not None:
                code = code.replace("9092", str(port))
            started = time.monotonic()
            failure = _run_block(block, code, env, tmp)
            if failure is not None:
                run.failure = failure
                return run
            run.done.append(f"{block.where}: ok in {time.monotonic() - started:.1f} s")
        return run
    finally:
        if port is not None:  # stop the page's broker, whatever the page did
            subprocess.run(
                ["rmq-kafka", "kafka", "stop"],
                env=env,
                capture_output=True,
                timeout=120,
                check=False,
            )


def test_the_docs_have_pages_to_run() -> None:
    assert len(PAGES) >= 8, PAGES
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "getting-started.md" in PAGES


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in PAGES])
def test_every_runnable_block_of_the_page_runs_as_written(
    page: str, kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    run = _run_page(ROOT / page, kafka_bootstrap_servers, tmp_path / "page")
    assert run.failure is None, "\n".join([*run.done, run.failure or ""])
