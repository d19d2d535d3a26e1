"""One Kafka broker container: a single-node KRaft broker's ``KAFKA_*`` settings
(:func:`kafka_env`, read by the official and the project's image), its cluster id and JVM
options, and :func:`start_kafka_container`, which the pytest plugin's container mode runs
(the retry stack starts its broker with the same settings)."""

from __future__ import annotations

import base64
import os
import socket
import uuid
from typing import Any

#: the broker's listener for other containers on a stack's network
INTERNAL_PORT = 19092
JVM_OPTS_ENV = "RMQ_KAFKA_JVM_OPTS"
DEFAULT_JVM_OPTS = "-XX:TieredStopAtLevel=1"


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka makes them (16 random bytes, URL-safe base64, unpadded):
    given to the container, it spares the image one JVM start (``random-uuid``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def broker_jvm_opts() -> str:
    """The broker JVM's options: ``$RMQ_KAFKA_JVM_OPTS`` when set (also empty), else the
    client compiler only, which starts a test broker on about half the CPU."""
    return os.environ.get(JVM_OPTS_ENV, DEFAULT_JVM_OPTS)


def kafka_env(
    host_port: int,
    *,
    internal_host: str | None = None,
    internal_port: int = INTERNAL_PORT,
    cluster_id: str | None = None,
    jvm_opts: str = "",
) -> dict[str, str]:
    """``KAFKA_*`` settings of a single-node KRaft broker container (both the official and
    the project's image read them).  The host listener listens on and advertises
    ``127.0.0.1:host_port`` (the port mapped 1:1); with ``internal_host`` a second listener
    ``INTERNAL`` advertises ``internal_host:internal_port`` to other containers on the
    network and carries the broker's own traffic.  ``cluster_id`` and ``jvm_opts`` (after a
    512 MiB heap) go to ``KAFKA_CLUSTER_ID`` and ``KAFKA_HEAP_OPTS``."""
    listeners = [f"PLAINTEXT://:{host_port}", "CONTROLLER://:9093"]
    advertised = [f"PLAINTEXT://127.0.0.1:{host_port}"]
    protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    inter_broker = "PLAINTEXT"
    if internal_host:
        listeners.insert(1, f"INTERNAL://:{internal_port}")
        advertised.append(f"INTERNAL://{internal_host}:{internal_port}")
        protocols.append("INTERNAL:PLAINTEXT")
        inter_broker = "INTERNAL"
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": ",".join(listeners),
        "KAFKA_ADVERTISED_LISTENERS": ",".join(advertised),
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": ",".join(protocols),
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_INTER_BROKER_LISTENER_NAME": inter_broker,
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_HEAP_OPTS": " ".join(["-Xmx512m", *jvm_opts.split()]),
        **({"KAFKA_CLUSTER_ID": cluster_id} if cluster_id else {}),
    }


def start_kafka_container(image: str, *, timeout_s: float = 300.0) -> tuple[Any, str]:
    """Start a single-node KRaft broker container of ``image`` with one listener for the
    host; return (the testcontainers container, its bootstrap).  It may not serve yet: wait
    for it.  The caller stops it (``container.stop()`` removes it).

    Testcontainers' reaper is an image of its own that would be pulled: it is left off."""
    from testcontainers.core.config import testcontainers_config

    testcontainers_config.ryuk_disabled = True
    if "confluentinc/" in image:
        # Confluent's images take their settings from a start script of testcontainers' kafka
        # module; the official and the project's image read KAFKA_* variables instead (below)
        from testcontainers.community.kafka import KafkaContainer

        kc = KafkaContainer(image).with_kraft()
        kc.start(timeout=int(timeout_s))
        return kc, kc.get_bootstrap_server()

    from testcontainers.core.container import DockerContainer

    # the advertised listener must carry the host-side port: a free host port mapped 1:1
    port = free_port()
    container = (
        DockerContainer(image)
        .with_bind_ports(port, port)
        .with_envs(**kafka_env(port, cluster_id=new_cluster_id(), jvm_opts=broker_jvm_opts()))
    )
    container.start()
    return container, f"127.0.0.1:{port}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
