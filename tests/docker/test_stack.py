"""The Docker stack (``docker/compose.yaml``) end to end (its files' static checks are in
``tests/unit/test_docker_files.py``).

The ``docker`` tests are opt-in: they run only with ``RMQ_DOCKER_TESTS=1`` and a reachable
Docker engine (and ``docker compose`` or ``docker-compose``), and are skipped with the reason
otherwise.  They build the images (``docker/build.sh``: the project's wheel from the working
tree), bring the stack up with ``docker/up.sh`` under a compose project, ports and data
directory of their own, push messages through the retry ladder into the DLQ, and check:

* the example consumer's deliveries (``reconsume_times`` 0, 1, 2 for a failing message, one
  delivery for the others) and the dead letters, read with ``rmq-kafka dlq list --group
  example`` inside the stack;
* the share group ``example-share`` (RocketMQ 5's SimpleConsumer on a Kafka share group, two
  members): each good message acknowledged once, each failing one left to its lock,
  delivered again with ``delivery_attempt`` 1, 2, 3 and then in ``%DLQ%example-share``;
* the Spark streaming job's committed Parquet windows (retries, DLQ arrivals);
* Prometheus (``/api/v1/targets``, ``/api/v1/query`` on 127.0.0.1) scraping the
  ScheduleService and the consumer, and the metrics contract on both endpoints.

Minutes, not seconds (about 4 with the images built; the first build debootstraps Debian and
copies pyspark): never part of the default suite.  ``RMQ_DOCKER_KEEP=1`` leaves the stack
running afterwards (the project name is printed).
"""

from __future__ import annotations

import json
import re
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.docker.harness import (
    CONSUMER_METRICS,
    SCHEDULE_METRICS,
    Stack,
    http_json,
    http_text,
    start_stack,
    wait_for,
)

GROUP = "example"
SHARE_GROUP = "example-share"
TOPIC = "orders"
SCHEDULE_GROUP = "rmq-schedule-service"
MAX_RECONSUME_TIMES = 2
N_OK = 10
N_FAIL = 2
DLQ_REASON = "MAX_RECONSUME_TIMES"


# --------------------------------------------------------------------------------------------
# the stack
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory, brokers=1)


@dataclass
class Traffic:
    run_id: str
    ok: list[str]
    fail: list[str]
    dead_letters: list[dict[str, Any]]


