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
            "start": "start it (idempotent); prints the bootstrap address (with --tls also "
            "the SSL and SASL_SSL listeners and ssl.ca.location)",
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
            "--tls",
            action="store_true",
            help="also an SSL and a SASL_SSL (SCRAM-SHA-256, user admin) listener, with "
            "certificates from a throw-away CA made at the first start (PEM files in the "
            "instance's tls/ folder)",
        )
        k.add_argument(
            "--mutual-tls",
            action="store_true",
            help="--tls, and the SSL listener requires a client certificate (made too)",
        )
        k.add_argument(
            "--client-config",
            metavar="PATH",
            help="with --tls: write a client's settings for --config-file there "
            "(bootstrap.servers, security.protocol, ssl.ca.location, ...)",
        )
        k.add_argument(
            "--protocol",
            choices=("SSL", "SASL_SSL"),
            default="SASL_SSL",
            help="the listener --client-config is for (default: SASL_SSL)",
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
    mutual = bool(getattr(args, "mutual_tls", False))
    tls = bool(getattr(args, "tls", False)) or mutual
    broker = (  # stop/status/kill: as many nodes as the instance's last start had
        EmbeddedKafka.existing(args.name)
        if args.brokers is None and port is None and not tls
        else EmbeddedKafka(
            args.name, brokers=args.brokers or 1, port=port, tls=tls, mutual_tls=mutual
        )
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
        if broker.tls:
            _print_tls(broker, args.protocol, args.client_config)
        elif args.client_config:
            from adapter.errors import ConfigError

            raise ConfigError("--client-config", args.client_config, "needs --tls")
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
                    **_tls_json(broker),
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


def _tls_json(broker: Any) -> dict[str, Any]:
    """A TLS instance's listeners and CA file for ``status``."""
    if not broker.tls:
        return {}
    return {
        "listeners": {p: broker.listener(p) for p in ("SSL", "SASL_SSL")},
        "ssl.ca.location": str(broker.ca_location),
    }


def _print_tls(broker: Any, protocol: str, client_config: str | None) -> None:
    """The TLS listeners and the CA file, one ``key=value`` a line (after the bootstrap)."""
    for name, value in _tls_json(broker)["listeners"].items():
        print(f"{name}={value}")
    print(f"ssl.ca.location={broker.ca_location}")
    if client_config:
        from pathlib import Path

        lines = [f"{k}={v}" for k, v in broker.client_config(protocol).items()]
        Path(client_config).write_text("\n".join(lines) + "\n", encoding="utf-8")
