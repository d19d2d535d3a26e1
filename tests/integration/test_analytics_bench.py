"""``rmq-kafka bench``'s analytics rows at a tiny size: the Spark job-vs-plain-count row and
the trace-emission rows (batch 1 and 32; batch 32 on records with RocketMQ headers) are
measured in one run and land in the table and the JSON."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from adapter.analytics.testing import shared_spark
from adapter.bench import pyspark_missing, render_table, run_bench

pytestmark = [pytest.mark.integration, pytest.mark.spark]

#: trace rows and consumed messages a row: enough for every row to measure a rate; what a
#: run costs here is mostly fixed (a Spark job's planning, a consumer's group join)
MESSAGES = 500


def _args(bootstrap: str, out: Path, *, no_spark: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        bootstrap_servers=bootstrap,
        messages=MESSAGES,
        repeats=1,
        only=["trace", "analytics"],
        json=str(out),
        no_spark=no_spark,
        warm_up=False,  # a check that the rows run: the Spark row's two warm-up jobs doubled it
    )


# two Spark jobs and nine consumer runs: on a loaded two-core machine (the suite's other
# workers, a Spark session per worker) it once took longer than the suite's 300 s default
@pytest.mark.timeout(600)
def test_analytics_rows_at_a_tiny_size(kafka_bootstrap_servers: str, tmp_path: Path) -> None:
    assert pyspark_missing() is None
    shared_spark()  # the bench's session is this one (getOrCreate): one JVM per test process
    out = tmp_path / "bench.json"
    assert run_bench(_args(kafka_bootstrap_servers, out)) == 0
    results = json.loads(out.read_text())["results"]
    rows = {r["scenario"].split(":")[0]: r for r in results}
    assert set(rows) == {"trace emission", "analytics"}
    spark_row = rows["analytics"]
    trace_rows = [r for r in results if r["scenario"].startswith("trace emission")]
    assert ["batch=1 " in r["scenario"] for r in trace_rows] == [True, False, False]
    assert "batch=32 " in trace_rows[1]["scenario"]
    assert (
        "batch=32 " in trace_rows[2]["scenario"] and "RocketMQ headers" in trace_rows[2]["scenario"]
    )
    assert spark_row["trace_rows"] == MESSAGES and spark_row["runs"] == 1
    for row in (spark_row, *trace_rows):
        assert row["ours_msgs_per_s"] > 0 and row["raw_msgs_per_s"] > 0
        # the table rounds ratios to 3 decimals and rates to whole messages a second (a
        # Spark row without its warm-up reads some tens of rows a second)
        ours, raw = row["ours_msgs_per_s"], row["raw_msgs_per_s"]
        low, high = (ours - 0.5) / (raw + 0.5), (ours + 0.5) / max(raw - 0.5, 1e-9)
        assert low - 0.0005 <= row["ratio"] <= high + 0.0005, row
        assert row["ours_cpu_us_per_msg"] > 0 and row["raw_cpu_us_per_msg"] > 0
    for trace_row in trace_rows:
        assert trace_row["trace_overhead_pct"] == pytest.approx(
            100 * (1 - trace_row["ratio"]), abs=0.2
        )
    table = render_table(results)
    assert "analytics: Spark consume-metrics job" in table and "trace_overhead_pct=" in table


def test_no_spark_skips_the_spark_row(
    kafka_bootstrap_servers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    args = _args(kafka_bootstrap_servers, out, no_spark=True)
    args.only = ["analytics"]
    assert run_bench(args) == 0
    assert "analytics: skipped (--no-spark)" in capsys.readouterr().out
    assert json.loads(out.read_text())["results"] == []


@pytest.mark.timeout(600)
def test_the_spark_rows_stages_each_read_every_row(kafka_bootstrap_servers: str) -> None:
    """``python -m adapter.bench.spark_floor``'s stages at a tiny size: each reads the whole
    topic (every stage checks its count; the job's is the bench's), and the table has one
    line per stage, the count's ratio 1."""
    from adapter.bench.analytics import fill_trace_topic
    from adapter.bench.spark_floor import STAGES, measure_stages, render

    spark = shared_spark()
    config = {"bootstrap.servers": kafka_bootstrap_servers}
    logical = f"trace-floor-{uuid.uuid4().hex[:8]}"
    fill_trace_topic(config, logical, 190)  # ten of each status cycle
    results = measure_stages(spark, config, logical, 190, repeats=1)
    assert [r.stage for r in results] == [name for name, _ in STAGES]
    assert results[0].ratio == 1.0
    assert all(r.seconds > 0 and r.rows_per_s > 0 for r in results)
    assert len(render(results).splitlines()) == 2 + len(STAGES)
