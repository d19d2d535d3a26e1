"""Benchmarks: every figure is a ratio against raw confluent-kafka in the same run.

``rmq-kafka bench`` pre-fills topics on one broker and runs each scenario and its raw
baseline alternately, ``--repeats`` times, reporting the median rate, the client CPU
microseconds per message and the ratio.  Results go to stdout (a table) and a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka import Producer as RawProducer

from adapter.clients.producer import Producer
from adapter.clients.push_consumer import PushConsumer
from adapter.constants import HEADER_DUE_MS, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_TOPIC
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.message import Message
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.io.polling import consume_available
from adapter.io.topics import TopicPlan, ensure_topics, plan_topics
from adapter.services.schedule_service import DeliveryGuarantee, ScheduleService

BENCH_LEVELS = "1s 2s 3s 4s 5s"
#: librdkafka fetch settings the PushConsumer uses; the raw baselines get them too, so the
#: ratio compares the code, not the settings (librdkafka's default fetch.queue.backoff.ms
#: of 1 s stalls any loop that drains the queue slower than the fetcher fills it).
RAW_FETCH_SETTINGS = {"fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 20}
#: The all-success consumer rows read this many times ``--messages``.
CONSUMER_SCALE = 4


@dataclass
class Run:
    rate: float  # messages per second
    cpu_us: float  # client CPU microseconds per message


@dataclass
class Scenario:
    name: str
    ours: list[Run] = field(default_factory=list)
    raw: list[Run] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scenario": self.name}
        if self.ours and self.raw:
            ours = statistics.median(r.rate for r in self.ours)
            raw = statistics.median(r.rate for r in self.raw)
            out.update(
                ours_msgs_per_s=round(ours),
                raw_msgs_per_s=round(raw),
                ratio=round(ours / raw, 3),
                ours_cpu_us_per_msg=round(statistics.median(r.cpu_us for r in self.ours), 2),
                raw_cpu_us_per_msg=round(statistics.median(r.cpu_us for r in self.raw), 2),
                runs=len(self.ours),
            )
        out.update(self.extra)
        return out


def _header(kmsg: Any, name: str) -> str:
    for key, value in kmsg.headers() or ():
        if key == name and value is not None:
            return bytes(value).decode()
    raise KeyError(name)


def _noop_listener(msgs: list[Any]) -> None:
    """What a raw loop hands its application: a batch."""


def _uid() -> str:
    return uuid.uuid4().hex[:10]


class Bench:
    def __init__(self, bootstrap: str, messages: int, repeats: int) -> None:
        self.config = {"bootstrap.servers": bootstrap}
        self.n = messages
        self.repeats = repeats

    # -- helpers ---------------------------------------------------------------------------
    def topic(self, partitions: int = 1) -> str:
        name = f"bench-{_uid()}"
        ensure_topics(self.config, [TopicPlan(name, name, partitions)])
        return name

    def fill(
        self, topic: str, n: int, size: int, headers: Callable[[int], list[Any]] | None = None
    ) -> None:
        p = RawProducer(
            {**self.config, "linger.ms": 20, "enable.idempotence": True, "batch.size": 1_000_000}
        )
        body = b"x" * size
        for i in range(n):
            while True:
                try:
                    p.produce(topic, body, headers=headers(i) if headers else None)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10_000 == 0:
                p.poll(0)
        p.flush(60)

    @staticmethod
    def _measure(work: Callable[[], tuple[int, float, float]]) -> Run:
        """``work`` returns (count, first_ts, last_ts); CPU is measured around it."""
        cpu0 = time.process_time()
        count, t_first, t_last = work()
        cpu = time.process_time() - cpu0
        return Run(count / max(t_last - t_first, 1e-9), cpu / count * 1e6)

    # -- consumer --------------------------------------------------------------------------
    def raw_consume(self, topic: str, n: int, batch: int, fail_every: int | None = None) -> Run:
        """A careful raw confluent-kafka loop: ``consume(500)``, an error check per record,
        the no-op per batch of ``batch`` records, offsets stored per fetch and committed in
        the background, and the adapter's fetch settings (:data:`RAW_FETCH_SETTINGS`:
        without them a loop slower than the fetcher stalls for a second at a time); with
        ``fail_every`` it also produces the failed record and the rest of its batch to a
        side topic (the work ``ack_index`` implies)."""

        def work() -> tuple[int, float, float]:
            c = Consumer(
                {
                    **self.config,
                    "group.id": f"raw-{_uid()}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.offset.store": False,
                    "enable.auto.commit": True,
                    **RAW_FETCH_SETTINGS,
                }
            )
            side = (
                RawProducer({**self.config, "enable.idempotence": True, "linger.ms": 5})
                if fail_every
                else None
            )
            c.subscribe([topic])
            seen, first = 0, 0.0
            while seen < n:
                msgs = c.consume(500, 1.0)
                if not msgs:
                    continue
                if not first:
                    first = time.perf_counter()
                records = [m for m in msgs if m.error() is None]
                for i in range(0, len(records), batch):
                    chunk = records[i : i + batch]
                    _noop_listener(chunk)  # the same per-batch call our consumer makes
                    if side is not None and fail_every is not None:
                        before = seen + i
                        for j in range(len(chunk)):
                            if (before + j + 1) % fail_every == 0:
                                for failed in chunk[j:]:  # like ack_index: the rest goes back
                                    side.produce(
                                        topic + "-retry", failed.value(), headers=failed.headers()
                                    )
                                break
                seen += len(records)
                c.store_offsets(message=msgs[-1])
                if side is not None:
                    side.poll(0)
            last = time.perf_counter()
            if side is not None:
                side.flush(30)
            c.close()
            return seen, first, last

        if fail_every:
            ensure_topics(self.config, [TopicPlan(topic + "-retry", topic + "-retry", 1)])
        return self._measure(work)

    def ours_consume(
        self,
        topic: str,
        n: int,
        batch: int,
        fail_every: int | None = None,
        block_s: float = 0.0,
        **options: Any,
    ) -> Run:
        lock = threading.Lock()
        counts: list[int] = []  # one entry per listener call (list.append is atomic)
        first = [0.0]
        seen = [0]
        ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            if block_s:
                time.sleep(block_s)
            if not first[0]:
                first[0] = time.perf_counter()
            counts.append(len(msgs))
            if fail_every:
                with lock:  # the failure pattern needs a consistent message count
                    before = seen[0]
                    seen[0] += len(msgs)
                for i in range(len(msgs)):
                    if (before + i + 1) % fail_every == 0:
                        ctx.ack_index = i - 1
                        return ok
            return ok

        group = f"ours-{_uid()}"
        consumer = PushConsumer(
            {**self.config, "group.id": group, "auto.offset.reset": "earliest"},
            consume_message_batch_max_size=batch,
            delay_levels=BENCH_LEVELS,
            namespace="bench",
            partitions=1,
            **options,
        )
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)

        def work() -> tuple[int, float, float]:
            consumer.start()
            total, pos, deadline = 0, 0, time.monotonic() + 600
            while total < n and time.monotonic() < deadline:
                time.sleep(0.0005)
                fresh = counts[pos:]
                pos += len(fresh)
                total += sum(fresh)
            last = time.perf_counter()
            consumer.shutdown()
            return total, first[0], last

        return self._measure(work)

    def consumer_scenarios(self, size: int, batches: tuple[int, ...]) -> list[Scenario]:
        """All-success rows over ``CONSUMER_SCALE`` times ``--messages``: the raw loop reads
        100 000 records in about 0.1 s, too short to measure past the fetch ramp-up."""
        out = []
        n = self.n * CONSUMER_SCALE
        for batch in batches:
            sc = Scenario(f"consume all-success batch={batch} body={size}B ({n} msgs)")
            topic = self.topic()
            self.fill(topic, n, size)
            for _ in range(self.repeats):
                sc.raw.append(self.raw_consume(topic, n, batch))
                sc.ours.append(self.ours_consume(topic, n, batch))
            out.append(sc)
        return out

    def pool_scenarios(self) -> list[Scenario]:
        """The same no-op listener forced onto the worker pool (a hand-off per batch)."""
        out = []
        for batch in (1, 32):
            sc = Scenario(f"consume all-success batch={batch} body=100B listener_mode=POOL")
            topic = self.topic()
            self.fill(topic, self.n // 2, 100)
            for _ in range(self.repeats):
                sc.raw.append(self.raw_consume(topic, self.n // 2, batch))
                sc.ours.append(self.ours_consume(topic, self.n // 2, batch, listener_mode="POOL"))
            out.append(sc)
        return out

    def blocking_scenario(self, threads: int = 20, block_s: float = 0.010) -> Scenario:
        """A listener that blocks ``block_s`` per batch (batch 1) on ``threads`` workers;
        the baseline is the ideal ``threads / block_s`` batches per second."""
        ideal = threads / block_s
        n = int(ideal * 3)  # about three seconds of work at the ideal rate
        sc = Scenario(
            f"consume blocking listener {block_s * 1000:.0f} ms/batch, "
            f"consume_thread_max={threads}, batch=1 (baseline: {ideal:.0f} batches/s)"
        )
        topic = self.topic()
        self.fill(topic, n, 100)
        for _ in range(self.repeats):
            sc.raw.append(Run(ideal, 0.0))
            sc.ours.append(
                self.ours_consume(topic, n, 1, consume_thread_max=threads, block_s=block_s)
            )
        return sc

    def failure_scenarios(self, rates: tuple[int, ...]) -> list[Scenario]:
        out = []
        for pct in rates:
            fail_every = max(1, round(100 / pct))
            sc = Scenario(f"consume {pct}% failing batch=32 body=100B (first delivery + send-back)")
            topic = self.topic()
            n = self.n // 2
            self.fill(topic, n, 100)
            for _ in range(self.repeats):
                sc.raw.append(self.raw_consume(topic, n, 32, fail_every))
                sc.ours.append(self.ours_consume(topic, n, 32, fail_every))
            out.append(sc)
        return out

    # -- producer --------------------------------------------------------------------------
    def producer_scenarios(self) -> list[Scenario]:
        n = self.n
        body = b"x" * 100
        async_sc = Scenario("producer send_async body=100B")
        sync_sc = Scenario("producer send (sync) body=100B")
        sync_n = max(200, n // 100)
        for _ in range(self.repeats):
            topic = self.topic()
            # the same settings the adapter's Producer uses (idempotent, linger 5 ms)
            raw = RawProducer({**self.config, "enable.idempotence": True, "linger.ms": 5})

            def raw_async() -> tuple[int, float, float]:
                acked = [0]

                def cb(err: Any, _: Any) -> None:
                    if err is None:
                        acked[0] += 1

                t0 = time.perf_counter()
                for _ in range(n):
                    while True:
                        try:
                            raw.produce(topic, body, on_delivery=cb)
                            break
                        except BufferError:
                            raw.poll(0.01)
                    raw.poll(0)
                raw.flush(60)
                return acked[0], t0, time.perf_counter()

            async_sc.raw.append(self._measure(raw_async))

            def raw_sync() -> tuple[int, float, float]:
                t0 = time.perf_counter()
                for _ in range(sync_n):
                    raw.produce(topic, body)
                    raw.flush(10)
                return sync_n, t0, time.perf_counter()

            sync_sc.raw.append(self._measure(raw_sync))
            with Producer(self.config) as ours:
                ours.send(Message(topic=topic, body=body))  # metadata warm-up

                def ours_async() -> tuple[int, float, float]:
                    acked = [0]
                    finished = threading.Event()

                    def cb(result: Any, exc: Any) -> None:
                        acked[0] += 1
                        if acked[0] >= n:
                            finished.set()

                    t0 = time.perf_counter()
                    for _ in range(n):
                        ours.send_async(Message(topic=topic, body=body), cb)
                    finished.wait(120)
                    return acked[0], t0, time.perf_counter()

                async_sc.ours.append(self._measure(ours_async))

                def ours_sync() -> tuple[int, float, float]:
                    t0 = time.perf_counter()
                    for _ in range(sync_n):
                        ours.send(Message(topic=topic, body=body))
                    return sync_n, t0, time.perf_counter()

                sync_sc.ours.append(self._measure(ours_sync))
        return [async_sc, sync_sc]

    # -- schedule service ------------------------------------------------------------------
    def forwarding_scenarios(self) -> list[Scenario]:
        """Due entries pre-filled on a level topic, forwarded to their real topic; the
        baseline is a raw consume→produce pipe with offsets committed after the ack."""
        out = []
        levels = DelayLevels.parse(BENCH_LEVELS)
        n = self.n // 2
        for delivery in (DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE):
            sc = Scenario(f"ScheduleService forwarding {delivery.value.lower()}")
            for _ in range(self.repeats):
                ns = f"b{_uid()}"
                real = self.topic()
                level_topic = naming.to_kafka(naming.schedule_topic(1, levels, ns))
                ensure_topics(self.config, [TopicPlan(level_topic, level_topic, 1)])
                due = str(int(time.time() * 1000) - 1).encode()
                self.fill(
                    level_topic,
                    n,
                    100,
                    lambda _i: [
                        (PROPERTY_REAL_TOPIC, real.encode()),
                        (PROPERTY_DELAY_TIME_LEVEL, b"1"),
                        (HEADER_DUE_MS, due),
                    ],
                )
                sc.raw.append(self._measure(partial(self._raw_pipe, level_topic, real, n)))
                sc.ours.append(self._measure(partial(self._service_pipe, ns, real, n, delivery)))
            out.append(sc)
        return out

    def _count_until(self, topic: str, n: int) -> float:
        c = Consumer({**self.config, "group.id": f"cnt-{_uid()}", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        seen = 0
        while seen < n:
            seen += sum(1 for m in consume_available(c, 1000, 1.0) if not m.error())
        c.close()
        return time.perf_counter()

    def _raw_pipe(self, src: str, dst: str, n: int) -> tuple[int, float, float]:
        c = Consumer(
            {
                **self.config,
                "group.id": f"pipe-{_uid()}",
                "auto.offset.reset": "earliest",
                "enable.auto.offset.store": False,
            }
        )
        p = RawProducer({**self.config, "enable.idempotence": True, "linger.ms": 5})
        c.subscribe([src])
        acked, first = [0], 0.0
        last_offset: list[Any] = [None]

        def cb(err: Any, m: Any) -> None:
            if err is None:
                acked[0] += 1

        moved = 0
        while acked[0] < n:
            msgs = consume_available(c, 500, 0.05)
            if not msgs:
                p.poll(0.01)  # serve acknowledgements while the source is drained
            if msgs and not first:
                first = time.perf_counter()
            for m in msgs:
                if m.error():
                    continue
                p.produce(dst, m.value(), key=m.key(), headers=m.headers(), on_delivery=cb)
                moved += 1
                last_offset[0] = m
            p.poll(0)
            if last_offset[0] is not None and acked[0] == moved:
                c.store_offsets(message=last_offset[0])
        end = time.perf_counter()
        c.close()
        return acked[0], first, end

    def _service_pipe(
        self, ns: str, real: str, n: int, delivery: DeliveryGuarantee
    ) -> tuple[int, float, float]:
        svc = ScheduleService(
            self.config, delay_levels=BENCH_LEVELS, namespace=ns, partitions=1, delivery=delivery
        )
        start = time.perf_counter()
        svc.start()
        while svc.stats.forwarded == 0:
            time.sleep(0.001)
        first = time.perf_counter()
        end = self._count_until(real, n)
        svc.shutdown()
        del start
        return n, first, end

    def lateness_scenario(
        self,
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
        ns = f"lat{_uid()}"
        real = self.topic()
        levels = DelayLevels.parse(BENCH_LEVELS)
        ensure_topics(self.config, plan_topics(delay_levels=levels, namespace=ns, partitions=1))
        total = int(seconds * rate)
        # the floor this machine puts under the figure: the same pipe without the adapter
        raw = self._raw_lateness_pipe(seconds, rate, warmup_s)
        service = ServiceProcess(self.config, ns, delivery)
        reader: subprocess.Popen[str] | None = None
        try:
            service.wait_assigned(60)
            steady_from = int(time.time() * 1000 + (warmup_s + 1.0) * 1000)
            reader = self._lateness_reader(real, total, steady_from)
            with Producer(self.config, delay_levels=BENCH_LEVELS, namespace=ns) as p:
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

    def _lateness_reader(self, topic: str, total: int, steady_from_ms: int) -> Any:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter.bench",
                "--lateness-reader",
                self.config["bootstrap.servers"],
                topic,
                str(total),
                str(steady_from_ms),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def _raw_lateness_pipe(self, seconds: float, rate: int, warmup_s: float) -> dict[str, Any]:
        """The same shape without the adapter: a raw idempotent producer (``linger.ms=5``)
        sends at ``rate``, each record due when it is sent, to a topic that a raw forwarder
        process (consume, produce at once, store offsets) passes on to the topic the
        lateness reader reads: two Kafka hops and as many processes as the service's
        figure, so it shows what this machine adds by itself."""
        src, dst = self.topic(), self.topic()
        total = int(seconds * rate)
        steady_from = int(time.time() * 1000 + warmup_s * 1000)
        forwarder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter.bench",
                "--raw-forwarder",
                self.config["bootstrap.servers"],
                src,
                dst,
                str(total),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        reader = self._lateness_reader(dst, total, steady_from)
        raw = RawProducer({**self.config, "enable.idempotence": True, "linger.ms": 5})
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

    # -- memory ----------------------------------------------------------------------------
    def rss_scenario(self, backlog: int) -> Scenario:
        """Peak RSS of a consumer process with a slow listener over a large backlog."""
        sc = Scenario(f"peak RSS, {backlog} x 100B backlog, slow listener (2 ms/msg), 20 s")
        topic = self.topic()
        self.fill(topic, backlog, 100)
        for mode in ("ours", "raw"):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "adapter.bench",
                    "--rss-child",
                    mode,
                    self.config["bootstrap.servers"],
                    topic,
                ],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            try:
                child = json.loads(proc.stdout.strip().splitlines()[-1])
                sc.extra[f"{mode}_peak_rss_mib"] = child["peak_rss_mib"]
                sc.extra[f"{mode}_consumed"] = child["consumed"]
            except (IndexError, ValueError, KeyError):
                sc.extra[f"{mode}_error"] = proc.stderr[-500:]
        return sc


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


def _raw_forwarder(bootstrap: str, src: str, dst: str, total: int) -> None:
    """Child process: a raw consume -> produce pipe (offsets stored per fetch), the baseline
    of the lateness figures."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fwd-{_uid()}",
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


