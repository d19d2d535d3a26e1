"""Start-up times of the two ways to test a service (docs/testing-your-service.md), measured
side by side in one run, alternating, ``--rounds`` times each:

* embedded: an embedded Kafka broker (fresh data) plus an in-process ScheduleService, until
  the ScheduleService's consumer group is stable;
* retry stack: ``RetryStack().start()`` (Kafka and ScheduleService containers, until the same
  condition holds);
* the plugin's container mode alone: a broker container until it serves.

Needs a Docker engine and the images (``docker/build.sh kafka app``); prints one line per
start and the medians.  ``python docker/measure_startup.py --rounds 3``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
import uuid

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from adapter import ScheduleService
from adapter.embedded import EmbeddedKafka
from adapter.testing.containers import (
    DEFAULT_DELAY_LEVELS,
    SCHEDULE_GROUP,
    RetryStack,
    resolve_kafka_image,
)
from adapter.testing.kafka_container import start_kafka_container


def group_stable(bootstrap: str, group: str, timeout_s: float = 300) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            desc = admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
            if desc.state == ConsumerGroupState.STABLE and desc.members:
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"group {group} not stable")


def embedded() -> float:
    broker = EmbeddedKafka(f"measure-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    started = time.monotonic()
    bootstrap = broker.start(fresh=True)
    try:
        conf = {"bootstrap.servers": bootstrap}
        with ScheduleService(conf, delay_levels=DEFAULT_DELAY_LEVELS, partitions=1):
            group_stable(bootstrap, SCHEDULE_GROUP)
            took = time.monotonic() - started
    finally:
        broker.stop()
        shutil.rmtree(broker.instance_dir, ignore_errors=True)
    return took


def stack() -> float:
    with RetryStack() as s:
        assert s.startup_seconds is not None
        return s.startup_seconds


def container_broker() -> float:
    image = resolve_kafka_image().image
    started = time.monotonic()
    container, bootstrap = start_kafka_container(image)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        while True:
            try:
                if admin.list_topics(timeout=2).brokers:
                    return time.monotonic() - started
            except Exception:
                time.sleep(0.1)
    finally:
        container.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"embedded": [], "retry stack": [], "container broker": []}
    for i in range(args.rounds):
        for name, fn in (
            ("embedded", embedded),
            ("retry stack", stack),
            ("container broker", container_broker),
        ):
            took = fn()
            results[name].append(took)
            print(f"round {i + 1}: {name}: {took:.1f}s", flush=True)
    for name, values in results.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: median {statistics.median(values):.1f}s ({each})")


if __name__ == "__main__":
    main()
