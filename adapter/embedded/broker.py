"""A real Apache Kafka (KRaft) on 127.0.0.1: one node, or a cluster of N, each node a JVM that
is broker and controller at once (the controller quorum is every node).

The broker jars come from :mod:`adapter.embedded.jars` (fetched once, cached). Each named
instance lives in its own directory (``<home>/instances/<name>`` unless an explicit
``instances_dir`` is given, e.g. a pytest ``tmp_path``)::

    instance.json      persistent config: cluster id + each node's ports (kept across stops)
    state.json         runtime state: bootstrap, each node's pid and ports (removed by stop())
    server.properties  generated broker config      (a cluster: node-<id>/server.properties)
    log4j2.properties  generated logging config
    server.log         broker log                    (a cluster: node-<id>/server.log)
    stdout.log         JVM stdout/stderr
    data/              log.dirs (KRaft metadata + topic data)
    tls/               with ``tls=True``: the throw-away CA and the certificates (PEM)

A cluster (``brokers=3``) is what production runs: the internal topics (offsets,
transactions, share-group state) and new topics take replication factor 3 and
``min.insync.replicas=2``, so one node can be down without a write being refused. Each node
can be stopped, killed, frozen and restarted on its own (:meth:`EmbeddedKafka.node`), which is
what the bounce tests do.
Which node leads a partition or coordinates a group, and what is under-replicated, is asked
over the Kafka protocol by the methods :class:`~adapter.embedded.metadata.ClusterMetadata`
gives it.

With ``tls=True`` every node also has an ``SSL`` and a ``SASL_SSL`` (SCRAM-SHA-256) listener;
:meth:`EmbeddedKafka.client_config` gives a client's settings for each listener and
:attr:`EmbeddedKafka.ca_location` the CA file (:mod:`adapter.embedded.tls`).

``start()`` is idempotent across processes: if ``state.json`` names live nodes that accept
connections they are reused. The nodes are detached (own session), so they outlive the Python
process that started them until ``stop()`` is called.

Why one module: :class:`EmbeddedKafka` is the lifecycle of one instance (not started,
running, partly down, paused, stopped), kept in its state files; every transition --
``start`` with its port choice, relaunch retries and readiness wait, ``stop``, ``restart``,
a node brought back -- runs under the instance's file lock and reads and writes the same
``instance.json`` and ``state.json``.  What needs none of that lives beside it: the
generated configs (:mod:`.config`), the state files' format (:mod:`.state`), one JVM
(:mod:`.node`), the metadata questions (:mod:`.metadata`), certificates (:mod:`.tls`) and
the jars (:mod:`.jars`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from adapter.embedded.config import (
    TlsListeners,
    security_settings,
    server_properties,
    tls_properties,
)
from adapter.embedded.jars import (
    HOME_ENV,
    KAFKA_VERSION,
    EmbeddedKafkaError,
    copy_maven_dependencies,
    ensure_jars,
    file_lock,
    kafka_home,
    kafka_version,
    lib_dir,
)
from adapter.embedded.metadata import ClusterMetadata
from adapter.embedded.node import (
    HOST,
    READY_TIMEOUT_S,
    KafkaNode,
    NodeStatus,
    brokers_listed,
    coordinator_partition,
    free_ports,
    new_cluster_id,
    pid_alive,
    port_open,
    reap,
    wait_dead,
)
from adapter.embedded.state import (
    BrokerStatus,
    config_ports,
    config_tls_ports,
    node_entry,
    read_json,
    write_json,
)
from adapter.embedded.tls import TlsFiles, make_certificates
from adapter.errors import ConfigError

__all__ = [
    "DEFAULT_INSTANCE",
    "DEFAULT_TLS_USERS",
    "HOME_ENV",
    "KAFKA_VERSION",
    "PROTOCOLS",
    "BrokerStatus",
    "EmbeddedKafka",
    "EmbeddedKafkaError",
    "KafkaNode",
    "NodeStatus",
    "coordinator_partition",
    "copy_maven_dependencies",
    "ensure_jars",
    "kafka_home",
    "lib_dir",
    "pid_alive",
    "start_default",
    "status_default",
    "stop_default",
]

DEFAULT_INSTANCE = "default"
#: the SCRAM user of a TLS instance's ``SASL_SSL`` listener when no ``scram_users`` are given
DEFAULT_TLS_USERS: Mapping[str, str] = {"admin": "admin-secret"}
#: the security protocols a client may ask :meth:`EmbeddedKafka.client_config` for
PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
MAX_BROKERS = 9

_PORT_RETRIES = 2
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

_log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# the instance: one node or a cluster
# --------------------------------------------------------------------------------------------


class EmbeddedKafka(ClusterMetadata):
    """A named, persistent KRaft Kafka on 127.0.0.1: one node (``brokers=1``, the default) or
    a cluster of ``brokers`` nodes, each broker and controller.

    ``home`` holds the jar cache (and, by default, the instances); ``instances_dir`` puts the
    instance directories elsewhere while still sharing the jar cache. The instance-wide
    methods (``start``, ``stop``, ``restart``, ``kill``, ``pause``, ``resume``) act on every
    node; :meth:`node` gives one.
    """

    def __init__(
        self,
        name: str = DEFAULT_INSTANCE,
        home: str | os.PathLike[str] | None = None,
        *,
        brokers: int = 1,
        heap: str | None = None,
        extra_properties: Mapping[str, str] | None = None,
        scram_users: Mapping[str, str] | None = None,
        authorizer: bool = False,
        instances_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        jvm_options: Sequence[str] = (),
        tls: bool = False,
        mutual_tls: bool = False,
    ) -> None:
        if not _NAME_RE.match(name):
            raise ConfigError("name", name, "invalid instance name (use letters, digits, . _ -)")
        if (
            isinstance(brokers, bool)
            or not isinstance(brokers, int)
            or not (1 <= brokers <= MAX_BROKERS)
        ):
            raise ConfigError("brokers", brokers, f"must be an int from 1 to {MAX_BROKERS}")
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535 - brokers
        ):
            raise ConfigError(
                "port", port, "must be a free TCP port (node i listens on port + i - 1)"
            )
        self.name = name
        self.brokers = brokers
        #: the first node's client port (``None``: free ports, kept across restarts)
        self.port = port
        self.home = kafka_home(home)
        #: extra options for each node's JVM (after ``$RMQ_KAFKA_JVM_OPTS``)
        self.jvm_options: tuple[str, ...] = tuple(jvm_options)
        base = (
            Path(instances_dir).expanduser().resolve()
            if instances_dir is not None
            else self.home / "instances"
        )
        self.instance_dir = base / name
        # three JVMs share two cores and the page cache: a smaller heap each
        self.heap = heap or ("512m" if brokers == 1 else "384m")
        self.extra_properties: dict[str, str] = dict(extra_properties or {})
        #: SASL/SCRAM-SHA-256 users (name → password); the first one is the super user.
        self.scram_users: dict[str, str] = dict(scram_users or {})
        #: With SCRAM users: enforce ACLs (StandardAuthorizer, deny when no ACL matches).
        self.authorizer = authorizer
        #: ``SSL`` and ``SASL_SSL`` listeners besides the plaintext one, with certificates
        #: from a throw-away CA made at the first (and every fresh) start
        self.tls = tls or mutual_tls
        #: the ``SSL`` listener requires a client certificate (signed by the same CA)
        self.mutual_tls = mutual_tls
        #: who may log in over SASL: ``scram_users``, or for a TLS instance without them
        #: :data:`DEFAULT_TLS_USERS` (on its ``SASL_SSL`` listener only)
        self.sasl_users: dict[str, str] = self.scram_users or (
            dict(DEFAULT_TLS_USERS) if self.tls else {}
        )
        if authorizer and not self.scram_users:
            raise ConfigError(
                "authorizer", authorizer, "needs scram_users (the first one is the super user)"
            )
        self.nodes: tuple[KafkaNode, ...] = tuple(
            KafkaNode(
                self, i, self.instance_dir if brokers == 1 else self.instance_dir / f"node-{i}"
            )
            for i in range(1, brokers + 1)
        )

    @classmethod
    def existing(
        cls,
        name: str = DEFAULT_INSTANCE,
        home: str | os.PathLike[str] | None = None,
        *,
        instances_dir: str | os.PathLike[str] | None = None,
    ) -> EmbeddedKafka:
        """The instance ``name`` with as many nodes as it was last started with (one if it
        never was): for stopping or inspecting an instance another process started."""
        probe = cls(name, home, instances_dir=instances_dir)
        config = read_json(probe._config_file) or {}
        nodes = config.get("nodes")
        brokers = len(nodes) if isinstance(nodes, dict) and nodes else 1
        tls = bool(config_tls_ports(config, brokers))
        mutual = bool(config.get("mutual_tls"))
        if brokers == 1 and not tls:
            return probe
        return cls(
            name, home, brokers=brokers, instances_dir=instances_dir, tls=tls, mutual_tls=mutual
        )

    # ---- paths -------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The first node's data (the only one's, for a single broker)."""
        return self.nodes[0].data_dir

    @property
    def state_file(self) -> Path:
        return self.instance_dir / "state.json"

    @property
    def server_log(self) -> Path:
        """The first node's log (the only one's, for a single broker)."""
        return self.nodes[0].server_log

    @property
    def stdout_log(self) -> Path:
        return self.nodes[0].stdout_log

    @property
    def tls_files(self) -> TlsFiles:
        """Where a TLS instance's PEM files are (``tls/`` in the instance's folder)."""
        return TlsFiles(self.instance_dir / "tls")

    @property
    def ca_location(self) -> Path:
        """The CA certificate (PEM) clients of the TLS listeners trust: librdkafka's
        ``ssl.ca.location``, Spark's ``kafka.ssl.truststore.location``."""
        if not self.tls:
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} has no TLS (tls=True)")
        return self.tls_files.ca

    def listener(self, protocol: str) -> str:
        """Bootstrap of the running instance's listener for ``protocol`` (``PLAINTEXT`` or
        ``SASL_PLAINTEXT``: the node's own, ``SSL``, ``SASL_SSL``)."""
        protocol = protocol.upper()
        if protocol not in PROTOCOLS:
            raise ConfigError("security.protocol", protocol, f"expected one of {PROTOCOLS}")
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            own = "SASL_PLAINTEXT" if self.scram_users else "PLAINTEXT"
            if protocol != own:
                raise ConfigError(
                    "security.protocol", protocol, f"this instance's own listener is {own}"
                )
            return self.bootstrap_servers
        state = read_json(self.state_file)
        if state is None:
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} is not started")
        listeners = state.get("listeners") or {}
        if protocol not in listeners:
            raise EmbeddedKafkaError(
                f"embedded Kafka {self.name!r} has no {protocol} listener (start it with tls=True)"
            )
        return str(listeners[protocol])

    def client_config(self, protocol: str | None = None, user: str | None = None) -> dict[str, str]:
        """``bootstrap.servers`` and the security settings of a client of the listener for
        ``protocol`` (default: the node's own): the SCRAM login of ``user`` (default the
        first user) for the SASL ones, ``ssl.ca.location`` for the TLS ones and, on a
        mutual-TLS instance's ``SSL`` listener, the client certificate and key."""
        own = "SASL_PLAINTEXT" if self.scram_users else "PLAINTEXT"
        protocol = (protocol or own).upper()
        conf = {"bootstrap.servers": self.listener(protocol)}
        if protocol.startswith("SASL"):
            conf.update(security_settings(self.sasl_users, user))
        conf["security.protocol"] = protocol
        if protocol in ("SSL", "SASL_SSL"):
            conf["ssl.ca.location"] = str(self.ca_location)
        if protocol == "SSL" and self.mutual_tls:
            conf["ssl.certificate.location"] = str(self.tls_files.client_certificate)
            conf["ssl.key.location"] = str(self.tls_files.client_key)
        return conf

    @property
    def _config_file(self) -> Path:
        return self.instance_dir / "instance.json"

    @property
    def lock_file(self) -> Path:
        """The instance's lock: every lifecycle step, of the instance or of one node, holds it."""
        return self.instance_dir / ".lock"

    @property
    def bootstrap_servers(self) -> str:
        """Bootstrap of the running instance, every node's address (raises if not started)."""
        state = read_json(self.state_file)
        if state is None:
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} is not started")
        return str(state["bootstrap_servers"])

    def node(self, node_id: int) -> KafkaNode:
        """The node with this id (1 .. ``brokers``)."""
        if not 1 <= node_id <= self.brokers:
            raise ConfigError("node_id", node_id, f"must be from 1 to {self.brokers}")
        return self.nodes[node_id - 1]

    # ---- public API --------------------------------------------------------------------------

    def start(self, *, fresh: bool = False, timeout: float = READY_TIMEOUT_S) -> str:
        """Start (or reuse) every node and return the bootstrap servers.

        ``fresh=True`` stops a running instance and wipes its data first. Nodes that are
        down (killed, stopped) in a running cluster are started again."""
        with file_lock(self.lock_file):
            if fresh:
                # whatever this instance ran before, however many nodes it had
                EmbeddedKafka.existing(
                    self.name, self.home, instances_dir=self.instance_dir.parent
                )._stop_locked(30.0)
            else:
                state = read_json(self.state_file)
                if state is not None and int(state.get("brokers", 1)) != self.brokers:
                    raise EmbeddedKafkaError(
                        f"embedded Kafka {self.name!r} was started with "
                        f"{state.get('brokers', 1)} broker(s), not {self.brokers}: stop it "
                        f"first (rmq-kafka kafka stop --name {self.name}), or start it fresh"
                    )
                if state is not None:
                    down = [n for n in self.nodes if not self._node_live(n, state)]
                    if not down:
                        return str(state["bootstrap_servers"])
                    if len(down) < len(self.nodes):  # a partial cluster: bring the rest back
                        for node in down:
                            node._stop_locked(10.0)
                            node._relaunch_locked(timeout)
                        return str(state["bootstrap_servers"])
                self._stop_locked(10.0)  # a hung/half-dead process of ours must release data
            return self._launch_locked(fresh=fresh, same_ports=False, timeout=timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """Gracefully stop every node (SIGTERM, then SIGKILL). True if one was running."""
        with file_lock(self.lock_file):
            return self._stop_locked(timeout)

    def restart(self, *, hard: bool = False, timeout: float = READY_TIMEOUT_S) -> str:
        """Stop every node (SIGTERM, or SIGKILL with ``hard=True``) and start them again on
        the same ports and with the same data, so clients can reconnect to the same
        bootstrap."""
        with file_lock(self.lock_file):
            state = read_json(self.state_file) or {}
            for node in self.nodes:
                entry = node_entry(state, node.node_id)
                if entry is not None and node.owns(int(entry["pid"])):
                    pid = int(entry["pid"])
                    if hard:
                        node._signal(pid, signal.SIGKILL)
                        wait_dead(pid, 30.0)
                    else:
                        node._terminate(pid, 30.0)
            return self._launch_locked(fresh=False, same_ports=True, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL every node without any cleanup (fault injection). ``start()``/``restart()``
        bring them back on the same ports with the same data."""
        self._each(KafkaNode.kill)

    def pause(self) -> None:
        """SIGSTOP every node: connections stay open but nothing is answered."""
        self._each(KafkaNode.pause)

    def resume(self) -> None:
        """SIGCONT every paused node."""
        self._each(KafkaNode.resume)

    def _each(self, action: Callable[[KafkaNode], None]) -> None:
        """``action`` on every node; a node that is not running raises only after the others
        had theirs."""
        first: EmbeddedKafkaError | None = None
        for node in self.nodes:
            try:
                action(node)
            except EmbeddedKafkaError as exc:
                first = first or exc
        if first is not None:
            raise first

    def status(self) -> BrokerStatus | None:
        """None if the instance has no state (never started or stopped)."""
        state = read_json(self.state_file)
        if state is None:
            return None
        nodes = tuple(st for st in (n.status() for n in self.nodes) if st is not None)
        return BrokerStatus(
            name=self.name,
            pid=nodes[0].pid if nodes else 0,
            bootstrap_servers=str(state["bootstrap_servers"]),
            data_dir=self.data_dir,
            running=len(nodes) == self.brokers and all(n.running for n in nodes),
            nodes=nodes,
        )

    def is_running(self) -> bool:
        st = self.status()
        return st is not None and st.running

    @property
    def pid(self) -> int | None:
        """The first node's pid (the only one's, for a single broker)."""
        return self.nodes[0].pid

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"EmbeddedKafka(name={self.name!r}, brokers={self.brokers}, "
            f"instance_dir={str(self.instance_dir)!r})"
        )

    # ---- configuration ---------------------------------------------------------------------

    def _properties(
        self,
        node_id: int,
        ports: Mapping[int, tuple[int, int]],
        tls_ports: Mapping[int, tuple[int, int]],
    ) -> dict[str, str]:
        props = server_properties(
            node_id,
            ports,
            brokers=self.brokers,
            log_dir=self.node(node_id).data_dir,
            scram_users=self.scram_users,
            authorizer=self.authorizer,
            extra={},
        )
        if self.tls:
            ssl_port, sasl_ssl_port = tls_ports[node_id]
            props = tls_properties(
                props,
                TlsListeners(ssl_port, sasl_ssl_port, self.tls_files, mutual=self.mutual_tls),
            )
        props.update(self.extra_properties)  # last: it wins
        return props

    def _reach(self) -> tuple[str, dict[str, str]]:
        return self.bootstrap_servers, self.client_security()

    def client_security(self, user: str | None = None) -> dict[str, str]:
        """confluent-kafka settings for a client of this broker (``user`` defaults to the
        super user); empty for a PLAINTEXT broker."""
        return security_settings(self.scram_users, user)

    # ---- state files -----------------------------------------------------------------------

    def state_node(self, node_id: int) -> dict[str, Any] | None:
        """The node's entry in ``state.json`` (pid, ports); ``None`` when not started."""
        state = read_json(self.state_file)
        return None if state is None else node_entry(state, node_id)

    def set_state_pid(self, node_id: int, pid: int) -> None:
        """Record a relaunched node's pid in ``state.json``."""
        state = read_json(self.state_file)
        if state is None:
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} is not started")
        state["nodes"][str(node_id)]["pid"] = pid
        if node_id == 1:
            state["pid"] = pid
        write_json(self.state_file, state)

    def node_ports(self, node_id: int) -> tuple[int, int] | None:
        """The node's (client, controller) ports in ``instance.json``; ``None``: never started."""
        config = read_json(self._config_file) or {}
        ports = config_ports(config, self.brokers)
        return ports.get(node_id)

    def _node_live(self, node: KafkaNode, state: Mapping[str, Any]) -> bool:
        entry = node_entry(state, node.node_id)
        return entry is not None and node.owns(int(entry["pid"])) and port_open(int(entry["port"]))

    # ---- lifecycle internals ---------------------------------------------------------------

    def _stop_locked(self, timeout: float) -> bool:
        state = read_json(self.state_file) or {}
        running = {
            node: int(entry["pid"])
            for node in self.nodes
            if (entry := node_entry(state, node.node_id)) is not None
            and node.owns(int(entry["pid"]))
        }
        # every node at once: a node stopped last, alone, would wait for a controller
        # quorum that is already gone
        for node, pid in running.items():
            node.ask_to_stop(pid)
        deadline = time.monotonic() + timeout
        for node, pid in running.items():
            node.finish_stop(pid, max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        return bool(running)

    def _launch_locked(self, *, fresh: bool, same_ports: bool, timeout: float) -> str:
        lib = ensure_jars(self.home)
        self.instance_dir.mkdir(parents=True, exist_ok=True)
        config = read_json(self._config_file) or {}
        formatted = all((n.data_dir / "meta.properties").is_file() for n in self.nodes)
        if fresh or not formatted or "cluster_id" not in config:
            formatted = False
            config["cluster_id"] = new_cluster_id()
        ports = config_ports(config, self.brokers)
        have_ports = len(ports) == self.brokers
        keep_ports = have_ports and same_ports
        if self.port is not None and not keep_ports:
            ports = self._fresh_ports()  # the ports asked for
        elif not (have_ports and (same_ports or formatted)):
            # else: prefer the previous ports so that clients can reconnect to the same bootstrap
            ports = self._fresh_ports()
        # a client port that still answers belongs to someone else: the readiness check
        # would take another broker there for this one while the new JVM fails to bind
        taken = [p for p, _ in ports.values() if port_open(p)]
        if taken and self.port is None and not keep_ports:
            ports, taken = self._fresh_ports(), []  # only preferred: move
        if taken:
            raise EmbeddedKafkaError(
                f"embedded Kafka {self.name!r}: port {taken[0]} is already in use (another "
                "broker or process listens there); stop it or choose another --port"
            )

        tls_ports = self._tls_ports(config, keep=keep_ports or formatted, avoid=ports)
        if self.tls and (not formatted or not self.tls_files.complete()):
            make_certificates(self.tls_files.directory)

        # the previous processes are dead before we relaunch, so retrying fixed ports once
        # is enough
        attempts = 2 if keep_ports else 1 + _PORT_RETRIES
        for attempt in range(attempts):
            config = {
                "cluster_id": config["cluster_id"],
                "nodes": {
                    str(i): {
                        "port": p,
                        "controller_port": c,
                        **(
                            {"ssl_port": tls_ports[i][0], "sasl_ssl_port": tls_ports[i][1]}
                            if i in tls_ports
                            else {}
                        ),
                    }
                    for i, (p, c) in ports.items()
                },
                **({"mutual_tls": True} if self.mutual_tls else {}),
            }
            for node in self.nodes:
                node.write_configs(self._properties(node.node_id, ports, tls_ports))
            if not formatted:
                for node in self.nodes:
                    node.format(lib, str(config["cluster_id"]), self.sasl_users)
                formatted = True
            write_json(self._config_file, config)
            try:
                return self._spawn_all(lib, ports, tls_ports, timeout)
            except EmbeddedKafkaError:
                if attempt + 1 >= attempts or not any(n.address_in_use() for n in self.nodes):
                    raise
                _log.info("embedded Kafka %s: address in use, retrying", self.name)
                if keep_ports:
                    time.sleep(0.5)  # the previous process may still be releasing the port
                else:
                    # KRaft static voters live in the config only: ports may move
                    ports = self._fresh_ports()
                    tls_ports = self._tls_ports({}, keep=False, avoid=ports)
        raise AssertionError("unreachable")

    def _tls_ports(
        self, config: Mapping[str, Any], *, keep: bool, avoid: Mapping[int, tuple[int, int]]
    ) -> dict[int, tuple[int, int]]:
        """Node id -> (``SSL`` port, ``SASL_SSL`` port) of a TLS instance (empty without
        TLS): the previous ones while they are free, else new free ports."""
        if not self.tls:
            return {}
        old = config_tls_ports(config, self.brokers)
        if (
            keep
            and len(old) == self.brokers
            and not any(port_open(p) for pair in old.values() for p in pair)
        ):
            return old
        used = {p for pair in avoid.values() for p in pair}
        flat = [p for p in free_ports(2 * self.brokers + len(used)) if p not in used]
        return {n.node_id: (flat[2 * k], flat[2 * k + 1]) for k, n in enumerate(self.nodes)}

    def _fresh_ports(self) -> dict[int, tuple[int, int]]:
        if self.port is not None:  # clients on the ports asked for, controllers on free ones
            controllers = free_ports(self.brokers)
            return {n.node_id: (self.port + k, controllers[k]) for k, n in enumerate(self.nodes)}
        flat = free_ports(2 * self.brokers)
        return {n.node_id: (flat[2 * k], flat[2 * k + 1]) for k, n in enumerate(self.nodes)}

    def _spawn_all(
        self,
        lib: Path,
        ports: Mapping[int, tuple[int, int]],
        tls_ports: Mapping[int, tuple[int, int]],
        timeout: float,
    ) -> str:
        bootstrap = ",".join(f"{HOST}:{ports[n.node_id][0]}" for n in self.nodes)
        tls_state: dict[str, Any] = {}
        if tls_ports:
            tls_state = {
                "listeners": {
                    protocol: ",".join(f"{HOST}:{tls_ports[n.node_id][k]}" for n in self.nodes)
                    for k, protocol in enumerate(("SSL", "SASL_SSL"))
                },
                "ca_location": str(self.tls_files.ca),
                "mutual_tls": self.mutual_tls,
            }
        started = time.monotonic()
        pids = {n.node_id: n.spawn(lib) for n in self.nodes}
        write_json(
            self.state_file,
            {
                "name": self.name,
                "brokers": self.brokers,
                "pid": pids[1],
                "bootstrap_servers": bootstrap,
                "port": ports[1][0],
                "controller_port": ports[1][1],
                "data_dir": str(self.data_dir),
                "instance_dir": str(self.instance_dir),
                "kafka_version": kafka_version(),
                "started_at": time.time(),
                "nodes": {
                    str(i): {"pid": pid, "port": ports[i][0], "controller_port": ports[i][1]}
                    for i, pid in pids.items()
                },
                **tls_state,
            },
        )
        try:
            self.wait_ready(pids, started + timeout, bootstrap=bootstrap)
        except EmbeddedKafkaError:
            for node in self.nodes:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pids[node.node_id], signal.SIGKILL)
            for pid in pids.values():
                wait_dead(pid, 10.0)
            with contextlib.suppress(FileNotFoundError):
                self.state_file.unlink()
            raise
        _log.info(
            "embedded Kafka %s (%d node%s) ready on %s in %.1fs",
            self.name,
            self.brokers,
            "" if self.brokers == 1 else "s",
            bootstrap,
            time.monotonic() - started,
        )
        return bootstrap

    def wait_ready(self, pids: Mapping[int, int], deadline: float, *, bootstrap: str) -> None:
        """Until every node in ``pids`` accepts connections and the cluster's metadata (asked
        through ``bootstrap``) lists it; a node whose JVM exits fails at once."""
        waiting = dict(pids)
        while True:
            for node_id, pid in list(waiting.items()):
                node = self.node(node_id)
                code = reap(pid)
                if code is not None or not pid_alive(pid):
                    raise EmbeddedKafkaError(
                        f"embedded Kafka {self.name!r}: node {node_id} exited with code "
                        f"{code}\n{node.failure_lines()}"
                    )
            ready = [i for i in waiting if port_open(self.node(i).port)]
            if len(ready) == len(waiting):
                listed = brokers_listed(bootstrap, 2.0, self.client_security())
                if set(waiting) <= listed:
                    return
            if time.monotonic() >= deadline:
                for pid in waiting.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                raise EmbeddedKafkaError(
                    f"embedded Kafka {self.name!r}: not ready on {bootstrap} in time\n"
                    + "\n".join(self.node(i).failure_lines() for i in waiting)
                )
            time.sleep(0.1)


# --------------------------------------------------------------------------------------------
# CLI helpers (instance "default")
# --------------------------------------------------------------------------------------------


def start_default(
    home: str | os.PathLike[str] | None = None, *, brokers: int = 1, tls: bool = False
) -> str:
    return EmbeddedKafka(DEFAULT_INSTANCE, home, brokers=brokers, tls=tls).start()


def stop_default(home: str | os.PathLike[str] | None = None) -> bool:
    return EmbeddedKafka.existing(DEFAULT_INSTANCE, home).stop()


def status_default(home: str | os.PathLike[str] | None = None) -> BrokerStatus | None:
    return EmbeddedKafka.existing(DEFAULT_INSTANCE, home).status()
