"""The CLI a newcomer meets through ``--help`` (no broker): one style (subcommands everywhere,
``-v`` after any of them, flags of one action refused by another), every subcommand and
flag described, and every flag the CLI page's synopsis shows is one the command takes.

Found by following the README: ``dlq``, ``topics`` and ``schedule-service`` took a positional
action with shared flags (``dlq list --to-origin`` was accepted), several flags had no help,
and ``-v`` worked only before the subcommand.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adapter.cli import build_parser

pytestmark = pytest.mark.unit

CLI_PAGE = Path(__file__).resolve().parents[3] / "docs" / "operating" / "cli.md"
_CHOICES = re.compile(r"^  \{([\w,-]+)\}$", re.M)


def _help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([*path, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def _commands(capsys: pytest.CaptureFixture[str]) -> dict[tuple[str, ...], str]:
    """Every command path -> its ``--help`` text (the root is ``()``)."""
    found: dict[tuple[str, ...], str] = {}
    todo: list[tuple[str, ...]] = [()]
    while todo:
        path = todo.pop()
        text = _help(path, capsys)
        if path and text == found[path[:-1]]:
            continue  # a positional choice, not a subcommand: its parent's help again
        found[path] = text
        for group in _CHOICES.findall(text):
            todo.extend((*path, name) for name in group.split(","))
    return found


def _leaves(commands: dict[tuple[str, ...], str]) -> list[tuple[str, ...]]:
    return [p for p in commands if not any(q[: len(p)] == p and q != p for q in commands)]


def _undescribed(text: str) -> list[str]:
    """The entries of a help text (subcommands and flags) that have no description."""
    lines = text.splitlines()
    bare = []
    for i, line in enumerate(lines):
        entry = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
        if entry is None or line.startswith("usage:") or _CHOICES.match(line):
            continue
        name, described = entry.groups()
        if name.startswith("-") or re.fullmatch(r"[\w-]+", name):
            follows = lines[i + 1] if i + 1 < len(lines) else ""
            if not described and not re.match(r"^ {10,}\S", follows):
                bare.append(name)
    return bare


def test_every_command_and_flag_is_described(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _commands(capsys)
    assert ("dlq", "redrive") in commands and ("kafka", "start") in commands
    missing = {" ".join(p): bare for p, text in commands.items() if (bare := _undescribed(text))}
    assert missing == {}


_REST = re.compile(r"``|:(?:class|mod|func|meth|attr|data|exc):`")


def test_no_help_text_shows_restructuredtext_markup(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` is read in a terminal: plain text (it showed ````rmq-kafka````: ...)."""
    commands = _commands(capsys)
    marked = {
        " ".join(p): [ln for ln in t.splitlines() if _REST.search(ln)] for p, t in commands.items()
    }
    assert {path: lines for path, lines in marked.items() if lines} == {}


def test_the_markup_detector_sees_markup() -> None:
    assert _REST.search("``rmq-kafka``: the broker")
    assert _REST.search("see :class:`Producer`")
    assert not _REST.search("rmq-kafka: the broker (`-b`)")


def test_the_detector_sees_a_bare_flag() -> None:
    text = "options:\n  -h, --help  show this\n  --limit LIMIT\n  --all       every entry\n"
    assert _undescribed(text) == ["--limit LIMIT"]


def test_every_family_uses_subcommands_and_takes_v_after_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    leaves = _leaves(_commands(capsys))
    for family in ("kafka", "topics", "schedule-service", "dlq", "group", "msg", "schedule"):
        assert any(leaf[0] == family and len(leaf) == 2 for leaf in leaves), family
    for leaf in leaves:
        assert "[-v]" in _help(leaf, capsys), leaf


@pytest.mark.parametrize(
    "argv",
    [
        ("dlq", "list", "--group", "g", "--to-origin"),  # redrive's flag
        ("dlq", "list", "--group", "g", "--all"),
        ("kafka", "stop", "--port", "9092"),  # start's flag
        ("topics", "--group", "g"),  # no action
    ],
)
def test_a_flag_of_another_action_is_refused(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(list(argv))
    assert info.value.code == 2
    capsys.readouterr()


def _synopsis() -> list[tuple[tuple[str, ...], list[str]]]:
    """The CLI page's synopsis: (command path, flags shown) per ``rmq-kafka ...`` entry
    (continuation lines belong to the entry above; ``a|b`` takes its first alternative)."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    block = text[text.index("```text\n") + 8 :]
    block = block[: block.index("```")]
    entries: list[tuple[tuple[str, ...], list[str]]] = []
    for line in block.splitlines():
        code = line.split("#", 1)[0]
        if code.startswith("rmq-kafka "):
            path = []
            for token in code.split()[1:]:
                if not re.fullmatch(r"[a-z][\w|-]*", token):
                    break
                path.append(token.split("|")[0])
            entries.append((tuple(path), []))
        entries[-1][1].extend(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", code))
    return entries


def test_every_flag_of_the_cli_page_synopsis_exists(capsys: pytest.CaptureFixture[str]) -> None:
    entries = _synopsis()
    assert len(entries) >= 10, entries
    unknown = {}
    for path, flags in entries:
        text = _help(path, capsys)
        if wrong := [f for f in flags if not re.search(rf"[\s\[(,]{re.escape(f)}\b", text)]:
            unknown[" ".join(path)] = wrong
    assert unknown == {}
