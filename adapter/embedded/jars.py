"""The pinned Kafka broker jars, fetched once with Maven into a shared cache, and the small
file helpers (a cache root, an inter-process lock, log tails) the embedded broker and the
Spark connector cache share::

    <home>/kafka-<KAFKA_VERSION>/lib/*.jar        home = $RMQ_KAFKA_HOME or ~/.cache/rmq-kafka
    <home>/kafka-<KAFKA_VERSION>/classes-<jdk>.jsa  the JVMs' class archive (embedded.classes)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

from adapter.errors import AdapterError, ConfigError

__all__ = [
    "DUMP_OPTION",
    "HOME_ENV",
    "JVM_OPTS_ENV",
    "KAFKA_VERSION",
    "EmbeddedKafkaError",
    "archive_key",
    "archive_options",
    "class_archive",
    "copy_maven_dependencies",
    "ensure_jars",
    "file_lock",
    "file_tail",
    "jvm_options",
    "kafka_home",
    "kafka_version",
    "lib_dir",
    "make_class_archive",
    "tail",
    "which",
]

#: The Kafka release the embedded broker runs (``org.apache.kafka:kafka_2.13``); the
#: ``pom.xml`` beside this module pins the same version.
KAFKA_VERSION = "4.4.0"
#: The oldest broker release the adapter supports (share groups are production-ready from
#: 4.2); CI runs the integration suite's core on it (``RMQ_KAFKA_VERSION``).
OLDEST_SUPPORTED_KAFKA = "4.2.0"
HOME_ENV = "RMQ_KAFKA_HOME"
VERSION_ENV = "RMQ_KAFKA_VERSION"
#: Extra JVM options for every embedded node and its storage format (``./run.sh test`` sets
#: ``-XX:TieredStopAtLevel=1``: short-lived test brokers start on half the CPU).
JVM_OPTS_ENV = "RMQ_KAFKA_JVM_OPTS"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")

_MARKER = ".rmq-kafka-complete"
_MVN_TIMEOUT_S = 1800.0
LOG_TAIL_LINES = 40

_log = logging.getLogger("adapter.embedded")


class EmbeddedKafkaError(AdapterError, RuntimeError):
    """The embedded broker (or its jars) could not be prepared, started or controlled.

    An :class:`~adapter.errors.AdapterError`, and a ``RuntimeError`` as before.
    """


def kafka_home(home: str | os.PathLike[str] | None = None) -> Path:
    """Cache/state root: ``home``, else ``$RMQ_KAFKA_HOME``, else ~/.cache/rmq-kafka."""
    if home is not None:
        return Path(home).expanduser().resolve()
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return (Path.home() / ".cache" / "rmq-kafka").resolve()


def jvm_options() -> list[str]:
    """``$RMQ_KAFKA_JVM_OPTS``, split as a shell would (none by default)."""
    value = os.environ.get(JVM_OPTS_ENV, "")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ConfigError(JVM_OPTS_ENV, value, f"cannot be split into options ({exc})") from exc


#: the JVM option that writes an archive of the classes loaded, at exit
DUMP_OPTION = "-XX:ArchiveClassesAtExit="


def archive_key(*parts: str) -> str:
    """A class archive's name key: the ``java`` this process would run (its path, size and
    time) and ``parts`` (what else the archive was made from), so that another JDK or other
    jars never map an archive they did not write."""
    java = Path(which("java")).resolve()
    st = java.stat()
    stamp = ":".join((str(java), str(st.st_size), str(st.st_mtime_ns), *parts))
    return hashlib.sha256(stamp.encode()).hexdigest()[:12]


def class_archive(lib: Path) -> Path:
    """The archive for the jars in ``lib`` (keyed by :func:`archive_key`: the JDK)."""
    return lib.parent / f"classes-{archive_key()}.jsa"


def archive_options(lib: Path, options: list[str]) -> list[str]:
    """The option that maps the archive for ``lib``, when it exists and ``options`` (the
    JVM's other options) do not dump one themselves (a JVM cannot do both)."""
    if any(o.startswith(DUMP_OPTION) for o in options):
        return []
    archive = class_archive(lib)
    return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []


def make_class_archive(archive: Path, write: Callable[[Path], bool]) -> Path | None:
    """``archive``, made once by ``write(tmp)`` (a JVM run that writes ``tmp`` as it exits;
    ``False``: it could not) and moved into place whole; ``None`` when it could not be made,
    or while another process is making it (never waited for)."""
    if archive.is_file():
        return archive
    lock = archive.with_name(archive.name + ".lock")
    with lock.open("a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # someone else is writing it
        if archive.is_file():
            return archive
        tmp = archive.with_name(f"{archive.name}.tmp-{os.getpid()}")
        if not (write(tmp) and tmp.is_file()):
            _log.warning("no class archive %s: the JVM wrote none", archive.name)
            tmp.unlink(missing_ok=True)
            return None
        tmp.replace(archive)
    return archive


def kafka_version() -> str:
    """The Kafka release to run: ``$RMQ_KAFKA_VERSION`` (e.g. the oldest supported one, in
    CI) or :data:`KAFKA_VERSION`."""
    version = os.environ.get(VERSION_ENV, "").strip() or KAFKA_VERSION
    if not _VERSION_RE.match(version):
        raise ConfigError(VERSION_ENV, version, "must be a Kafka release such as 4.2.0")
    return version


def lib_dir(home: str | os.PathLike[str] | None = None) -> Path:
    return kafka_home(home) / f"kafka-{kafka_version()}" / "lib"


def _jars_complete(lib: Path) -> bool:
    marker = lib / _MARKER
    if not marker.is_file():
        return False
    names = [n for n in marker.read_text(encoding="utf-8").splitlines() if n.strip()]
    return bool(names) and all((lib / n).is_file() for n in names)


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def file_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "<missing>"
    return tail(data, lines) or "<empty>"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock (inter-process, and between threads of this process)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def which(tool: str) -> str:
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
    with file_lock(root / ".lock"):
        if _jars_complete(lib):  # fetched by someone else while we waited for the lock
            return lib
        which("java")
        tmp = copy_maven_dependencies(
            _pom(kafka_version()),
            root,
            f"lib.tmp-{os.getpid()}",
            what=f"Kafka {kafka_version()} jars",
            complete=lambda names: any(j.startswith("kafka_2.13-") for j in names),
            error=EmbeddedKafkaError,
        )
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        (tmp / _MARKER).write_text("\n".join(jars) + "\n", encoding="utf-8")
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)
    return lib


def _pom(version: str) -> bytes:
    """The shipped ``pom.xml`` with the broker release ``version``."""
    pom = resources.files("adapter.embedded").joinpath("pom.xml").read_text(encoding="utf-8")
    pinned = f"<artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version>"
    if pinned not in pom:
        raise EmbeddedKafkaError(f"pom.xml does not pin kafka_2.13 {KAFKA_VERSION}")
    wanted = f"<artifactId>kafka_2.13</artifactId><version>{version}</version>"
    return pom.replace(pinned, wanted).encode("utf-8")


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
    mvn = which("mvn")
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
        output = tail((proc.stdout or "") + "\n" + (proc.stderr or ""), 60)
        raise error(
            f"fetching {what} failed (mvn exit {proc.returncode}):\n"
            f"$ {' '.join(cmd)}\n{output or '<no output>'}"
        )
    return tmp
