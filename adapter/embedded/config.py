"""The embedded broker's generated configuration: a node's ``server.properties`` (listeners,
the controller quorum, replication for one node or a cluster, the short test timeouts, SCRAM
and ACLs) and the settings a client needs to reach it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adapter.embedded.node import HOST
from adapter.embedded.tls import TlsFiles

__all__ = [
    "OFFSETS_PARTITIONS",
    "TRANSACTION_PARTITIONS",
    "TlsListeners",
    "security_settings",
    "server_properties",
    "tls_properties",
]

#: partitions of Kafka's internal topics here (Kafka's defaults, 50, are slow to create)
OFFSETS_PARTITIONS = 10
TRANSACTION_PARTITIONS = 10


def server_properties(
    node_id: int,
    ports: Mapping[int, tuple[int, int]],
    *,
    brokers: int,
    log_dir: Path,
    scram_users: Mapping[str, str],
    authorizer: bool,
    extra: Mapping[str, str],
) -> dict[str, str]:
    """Node ``node_id``'s ``server.properties`` in a cluster of ``brokers`` nodes (``ports``:
    node id -> (client port, controller port)): broker and controller at once, replication
    for 1 or N nodes, short timeouts for tests; SASL/SCRAM with ``scram_users`` (the first
    is the super user), ACLs with ``authorizer``; ``extra`` last (it wins)."""
    port, cport = ports[node_id]
    replicas = str(min(3, brokers))
    #: one node may be down without a write being refused (production's usual 2 of 3)
    min_isr = "2" if brokers >= 3 else "1"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(
            f"{i}@{HOST}:{c}" for i, (_p, c) in sorted(ports.items())
        ),
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{cport}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": str(TRANSACTION_PARTITIONS),
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        # A SIGKILLed broker can only re-register once its old session expired (default
        # 9 s), and its partitions' leadership moves only then: keep that short.  But a
        # SIGSTOPped one (a GC pause, a frozen VM) that outlasts it is fenced by its own
        # controller on waking, and that single-broker metadata with no broker in it
        # makes librdkafka >= 2.10 drop every broker it knows for good: keep it above
        # short stalls.
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "500",
        # consumers in tests may detect a dead member in seconds (broker default 6 s)
        "group.min.session.timeout.ms": "1000",
        # ... under the consumer group protocol (KIP-848) too, where the session and the
        # heartbeat are the group's, not the client's: the test timeouts the classic suites
        # set on their clients (6 s, 0.5 s) are this broker's defaults (Kafka's: 45 s, 5 s)
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "500",
        # share groups (KIP-932): a group's record lock may be as short as 1 s (broker
        # default minimum 15 s), so tests of lock expiry take seconds
        "group.share.min.record.lock.duration.ms": "1000",
        # ... and a dead member's partitions may be reassigned in seconds: a group's
        # share.session.timeout.ms may go down to 1 s (broker default minimum 45 s)
        "group.share.min.session.timeout.ms": "1000",
        "group.share.min.heartbeat.interval.ms": "500",
    }
    if scram_users:
        admin, password = next(iter(scram_users.items()))
        props.update(
            {
                "listeners": f"SASL_PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{cport}",
                "advertised.listeners": f"SASL_PLAINTEXT://{HOST}:{port}",
                "listener.security.protocol.map": (
                    "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
                ),
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{admin}" password="{password}";'
                ),
            }
        )
        if authorizer:
            props.update(
                {
                    "authorizer.class.name": (
                        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                    ),
                    # the controller listener is PLAINTEXT inside these processes
                    "super.users": f"User:{admin};User:ANONYMOUS",
                    "allow.everyone.if.no.acl.found": "false",
                }
            )
    props.update(extra)
    return props


@dataclass(frozen=True)
class TlsListeners:
    """A node's TLS listeners: ``SSL`` on ``ssl_port`` (client certificates required with
    ``mutual``), ``SASL_SSL`` (SCRAM-SHA-256 with ``scram_users``) on ``sasl_ssl_port``."""

    ssl_port: int
    sasl_ssl_port: int
    files: TlsFiles
    mutual: bool = False


def tls_properties(props: Mapping[str, str], tls: TlsListeners) -> dict[str, str]:
    """``props`` (of :func:`server_properties`) with the ``SSL`` and ``SASL_SSL`` listeners
    added beside the node's own; Kafka reads the PEM files directly (``ssl.keystore.type=PEM``:
    the private key and the certificate chain in one file, ``ssl.truststore.type=PEM``)."""
    out = dict(props)
    listeners = out["listeners"].split(",")
    out["listeners"] = ",".join(
        [
            *listeners,
            f"SSL://{HOST}:{tls.ssl_port}",
            f"SASL_SSL://{HOST}:{tls.sasl_ssl_port}",
        ]
    )
    out["advertised.listeners"] = ",".join(
        [
            out["advertised.listeners"],
            f"SSL://{HOST}:{tls.ssl_port}",
            f"SASL_SSL://{HOST}:{tls.sasl_ssl_port}",
        ]
    )
    out["listener.security.protocol.map"] += ",SSL:SSL,SASL_SSL:SASL_SSL"
    out.update(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.files.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.files.ca),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.ssl.ssl.client.auth": "required" if tls.mutual else "none",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
        }
    )
    return out


def security_settings(scram_users: Mapping[str, str], user: str | None = None) -> dict[str, str]:
    """confluent-kafka settings for a client of this broker (``user`` defaults to the
    super user, the first of ``scram_users``); empty for a PLAINTEXT broker."""
    if not scram_users:
        return {}
    name = user or next(iter(scram_users))
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": name,
        "sasl.password": scram_users[name],
    }
