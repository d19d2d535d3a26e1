"""``rmq-kafka dashboard render`` on real parts: the embedded broker, a PushConsumer whose
listener fails some messages (retries, a few dead letters), a Producer and the ScheduleService
in-process, each serving its metrics, and a real ``prometheus`` (Debian's package) scraping
them every second.  After traffic, the command asks Prometheus every panel's queries (all
must be accepted, and with ``--strict`` every metric they read must be one the processes
expose) and draws the SVG.  A dashboard with one metric renamed, or one query broken, fails
with one line naming the panel.

The picture goes to the test's temporary folder; ``RMQ_UPDATE_SCREENSHOTS=1`` writes it to
``docs/images/dashboard.svg`` instead (the docs show that one)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tenacity

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker" / "grafana" / "rmq-kafka-dashboard.json"
DOCS_PICTURE = ROOT / "docs" / "images" / "dashboard.svg"
PROMETHEUS = os.environ.get("RMQ_PROMETHEUS", shutil.which("prometheus") or "/usr/bin/prometheus")
LEVELS = "1s 2s 3s"
TRAFFIC_S = 45.0
SVG = "{http://www.w3.org/2000/svg}"
#: the panels the traffic must fill: consumed, failed, send-backs, dead letters, forwarded
MUST_HAVE_DATA = (
    "Consumed / s",
    "Failed / s",
    "Dead letters (range)",
    "Forwarded / s (ScheduleService)",
    "Messages by result",
    "Send-backs by delay level",
    "Dead letters by reason",
    "Forwarded by level",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _target(endpoint: str | None) -> str:
    assert endpoint, "metrics are not served"
    return urllib.parse.urlsplit(endpoint).netloc


@tenacity.retry(
    stop=tenacity.stop_after_delay(60),
    wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
    retry=tenacity.retry_if_exception_type((OSError, AssertionError)),
    reraise=True,
)
def _wait_ready(url: str, targets: int) -> None:
    with urllib.request.urlopen(url + "/api/v1/targets", timeout=5) as answer:
        active = json.load(answer)["data"]["activeTargets"]
    assert sum(1 for t in active if t["health"] == "up") == targets, active


class Prometheus:
    """A ``prometheus`` process scraping ``targets`` every second, in ``home``."""

    def __init__(self, home: Path, targets: list[str]) -> None:
        if not Path(PROMETHEUS).exists():
            pytest.fail(f"no prometheus at {PROMETHEUS}: apt-get install prometheus")
        config = home / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: rmq\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n",
            "utf-8",
        )
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = (home / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={home / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_ready(self.url, len(targets))
        except BaseException:
            self.stop()  # no process left behind
            raise

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


class Traffic:
    """Messages sent at a steady pace until stopped; the listener fails every 5th message
    once (a retry through the ScheduleService) and every 25th always (a dead letter after
    ``max_reconsume_times=2``)."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    @staticmethod
    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            n = int(m.body.decode().split("-")[1])
            if n % 25 == 0 or (n % 5 == 0 and m.reconsume_times == 0):
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _run(self) -> None:
        while not self.stopped.wait(0.1):
            self.producer.send(Message(topic=self.topic, body=f"order-{self.sent}".encode()))
            self.sent += 1

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


def _render(prometheus: Prometheus, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "adapter.cli",
            "dashboard",
            "render",
            "--prometheus",
            prometheus.url,
            "--range",
            "1m",
            "--step",
            "1s",
            "--scrape-interval",
            "1s",
            "--strict",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.fixture
def stack(
    kafka_bootstrap_servers: str, kafka_group_id: str, tmp_path: Path
) -> Iterator[tuple[Prometheus, Traffic]]:
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    run = kafka_group_id[-6:]  # unique per run, short for the picture's legends
    ns, group, topic = "dash" + run, "orders-service-" + run, "orders-" + run
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        max_reconsume_times=2,
        metrics_port=0,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(Traffic.listener)
    service = ScheduleService(
        conf, delay_levels=LEVELS, namespace=ns, metrics_port=0, lag_groups=[group]
    )
    producer = Producer(conf, metrics_port=0)
    with producer, service, consumer:
        prometheus = Prometheus(
            tmp_path,
            [
                _target(e)
                for e in (
                    consumer.metrics_endpoint,
                    service.metrics_endpoint,
                    producer.metrics_endpoint,
                )
            ],
        )
        try:
            with Traffic(producer, topic) as traffic:
                yield prometheus, traffic
        finally:
            prometheus.stop()


def _panels(svg: Path) -> dict[str, ET.Element]:
    root = ET.parse(svg).getroot()
    groups = [g for g in root.iter(f"{SVG}g") if "panel" in g.get("class", "").split()]
    return {g.get("data-title", ""): g for g in groups}


def test_the_dashboard_drawn_from_real_metrics(
    stack: tuple[Prometheus, Traffic], tmp_path: Path
) -> None:
    prometheus, traffic = stack
    time.sleep(TRAFFIC_S)  # the traffic runs: a minute of metrics for the picture
    update = os.environ.get("RMQ_UPDATE_SCREENSHOTS", "").strip() not in ("", "0")
    out = DOCS_PICTURE if update else tmp_path / "dashboard.svg"
    done = _render(prometheus, out)
    assert done.returncode == 0, done.stderr
    assert traffic.sent > 100

    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    drawn = [p for row in dashboard["panels"] for p in [row, *row.get("panels", [])]]
    titles = [p["title"] for p in drawn if p["type"] != "row"]
    panels = _panels(out)
    assert sorted(panels) == sorted(titles)  # one element group per panel
    empty = [t for t in MUST_HAVE_DATA if int(panels[t].get("data-series", "0")) == 0]
    assert empty == [], f"panels without data: {empty}"

    # a metric the processes do not expose fails, naming the panel and the metric
    renamed = tmp_path / "renamed.json"
    renamed.write_text(
        DASHBOARD.read_text("utf-8").replace(
            "rmq_consumer_send_backs_total", "rmq_consumer_sendbacks_total"
        ),
        "utf-8",
    )
    done = _render(prometheus, tmp_path / "renamed.svg", "--dashboard", str(renamed))
    assert done.returncode == 2
    assert "'Send-backs by delay level'" in done.stderr
    assert "rmq_consumer_sendbacks_total" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr

    # a query Prometheus refuses fails, naming the panel, the query and Prometheus' message
    broken = tmp_path / "broken.json"
    broken.write_text(
        DASHBOARD.read_text("utf-8").replace(
            "sum(rmq_schedule_entries_waiting)", "sum(rmq_schedule_entries_waiting"
        ),
        "utf-8",
    )
    done = _render(prometheus, tmp_path / "broken.svg", "--dashboard", str(broken))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "'Entries waiting (delay levels)'" in line and "sum(rmq_schedule_entries_waiting" in line
    assert "parse error" in line and len(line.splitlines()) == 1, line
