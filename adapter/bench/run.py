"""``rmq-kafka bench``: runs the picked scenarios of the registry on one broker and reports
them (a markdown table on stdout, every run in a JSON file)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from adapter.bench.analytics import pyspark_missing
from adapter.bench.harness import Bench, Scenario
from adapter.bench.registry import ALL, SCENARIOS, SPARK_SCENARIO

__all__ = ["render_table", "run_bench"]

#: Summary keys with a column of their own; any other key goes to the "other" column.
_COLUMNS = frozenset(
    {
        "scenario",
        "ours_msgs_per_s",
        "raw_msgs_per_s",
        "ratio",
        "ours_cpu_us_per_msg",
        "raw_cpu_us_per_msg",
        "runs",
    }
)


def run_bench(args: argparse.Namespace) -> int:
    """Run ``args.only`` (default: every scenario) on ``args.bootstrap_servers`` (default:
    ``$KAFKA_BOOTSTRAP_SERVERS``, else a fresh embedded broker of ``args.brokers`` nodes),
    ``args.repeats`` times each; the table on stdout, every run in ``args.json``."""
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.ExitStack() as stack:
        if not bootstrap:
            from adapter.embedded.process_instance import process_instance

            brokers = getattr(args, "brokers", 1)
            # one broker gets 1 GiB; three share the machine's cores and memory.  An instance
            # of this run's own: two benches on one machine never stop each other's broker
            heap = "1g" if brokers == 1 else "512m"
            broker = stack.enter_context(process_instance("bench", heap=heap, brokers=brokers))
            bootstrap = broker.bootstrap_servers
        return _run(args, bootstrap)


def _run(args: argparse.Namespace, bootstrap: str) -> int:
    """:func:`run_bench` on ``bootstrap``."""
    bench = Bench(bootstrap, args.messages, args.repeats, warm_up=getattr(args, "warm_up", True))
    only = set(args.only or ALL)
    if SPARK_SCENARIO in only and getattr(args, "no_spark", False):
        only.discard(SPARK_SCENARIO)
        print(f"== {SPARK_SCENARIO}: skipped (--no-spark)", flush=True)
    elif SPARK_SCENARIO in only and (why := pyspark_missing()):
        only.discard(SPARK_SCENARIO)
        print(
            f"== {SPARK_SCENARIO}: skipped, {why}\n"
            "   (./run.sh setup installs the spark extra; "
            "pass --no-spark to skip the Spark analytics row without this message)",
            flush=True,
        )
    results: list[Scenario] = []
    for name, step in SCENARIOS.items():
        if name in only:
            print(f"== {name}", flush=True)
            for sc in step(bench):
                results.append(sc)
                print(json.dumps(sc.summary()), flush=True)
    table = [sc.summary() for sc in results]
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "messages": args.messages,
                "repeats": args.repeats,
                "results": table,
                "runs": [asdict(sc) for sc in results],
            },
            indent=2,
        )
    )
    print()
    print(render_table(table))
    print(f"\nJSON: {path}")
    return 0


def render_table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of BENCHMARKS.md: one line per scenario summary."""
    lines = [
        "| scenario | ours msg/s | raw msg/s | ratio | ours µs CPU/msg | raw µs CPU/msg | other |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        other = {k: v for k, v in r.items() if k not in _COLUMNS}
        lines.append(
            f"| {r['scenario']} | {r.get('ours_msgs_per_s', '')} | {r.get('raw_msgs_per_s', '')} | "
            f"{r.get('ratio', '')} | {r.get('ours_cpu_us_per_msg', '')} | "
            f"{r.get('raw_cpu_us_per_msg', '')} | "
            f"{', '.join(f'{k}={v}' for k, v in other.items())} |"
        )
    return "\n".join(lines)
