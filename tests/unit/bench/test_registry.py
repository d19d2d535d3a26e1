"""The parts of ``rmq-kafka bench`` that need no broker: the scenario registry (its names and
order are what ``--only`` takes and the order rows are reported in), a row's ratio and the
markdown table of BENCHMARKS.md."""

from __future__ import annotations

import pytest

from adapter.bench import ALL, SCENARIOS, Run, Scenario, render_table
from adapter.cli import build_parser

pytestmark = pytest.mark.unit


def test_registry_names_and_order_are_the_reported_ones() -> None:
    assert ALL == (
        "consumer",
        "consumer-pool",
        "blocking",
        "consumer-1k",
        "failures",
        "consumer-protocol",
        "sendback",
        "breaker",
        "pull",
        "share",
        "share-scaling",
        "orderly",
        "producer",
        "forwarding",
        "lateness",
        "rss",
        "trace",
        "tracing",
        "analytics",
    )
    assert tuple(SCENARIOS) == ALL
    assert all(callable(run) for run in SCENARIOS.values())


def test_bench_help_lists_every_registered_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(repeatable: " + ", ".join(ALL) + ")" in text
    args = build_parser().parse_args(["bench", "--only", "pull", "--only", "orderly"])
    assert (args.only, args.brokers, args.messages, args.repeats) == (
        ["pull", "orderly"],
        1,
        100_000,
        3,
    )


def test_a_rows_summary_is_the_median_ratio_to_raw() -> None:
    sc = Scenario("row", extra={"note": 1})
    sc.ours += [Run(100.0, 4.0), Run(300.0, 2.0), Run(200.0, 3.0)]
    sc.raw += [Run(400.0, 1.0), Run(400.0, 1.5), Run(1000.0, 0.5)]
    assert sc.summary() == {
        "scenario": "row",
        "ours_msgs_per_s": 200,
        "raw_msgs_per_s": 400,
        "ratio": 0.5,
        "ours_cpu_us_per_msg": 3.0,
        "raw_cpu_us_per_msg": 1.0,
        "runs": 3,
        "note": 1,
    }
    assert Scenario("extra only", extra={"x": 2}).summary() == {"scenario": "extra only", "x": 2}


def test_render_table_puts_unknown_keys_in_other() -> None:
    rows = [
        {"scenario": "a", "ours_msgs_per_s": 5, "raw_msgs_per_s": 10, "ratio": 0.5, "runs": 1},
        {"scenario": "b", "peak_mib": 3.5, "consumed": 7},
    ]
    assert render_table(rows).splitlines() == [
        "| scenario | ours msg/s | raw msg/s | ratio | ours µs CPU/msg | raw µs CPU/msg | other |",
        "|---|---:|---:|---:|---:|---:|---|",
        "| a | 5 | 10 | 0.5 |  |  |  |",
        "| b |  |  |  |  |  | peak_mib=3.5, consumed=7 |",
    ]
