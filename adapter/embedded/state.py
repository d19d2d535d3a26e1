"""The embedded broker's state: its files (``instance.json``: cluster id and ports, kept across
stops; ``state.json``: the running nodes' pids and ports), read and written atomically, and
the status an instance reports from them (:class:`BrokerStatus`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapter.embedded.node import NodeStatus

__all__ = [
    "BrokerStatus",
    "config_ports",
    "config_tls_ports",
    "node_entry",
    "read_json",
    "write_json",
]


@dataclass(frozen=True)
class BrokerStatus:
    """What :meth:`~adapter.embedded.broker.EmbeddedKafka.status` reports of a started instance."""

    name: str
    #: the first node's pid (the only one's, for a single broker)
    pid: int
    bootstrap_servers: str
    data_dir: Path
    #: every node is running
    running: bool
    nodes: tuple[NodeStatus, ...] = ()


def read_json(path: Path) -> dict[str, Any] | None:
    """A state file's object; ``None`` when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write a state file atomically (a reader sees the old or the new one, never half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def node_entry(state: Mapping[str, Any], node_id: int) -> dict[str, Any] | None:
    """Node ``node_id``'s entry of a state file (pid, ports), if any."""
    entry = state.get("nodes", {}).get(str(node_id))
    return entry if isinstance(entry, dict) else None


def config_ports(config: Mapping[str, Any], brokers: int) -> dict[int, tuple[int, int]]:
    """Node id -> (client port, controller port) of ``instance.json``, for nodes 1..``brokers``."""
    nodes = config.get("nodes")
    if isinstance(nodes, dict):
        return {
            int(i): (int(p["port"]), int(p["controller_port"]))
            for i, p in nodes.items()
            if 1 <= int(i) <= brokers
        }
    if brokers == 1 and "port" in config and "controller_port" in config:
        # written by a single-broker version of this module
        return {1: (int(config["port"]), int(config["controller_port"]))}
    return {}


def config_tls_ports(config: Mapping[str, Any], brokers: int) -> dict[int, tuple[int, int]]:
    """Node id -> (``SSL`` port, ``SASL_SSL`` port) of a TLS instance's ``instance.json``."""
    nodes = config.get("nodes")
    if not isinstance(nodes, dict):
        return {}
    return {
        int(i): (int(p["ssl_port"]), int(p["sasl_ssl_port"]))
        for i, p in nodes.items()
        if 1 <= int(i) <= brokers and "ssl_port" in p and "sasl_ssl_port" in p
    }
