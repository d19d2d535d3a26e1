"""The documentation's code, checked without a broker: every fenced block has a language,
every ``python`` block compiles and leaves no name undefined (excerpts included: pasted, they
must not raise ``NameError``), a block not run says why, the README stays short, and no file
labels anything by a numbered internal work period."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.doc_snippets import ROOT, Block, blocks, names_to_rename, pages, rename

pytestmark = pytest.mark.unit

ALL = [b for page in pages() for b in blocks(page)]
PYTHON = [b for b in ALL if b.lang == "python"]


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert found, "ruff (the test extra) is needed to check snippets for undefined names"
    return found


def _undefined_names(code: str) -> list[str]:
    """ruff's undefined-name rules on ``code`` alone (the project's config left out)."""
    out = subprocess.run(
        [
            _ruff(),
            "check",
            "--isolated",
            "--select",
            "F821,F822,F823",
            "--output-format",
            "concise",
            "--stdin-filename",
            "snippet.py",
            "-",
        ],
        input=code,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return [line for line in out.stdout.splitlines() if "snippet.py:" in line]


def test_the_docs_have_code_to_check() -> None:
    assert len(PYTHON) >= 10 and any(b.runnable for b in PYTHON)
    assert any(b.marker == "excerpt" for b in PYTHON)


def test_every_code_block_names_its_language() -> None:
    assert [b.where for b in ALL if not b.lang] == []


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.where)
def test_every_python_block_compiles_and_defines_every_name_it_uses(block: Block) -> None:
    compile(block.code, block.where, "exec")
    assert _undefined_names(block.code) == []


def test_the_undefined_name_check_sees_one() -> None:
    assert _undefined_names("import os\nprint(os.sep, running)\n")
    assert not _undefined_names("import os\nprint(os.sep)\n")


def test_markers_are_used_as_meant() -> None:
    wrong = [b.where for b in ALL if b.marker == "excerpt" and b.lang != "python"]
    wrong += [b.where for b in ALL if b.marker == "not run" and not b.why]
    assert wrong == []


def test_a_runnable_block_that_prints_its_result_says_what() -> None:
    """The last ``print`` of a runnable block states its output, so a reader knows what to
    expect and the test can check it."""
    silent = [
        b.where
        for b in PYTHON
        if b.runnable and "print(" in b.code.strip().splitlines()[-1] and not b.expected_last_line
    ]
    assert silent == []


def test_renaming_keeps_longer_names_apart() -> None:
    code = 'g = "orders-service"; t = "orders"; d = "%DLQ%orders-service"  # orders\n'
    assert rename(code, ["orders", "orders-service"], "x1") == (
        'g = "orders-service-x1"; t = "orders-x1"; d = "%DLQ%orders-service-x1"  # orders-x1\n'
    )


def test_pages_name_their_test_names_once() -> None:
    assert names_to_rename(ROOT / "docs" / "getting-started.md") == ["orders", "orders-service"]


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)


# a work period's label (the word and a number); not a duration ("a group session 6 s")
_PERIOD = re.compile(r"\b(session|wave)\s+[0-9]+\b(?!\s*(?:s|ms|min)\b)", re.IGNORECASE)
_SKIP_DIRS = {
    ".git",
    "site",
    "bench-results",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
}


def test_the_work_period_detector() -> None:
    word = "Sess" + "ion"  # spelt apart, so that this file does not match itself
    assert _PERIOD.search(f"## {word} 12: one run") and _PERIOD.search("(wa" + "ve 1)")
    assert not _PERIOD.search("the kill test's group session 6 s")


def _repository_files() -> list[Path]:
    """The repository's files: in a git checkout those git tracks or would (not what it
    ignores: virtualenvs, builds, an editable install's metadata); elsewhere a walk that
    skips virtualenvs, builds and caches."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        return [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".venv")]
        found += [Path(folder) / name for name in files]
    return found


def test_no_file_labels_anything_by_a_numbered_work_period() -> None:
    """Files date what they record; an internal work period means nothing to a reader."""
    found = []
    for path in _repository_files():
        if path.suffix not in {".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".txt", ""}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _PERIOD.finditer(text)]
    assert found == []


_LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_links_to_files_that_exist() -> None:
    """The site's build checks its own links (--strict); the README is read outside it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = _LINK.findall(text)
    assert len(targets) >= 10
    assert [t for t in targets if not (ROOT / t).exists()] == []


def test_nothing_points_outside_the_repository() -> None:
    """No URL in the README or the site's pages (the vendored Mermaid's licence aside)."""
    found = [
        f"{page.relative_to(ROOT)}: {m.group(0)}"
        for page in pages()
        # a loopback address is this machine's (the console's own page), and a Kubernetes
        # service name (``*.svc``) the reader's own cluster's: neither is elsewhere
        for m in re.finditer(
            r"https?://(?!127\.0\.0\.1|localhost|\[::1\]|[\w.-]+\.svc[:/])\S+",
            page.read_text(encoding="utf-8"),
        )
    ]
    assert found == []
