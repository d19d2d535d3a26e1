"""The two sides of a conformance scenario: RocketMQ's official Java client on a real
RocketMQ broker (:func:`start_rocketmq`, a subprocess running ``java/.../Runner.java``) and the
adapter on the embedded Kafka broker (:func:`run_adapter`). Both record the same shape: one
dict per delivery (``type: delivery``), per dead letter (``type: dlq``) and per queue offset
(``type: offset``); :mod:`compare` reads them.

A scenario is a dict (see :mod:`scenarios`): a topic and group (made unique per run), the
messages, the consumer's settings and ``rules``: what the listener does with a batch, by its
first message's key and ``reconsumeTimes`` (the first matching rule; none: success). Both
sides stop once no delivery came for ``quietMs``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import rmq_broker as rmq
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from adapter import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
)
from adapter.services.dlq import read_dlq

Line = dict[str, Any]


def rule(rules: list[dict[str, Any]], key: str | None, rt: int) -> dict[str, Any]:
    """The scripted rule for a batch whose first message has ``key`` and ``rt``."""
    for r in rules:
        if "key" in r and r["key"] != key:
            continue
        if "rt" in r and r["rt"] != rt:
            continue
        if "rtBelow" in r and rt >= r["rtBelow"]:
            continue
        return r
    return {"action": "success"}


# --------------------------------------------------------------------------------------------
# RocketMQ
# --------------------------------------------------------------------------------------------


class RocketMQRun:
    """A running Java side; :meth:`lines` waits for it and parses what it printed."""

    def __init__(self, proc: subprocess.Popen[str], workdir: Path) -> None:
        self.proc = proc
        self.workdir = workdir

    def lines(self, timeout: float) -> list[Line]:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            raise AssertionError(f"the RocketMQ side timed out:\n{out[-3000:]}") from None
        lines = [json.loads(t) for t in out.splitlines() if t.startswith("{")]
        if not lines or lines[-1].get("type") != "done":
            raise AssertionError(f"the RocketMQ side failed:\n{out[-3000:]}")
        return lines


def start_rocketmq(scenario: dict[str, Any], broker: rmq.RocketMQ) -> RocketMQRun:
    workdir = Path(tempfile.mkdtemp(prefix="rmq-side-", dir=broker.home))
    spec = workdir / "scenario.json"
    spec.write_text(json.dumps({**scenario, "namesrv": broker.namesrv}), encoding="utf-8")
    logback = workdir / "logback.xml"
    logback.write_text(
        '<configuration><appender name="F" class="ch.qos.logback.core.FileAppender">'
        f"<file>{workdir}/client.log</file><encoder><pattern>%d %m%n</pattern></encoder>"
        '</appender><root level="WARN"><appender-ref ref="F"/></root></configuration>',
        encoding="utf-8",
    )
    cmd = [
        rmq.which("java"),
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        *rmq.JAVA_OPENS,
        f"-Drocketmq.client.logRoot={workdir}/logs",
        f"-Drocketmq.client.localOffsetStoreDir={workdir}/offsets",
        f"-Dlogback.configurationFile={logback}",
        f"-Duser.home={workdir}",
        "-cp",
        rmq.classpath(),
        "conformance.Runner",
        str(spec),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workdir
    )
    return RocketMQRun(proc, workdir)


# --------------------------------------------------------------------------------------------
# the adapter
# --------------------------------------------------------------------------------------------


def _message(topic: str, m: dict[str, Any]) -> Message:
    return Message(
        topic=topic,
        body=str(m.get("body", m["key"])).encode(),
        tags=m.get("tags"),
        keys=m["key"],
        properties=dict(m.get("properties", {})),
        delay_time_level=int(m.get("delayLevel", 0)),
    )


def _describe(m: Any) -> Line:
    return {
        "key": m.keys,
        "rt": m.reconsume_times,
        "topic": m.topic,
        "tags": m.tags,
        "keys": m.keys,
        "queue": m.queue_id,
        "body": m.body.decode("utf-8", "replace"),
        "props": dict(sorted(m.properties.items())),
    }


class _Recorder:
    def __init__(self, rules: list[dict[str, Any]]) -> None:
        self.rules = rules
        self.lock = threading.Lock()
        self.lines: list[Line] = []
        self.calls = 0
        self.start = time.monotonic()
        self.last = self.start

    def record(self, msgs: list[Any]) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            call = self.calls
            self.calls += 1
            self.last = now
            for i, m in enumerate(msgs):
                line = _describe(m)
                line.update(
                    type="delivery",
                    call=call,
                    index=i,
                    size=len(msgs),
                    t=int((now - self.start) * 1000),
                )
                self.lines.append(line)
        return rule(self.rules, msgs[0].keys, msgs[0].reconsume_times)

    def concurrent(self, msgs: list[Any], ctx: Any) -> Any:
        r = self.record(msgs)
        if "ackIndex" in r:
            ctx.ack_index = r["ackIndex"]
        if "delayLevel" in r:
            ctx.delay_level_when_next_consume = r["delayLevel"]
        action = r["action"]
        if action == "throw":
            raise RuntimeError("scripted failure")
        if action == "null":
            return None
        if action == "success":
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    def orderly(self, msgs: list[Any], ctx: Any) -> Any:
        r = self.record(msgs)
        if "suspendMillis" in r:
            ctx.suspend_current_queue_time_millis = r["suspendMillis"]
        action = r["action"]
        if action == "throw":
            raise RuntimeError("scripted failure")
        if action == "null":
            return None
        if action == "success":
            return ConsumeOrderlyStatus.SUCCESS
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    def wait_quiet(self, quiet_s: float, max_s: float) -> None:
        deadline = self.start + max_s
        while time.monotonic() < deadline:
            with self.lock:
                last = self.last
            if time.monotonic() - last >= quiet_s:
                return
            time.sleep(0.1)


def _committed(bootstrap: str, group: str, topic: str) -> list[Line]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, 0)], timeout=10)
        return [{"type": "offset", "queue": tp.partition, "offset": tp.offset} for tp in got]
    finally:
        c.close()


def _broadcast_offsets(store: Path, topic: str) -> list[Line]:
    """The broadcasting consumer's local offset store: ``<store>/<group>/<instance>.json``
    holding ``{"<topic>:<partition>": offset}``."""
    out: list[Line] = []
    for f in sorted(store.rglob("*.json")):
        for where, offset in json.loads(f.read_text(encoding="utf-8")).items():
            name, _, partition = where.rpartition(":")
            if name == topic:
                out.append({"type": "offset", "queue": int(partition), "offset": int(offset)})
    return out


def run_adapter(scenario: dict[str, Any], bootstrap: str, delay_levels: str) -> list[Line]:
    """Run ``scenario`` with the adapter on ``bootstrap``; the recorded lines."""
    topic, group = scenario["topic"], scenario["group"]
    namespace = f"ns{uuid.uuid4().hex[:10]}"
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    admin = AdminClient(conf)
    for fut in admin.create_topics([NewTopic(topic, 1)]).values():
        fut.result(30)
    orderly = scenario.get("mode") == "orderly"
    broadcasting = scenario.get("model") == "BROADCASTING"
    rec = _Recorder(scenario.get("rules", []))
    store_dir = tempfile.TemporaryDirectory(prefix="adapter-side-")
    store = Path(store_dir.name)
    options: dict[str, Any] = {
        "delay_levels": delay_levels,
        "namespace": namespace,
        "partitions": 1,
        "shutdown_await": 10.0,
        "consume_thread_max": 1,
        "message_model": scenario.get("model", "CLUSTERING"),
        "consume_from_where": {
            "LAST": "CONSUME_FROM_LAST_OFFSET",
            "TIMESTAMP": "CONSUME_FROM_TIMESTAMP",
        }.get(scenario.get("consumeFromWhere", "FIRST"), "CONSUME_FROM_FIRST_OFFSET"),
    }
    if broadcasting:
        options["offset_store_dir"] = str(store)
    if "maxReconsumeTimes" in scenario:
        options["max_reconsume_times"] = scenario["maxReconsumeTimes"]
    if "batchMaxSize" in scenario:
        options["consume_message_batch_max_size"] = scenario["batchMaxSize"]
    if "suspendMillis" in scenario:
        options["suspend_current_queue_time_millis"] = scenario["suspendMillis"]
    consumer = PushConsumer({**conf, "group.id": group}, **options)
    consumer.subscribe(topic, scenario.get("expression", "*"))
    if orderly:
        consumer.register_message_listener_orderly(rec.orderly)
    else:
        consumer.register_message_listener(rec.concurrent)
    lines: list[Line] = []
    with (
        ScheduleService(conf, delay_levels=delay_levels, namespace=namespace, partitions=1),
        Producer(conf, delay_levels=delay_levels, namespace=namespace) as producer,
    ):
        for m in scenario.get("preSend", []):
            producer.send(_message(topic, m))
        after = bool(scenario.get("sendAfterStart"))
        if not after:
            for m in scenario["messages"]:
                producer.send(_message(topic, m))
        with consumer:
            rec.start = rec.last = time.monotonic()
            if after:
                time.sleep(scenario.get("sendDelayMs", 500) / 1000)
                for m in scenario["messages"]:
                    producer.send(_message(topic, m))
                rec.last = time.monotonic()
            rec.wait_quiet(
                scenario.get("quietMs", 2500) / 1000, scenario.get("maxMs", 90000) / 1000
            )
        with rec.lock:
            lines.extend(rec.lines)
    if broadcasting:
        lines.extend(_broadcast_offsets(store, topic))
    else:
        lines.extend(_committed(bootstrap, group, topic))
    store_dir.cleanup()
    for entry in read_dlq(conf, group, timeout_s=5):
        line = _describe(entry.message)
        line["type"] = "dlq"
        lines.append(line)
    return lines
