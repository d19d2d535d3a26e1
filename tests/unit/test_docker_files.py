"""Static checks of the Docker stack's files (no engine needed): the Grafana dashboard uses
exactly the metrics contract, Prometheus scrapes the compose services, every port is bound to
127.0.0.1, and the three-broker override has a cluster's settings."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import adapter
from tests.docker.harness import (
    ALL_METRICS,
    BROKER_SERVICES,
    CLUSTER_FILE,
    COMPOSE_FILE,
    DOCKER,
    HISTOGRAMS,
)

pytestmark = pytest.mark.unit

DASHBOARD = DOCKER / "grafana" / "rmq-kafka-dashboard.json"
METRICS_MODULE = Path(adapter.__file__).parent / "io" / "metrics.py"
FAMILIES = ("CounterMetricFamily", "GaugeMetricFamily", "HistogramMetricFamily")


def defined_metrics() -> tuple[dict[str, set[str]], set[str]]:
    """What ``adapter/io/metrics.py`` defines, read from its source: exposed metric name ->
    labels (a counter is exposed with ``_total``), and the histograms' names."""
    metrics: dict[str, set[str]] = {}
    histograms: set[str] = set()
    tree = ast.parse(METRICS_MODULE.read_text("utf-8"))
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FAMILIES
        ):
            continue
        first = node.args[0]
        assert isinstance(first, ast.Constant) and isinstance(first.value, str)
        labels = next(kw.value for kw in node.keywords if kw.arg == "labels")
        assert isinstance(labels, ast.List)
        name = first.value
        if node.func.id == "CounterMetricFamily":
            name += "_total"
        elif node.func.id == "HistogramMetricFamily":
            histograms.add(name)
        metrics[name] = {e.value for e in labels.elts if isinstance(e, ast.Constant)}
    return metrics, histograms


def test_the_metrics_read_from_the_code_are_the_harness_contract() -> None:
    """The stack's harness checks a running stack against ALL_METRICS: it is what the code
    defines, names and labels."""
    metrics, histograms = defined_metrics()
    assert len(metrics) >= 20  # the reader found the families
    assert metrics == ALL_METRICS
    assert histograms == HISTOGRAMS


def _series_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(rmq_[a-z_]+)\b", expr))


def _family(series: str, histograms: set[str]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = series.removesuffix(suffix)
        if base != series and base in histograms:
            return base
    return series


def test_dashboard_uses_exactly_the_metrics_the_code_defines() -> None:
    metrics, histograms = defined_metrics()
    dash = json.loads(DASHBOARD.read_text("utf-8"))
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            names = _series_names(target["expr"])
            assert names, f"panel {panel['title']!r}: {target['expr']!r} names no rmq_ metric"
            for name in names:
                family = _family(name, histograms)
                assert family in metrics, f"{panel['title']!r}: unknown metric {name}"
                if name in histograms:
                    pytest.fail(f"{panel['title']!r}: histogram {name} without _bucket/_sum/_count")
            used |= {_family(n, histograms) for n in names}
    assert used == set(metrics), f"not on the dashboard: {sorted(set(metrics) - used)}"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "group", "topic"} <= variables


def test_prometheus_scrapes_the_compose_services() -> None:
    prom = (DOCKER / "prometheus" / "prometheus.yml").read_text("utf-8")
    compose = COMPOSE_FILE.read_text("utf-8")
    assert '"schedule-service:9400"' in prom and '"example-consumer:9401"' in prom
    services = ("broker", "schedule-service", "example-consumer", "spark-metrics", "prometheus")
    for service in services:
        assert re.search(rf"^  {re.escape(service)}:$", compose, re.M), service
    # every published port is bound to the loopback interface
    published = re.findall(r'^\s+- "([^"]*:\d+)"$', compose, re.M)
    assert published and all(p.startswith("127.0.0.1:") for p in published), published


def test_cluster_profile_settings() -> None:
    text = CLUSTER_FILE.read_text("utf-8")
    for service in BROKER_SERVICES.values():
        assert re.search(rf"^  {re.escape(service)}:$", text, re.M), service
    assert sorted(re.findall(r'KAFKA_NODE_ID: "(\d)"', text)) == ["1", "2", "3"]
    voters = re.findall(r"KAFKA_CONTROLLER_QUORUM_VOTERS: (\S+)", text)
    assert voters == ["1@broker:9093,2@broker-2:9093,3@broker-3:9093"]
    settings = dict(re.findall(r'^  (KAFKA_[A-Z_]+): "(\d+)"$', text, re.M))
    for name in (
        "DEFAULT_REPLICATION_FACTOR",
        "OFFSETS_TOPIC_REPLICATION_FACTOR",
        "TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR",
    ):
        assert settings.get(f"KAFKA_{name}") == "3", name
    for name in (
        "MIN_INSYNC_REPLICAS",
        "TRANSACTION_STATE_LOG_MIN_ISR",
        "SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR",
    ):
        assert settings.get(f"KAFKA_{name}") == "2", name
    # every client of the stack bootstraps from all three
    assert "KAFKA_BOOTSTRAP_SERVERS: broker:9092,broker-2:9092,broker-3:9092" in text
    # the other two nodes' host listeners, bound to the loopback interface
    published = re.findall(r'^\s+- "([^"]*:\d+)"$', text, re.M)
    assert published == [
        "127.0.0.1:${RMQ_STACK_KAFKA_PORT_2:-29093}:29092",
        "127.0.0.1:${RMQ_STACK_KAFKA_PORT_3:-29094}:29092",
    ]
