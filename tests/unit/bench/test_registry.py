"""The parts of ``rmq-kafka bench`` and of the CLI that need no broker: the scenario
registry (its names and order are what ``--only`` takes and the order rows are reported
in), a row's ratio, the markdown table of BENCHMARKS.md, and the shared Kafka options."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from adapter.bench import ALL, SCENARIOS, Run, Scenario, render_table
from adapter.cli import build_parser, kafka_config
from adapter.errors import AdapterError

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


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["topics", "ensure", *argv])


def test_kafka_config_reads_the_file_then_x_then_b(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# comment\nsecurity.protocol = SASL_SSL\nlinger.ms=5\n", "utf-8")
    config = kafka_config(
        _args("--config-file", str(props), "-X", "linger.ms=7", "-b", "h1:9092,h2:9092")
    )
    assert config == {
        "security.protocol": "SASL_SSL",
        "linger.ms": "7",
        "bootstrap.servers": "h1:9092,h2:9092",
    }


def test_kafka_config_refuses_a_setting_without_a_value() -> None:
    with pytest.raises(AdapterError, match="-X expects key=value"):
        kafka_config(_args("-X", "linger.ms", "-b", "h:9092"))
