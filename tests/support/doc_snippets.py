"""The code blocks of README.md and docs/, as the snippet tests see them.

Conventions (written for contributors in docs/contributing.md):

* every fenced block has a language tag;
* a ``python`` block is run as a script against a real broker, unless the line before it is
  ``<!-- excerpt -->``: then it is only compiled and checked for undefined names;
* a shell block (``bash``, ``sh``, ``shell``) with a line that runs ``rmq-kafka`` is run too,
  unless the line before it is ``<!-- not run: <why> -->``;
* the runnable blocks of a page run in order, as a reader would run them;
  ``<!-- test-names: a b -->`` names the topics and groups the test makes unique per run;
* a ``python`` block whose last line is ``print(...)  # <text>`` must print ``<text>`` last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"bash", "sh", "shell"})

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[^\s`]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(excerpt|not run:\s*(?P<why>.*?))\s*-->\s*$")
_NAMES = re.compile(r"<!--\s*test-names:\s*(?P<names>[^>]*?)\s*-->")
_EXPECT = re.compile(r"^print\(.*\)\s+#\s*(?P<text>\S.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block: where it is, its language and text, and its marker."""

    page: str  # relative to the repository's root
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # "excerpt", "not run", or None
    why: str | None = None  # the reason of a "not run" marker

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs_rmq_kafka(self) -> bool:
        return any(
            line.strip().removeprefix("$ ").startswith("rmq-kafka")
            for line in self.code.splitlines()
        )

    @property
    def runnable(self) -> bool:
        if self.lang == "python":
            return self.marker != "excerpt"
        return self.lang in SHELL and self.runs_rmq_kafka and self.marker != "not run"

    @property
    def expected_last_line(self) -> str | None:
        lines = [line for line in self.code.splitlines() if line.strip()]
        found = _EXPECT.match(lines[-1]) if lines else None
        return found.group("text") if found else None


def pages() -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = opening.group("indent")
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != f"{indent}```":
            end += 1
        body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(before)
        found.append(
            Block(
                page=str(page.relative_to(ROOT)),
                line=i + 1,
                lang=opening.group("lang"),
                code=body,
                marker=None if marker is None else marker.group(1).split(":")[0],
                why=None if marker is None else marker.group("why"),
            )
        )
        i = end + 1
    return found


def names_to_rename(page: Path) -> list[str]:
    """The topic and group names a page's runnable blocks use, to be made unique per run."""
    text = page.read_text(encoding="utf-8")
    return [name for m in _NAMES.finditer(text) for name in m.group("names").split()]


def rename(code: str, names: list[str], suffix: str) -> str:
    """``code`` with each of ``names`` (a whole word: not part of a longer name) suffixed."""
    for name in sorted(names, key=len, reverse=True):
        code = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", f"{name}-{suffix}", code)
    return code
