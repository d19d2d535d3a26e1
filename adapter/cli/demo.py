"""``rmq-kafka demo``: the retry ladder end to end on the embedded broker
(:mod:`adapter.demo`)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "cmd_demo"]


def add_parser(sub: Any) -> None:
    m = sub.add_parser("demo", help="end-to-end demo of the retry ladder on the embedded broker")
    m.add_argument(
        "-b",
        "--bootstrap-servers",
        help="a broker to run against (default: an embedded one, started for the demo)",
    )
    m.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from adapter.demo import run_demo

    return run_demo(bootstrap=args.bootstrap_servers)
