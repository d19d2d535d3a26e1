"""``rmq-kafka bench``: the benchmarks against raw confluent-kafka in the same run; the
scenario names ``--only`` takes come from the registry (:mod:`adapter.bench.registry`)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "cmd_bench"]


def add_parser(sub: Any) -> None:
    from adapter.bench.registry import ALL

    b = sub.add_parser("bench", help="benchmarks against raw confluent-kafka in the same run")
    b.add_argument(
        "-b",
        "--bootstrap-servers",
        help="measure on this cluster (default: an embedded one, started for the run)",
    )
    b.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="nodes of the embedded cluster it starts (without -b): 3 measures on a cluster "
        "(replication factor 3, min.insync.replicas 2), raw confluent-kafka on the same one",
    )
    b.add_argument(
        "--messages", type=int, default=100_000, help="messages per scenario (default: 100000)"
    )
    b.add_argument(
        "--repeats", type=int, default=3, help="runs per scenario; the median counts (default: 3)"
    )
    b.add_argument(
        "--only",
        action="append",
        help=f"run only this scenario (repeatable: {', '.join(ALL)})",
    )
    b.add_argument(
        "--no-spark",
        action="store_true",
        help="skip the Spark analytics row (it needs the spark extra: pyspark)",
    )
    b.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="skip the Spark row's warm-up jobs: a check that the row runs (its figures then "
        "include the JVM's compilation and class loading, so they are not comparable)",
    )
    b.add_argument(
        "--json",
        default="bench-results/latest.json",
        help="where the results go as JSON (default: bench-results/latest.json)",
    )
    b.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from adapter.bench import run_bench

    return int(run_bench(args))
