"""A real RocketMQ 4.9.x name server and broker for the conformance tier, and its scenario
runner (RocketMQ's official Java client), from Maven Central jars cached like Kafka's::

    <home>/rocketmq-<version>/lib/*.jar         home = $RMQ_KAFKA_HOME or ~/.cache/rmq-kafka
    <home>/rocketmq-<version>/runner-<hash>/    the compiled tests/conformance/java sources

The jars are the runtime dependencies of ``java/pom.xml`` (``mvn dependency:copy-dependencies``
under the cache's file lock); the runner is compiled with ``javac`` against them once per
source version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from adapter.embedded.jars import copy_maven_dependencies, file_lock, file_tail, kafka_home, which

HERE = Path(__file__).resolve().parent
JAVA_DIR = HERE / "java"
SOURCES = sorted((JAVA_DIR / "src" / "main" / "java").rglob("*.java"))
#: the RocketMQ release (``java/pom.xml`` pins the same)
ROCKETMQ_VERSION = "4.9.7"
_MARKER = ".rmq-kafka-complete"

#: RocketMQ 4.9 predates Java 17's strong encapsulation: netty and the store's mapped files
#: reach into java.nio and sun.nio.ch by reflection
JAVA_OPENS = [
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
]

_LOGBACK = """<configuration>
  <appender name="F" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5p [%t] %c{{1}} - %m%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="F"/></root>
</configuration>
"""


class RocketMQError(RuntimeError):
    """The RocketMQ jars, runner or broker could not be prepared or started."""


def rocketmq_root() -> Path:
    return kafka_home() / f"rocketmq-{ROCKETMQ_VERSION}"


def _complete(lib: Path) -> bool:
    marker = lib / _MARKER
    if not marker.is_file():
        return False
    names = [n for n in marker.read_text(encoding="utf-8").splitlines() if n.strip()]
    return bool(names) and all((lib / n).is_file() for n in names)


def ensure_rocketmq_jars() -> Path:
    """The RocketMQ name server, broker and client jars (fetched once); their folder."""
    root = rocketmq_root()
    lib = root / "lib"
    if _complete(lib):
        return lib
    with file_lock(root / ".lock"):
        if _complete(lib):
            return lib
        which("java")
        tmp = copy_maven_dependencies(
            (JAVA_DIR / "pom.xml").read_bytes(),
            root,
            f"lib.tmp-{os.getpid()}",
            what=f"RocketMQ {ROCKETMQ_VERSION} jars",
            complete=lambda names: (
                {f"rocketmq-{a}-{ROCKETMQ_VERSION}.jar" for a in ("broker", "namesrv", "client")}
                <= names
            ),
            error=RocketMQError,
        )
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        (tmp / _MARKER).write_text("\n".join(jars) + "\n", encoding="utf-8")
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)
    return lib


def ensure_runner() -> Path:
    """The compiled scenario runner (``java/src``) for the current sources; its folder."""
    lib = ensure_rocketmq_jars()
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES)).hexdigest()[:16]
    out = rocketmq_root() / f"runner-{digest}"
    if (out / _MARKER).is_file():
        return out
    with file_lock(rocketmq_root() / ".lock"):
        if (out / _MARKER).is_file():
            return out
        tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run(
            [which("javac"), "-nowarn", "-d", str(tmp), "-cp", f"{lib}/*", *map(str, SOURCES)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RocketMQError(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
        (tmp / _MARKER).write_text("ok\n", encoding="utf-8")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def classpath() -> str:
    return f"{ensure_runner()}{os.pathsep}{ensure_rocketmq_jars()}/*"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RocketMQ:
    """A name server and one broker on 127.0.0.1, in a temporary home, for the tier's run.

    ``delay_levels`` is the broker's ``messageDelayLevel`` (must match the adapter's table).
    """

    def __init__(self, delay_levels: str) -> None:
        self.delay_levels = delay_levels
        self.home = Path(tempfile.mkdtemp(prefix="rmq-conformance-"))
        self.namesrv_port = _free_port()
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self._procs: list[subprocess.Popen[bytes]] = []

    def _java(self, main: str, conf: Path, name: str, heap: str) -> subprocess.Popen[bytes]:
        out = (self.home / f"{name}.out").open("wb")
        cmd = [
            which("java"),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:MaxDirectMemorySize=256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            *JAVA_OPENS,
            f"-Drocketmq.home.dir={self.home}",
            f"-Duser.home={self.home}",
            "-cp",
            f"{ensure_rocketmq_jars()}/*",
            main,
            "-c",
            str(conf),
        ]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.home)
        self._procs.append(proc)
        return proc

    def _wait_for(self, proc: subprocess.Popen[bytes], name: str, text: str) -> None:
        out = self.home / f"{name}.out"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if text in out.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RocketMQError(f"RocketMQ {name} did not start:\n{file_tail(out)}")

    def start(self) -> RocketMQ:
        conf_dir = self.home / "conf"
        conf_dir.mkdir()
        for name in ("namesrv", "broker"):
            (conf_dir / f"logback_{name}.xml").write_text(
                _LOGBACK.format(log=self.home / f"{name}.log"), encoding="utf-8"
            )
        namesrv_conf = conf_dir / "namesrv.conf"
        namesrv_conf.write_text(f"listenPort={self.namesrv_port}\n", encoding="utf-8")
        ns = self._java(
            "org.apache.rocketmq.namesrv.NamesrvStartup", namesrv_conf, "namesrv", "128m"
        )
        self._wait_for(ns, "namesrv", "boot success")
        broker_port = _free_port()
        store = self.home / "store"
        broker_conf = conf_dir / "broker.conf"
        broker_conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=conformance",
                    "brokerName=broker-a",
                    "brokerId=0",
                    f"namesrvAddr={self.namesrv}",
                    "brokerIP1=127.0.0.1",
                    f"listenPort={broker_port}",
                    f"storePathRootDir={store}",
                    f"storePathCommitLog={store}/commitlog",
                    "mappedFileSizeCommitLog=67108864",
                    "mappedFileSizeConsumeQueue=600000",
                    "autoCreateTopicEnable=true",
                    "autoCreateSubscriptionGroup=true",
                    "defaultTopicQueueNums=1",
                    "flushDiskType=ASYNC_FLUSH",
                    "brokerRole=ASYNC_MASTER",
                    f"messageDelayLevel={self.delay_levels}",
                    "diskMaxUsedSpaceRatio=98",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        broker = self._java(
            "org.apache.rocketmq.broker.BrokerStartup", broker_conf, "broker", "384m"
        )
        self._wait_for(broker, "broker", "boot success")
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._procs.clear()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> RocketMQ:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
