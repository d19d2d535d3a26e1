"""``rmq-kafka dashboard render``: the Grafana dashboard as one SVG picture, drawn from what
a Prometheus answers to its queries (no Grafana needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import adapter
from adapter.cli.options import positive_float
from adapter.errors import InvalidInputError

__all__ = ["add_parser", "cmd_dashboard", "default_dashboard"]

DASHBOARD = Path("docker") / "grafana" / "rmq-kafka-dashboard.json"


def default_dashboard() -> Path:
    """The dashboard shipped with the project (``docker/grafana/rmq-kafka-dashboard.json``
    of the checkout the package runs from, else of the current directory)."""
    for root in (Path(adapter.__file__).resolve().parents[1], Path.cwd()):
        if (root / DASHBOARD).is_file():
            return root / DASHBOARD
    raise InvalidInputError(
        "--dashboard",
        None,
        f"{DASHBOARD} is not next to the installed package nor in the current directory; "
        "pass the dashboard's JSON file",
    )


def add_parser(sub: Any) -> None:
    d = sub.add_parser("dashboard", help="the Grafana dashboard drawn as an SVG from Prometheus")
    dsub = d.add_subparsers(dest="action", required=True)
    r = dsub.add_parser(
        "render",
        help="ask Prometheus every panel's queries and draw the dashboard as one SVG file",
    )
    r.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus, e.g. http://127.0.0.1:9090"
    )
    r.add_argument(
        "--dashboard",
        type=Path,
        help="the Grafana dashboard JSON (default: docker/grafana/rmq-kafka-dashboard.json)",
    )
    r.add_argument("--group", default=".*", help="$group: a regular expression (default: .*)")
    r.add_argument("--topic", default=".*", help="$topic: a regular expression (default: .*)")
    r.add_argument("--range", default="10m", help="the time range up to now (default: 10m)")
    r.add_argument(
        "--step", help="seconds between a timeseries' points (default: the range / 120, >= 1s)"
    )
    r.add_argument(
        "--scrape-interval",
        default="15s",
        help="Prometheus' scrape interval, for $__rate_interval (default: 15s)",
    )
    r.add_argument(
        "--strict",
        action="store_true",
        help="fail unless every metric the queries read is exposed by a target Prometheus scrapes",
    )
    r.add_argument(
        "--timeout", type=positive_float, default=30.0, help="seconds per Prometheus request"
    )
    r.add_argument("--out", required=True, type=Path, help="the SVG file to write")
    r.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from adapter.io.clock import SYSTEM_CLOCK
    from adapter.ops.dashboard import (
        MAX_POINTS,
        Settings,
        check_variable,
        load_dashboard,
        parse_duration,
        render_svg,
    )
    from adapter.ops.prometheus import PrometheusApi, check_metrics, fetch

    range_s = parse_duration("--range", args.range)
    step_s = parse_duration("--step", args.step) if args.step else max(1.0, range_s / MAX_POINTS)
    settings = Settings(
        end=SYSTEM_CLOCK.now_ms() / 1000.0,
        range_s=range_s,
        step_s=step_s,
        scrape_interval_s=parse_duration("--scrape-interval", args.scrape_interval),
        group=check_variable("--group", args.group),
        topic=check_variable("--topic", args.topic),
    )
    title, panels = load_dashboard(args.dashboard or default_dashboard())
    api = PrometheusApi(args.prometheus, timeout_s=args.timeout)
    if args.strict:
        check_metrics(api, panels)
    data = fetch(api, panels, settings)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_svg(title, panels, data, settings), "utf-8")
    drawn = sum(1 for p in panels if p.kind != "row")
    empty = sum(1 for p in panels if p.kind != "row" and not any(data[p.id]))
    print(f"{args.out}: {drawn} panel(s), {empty} without data", file=sys.stderr)
    return 0
