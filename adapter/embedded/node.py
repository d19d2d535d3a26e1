"""One node of an :class:`~adapter.embedded.broker.EmbeddedKafka`: a KRaft JVM that is broker
and controller at once, and the process and port helpers that start, signal and watch it."""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka.admin import AdminClient

from adapter.embedded.jars import (
    DUMP_OPTION,
    LOG_TAIL_LINES,
    EmbeddedKafkaError,
    archive_options,
    ensure_jars,
    file_lock,
    file_tail,
    jvm_options,
    tail,
    which,
)

__all__ = [
    "HOST",
    "KafkaNode",
    "NodeStatus",
    "coordinator_partition",
    "java_string_hash",
    "pid_alive",
]

HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0  # a restart replays every topic; slow on a loaded 2-core machine
_FORMAT_TIMEOUT_S = 120.0

_log = logging.getLogger("adapter.embedded.broker")


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    pid: int
    bootstrap_servers: str
    data_dir: Path
    running: bool


# --------------------------------------------------------------------------------------------
# process / network helpers
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = _free_port()
        if p not in ports:
            ports.append(p)
    return ports


def port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _proc_state(pid: int, tid: int | None = None) -> str | None:
    """Linux state letter of a process (or of its thread ``tid``) from /proc (None if
    unknown / no procfs)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        stat = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[-1].split()
    return rest[0] if rest else None


def _exited(pid: int) -> bool:
    """Every thread of ``pid`` has exited. A killed JVM's main thread shows as a zombie
    while its other threads, which hold its sockets and files, are still exiting: a
    restart on its ports in that moment would find them taken."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return _proc_state(pid) in ("Z", "X")
    return all(_proc_state(pid, tid) in ("Z", "X", None) for tid in tids)


def reap(pid: int) -> int | None:
    """If ``pid`` is an exited child of this process, reap it and return its exit code."""
    try:
        wpid, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child, or already reaped
        return None
    return os.waitstatus_to_exitcode(status) if wpid == pid else None


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    reap(pid)  # a dead child of ours stays a zombie (and "alive" to kill(0)) until reaped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _exited(pid)


def _pid_is_broker(pid: int, server_properties: Path) -> bool:
    """Guard against pid reuse: the process must be a kafka.Kafka JVM with our config."""
    if not Path("/proc/self").exists():  # no procfs (e.g. macOS): trust the pid
        return True
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    args = [a.decode("utf-8", errors="replace") for a in raw.split(b"\0")]
    return "kafka.Kafka" in args and str(server_properties) in args


def wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def new_cluster_id() -> str:
    """A KRaft cluster id; never starting with '-' (kafka-storage would read it as an
    option: Kafka's own Uuid generator avoids those ids for the same reason)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def _silent_logger() -> logging.Logger:
    lg = logging.getLogger("adapter.embedded.probe")
    lg.propagate = False
    if not lg.handlers:
        lg.addHandler(logging.NullHandler())
    return lg


def probe_admin(bootstrap: str, timeout: float, security: Mapping[str, str]) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
            **security,
        },
        logger=_silent_logger(),
    )


def brokers_listed(bootstrap: str, timeout: float, security: Mapping[str, str]) -> set[int]:
    """The broker ids one bounded metadata round trip lists (empty when it fails)."""
    try:
        md = probe_admin(bootstrap, timeout, security).list_topics(timeout=timeout)
    except Exception:
        return set()
    return set(md.brokers)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (a signed 32-bit int) of ``text``."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` (a group id) or ``__transaction_state`` (a
    transactional id) whose leader coordinates ``key``: Kafka's ``Utils.abs(key.hashCode())
    % partitions``."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


_LOG4J2 = """\
status = warn
name = rmq-kafka-embedded
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka-request.name = kafka.request.logger
logger.kafka-request.level = WARN
logger.state-change.name = state.change.logger
logger.state-change.level = WARN
"""


# --------------------------------------------------------------------------------------------
# one node
# --------------------------------------------------------------------------------------------


class NodeHost(Protocol):
    """What a node needs of its instance (an :class:`~adapter.embedded.broker.EmbeddedKafka`):
    its name, jar home and JVM settings, its lock and state files, and the readiness wait."""

    name: str
    home: Path
    heap: str
    jvm_options: tuple[str, ...]

    @property
    def lock_file(self) -> Path: ...

    def node_ports(self, node_id: int) -> tuple[int, int] | None: ...

    def state_node(self, node_id: int) -> dict[str, Any] | None: ...

    def set_state_pid(self, node_id: int, pid: int) -> None: ...

    def wait_ready(self, pids: Mapping[int, int], deadline: float, *, bootstrap: str) -> None: ...


class KafkaNode:
    """One JVM of an :class:`~adapter.embedded.broker.EmbeddedKafka`: a broker and a
    controller (KRaft combined mode).

    Got from :meth:`EmbeddedKafka.node`; its methods take the instance's lock, so a node can
    be bounced while clients of the others keep running."""

    def __init__(self, cluster: NodeHost, node_id: int, directory: Path) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.directory = directory

    # ---- paths and state -----------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def server_log(self) -> Path:
        return self.directory / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.directory / "stdout.log"

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    def _ports(self) -> tuple[int, int]:
        ports = self.cluster.node_ports(self.node_id)
        if ports is None:
            raise EmbeddedKafkaError(f"{self!r} was never started")
        return ports

    @property
    def port(self) -> int:
        return self._ports()[0]

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        entry = self.cluster.state_node(self.node_id)
        return None if entry is None else int(entry["pid"])

    def owns(self, pid: int) -> bool:
        """The pid is alive and is this node's JVM."""
        # cmdline first: a zombie has none, and only our own broker child is ever reaped
        return _pid_is_broker(pid, self.properties_file) and pid_alive(pid)

    def status(self) -> NodeStatus | None:
        entry = self.cluster.state_node(self.node_id)
        if entry is None:
            return None
        pid, port = int(entry["pid"]), int(entry["port"])
        return NodeStatus(
            node_id=self.node_id,
            pid=pid,
            bootstrap_servers=f"{HOST}:{port}",
            data_dir=self.data_dir,
            running=self.owns(pid) and port_open(port),
        )

    def is_running(self) -> bool:
        st = self.status()
        return st is not None and st.running

    # ---- faults and restarts (each under the instance's lock) ----------------------------

    def kill(self) -> None:
        """SIGKILL this node without any cleanup; :meth:`start` brings it back."""
        with file_lock(self.cluster.lock_file):
            pid = self._require_pid()
            self._signal(pid, signal.SIGKILL)
            wait_dead(pid, 30.0)

    def pause(self) -> None:
        """SIGSTOP this node: its connections stay open but nothing is answered."""
        self._signal(self._require_pid(), signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused node."""
        self._signal(self._require_pid(), signal.SIGCONT)

    def stop(self, timeout: float = 30.0) -> bool:
        """Controlled shutdown (SIGTERM: leadership moves off first), then SIGKILL after
        ``timeout``. True if the node was running."""
        with file_lock(self.cluster.lock_file):
            return self._stop_locked(timeout)

    def start(self, timeout: float = READY_TIMEOUT_S) -> str:
        """Start this node again (same ports, same data) unless it runs; return its
        bootstrap once the cluster lists it."""
        with file_lock(self.cluster.lock_file):
            entry = self.cluster.state_node(self.node_id)
            if entry is not None and self.owns(int(entry["pid"])):
                return self.bootstrap_servers
            return self._relaunch_locked(timeout)

    def restart(self, *, hard: bool = False, timeout: float = READY_TIMEOUT_S) -> str:
        """Stop (controlled, or SIGKILL with ``hard=True``) and start on the same ports."""
        with file_lock(self.cluster.lock_file):
            entry = self.cluster.state_node(self.node_id)
            if entry is not None and self.owns(int(entry["pid"])):
                pid = int(entry["pid"])
                if hard:
                    self._signal(pid, signal.SIGKILL)
                    wait_dead(pid, 30.0)
                else:
                    self._terminate(pid, 30.0)
            return self._relaunch_locked(timeout)

    # ---- internals -----------------------------------------------------------------------

    def _require_pid(self) -> int:
        entry = self.cluster.state_node(self.node_id)
        if entry is None or not self.owns(int(entry["pid"])):
            raise EmbeddedKafkaError(f"{self!r} is not running")
        return int(entry["pid"])

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError as exc:
            raise EmbeddedKafkaError(f"{self!r} (pid {pid}) is gone") from exc

    def _terminate(self, pid: int, timeout: float) -> None:
        self.ask_to_stop(pid)
        self.finish_stop(pid, timeout)

    @staticmethod
    def ask_to_stop(pid: int) -> None:
        """SIGTERM: a controlled shutdown (leadership moves to the other nodes first)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)  # a paused broker must run to handle SIGTERM

    def finish_stop(self, pid: int, timeout: float) -> None:
        """Wait ``timeout`` for the JVM to exit, then SIGKILL it."""
        if not wait_dead(pid, timeout):
            _log.warning("%r (pid %d) ignored SIGTERM; killing", self, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            wait_dead(pid, 10.0)

    def _stop_locked(self, timeout: float) -> bool:
        entry = self.cluster.state_node(self.node_id)
        if entry is None or not self.owns(int(entry["pid"])):
            return False
        self._terminate(int(entry["pid"]), timeout)
        return True

    def _relaunch_locked(self, timeout: float) -> str:
        lib = ensure_jars(self.cluster.home)
        pid = self.spawn(lib)
        self.cluster.set_state_pid(self.node_id, pid)
        self.cluster.wait_ready(
            {self.node_id: pid}, time.monotonic() + timeout, bootstrap=self.bootstrap_servers
        )
        return self.bootstrap_servers

    def write_configs(self, props: Mapping[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{k}={v}" for k, v in props.items()]
        self.properties_file.write_text(
            "# generated by adapter.embedded; edits are overwritten on start\n"
            + "\n".join(lines)
            + "\n",
            encoding="utf-8",
        )
        (self.directory / "log4j2.properties").write_text(
            _LOG4J2.format(log=self.server_log), encoding="utf-8"
        )

    def java_cmd(self, lib: Path, heap: str, main: str, *args: str) -> list[str]:
        options = [*jvm_options(), *self.cluster.jvm_options]
        if main != "kafka.Kafka":  # an archive is written by a node, not by a format
            options = [o for o in options if not o.startswith(DUMP_OPTION)]
        return [
            which("java"),
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.directory}",
            f"-XX:ErrorFile={self.directory / 'hs_err_pid%p.log'}",
            *options,
            *archive_options(lib, options),
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ]

    def format(self, lib: Path, cluster_id: str, scram_users: Mapping[str, str]) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        cmd = self.java_cmd(
            lib,
            "256m",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self.properties_file),
            *(
                arg
                for name, password in scram_users.items()
                for arg in ("--add-scram", f"SCRAM-SHA-256=[name={name},password={password}]")
            ),
        )
        for _ in range(2):  # one retry: a JVM that dies at start-up (rare, seen under load)
            try:
                proc = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=_FORMAT_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise EmbeddedKafkaError(f"formatting {self.data_dir} timed out") from exc
            if proc.returncode == 0:
                break
            self.data_dir.mkdir(parents=True, exist_ok=True)
        if proc.returncode != 0:
            raise EmbeddedKafkaError(
                f"formatting KRaft storage {self.data_dir} failed (exit {proc.returncode}):\n"
                + tail((proc.stdout or "") + "\n" + (proc.stderr or ""))
            )

    def spawn(self, lib: Path) -> int:
        """Launch the JVM (detached); its previous run's logs are kept aside as ``*.prev``."""
        for old_log in (self.server_log, self.stdout_log):
            with contextlib.suppress(FileNotFoundError):
                old_log.replace(old_log.with_name(old_log.name + ".prev"))
        cmd = self.java_cmd(lib, self.cluster.heap, "kafka.Kafka", str(self.properties_file))
        # posix_spawn rather than subprocess.Popen: the broker is meant to outlive this Python
        # process (CLI use), and a Popen object dropped while its child runs warns on GC.
        # Children are reaped with waitpid(WNOHANG) in pid_alive.
        out = os.open(self.stdout_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            return os.posix_spawn(
                cmd[0],
                cmd,
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, out, 2),
                ],
                setsid=True,  # detached: own session, no signals from our terminal
            )
        finally:
            os.close(out)

    def address_in_use(self) -> bool:
        needle = "Address already in use"
        return needle in file_tail(self.server_log, 200) or needle in file_tail(
            self.stdout_log, 200
        )

    def failure_lines(self) -> str:
        log = file_tail(self.server_log, 2000).splitlines()
        key = [ln for ln in log if " ERROR " in ln or " FATAL " in ln or ln.startswith("Caused by")]
        key_lines = "\n".join(key[:12]) or "<none>"
        return (
            f"--- ERROR/FATAL lines ---\n{key_lines}\n"
            f"--- {self.server_log} (last {LOG_TAIL_LINES} lines) ---\n"
            f"{file_tail(self.server_log)}\n"
            f"--- {self.stdout_log} (last {LOG_TAIL_LINES} lines) ---\n"
            f"{file_tail(self.stdout_log)}"
        )

    def __repr__(self) -> str:
        return f"KafkaNode({self.cluster.name!r}, node_id={self.node_id})"
