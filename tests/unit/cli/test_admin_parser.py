"""The admin subcommands' arguments (no broker): required choices, defaults, and the
ControlChannel's own argument checks."""

from __future__ import annotations

import argparse

import pytest

from adapter.cli import build_parser
from adapter.errors import ConfigError, TopicNameError
from adapter.io.control import ControlChannel

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_defaults() -> None:
    args = parse("msg", "show", "--id", "X")
    assert (args.since, args.max_records, args.timeout, args.json) == (
        "24h",
        1_000_000,
        30.0,
        False,
    )
    args = parse("group", "reset-offset", "--group", "g", "--topic", "t", "--to-latest", "--force")
    assert args.force and args.to_latest and args.to_time is None
    args = parse("schedule", "status", "--namespace", "ns", "--json")
    assert args.namespace == "ns" and args.group is None and args.json


@pytest.mark.parametrize(
    "argv",
    [
        ("group", "reset-offset", "--group", "g", "--topic", "t"),  # no target
        ("group", "reset-offset", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest"),
        ("group", "progress"),  # no group
        ("msg", "show"),  # neither --id nor --key
        ("msg", "show", "--id", "a", "--key", "b"),
        ("msg", "show", "--id", "a", "--max-records", "0"),
        ("group", "progress", "--group", "g", "--timeout", "-1"),
        ("schedule", "run"),
    ],
)
def test_refused_arguments_exit_with_usage(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_control_channel_checks_its_arguments_before_connecting() -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(TopicNameError):
        ControlChannel(conf, "", "member-1")
    with pytest.raises(ConfigError) as info:
        ControlChannel(conf, "g", "")
    assert info.value.field == "member_id"
    channel = ControlChannel({**conf, "stats_cb": print, "statistics.interval.ms": 1000}, "g", "m")
    channel.close()  # never opened: nothing to close, no connection made
