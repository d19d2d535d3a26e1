"""``rmq-kafka kafka start|stop|status|kill``: the embedded Kafka (KRaft), one broker or a
cluster (``--brokers 3``), or one node of it (``--node``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from adapter.cli.options import add_actions

__all__ = ["add_parser", "cmd_kafka", "node_json"]


def add_parser(sub: Any) -> None:
    k = sub.add_parser(
        "kafka", help="the embedded Kafka (KRaft): one broker, or a cluster with --brokers 3"
    )
    add_actions(
        k,
        {
            "start": "start it (idempotent); prints the bootstrap address",
            "stop": "controlled shutdown",
            "status": "every node, its pid and whether it runs (JSON); exit 1 when not running",
            "kill": "kill -9 (a fault to test against)",
        },
        _args,
        cmd_kafka,
    )


def _args(k: argparse.ArgumentParser, action: str) -> None:
    k.add_argument("--name", default="default", help="instance name (default: default)")
    if action == "start":
        k.add_argument(
            "--port",
            type=int,
            help="the client port of the first node (node i: port + i - 1; default: a free "
            "port, kept across restarts), e.g. 9092",
        )
    k.add_argument(
        "--brokers",
        type=int,
        help="nodes in the cluster, each broker and controller (start: default 1; "
        "replication factor 3 and min.insync.replicas 2 from 3 nodes on)",
    )
    k.add_argument(
        "--node",
        type=int,
        help="act on this node only (1..brokers): stop is a controlled shutdown, kill is "
        "SIGKILL, start brings it back on the same ports and data",
    )


def cmd_kafka(args: argparse.Namespace) -> int:
    from adapter.embedded import EmbeddedKafka

    port = getattr(args, "port", None)  # start only
    broker = (  # stop/status/kill: as many nodes as the instance's last start had
        EmbeddedKafka.existing(args.name)
        if args.brokers is None and port is None
        else EmbeddedKafka(args.name, brokers=args.brokers or 1, port=port)
    )
    if args.node is not None:
        node = broker.node(args.node)
        if args.action == "start":
            print(node.start())
        elif args.action == "stop":
            print("stopped" if node.stop() else "not running")
        elif args.action == "kill":
            node.kill()
            print("killed")
        else:
            st = node.status()
            print(json.dumps(None if st is None else node_json(st)))
            return 0 if st is not None and st.running else 1
        return 0
    if args.action == "start":
        print(broker.start())
    elif args.action == "stop":
        print("stopped" if broker.stop() else "not running")
    elif args.action == "kill":
        broker.kill()
        print("killed")
    else:
        status = broker.status()
        if status is None or not status.running:
            if status is not None:
                print(json.dumps({"nodes": [node_json(n) for n in status.nodes]}))
            print("not running")
            return 1
        print(
            json.dumps(
                {
                    "name": status.name,
                    "pid": status.pid,
                    "bootstrap.servers": status.bootstrap_servers,
                    "data_dir": str(status.data_dir),
                    "brokers": len(status.nodes),
                    "nodes": [node_json(n) for n in status.nodes],
                }
            )
        )
    return 0


def node_json(node: Any) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "pid": node.pid,
        "bootstrap.servers": node.bootstrap_servers,
        "running": node.running,
    }