@pytest.fixture(scope="module")
def traffic(stack: Stack) -> Traffic:
    """N_OK good and N_FAIL failing messages, sent with the adapter's Producer inside the
    stack; returns once every failing one is in %DLQ%example."""
    run_id = uuid.uuid4().hex[:8]
    out = stack.exec(
        "example-consumer",
        "python",
        "/opt/example_app/app.py",
        "produce",
        "--ok",
        str(N_OK),
        "--fail",
        str(N_FAIL),
        "--run-id",
        run_id,
    )
    assert '"produced"' in out, out
    ok = [f"ok-{run_id}-{i}" for i in range(N_OK)]
    fail = [f"fail-{run_id}-{i}" for i in range(N_FAIL)]

    def dead_letters() -> list[dict[str, Any]] | None:
        lines = stack.exec("example-consumer", "rmq-kafka", "dlq", "list", "--group", GROUP)
        entries = [json.loads(line) for line in lines.splitlines() if line.startswith("{")]
        mine = [e for e in entries if run_id in e["body"]]
        return mine if len(mine) >= N_FAIL else None

    # 3 s (level 3) + 4 s (level 4) of retry delays, plus polling and scheduling
    entries = wait_for("the failing messages in %DLQ%example", dead_letters, timeout=120)
    return Traffic(run_id, ok, fail, entries)


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_retry_ladder_then_dlq(stack: Stack, traffic: Traffic) -> None:
    assert sorted(e["body"] for e in traffic.dead_letters) == sorted(traffic.fail)
    for entry in traffic.dead_letters:
        assert entry["origin_topic"] == TOPIC, entry
        assert entry["reason"] == DLQ_REASON, entry
        assert entry["reconsume_times"] >= MAX_RECONSUME_TIMES, entry

    deliveries = [
        d for d in stack.events("example-consumer", "delivery") if traffic.run_id in d["body"]
    ]
    by_body: dict[str, list[dict[str, Any]]] = {}
    for d in deliveries:
        by_body.setdefault(d["body"], []).append(d)
    for body in traffic.fail:
        seen = sorted(d["reconsume_times"] for d in by_body.get(body, []))
        assert seen == [0, 1, 2], f"{body}: deliveries with reconsume_times {seen}"
        assert all(d["topic"] == TOPIC and d["result"] == "failed" for d in by_body[body])
    for body in traffic.ok:
        got = by_body.get(body, [])
        assert [d["reconsume_times"] for d in got] == [0], f"{body}: {got}"
        assert got[0]["result"] == "ok"


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_share_group_simple_consumer(stack: Stack, traffic: Traffic) -> None:
    def dead_letters() -> list[dict[str, Any]] | None:
        lines = stack.exec(
            "example-share-consumer", "rmq-kafka", "dlq", "list", "--group", SHARE_GROUP
        )
        entries = [json.loads(line) for line in lines.splitlines() if line.startswith("{")]
        mine = [e for e in entries if traffic.run_id in e["body"]]
        return mine if len(mine) >= N_FAIL else None

    # three deliveries a failing message, each held until its 5 s lock runs out
    entries = wait_for("the failing messages in %DLQ%example-share", dead_letters, timeout=120)
    assert sorted(e["body"] for e in entries) == sorted(traffic.fail)
    for entry in entries:
        assert entry["origin_topic"] == TOPIC and entry["reason"] == "MAX_DELIVERY_ATTEMPTS", entry

    deliveries = [
        d
        for d in stack.events("example-share-consumer", "share-delivery")
        if traffic.run_id in d["body"]
    ]
    by_body: dict[str, list[dict[str, Any]]] = {}
    for d in deliveries:
        by_body.setdefault(d["body"], []).append(d)
    for body in traffic.fail:
        seen = sorted(d["delivery_attempt"] for d in by_body.get(body, []))
        assert seen == [1, 2, 3], f"{body}: deliveries with delivery_attempt {seen}"
    for body in traffic.ok:
        got = by_body.get(body, [])
        assert [(d["delivery_attempt"], d["result"]) for d in got] == [(1, "ok")], f"{body}: {got}"


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_the_console_shows_the_example_group_and_dry_runs_a_redrive(
    stack: Stack, traffic: Traffic
) -> None:
    """The stack's retry console (``console`` service, on the host at its own port): no
    token, no answer; with it, the example group and its dead letters as the CLI listed
    them, and a dry-run redrive that would send each of them back and sends nothing."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        http_json(f"{stack.console}/api/groups")
    assert refused.value.code == 401

    token = stack.console_token

    def example_row() -> dict[str, Any] | None:
        rows = http_json(f"{stack.console}/api/groups", token)["groups"]
        row = next((r for r in rows if r["group"] == GROUP), None)
        return row if row is not None and (row["dlq"] or {}).get("size", 0) >= N_FAIL else None

    row = wait_for("the console's row of group example", example_row, timeout=120)
    assert row["state"] == "STABLE" and row["members"], row

    page = http_json(f"{stack.console}/api/groups/{GROUP}/dlq?limit=500", token)
    mine = [e for e in page["entries"] if traffic.run_id in e["body"]]
    assert sorted(e["body"] for e in mine) == sorted(traffic.fail), page
    ids = sorted(e["msg_id"] for e in mine)
    assert ids == sorted(e["msg_id"] for e in traffic.dead_letters)

    url = f"{stack.console}/api/groups/{GROUP}/dlq/redrive"
    dry = http_json(url, token, {"ids": ids, "dry_run": True})
    assert (dry["dry_run"], dry["sent"], dry["would_send"]) == (True, 0, N_FAIL), dry
    assert sorted(p["msg_id"] for p in dry["plan"]) == ids, dry
    records = http_json(f"{stack.console}/api/audit?group={GROUP}", token)["records"]
    assert records and records[0]["options"]["dry_run"] is True, records


def _final_rows(data: Path) -> list[dict[str, Any]]:
    """The metrics table's final rows, read without Spark: each micro-batch's directory
    (``batch_id=<n>``, its files moved in once written) holds at most one final row per
    window, and a window has one final row in all (docs/analytics/drain-runs.md)."""
    import pyarrow.parquet as pq

    out = data / "consume-metrics"
    return [
        row
        for path in sorted(out.glob("batch_id=*/*.parquet"))
        for row in pq.read_table(path).to_pylist()
        if not row["provisional"]
    ]


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_spark_streaming_output(stack: Stack, traffic: Traffic) -> None:
    pytest.importorskip("pyarrow.parquet")
    from confluent_kafka import Producer as KafkaProducer

    # a window is final once the watermark (10 s) passes its end (10 s windows): keep
    # events coming -- plain Kafka records from the host, through the host listener
    ticker = KafkaProducer({"bootstrap.servers": stack.bootstrap})
    ticks = 0

    def totals() -> dict[str, Any] | None:
        nonlocal ticks
        ticker.produce(TOPIC, value=f"tick-{traffic.run_id}-{ticks}".encode())
        ticker.flush(10)
        ticks += 1
        rows = [
            row
            for row in _final_rows(stack.data)
            if row["group"] == GROUP and row["topic"] == TOPIC
        ]
        sums: dict[str, Any] = {
            k: sum(r[k] or 0 for r in rows)
            for k in ("consumed", "succeeded", "failed", "retried", "dlq_arrivals")
        }
        by_rc: dict[int, int] = {}
        for r in rows:
            for k, v in r["retries_by_reconsume_times"] or []:
                by_rc[k] = by_rc.get(k, 0) + v
        sums["retries_by_reconsume_times"] = by_rc
        sums["windows"] = len(rows)
        done = sums["dlq_arrivals"] >= N_FAIL and sums["succeeded"] >= N_OK
        return sums if done else None

    sums = wait_for("the Spark job's Parquet windows", totals, timeout=300, interval=3)
    assert sums["dlq_arrivals"] == N_FAIL, sums
    assert sums["retried"] == MAX_RECONSUME_TIMES * N_FAIL, sums
    assert sums["failed"] == (MAX_RECONSUME_TIMES + 1) * N_FAIL, sums
    assert sums["retries_by_reconsume_times"] == {0: N_FAIL, 1: N_FAIL}, sums
    assert sums["consumed"] >= N_OK + (MAX_RECONSUME_TIMES + 1) * N_FAIL, sums


def _metric_families(text: str) -> dict[str, str]:
    """``# TYPE`` lines of a Prometheus text exposition: family -> type."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def _has_family(families: dict[str, str], name: str) -> bool:
    # the text format names a counter's family without ``_total`` (prometheus-client)
    return name in families or name.removesuffix("_total") in families


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_prometheus_scrapes_the_metrics_contract(stack: Stack, traffic: Traffic) -> None:
    targets = http_json(f"{stack.prometheus}/api/v1/targets")["data"]["activeTargets"]
    scraped = {t["labels"]["job"]: t for t in targets}
    assert scraped["rmq-schedule-service"]["scrapeUrl"] == "http://schedule-service:9400/metrics"
    assert scraped["rmq-example-consumer"]["scrapeUrl"] == "http://example-consumer:9401/metrics"

    missing = [
        what
        for what, service, marker in (
            (
                "--metrics-port (rmq-kafka schedule-service run)",
                "schedule-service",
                "/tmp/schedule-service.metrics",
            ),
            ("PushConsumer(metrics_port=...)", "example-consumer", "/tmp/example-consumer.metrics"),
        )
        if not stack.has_file(service, marker)
    ]
    assert missing == [], f"metrics endpoints not started: {missing}"

    def all_up() -> bool:
        ts = http_json(f"{stack.prometheus}/api/v1/targets")["data"]["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in ts}
        return (
            health.get("rmq-schedule-service") == "up"
            and health.get("rmq-example-consumer") == "up"
        )

    wait_for("both targets up in Prometheus", all_up, timeout=90)

    # the endpoints themselves, published on the host
    consumer = _metric_families(
        http_text(f"http://127.0.0.1:{stack.consumer_metrics_port}/metrics")
    )
    schedule = _metric_families(
        http_text(f"http://127.0.0.1:{stack.schedule_metrics_port}/metrics")
    )
    assert [m for m in CONSUMER_METRICS if not _has_family(consumer, m)] == []
    assert [m for m in SCHEDULE_METRICS if not _has_family(schedule, m)] == []
    assert consumer.get("rmq_consumer_listener_duration_seconds") == "histogram"
    assert schedule.get("rmq_schedule_lateness_seconds") == "histogram"

    g = f'group="{GROUP}"'
    s = f'group="{SCHEDULE_GROUP}"'
    want = {
        f'rmq_consumer_messages_total{{{g},topic="{TOPIC}",result="ok"}}': N_OK,
        f'rmq_consumer_messages_total{{{g},topic="{TOPIC}",result="failed"}}': (
            MAX_RECONSUME_TIMES + 1
        )
        * N_FAIL,
        f'rmq_consumer_send_backs_total{{{g},topic="{TOPIC}",level="3"}}': N_FAIL,
        f'rmq_consumer_send_backs_total{{{g},topic="{TOPIC}",level="4"}}': N_FAIL,
        f'rmq_consumer_dead_letters_total{{{g},topic="{TOPIC}",reason="{DLQ_REASON}"}}': N_FAIL,
        f"rmq_consumer_listener_duration_seconds_count{{{g}}}": N_OK
        + (MAX_RECONSUME_TIMES + 1) * N_FAIL,
        f'rmq_schedule_forwarded_total{{{s},level="3"}}': N_FAIL,
        f'rmq_schedule_forwarded_total{{{s},level="4"}}': N_FAIL,
        f"rmq_schedule_lateness_seconds_count{{{s}}}": MAX_RECONSUME_TIMES * N_FAIL,
        f'rmq_schedule_transactions_total{{{s},outcome="committed"}}': 1,
    }

    def reached() -> dict[str, float] | None:
        got = {q: stack.prom_value(f"sum({q})") for q in want}
        return got if all(got[q] >= n for q, n in want.items()) else None

    wait_for(f"the counters in Prometheus ({want})", reached, timeout=90, interval=3)

    # gauges: present for the group (values move)
    for query in (
        f"rmq_consumer_batches_running{{{g}}}",
        f'rmq_consumer_messages_in_flight{{{g},topic="{TOPIC}"}}',
        f"rmq_consumer_partitions_paused{{{g}}}",
        f'rmq_consumer_lag_messages{{{g},topic="{TOPIC}"}}',
        f'rmq_consumer_lag_messages{{{g},topic="%RETRY%{GROUP}"}}',
        f"rmq_schedule_entries_waiting{{{s}}}",
    ):
        assert stack.prom_query(query), f"no series for {query}"
    # every message was handled (counted above): nothing stays in flight
    in_flight = f"sum(rmq_consumer_messages_in_flight{{{g}}})"
    wait_for(
        "nothing in flight",
        lambda: True if stack.prom_value(in_flight) == 0 else None,
        timeout=60,
        interval=3,
    )
