"""Benchmark row of memory: the peak RSS of a consumer process (ours, then raw
confluent-kafka) with a slow listener over a large backlog, each measured in a child
process of its own (``python -m adapter.bench --rss-child``)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer

from adapter.bench.harness import BENCH_LEVELS, Bench, Scenario, uid
from adapter.clients.push.push_consumer import PushConsumer
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.io.polling import consume_available

__all__ = ["rss_child", "rss_scenario"]


def rss_scenario(bench: Bench, backlog: int) -> Scenario:
    """Peak RSS of a consumer process with a slow listener over a large backlog."""
    sc = Scenario(f"peak RSS, {backlog} x 100B backlog, slow listener (2 ms/msg), 20 s")
    topic = bench.topic()
    bench.fill(topic, backlog, 100)
    for mode in ("ours", "raw"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "adapter.bench",
                "--rss-child",
                mode,
                bench.config["bootstrap.servers"],
                topic,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        try:
            child = json.loads(proc.stdout.strip().splitlines()[-1])
            sc.extra[f"{mode}_peak_rss_mib"] = child["peak_rss_mib"]
            sc.extra[f"{mode}_consumed"] = child["consumed"]
        except (IndexError, ValueError, KeyError):
            sc.extra[f"{mode}_error"] = proc.stderr[-500:]
    return sc


def rss_child(mode: str, bootstrap: str, topic: str) -> None:
    config = {"bootstrap.servers": bootstrap}
    consumed = [0]
    deadline = time.time() + 20
    if mode == "ours":

        def slow(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            time.sleep(0.002 * len(msgs))
            consumed[0] += len(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer(
            {**config, "group.id": f"rss-{uid()}", "auto.offset.reset": "earliest"},
            delay_levels=BENCH_LEVELS,
            namespace="bench",
            partitions=1,
        )
        c.subscribe(topic)
        c.register_message_listener(slow)
        c.start()
        while time.time() < deadline:
            time.sleep(0.2)
        c.shutdown(timeout=30)
    else:
        rc = Consumer(
            {
                **config,
                "group.id": f"rss-{uid()}",
                "auto.offset.reset": "earliest",
                "enable.auto.offset.store": False,
            }
        )
        rc.subscribe([topic])
        while time.time() < deadline:
            for m in consume_available(rc, 32, 0.5):
                time.sleep(0.002)
                rc.store_offsets(message=m)
                consumed[0] += 1
        rc.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_rss_mib": round(peak, 1), "consumed": consumed[0]}))
