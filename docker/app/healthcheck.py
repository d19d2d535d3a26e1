"""Container health check of the stack's Python services (no adapter internals).

    python /opt/rmq/healthcheck.py (--group G | --share-group S) [--ready-file F]
                                   [--metrics-marker M]

Healthy when ``F`` exists (if given), the consumer group ``G`` is STABLE with a member (or
the share group ``S`` was configured by a member: its ``share.delivery.count.limit`` is a
group config, not the broker's default; confluent-kafka has no share-group describe), and
-- when the service wrote ``M`` (it holds the metrics port) -- its Prometheus endpoint
answers.  Exit 0 healthy, 1 not (the reason on stdout, shown by
``docker inspect``).
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request
from pathlib import Path


def check(args: argparse.Namespace) -> str | None:
    if args.ready_file and not Path(args.ready_file).exists():
        return f"not started yet ({args.ready_file} missing)"
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "broker:9092")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if args.share_group:
        resource = ConfigResource(ResourceType.GROUP, args.share_group)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        entry = configs.get("share.delivery.count.limit")
        if entry is None or entry.source == ConfigSource.DEFAULT_CONFIG.value:
            return f"share group {args.share_group}: not configured by a member yet"
    else:
        futures = admin.describe_consumer_groups([args.group], request_timeout=5)
        desc = futures[args.group].result(timeout=10)
        if desc.state != ConsumerGroupState.STABLE or not desc.members:
            return f"group {args.group}: {desc.state}, {len(desc.members)} member(s)"
    marker = Path(args.metrics_marker) if args.metrics_marker else None
    if marker is not None and marker.exists():
        port = int(marker.read_text().strip() or "0")
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            if resp.status != 200:
                return f"{url}: HTTP {resp.status}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--group")
    which.add_argument("--share-group")
    parser.add_argument("--ready-file")
    parser.add_argument("--metrics-marker")
    args = parser.parse_args()
    try:
        problem = check(args)
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        print(f"unhealthy: {problem}")
        return 1
    print("healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
