"""One version, read three ways: ``adapter.__version__`` (the one place it is written),
the installed distribution's metadata (pyproject.toml reads the attribute) and
``rmq-kafka --version``."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

import adapter
from adapter.cli import build_parser

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "adapter.__version__"}


def test_the_version_is_a_release_number_and_the_installed_metadata_agrees() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:\S*)", adapter.__version__), adapter.__version__
    assert importlib.metadata.version("rmq-kafka-adapter") == adapter.__version__


def test_rmq_kafka_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rmq-kafka {adapter.__version__}"
