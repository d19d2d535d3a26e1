"""A real, single-node Apache Kafka broker (KRaft, combined broker+controller) run as a JVM.

The broker jars are fetched once with Maven (``pom.xml`` shipped as package data) into a
shared cache::

    <home>/kafka-<KAFKA_VERSION>/lib/*.jar        home = $RMQ_KAFKA_HOME or ~/.cache/rmq-kafka

Each named instance lives in its own directory (``<home>/instances/<name>`` unless an explicit
``instances_dir`` is given, e.g. a pytest ``tmp_path``)::

    instance.json      persistent config: ports + cluster id (kept across stop/start)
    state.json         runtime state: pid, bootstrap, ports, data dir (removed by stop())
    server.properties  generated broker config
    log4j2.properties  generated logging config
    server.log         broker log
    stdout.log         JVM stdout/stderr
    data/              log.dirs (KRaft metadata + topic data)

``start()`` is idempotent across processes: if ``state.json`` names a live broker process that
accepts connections it is reused. The broker is detached (own session), so it outlives the
Python process that started it until ``stop()`` is called.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from adapter.errors import AdapterError, ConfigError

__all__ = [
    "DEFAULT_INSTANCE",
    "KAFKA_VERSION",
    "BrokerStatus",
    "EmbeddedKafka",
    "EmbeddedKafkaError",
    "ensure_jars",
    "kafka_home",
    "lib_dir",
    "start_default",
    "status_default",
    "stop_default",
]

KAFKA_VERSION = "4.4.0"
DEFAULT_INSTANCE = "default"
HOME_ENV = "RMQ_KAFKA_HOME"
HOST = "127.0.0.1"

_MARKER = ".rmq-kafka-complete"
_MVN_TIMEOUT_S = 1800.0
_FORMAT_TIMEOUT_S = 120.0
_READY_TIMEOUT_S = 120.0  # a restart replays every topic; slow on a loaded 2-core machine
_PORT_RETRIES = 2
_LOG_TAIL_LINES = 40
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

_log = logging.getLogger(__name__)


class EmbeddedKafkaError(AdapterError, RuntimeError):
    """The embedded broker (or its jars) could not be prepared, started or controlled.

    An :class:`~adapter.errors.AdapterError`, and a ``RuntimeError`` as before.
    """


@dataclass(frozen=True)
class BrokerStatus:
    name: str
    pid: int
    bootstrap_servers: str
    data_dir: Path
    running: bool


# --------------------------------------------------------------------------------------------
# jars
# --------------------------------------------------------------------------------------------


def kafka_home(home: str | os.PathLike[str] | None = None) -> Path:
    """Cache/state root: ``home``, else ``$RMQ_KAFKA_HOME``, else ~/.cache/rmq-kafka."""
    if home is not None:
        return Path(home).expanduser().resolve()
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return (Path.home() / ".cache" / "rmq-kafka").resolve()


def lib_dir(home: str | os.PathLike[str] | None = None) -> Path:
    return kafka_home(home) / f"kafka-{KAFKA_VERSION}" / "lib"


def _jars_complete(lib: Path) -> bool:
    marker = lib / _MARKER
    if not marker.is_file():
        return False
    names = [n for n in marker.read_text(encoding="utf-8").splitlines() if n.strip()]
    return bool(names) and all((lib / n).is_file() for n in names)


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _file_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "<missing>"
    return _tail(data, lines) or "<empty>"


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock (inter-process, and between threads of this process)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _which(tool: str) -> str:
    if tool == "java":
        java_home = os.environ.get("JAVA_HOME")
        if java_home:
            candidate = Path(java_home) / "bin" / "java"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which(tool)
    if found is None:
        raise EmbeddedKafkaError(
            f"`{tool}` was not found on PATH; the embedded Kafka broker needs a JDK (17+)"
            + (" and Maven (to fetch the broker jars once)" if tool == "mvn" else "")
        )
    return found


def ensure_jars(home: str | os.PathLike[str] | None = None) -> Path:
    """Make sure the Kafka broker jars are in ``<home>/kafka-<version>/lib``; return that dir.

    Runs ``mvn dependency:copy-dependencies`` only when the lib dir is missing or incomplete.
    """
    lib = lib_dir(home)
    if _jars_complete(lib):
        return lib
    root = lib.parent
    with _flock(root / ".lock"):
        if _jars_complete(lib):  # fetched by someone else while we waited for the lock
            return lib
        _which("java")
        tmp = copy_maven_dependencies(
            resources.files("adapter.embedded").joinpath("pom.xml").read_bytes(),
            root,
            f"lib.tmp-{os.getpid()}",
            what=f"Kafka {KAFKA_VERSION} jars",
            complete=lambda names: any(j.startswith("kafka_2.13-") for j in names),
            error=EmbeddedKafkaError,
        )
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        (tmp / _MARKER).write_text("\n".join(jars) + "\n", encoding="utf-8")
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)
    return lib


def copy_maven_dependencies(
    pom: bytes,
    root: Path,
    tmp_name: str,
    *,
    what: str,
    complete: Callable[[set[str]], bool],
    error: Callable[[str], Exception],
) -> Path:
    """Fetch the runtime dependencies of ``pom`` (written to ``root/pom.xml``) with
    ``mvn dependency:copy-dependencies`` into ``root/tmp_name``; return that folder.

    ``complete`` checks the jar names fetched; on a failure, a timeout or an incomplete set
    the folder is removed and ``error(message)`` is raised with mvn's output tail."""
    mvn = _which("mvn")
    pom_file = root / "pom.xml"
    pom_file.write_bytes(pom)
    tmp = root / tmp_name
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom_file),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={tmp}",
        "-DincludeScope=runtime",
    ]
    _log.info("fetching %s into %s", what, root)
    try:
        proc = subprocess.run(
            cmd,
            cwd=root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_MVN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise error(f"mvn timed out after {_MVN_TIMEOUT_S:.0f}s fetching {what}") from exc
    names = {p.name for p in tmp.glob("*.jar")} if tmp.is_dir() else set()
    if proc.returncode != 0 or not complete(names):
        shutil.rmtree(tmp, ignore_errors=True)
        output = _tail((proc.stdout or "") + "\n" + (proc.stderr or ""), 60)
        raise error(
            f"fetching {what} failed (mvn exit {proc.returncode}):\n"
            f"$ {' '.join(cmd)}\n{output or '<no output>'}"
        )
    return tmp


# --------------------------------------------------------------------------------------------
# process / network helpers
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = _free_port()
        if p not in ports:
            ports.append(p)
    return ports


def _port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _proc_state(pid: int) -> str | None:
    """Linux process state letter from /proc (None if unknown / no procfs)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[-1].split()
    return rest[0] if rest else None


def _reap(pid: int) -> int | None:
    """If ``pid`` is an exited child of this process, reap it and return its exit code."""
    try:
        wpid, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child, or already reaped
        return None
    return os.waitstatus_to_exitcode(status) if wpid == pid else None


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    _reap(pid)  # a dead child of ours stays a zombie (and "alive" to kill(0)) until reaped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _proc_state(pid) not in ("Z", "X")


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


def _new_cluster_id() -> str:
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


def _metadata_ok(bootstrap: str, timeout: float, security: Mapping[str, str] | None = None) -> bool:
    """One bounded AdminClient metadata round trip."""
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
            **(security or {}),
        },
        logger=_silent_logger(),
    )
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception:
        return False
    return bool(md.brokers)


# --------------------------------------------------------------------------------------------
# the broker
# --------------------------------------------------------------------------------------------

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


class EmbeddedKafka:
    """A named, persistent, single-node KRaft Kafka broker on 127.0.0.1.

    ``home`` holds the jar cache (and, by default, the instances); ``instances_dir`` puts the
    instance directories elsewhere while still sharing the jar cache.
    """

    def __init__(
        self,
        name: str = DEFAULT_INSTANCE,
        home: str | os.PathLike[str] | None = None,
        *,
        heap: str = "512m",
        extra_properties: Mapping[str, str] | None = None,
        scram_users: Mapping[str, str] | None = None,
        authorizer: bool = False,
        instances_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not _NAME_RE.match(name):
            raise ConfigError("name", name, "invalid instance name (use letters, digits, . _ -)")
        self.name = name
        self.home = kafka_home(home)
        base = (
            Path(instances_dir).expanduser().resolve()
            if instances_dir is not None
            else self.home / "instances"
        )
        self.instance_dir = base / name
        self.heap = heap
        self.extra_properties: dict[str, str] = dict(extra_properties or {})
        #: SASL/SCRAM-SHA-256 users (name → password); the first one is the super user.
        self.scram_users: dict[str, str] = dict(scram_users or {})
        #: With SCRAM users: enforce ACLs (StandardAuthorizer, deny when no ACL matches).
        self.authorizer = authorizer
        if authorizer and not self.scram_users:
            raise ConfigError(
                "authorizer", authorizer, "needs scram_users (the first one is the super user)"
            )

    # ---- paths -------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.instance_dir / "data"

    @property
    def state_file(self) -> Path:
        return self.instance_dir / "state.json"

    @property
    def server_log(self) -> Path:
        return self.instance_dir / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.instance_dir / "stdout.log"

    @property
    def _config_file(self) -> Path:
        return self.instance_dir / "instance.json"

    @property
    def _properties_file(self) -> Path:
        return self.instance_dir / "server.properties"

    @property
    def _lock_file(self) -> Path:
        return self.instance_dir / ".lock"

    @property
    def bootstrap_servers(self) -> str:
        """Bootstrap of the running broker (raises if not started)."""
        state = self._read_json(self.state_file)
        if state is None:
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} is not started")
        return str(state["bootstrap_servers"])

    # ---- public API --------------------------------------------------------------------------

    def start(self, *, fresh: bool = False, timeout: float = _READY_TIMEOUT_S) -> str:
        """Start (or reuse) the broker and return ``127.0.0.1:<port>``.

        ``fresh=True`` stops a running broker of this instance and wipes its data first.
        """
        with _flock(self._lock_file):
            if fresh:
                self._stop_locked(30.0)
            else:
                live = self._live_state()
                if live is not None:
                    return str(live["bootstrap_servers"])
                self._stop_locked(10.0)  # a hung/half-dead process of ours must release data
            return self._launch_locked(fresh=fresh, same_ports=False, timeout=timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """Gracefully stop the broker (SIGTERM, then SIGKILL). True if a broker was running."""
        with _flock(self._lock_file):
            return self._stop_locked(timeout)

    def restart(self, *, hard: bool = False, timeout: float = _READY_TIMEOUT_S) -> str:
        """Stop (SIGTERM, or SIGKILL with ``hard=True``) and start again on the same ports and
        with the same data, so clients can reconnect to the same bootstrap."""
        with _flock(self._lock_file):
            state = self._read_json(self.state_file)
            if state is not None:
                pid = int(state["pid"])
                if self._owns(pid):
                    if hard:
                        self._signal(pid, signal.SIGKILL)
                        self._wait_dead(pid, 30.0)
                    else:
                        self._terminate(pid, 30.0)
            return self._launch_locked(fresh=False, same_ports=True, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the broker without any cleanup (fault injection). ``start()``/``restart()``
        bring it back on the same ports with the same data."""
        pid = self._require_pid()
        self._signal(pid, signal.SIGKILL)
        self._wait_dead(pid, 30.0)

    def pause(self) -> None:
        """SIGSTOP the broker: connections stay open but nothing is answered."""
        self._signal(self._require_pid(), signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused broker."""
        self._signal(self._require_pid(), signal.SIGCONT)

    def status(self) -> BrokerStatus | None:
        """None if the instance has no state (never started or stopped)."""
        state = self._read_json(self.state_file)
        if state is None:
            return None
        pid = int(state["pid"])
        running = self._owns(pid) and _port_open(int(state["port"]))
        return BrokerStatus(
            name=self.name,
            pid=pid,
            bootstrap_servers=str(state["bootstrap_servers"]),
            data_dir=Path(str(state["data_dir"])),
            running=running,
        )

    def is_running(self) -> bool:
        st = self.status()
        return st is not None and st.running

    @property
    def pid(self) -> int | None:
        state = self._read_json(self.state_file)
        return None if state is None else int(state["pid"])

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
        return f"EmbeddedKafka(name={self.name!r}, instance_dir={str(self.instance_dir)!r})"

    # ---- internals ---------------------------------------------------------------------------

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @staticmethod
    def _write_json(path: Path, data: Mapping[str, Any]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def _owns(self, pid: int) -> bool:
        """The pid is alive and is this instance's broker JVM."""
        # cmdline first: a zombie has none, and only our own broker child is ever reaped
        return _pid_is_broker(pid, self._properties_file) and pid_alive(pid)

    def _live_state(self) -> dict[str, Any] | None:
        state = self._read_json(self.state_file)
        if state is None:
            return None
        if self._owns(int(state["pid"])) and _port_open(int(state["port"])):
            return state
        return None

    def _require_pid(self) -> int:
        state = self._read_json(self.state_file)
        if state is None or not self._owns(int(state["pid"])):
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} is not running")
        return int(state["pid"])

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError as exc:
            raise EmbeddedKafkaError(f"embedded Kafka {self.name!r} (pid {pid}) is gone") from exc

    def _wait_dead(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if not pid_alive(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _terminate(self, pid: int, timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)  # a paused broker must run to handle SIGTERM
        if not self._wait_dead(pid, timeout):
            _log.warning("embedded Kafka %s (pid %d) ignored SIGTERM; killing", self.name, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_dead(pid, 10.0)

    def _stop_locked(self, timeout: float) -> bool:
        state = self._read_json(self.state_file)
        was_running = False
        if state is not None:
            pid = int(state["pid"])
            if self._owns(pid):
                self._terminate(pid, timeout)
                was_running = True
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        return was_running

    def _properties(self, port: int, cport: int) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{cport}",
            "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A SIGKILLed broker can only re-register once its old session expired (default
            # 9 s): keep that short.  But a SIGSTOPped one (a GC pause, a frozen VM) that
            # outlasts it is fenced by its own controller on waking, and that single-broker
            # metadata with no broker in it makes librdkafka >= 2.10 drop every broker it
            # knows for good: keep it above short stalls.
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500",
            # consumers in tests may detect a dead member in seconds (broker default 6 s)
            "group.min.session.timeout.ms": "1000",
        }
        if self.scram_users:
            admin, password = next(iter(self.scram_users.items()))
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
            if self.authorizer:
                props.update(
                    {
                        "authorizer.class.name": (
                            "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                        ),
                        # the controller listener is PLAINTEXT inside this one process
                        "super.users": f"User:{admin};User:ANONYMOUS",
                        "allow.everyone.if.no.acl.found": "false",
                    }
                )
        props.update(self.extra_properties)
        return props

    def client_security(self, user: str | None = None) -> dict[str, str]:
        """confluent-kafka settings for a client of this broker (``user`` defaults to the
        super user); empty for a PLAINTEXT broker."""
        if not self.scram_users:
            return {}
        name = user or next(iter(self.scram_users))
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": name,
            "sasl.password": self.scram_users[name],
        }

    def _write_configs(self, port: int, cport: int) -> None:
        lines = [f"{k}={v}" for k, v in self._properties(port, cport).items()]
        self._properties_file.write_text(
            "# generated by adapter.embedded; edits are overwritten on start\n"
            + "\n".join(lines)
            + "\n",
            encoding="utf-8",
        )
        (self.instance_dir / "log4j2.properties").write_text(
            _LOG4J2.format(log=self.server_log), encoding="utf-8"
        )

    def _java_cmd(self, lib: Path, heap: str, main: str, *args: str) -> list[str]:
        return [
            _which("java"),
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.instance_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.instance_dir}",
            f"-XX:ErrorFile={self.instance_dir / 'hs_err_pid%p.log'}",
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ]

    def _format(self, lib: Path, cluster_id: str) -> None:
        cmd = self._java_cmd(
            lib,
            "256m",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self._properties_file),
            *(
                arg
                for name, password in self.scram_users.items()
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
                + _tail((proc.stdout or "") + "\n" + (proc.stderr or ""))
            )

    def _failure(self, headline: str) -> EmbeddedKafkaError:
        log = _file_tail(self.server_log, 2000).splitlines()
        key = [ln for ln in log if " ERROR " in ln or " FATAL " in ln or ln.startswith("Caused by")]
        key_lines = "\n".join(key[:12]) or "<none>"
        return EmbeddedKafkaError(
            f"embedded Kafka {self.name!r}: {headline}\n"
            f"--- ERROR/FATAL lines ---\n{key_lines}\n"
            f"--- {self.server_log} (last {_LOG_TAIL_LINES} lines) ---\n"
            f"{_file_tail(self.server_log)}\n"
            f"--- {self.stdout_log} (last {_LOG_TAIL_LINES} lines) ---\n"
            f"{_file_tail(self.stdout_log)}"
        )

    def _address_in_use(self) -> bool:
        needle = "Address already in use"
        return needle in _file_tail(self.server_log, 200) or needle in _file_tail(
            self.stdout_log, 200
        )

    def _launch_locked(self, *, fresh: bool, same_ports: bool, timeout: float) -> str:
        lib = ensure_jars(self.home)
        self.instance_dir.mkdir(parents=True, exist_ok=True)
        config = self._read_json(self._config_file) or {}
        formatted = (self.data_dir / "meta.properties").is_file()
        if fresh or not formatted:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            formatted = False
            config["cluster_id"] = _new_cluster_id()
        have_ports = "port" in config and "controller_port" in config
        keep_ports = have_ports and same_ports
        if have_ports and (same_ports or formatted):
            # prefer the previous ports so that clients can reconnect to the same bootstrap
            ports = [int(config["port"]), int(config["controller_port"])]
        else:
            ports = _free_ports(2)

        # the previous process is dead before we relaunch, so retrying fixed ports once is enough
        attempts = 2 if keep_ports else 1 + _PORT_RETRIES
        for attempt in range(attempts):
            port, cport = ports
            config.update(port=port, controller_port=cport)
            self._write_configs(port, cport)
            if not formatted:
                self._format(lib, str(config["cluster_id"]))
                formatted = True
            self._write_json(self._config_file, config)
            # keep the previous run's logs aside: they would confuse the failure diagnostics
            for old_log in (self.server_log, self.stdout_log):
                with contextlib.suppress(FileNotFoundError):
                    old_log.replace(old_log.with_name(old_log.name + ".prev"))
            try:
                return self._spawn_and_wait(lib, port, cport, timeout)
            except EmbeddedKafkaError:
                if attempt + 1 >= attempts or not self._address_in_use():
                    raise
                _log.info("embedded Kafka %s: address in use, retrying", self.name)
                if keep_ports:
                    time.sleep(0.5)  # the previous process may still be releasing the port
                else:
                    # KRaft static voters live in the config only: ports may move
                    ports = _free_ports(2)
        raise AssertionError("unreachable")

    def _spawn_and_wait(self, lib: Path, port: int, cport: int, timeout: float) -> str:
        bootstrap = f"{HOST}:{port}"
        cmd = self._java_cmd(lib, self.heap, "kafka.Kafka", str(self._properties_file))
        # posix_spawn rather than subprocess.Popen: the broker is meant to outlive this Python
        # process (CLI use), and a Popen object dropped while its child runs warns on GC.
        # Children are reaped with waitpid(WNOHANG) in pid_alive.
        out = os.open(self.stdout_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            pid = os.posix_spawn(
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
        started = time.monotonic()
        deadline = started + timeout
        while True:
            code = _reap(pid)
            if code is not None or not pid_alive(pid):
                raise self._failure(f"broker process exited with code {code}")
            if _port_open(port) and _metadata_ok(
                bootstrap, timeout=2.0, security=self.client_security()
            ):
                break
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_dead(pid, 10.0)
                raise self._failure(f"broker not ready on {bootstrap} within {timeout:.0f}s")
            time.sleep(0.1)
        self._write_json(
            self.state_file,
            {
                "name": self.name,
                "pid": pid,
                "bootstrap_servers": bootstrap,
                "port": port,
                "controller_port": cport,
                "data_dir": str(self.data_dir),
                "instance_dir": str(self.instance_dir),
                "kafka_version": KAFKA_VERSION,
                "started_at": time.time(),
            },
        )
        _log.info(
            "embedded Kafka %s ready on %s (pid %d) in %.1fs",
            self.name,
            bootstrap,
            pid,
            time.monotonic() - started,
        )
        return bootstrap


# --------------------------------------------------------------------------------------------
# CLI helpers (instance "default")
# --------------------------------------------------------------------------------------------


def start_default(home: str | os.PathLike[str] | None = None) -> str:
    return EmbeddedKafka(DEFAULT_INSTANCE, home).start()


def stop_default(home: str | os.PathLike[str] | None = None) -> bool:
    return EmbeddedKafka(DEFAULT_INSTANCE, home).stop()


def status_default(home: str | os.PathLike[str] | None = None) -> BrokerStatus | None:
    return EmbeddedKafka(DEFAULT_INSTANCE, home).status()
