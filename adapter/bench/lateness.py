"""Benchmark row of scheduled-message lateness: messages sent at a steady rate on delay
level 1, how late a ``read_committed`` reader sees them after the ScheduleService forwards
them, beside the same two-hop pipe without the adapter.  The service, the reader and the
raw forwarder each run in a process of their own (``python -m adapter.bench
--lateness-reader`` / ``--raw-forwarder``, :mod:`adapter.bench.__main__`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka import Producer as RawProducer

from adapter.bench.harness import BENCH_LEVELS, RAW_FETCH_SETTINGS, Bench, Scenario, header, uid
from adapter.clients.producer import Producer
from adapter.constants import HEADER_DUE_MS
from adapter.core.delay import DelayLevels
from adapter.core.message import Message
from adapter.io.polling import consume_available
from adapter.io.topics import ensure_topics, plan_topics
from adapter.services.schedule import DeliveryGuarantee

__all__ = [
    "ServiceProcess",
    "lateness_reader",
    "lateness_scenario",
    "raw_forwarder",
    "raw_lateness_pipe",
    "spawn_lateness_reader",
]


def lateness_scenario(
    bench: Bench,
    delivery: DeliveryGuarantee = DeliveryGuarantee.AT_LEAST_ONCE,
    seconds: float = 10.0,
    rate: int = 2000,
    warmup_s: float = 2.0,
) -> Scenario:
    """Scheduled messages at a steady rate on level 1 (1 s): how late a
    ``read_committed`` reader sees them.  The ScheduleService, the reader and the sender
    each run in a process of their own (a shared interpreter lock would add its own
    lateness), messages are sent only once the service owns its partitions, and the
    figures are given for every message and for the steady state (due after the first
    ``warmup_s`` of traffic: a client's first requests wait for its connections and,
    idempotent, its producer id)."""
    sc = Scenario(
        f"scheduled-message lateness level 1s at {rate}/s for {seconds:.0f}s "
        f"({delivery.value.lower()})"
    )
    ns = f"lat{uid()}"
    real = bench.topic()
    levels = DelayLevels.parse(BENCH_LEVELS)
    ensure_topics(bench.config, plan_topics(delay_levels=levels, namespace=ns, partitions=1))
    total = int(seconds * rate)
    # the floor this machine puts under the figure: the same pipe without the adapter
    raw = raw_lateness_pipe(bench, seconds, rate, warmup_s)
    service = ServiceProcess(bench.config, ns, delivery)
    reader: subprocess.Popen[str] | None = None
    try:
        service.wait_assigned(60)
        steady_from = int(time.time() * 1000 + (warmup_s + 1.0) * 1000)
        reader = spawn_lateness_reader(bench, real, total, steady_from)
        with Producer(bench.config, delay_levels=BENCH_LEVELS, namespace=ns) as p:
            t0 = time.perf_counter()
            for i in range(total):
                p.send_async(
                    Message(topic=real, body=b"x" * 100, delay_time_level=1), lambda r, e: None
                )
                target = t0 + (i + 1) / rate
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
        out, _ = reader.communicate(timeout=120)
        figures = json.loads(out.strip().splitlines()[-1])
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
        own = service.stop()
    sc.extra = {
        "sent": total,
        **figures,
        "service_forward_lateness_ms": own.get("lateness_ms"),
        "raw_pipe_lateness_ms": {k: raw.get(f"lateness_ms_{k}") for k in ("p50", "p99", "max")},
    }
    return sc


def spawn_lateness_reader(bench: Bench, topic: str, total: int, steady_from_ms: int) -> Any:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapter.bench",
            "--lateness-reader",
            bench.config["bootstrap.servers"],
            topic,
            str(total),
            str(steady_from_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def raw_lateness_pipe(bench: Bench, seconds: float, rate: int, warmup_s: float) -> dict[str, Any]:
    """The same shape without the adapter: a raw idempotent producer (``linger.ms=5``)
    sends at ``rate``, each record due when it is sent, to a topic that a raw forwarder
    process (consume, produce at once, store offsets) passes on to the topic the
    lateness reader reads: two Kafka hops and as many processes as the service's
    figure, so it shows what this machine adds by itbench."""
    src, dst = bench.topic(), bench.topic()
    total = int(seconds * rate)
    steady_from = int(time.time() * 1000 + warmup_s * 1000)
    forwarder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapter.bench",
            "--raw-forwarder",
            bench.config["bootstrap.servers"],
            src,
            dst,
            str(total),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    reader = spawn_lateness_reader(bench, dst, total, steady_from)
    raw = RawProducer({**bench.config, "enable.idempotence": True, "linger.ms": 5})
    try:
        t0 = time.perf_counter()
        for i in range(total):
            now = b"%d" % int(time.time() * 1000)
            raw.produce(src, b"x" * 100, headers=[(HEADER_DUE_MS, now)])
            raw.poll(0)
            delay = t0 + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        raw.flush(30)
        out, _ = reader.communicate(timeout=120)
        return dict(json.loads(out.strip().splitlines()[-1]))
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return {}
    finally:
        for child in (reader, forwarder):
            if child.poll() is None:
                child.kill()


class ServiceProcess:
    """``rmq-kafka schedule-service run`` in a child process."""

    def __init__(self, config: dict[str, Any], namespace: str, delivery: DeliveryGuarantee):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter.cli",
                "schedule-service",
                "run",
                "--delay-levels",
                BENCH_LEVELS,
                "--namespace",
                namespace,
                "--partitions",
                "1",
                "--delivery",
                delivery.value,
                "-X",
                f"bootstrap.servers={config['bootstrap.servers']}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.assigned = threading.Event()
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if " assigned " in line:
                self.assigned.set()

    def wait_assigned(self, timeout: float) -> None:
        if not self.assigned.wait(timeout):
            raise RuntimeError("ScheduleService not assigned: " + "".join(self.lines[-20:]))

    def stop(self) -> dict[str, Any]:
        """Stop it; what it says about itself (its own lateness figures)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return {}
        try:
            return dict(json.loads(out.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            return {}


def raw_forwarder(bootstrap: str, src: str, dst: str, total: int) -> None:
    """Child process: a raw consume -> produce pipe (offsets stored per fetch), the baseline
    of the lateness figures."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fwd-{uid()}",
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            **RAW_FETCH_SETTINGS,
        }
    )
    p = RawProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    c.subscribe([src])
    done = [0]

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            done[0] += 1

    deadline = time.time() + 120
    while done[0] < total and time.time() < deadline:
        msgs = [m for m in consume_available(c, 500, 0.05) if m.error() is None]
        for m in msgs:
            p.produce(dst, m.value(), m.key(), headers=m.headers(), on_delivery=acked)
        p.poll(0)
        if msgs:
            c.store_offsets(message=msgs[-1])
    p.flush(30)
    c.close()


def lateness_reader(bootstrap: str, topic: str, total: int, steady_from_ms: int) -> None:
    """Child process: read ``total`` forwarded messages (read_committed, partition 0 assigned
    from its beginning: no group join to wait for) and print percentiles (ms) of how late
    each was seen (now minus ``RMQ_DUE_MS``), for all and for those due from
    ``steady_from_ms``; and, split, how late it was forwarded (its record timestamp minus
    ``RMQ_DUE_MS``) and how long it then took to reach the reader."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{uid()}",
            "isolation.level": "read_committed",
            **RAW_FETCH_SETTINGS,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    every: list[float] = []
    steady: list[float] = []
    forward: list[float] = []
    transport: list[float] = []
    early = 0
    deadline = time.time() + 90
    while len(every) < total and time.time() < deadline:
        for m in consume_available(c, 500, 0.05):
            if m.error():
                continue
            now = time.time() * 1000
            due = int(header(m, HEADER_DUE_MS))
            every.append(now - due)
            if due >= steady_from_ms:
                steady.append(now - due)
                created = m.timestamp()[1]
                forward.append(created - due)
                transport.append(now - created)
            if now < due:
                early += 1
    c.close()

    def pct(values: list[float], q: float) -> float | None:
        ordered = sorted(values)
        if not ordered:
            return None
        return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))], 1)

    print(
        json.dumps(
            {
                "received": len(every),
                "early": early,
                "lateness_ms_p50": pct(steady, 50),
                "lateness_ms_p99": pct(steady, 99),
                "lateness_ms_max": round(max(steady), 1) if steady else None,
                "steady_messages": len(steady),
                "forward_ms_p99": pct(forward, 99),
                "transport_ms_p99": pct(transport, 99),
                "all_lateness_ms_p50": pct(every, 50),
                "all_lateness_ms_p99": pct(every, 99),
                "all_lateness_ms_max": round(max(every), 1) if every else None,
            }
        )
    )
