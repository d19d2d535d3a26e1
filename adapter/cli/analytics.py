"""``rmq-kafka analytics stream|dlq-report``: the Spark jobs, whose arguments and runner live
in :mod:`adapter.analytics.cli` (shared with the ``spark/*.py`` scripts); pyspark is
imported only when a job runs."""

from __future__ import annotations

import argparse
from typing import Any

from adapter.cli.options import kafka_config

__all__ = ["add_parser", "cmd_analytics"]


def add_parser(sub: Any) -> None:
    from adapter.analytics.cli import add_analytics_parser

    add_analytics_parser(sub).set_defaults(func=cmd_analytics)


def cmd_analytics(args: argparse.Namespace) -> int:
    from adapter.analytics.cli import run_analytics

    return run_analytics(args, kafka_config(args))