def _lateness_reader(bootstrap: str, topic: str, total: int, steady_from_ms: int) -> None:
    """Child process: read ``total`` forwarded messages (read_committed, partition 0 assigned
    from its beginning: no group join to wait for) and print percentiles (ms) of how late
    each was seen (now minus ``RMQ_DUE_MS``), for all and for those due from
    ``steady_from_ms``; and, split, how late it was forwarded (its record timestamp minus
    ``RMQ_DUE_MS``) and how long it then took to reach the reader."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{_uid()}",
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
            due = int(_header(m, HEADER_DUE_MS))
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


def _rss_child(mode: str, bootstrap: str, topic: str) -> None:
    config = {"bootstrap.servers": bootstrap}
    consumed = [0]
    deadline = time.time() + 20
    if mode == "ours":

        def slow(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            time.sleep(0.002 * len(msgs))
            consumed[0] += len(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer(
            {**config, "group.id": f"rss-{_uid()}", "auto.offset.reset": "earliest"},
            delay_levels=BENCH_LEVELS,
            namespace="bench",
            partitions=1,
        )
        c.subscribe(topic)
        c.register_message_listener(slow)
        c.start()
        while time.time() < deadline:
            time.sleep(0.2)
        c.shutdown(timeout=30)
    else:
        rc = Consumer(
            {
                **config,
                "group.id": f"rss-{_uid()}",
                "auto.offset.reset": "earliest",
                "enable.auto.offset.store": False,
            }
        )
        rc.subscribe([topic])
        while time.time() < deadline:
            for m in consume_available(rc, 32, 0.5):
                time.sleep(0.002)
                rc.store_offsets(message=m)
                consumed[0] += 1
        rc.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_rss_mib": round(peak, 1), "consumed": consumed[0]}))


ALL = (
    "consumer",
    "consumer-pool",
    "blocking",
    "consumer-1k",
    "failures",
    "pull",
    "orderly",
    "producer",
    "forwarding",
    "lateness",
    "rss",
    "trace",
    "analytics",
)


def pyspark_missing() -> str | None:
    """Why the Spark analytics row cannot run here (``None``: it can)."""
    from adapter.analytics.jars import AnalyticsError, check_pyspark

    try:
        check_pyspark()
    except AnalyticsError as exc:
        return str(exc)
    return None


def analytics_scenarios(bench: Bench, *, spark: Any = None) -> list[Scenario]:
    """The Spark analytics row (needs pyspark): streaming job vs plain Kafka-source count."""
    from adapter.analytics.bench import spark_scenario

    return [spark_scenario(bench, bench.n, spark=spark)]


def pull_consumer_scenarios(bench: Bench) -> list[Scenario]:
    """The pull-style consumer rows (:mod:`adapter.bench_pull`): SimpleConsumer
    receive/ack and the confluent-kafka drop-in's loops, each against raw confluent-kafka."""
    from adapter.bench_pull import pull_scenarios

    return pull_scenarios(bench)


def orderly_consumer_scenarios(bench: Bench) -> list[Scenario]:
    """The orderly consumer rows (:mod:`adapter.bench_orderly`): no-op at batch 1 and 32 and
    1 % suspended once, each beside the concurrent PushConsumer and raw confluent-kafka."""
    from adapter.bench_orderly import orderly_scenarios

    return orderly_scenarios(bench)


def trace_scenarios(bench: Bench) -> list[Scenario]:
    """The trace-emission row: the consumer with and without ``trace_topic``."""
    from adapter.analytics.bench import trace_overhead_scenario

    return [trace_overhead_scenario(bench)]


def run_bench(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None
    if not bootstrap:
        from adapter.embedded import EmbeddedKafka

        brokers = getattr(args, "brokers", 1)
        # one broker gets 1 GiB; three share the machine's cores and memory
        broker = EmbeddedKafka("bench", heap="1g" if brokers == 1 else "512m", brokers=brokers)
        bootstrap = broker.start(fresh=True)
    try:
        bench = Bench(bootstrap, args.messages, args.repeats)
        only = set(args.only or ALL)
        if "analytics" in only and getattr(args, "no_spark", False):
            only.discard("analytics")
            print("== analytics: skipped (--no-spark)", flush=True)
        elif "analytics" in only and (why := pyspark_missing()):
            only.discard("analytics")
            print(
                f"== analytics: skipped, {why}\n   (./run.sh setup installs the spark extra; "
                "pass --no-spark to skip the Spark analytics row without this message)",
                flush=True,
            )
        results: list[Scenario] = []
        steps: list[tuple[str, Callable[[], list[Scenario]]]] = [
            ("consumer", lambda: bench.consumer_scenarios(100, (1, 32))),
            ("consumer-pool", bench.pool_scenarios),
            ("blocking", lambda: [bench.blocking_scenario()]),
            ("consumer-1k", lambda: bench.consumer_scenarios(1000, (32,))),
            ("failures", lambda: bench.failure_scenarios((1, 10, 100))),
            ("pull", lambda: pull_consumer_scenarios(bench)),
            ("orderly", lambda: orderly_consumer_scenarios(bench)),
            ("producer", bench.producer_scenarios),
            ("forwarding", bench.forwarding_scenarios),
            ("lateness", lambda: [bench.lateness_scenario(d) for d in DeliveryGuarantee]),
            ("rss", lambda: [bench.rss_scenario(1_000_000)]),
            ("trace", lambda: trace_scenarios(bench)),
            ("analytics", lambda: analytics_scenarios(bench)),
        ]
        for name, step in steps:
            if name in only:
                print(f"== {name}", flush=True)
                for sc in step():
                    results.append(sc)
                    print(json.dumps(sc.summary()), flush=True)
        table = [sc.summary() for sc in results]
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "messages": args.messages,
                    "repeats": args.repeats,
                    "results": table,
                    "runs": [asdict(sc) for sc in results],
                },
                indent=2,
            )
        )
        print()
        print(render_table(table))
        print(f"\nJSON: {path}")
        return 0
    finally:
        if broker is not None:
            broker.stop()


def render_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | ours msg/s | raw msg/s | ratio | ours µs CPU/msg | raw µs CPU/msg | other |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        other = {
            k: v
            for k, v in r.items()
            if k
            not in {
                "scenario",
                "ours_msgs_per_s",
                "raw_msgs_per_s",
                "ratio",
                "ours_cpu_us_per_msg",
                "raw_cpu_us_per_msg",
                "runs",
            }
        }
        lines.append(
            f"| {r['scenario']} | {r.get('ours_msgs_per_s', '')} | {r.get('raw_msgs_per_s', '')} | "
            f"{r.get('ratio', '')} | {r.get('ours_cpu_us_per_msg', '')} | "
            f"{r.get('raw_cpu_us_per_msg', '')} | "
            f"{', '.join(f'{k}={v}' for k, v in other.items())} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--rss-child":
        _rss_child(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 6 and sys.argv[1] == "--raw-forwarder":
        _raw_forwarder(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif len(sys.argv) == 6 and sys.argv[1] == "--lateness-reader":
        _lateness_reader(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
