"""Example consumer app of the Docker stack (``docker/compose.yaml``), on the public API only.

``python app.py consume``
    Consumer group ``example`` on topic ``orders``.  A message whose body starts with
    ``b"fail"`` fails (``RECONSUME_LATER``), anything else succeeds (``CONSUME_SUCCESS``).
    With ``max_reconsume_times=2`` and the delay table ``1s 2s 3s 4s 5s 6s`` a failing
    message is delivered three times (``reconsume_times`` 0, 1, 2; the retries wait on
    levels 3 and 4: 3 s, then 4 s) and then lands in ``%DLQ%example``.  Every delivery is
    logged as one JSON line on stdout (``{"event": "delivery", ...}``).

``python app.py share --consumers 2``
    The same topic read by RocketMQ 5's SimpleConsumer on a Kafka share group
    (``backend="share"``), group ``example-share``: ``--consumers`` members in one process,
    more members than partitions being what a share group allows.  A message whose body
    starts with ``b"fail"`` is never acknowledged: the broker's lock expires
    (``lock_duration`` 5 s) and it is delivered again with ``delivery_attempt`` + 1; after
    ``max_delivery_attempts=3`` it lands in ``%DLQ%example-share``.  Anything else is
    acknowledged.  Every receipt is one JSON line (``{"event": "share-delivery", ...}``).

``python app.py produce --ok 10 --fail 2``
    Sends that many ``ok-...`` and ``fail-...`` messages to ``orders``.

Environment: ``KAFKA_BOOTSTRAP_SERVERS`` (default ``broker:9092``), ``RMQ_DELAY_LEVELS``
(default ``1s 2s 3s 4s 5s 6s``; every client of the stack must use the same table),
``METRICS_PORT`` (default 9401, ``0`` = off), ``RMQ_TRACE_TOPIC`` (default
``RMQ_SYS_TRACE_TOPIC``, the topic the Spark job reads; empty = off), and
``RMQ_EXAMPLE_SCHEDULE_SERVICE=1`` to run a ScheduleService in this process (for a broker
without the stack's schedule-service container).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import tenacity

from adapter import (
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
    SimpleConsumer,
)
from adapter.errors import AdapterError
from adapter.io.topics import TopicPlan, ensure_topics

GROUP = "example"
SHARE_GROUP = "example-share"
SHARE_MAX_DELIVERY_ATTEMPTS = 3
SHARE_LOCK_S = 5
TOPIC = "orders"
MAX_RECONSUME_TIMES = 2
DEFAULT_DELAY_LEVELS = "1s 2s 3s 4s 5s 6s"
#: written once the consumer runs; the container's health check waits for it
READY_FILE = Path(os.environ.get("RMQ_EXAMPLE_READY_FILE", "/tmp/example-consumer.ready"))
#: written when the metrics endpoint is on; the health check then probes it too
METRICS_MARKER = Path(os.environ.get("RMQ_EXAMPLE_METRICS_MARKER", "/tmp/example-consumer.metrics"))

log = logging.getLogger("example")


def kafka_config() -> dict[str, Any]:
    return {"bootstrap.servers": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "broker:9092")}


def delay_levels() -> str:
    return os.environ.get("RMQ_DELAY_LEVELS", DEFAULT_DELAY_LEVELS)


def metrics_port(default: int) -> int:
    return int(os.environ.get("METRICS_PORT", str(default)))


_emit_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout (one write, so lines from worker threads never interleave)."""
    line = json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n"
    with _emit_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def with_metrics(factory: Any, port: int, *args: Any, **options: Any) -> tuple[Any, bool]:
    """``factory(*args, **options)`` serving Prometheus metrics on ``port`` on every
    interface of the container (``port`` 0: no endpoint)."""
    if port <= 0:
        return factory(*args, **options), False
    return factory(*args, metrics_port=port, metrics_addr="0.0.0.0", **options), True


def ensure_topic(config: dict[str, Any], topic: str, partitions: int) -> None:
    """Create the user topic (a plain Kafka topic) unless it exists; the broker may still be
    starting, so a failure is retried with back-off for up to a minute."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(60),
        wait=tenacity.wait_exponential(multiplier=0.5, max=5),
        retry=tenacity.retry_if_exception_type(AdapterError),
        before_sleep=lambda state: log.info(
            "creating topic %s: %s (retrying)", topic, state.outcome and state.outcome.exception()
        ),
        reraise=True,
    )
    retrying(ensure_topics, config, [TopicPlan(topic, topic, partitions)])


def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
    # consume_message_batch_max_size=1: one message per call
    for msg in msgs:
        failed = msg.body.startswith(b"fail")
        emit(
            "delivery",
            group=GROUP,
            topic=msg.topic,
            msg_id=msg.msg_id,
            keys=msg.keys,
            body=msg.body[:200].decode("utf-8", "replace"),
            reconsume_times=msg.reconsume_times,
            result="failed" if failed else "ok",
        )
        if failed:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def consume(args: argparse.Namespace) -> int:
    config = kafka_config()
    levels = delay_levels()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    READY_FILE.unlink(missing_ok=True)
    METRICS_MARKER.unlink(missing_ok=True)
    ensure_topic(config, TOPIC, args.partitions)

    service = None
    if os.environ.get("RMQ_EXAMPLE_SCHEDULE_SERVICE") == "1":
        service, _ = with_metrics(ScheduleService, metrics_port(0), config, delay_levels=levels)
        service.start()
    trace_topic = os.environ.get("RMQ_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC") or None
    consumer, metrics_on = with_metrics(
        PushConsumer,
        metrics_port(9401),
        {**config, "group.id": GROUP},
        max_reconsume_times=MAX_RECONSUME_TIMES,
        delay_levels=levels,
        consume_message_batch_max_size=1,
        trace_topic=trace_topic,
    )
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    if metrics_on:
        METRICS_MARKER.write_text(str(metrics_port(9401)))
    READY_FILE.write_text("ready\n")
    emit(
        "started",
        group=GROUP,
        topic=TOPIC,
        bootstrap=config["bootstrap.servers"],
        delay_levels=levels,
        max_reconsume_times=MAX_RECONSUME_TIMES,
        metrics_port=metrics_port(9401) if metrics_on else None,
        trace_topic=trace_topic,
    )
    try:
        stop.wait()
    finally:
        READY_FILE.unlink(missing_ok=True)
        consumer.shutdown()
        if service is not None:
            service.shutdown()
        emit("stopped", group=GROUP)
    return 0


def share(args: argparse.Namespace) -> int:
    """Members of the share group ``example-share``, each on a thread of its own."""
    config = kafka_config()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    ready = Path(os.environ.get("RMQ_EXAMPLE_READY_FILE", "/tmp/example-share.ready"))
    ready.unlink(missing_ok=True)
    ensure_topic(config, TOPIC, args.partitions)
    members = [
        SimpleConsumer(
            config,
            SHARE_GROUP,
            {TOPIC: "*"},
            backend="share",
            max_delivery_attempts=SHARE_MAX_DELIVERY_ATTEMPTS,
            lock_duration=SHARE_LOCK_S,
            await_duration=1,
        )
        for _ in range(args.consumers)
    ]
    failures: list[BaseException] = []

    def member(index: int, consumer: Any) -> None:
        try:
            while not stop.is_set():
                for msg in consumer.receive(16, SHARE_LOCK_S - 1):
                    failed = msg.body.startswith(b"fail")
                    emit(
                        "share-delivery",
                        group=SHARE_GROUP,
                        member=index,
                        topic=msg.topic,
                        msg_id=msg.message_id,
                        body=msg.body[:200].decode("utf-8", "replace"),
                        delivery_attempt=msg.delivery_attempt,
                        result="failed" if failed else "ok",
                    )
                    if not failed:  # a failed one is left to its lock: it comes back
                        consumer.ack(msg)
        except BaseException as exc:  # surfaced by the main thread, which stops the rest
            failures.append(exc)
            stop.set()

    for consumer in members:
        consumer.start()
    threads = [
        threading.Thread(target=member, args=(i, c), name=f"share-{i}", daemon=True)
        for i, c in enumerate(members)
    ]
    for t in threads:
        t.start()
    ready.write_text("ready\n")
    emit(
        "started",
        group=SHARE_GROUP,
        topic=TOPIC,
        backend="share",
        consumers=args.consumers,
        bootstrap=config["bootstrap.servers"],
        max_delivery_attempts=SHARE_MAX_DELIVERY_ATTEMPTS,
        lock_duration_s=SHARE_LOCK_S,
    )
    try:
        stop.wait()
    finally:
        ready.unlink(missing_ok=True)
        for t in threads:
            t.join(10)
        for consumer in members:
            consumer.shutdown()
        emit("stopped", group=SHARE_GROUP)
    if failures:
        raise failures[0]
    return 0


def produce(args: argparse.Namespace) -> int:
    run = args.run_id or uuid.uuid4().hex[:8]
    bodies = [f"ok-{run}-{i}" for i in range(args.ok)]
    bodies += [f"fail-{run}-{i}" for i in range(args.fail)]
    with Producer(kafka_config(), delay_levels=delay_levels()) as producer:
        for body in bodies:
            producer.send(Message(topic=TOPIC, body=body.encode(), keys=[body]))
    emit("produced", topic=TOPIC, run_id=run, ok=args.ok, fail=args.fail)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="example-app", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("consume", help='run the "example" consumer group on "orders"')
    c.add_argument("--partitions", type=int, default=3, help="partitions of a new orders topic")
    c.set_defaults(func=consume)
    s = sub.add_parser("share", help='run the "example-share" share group on "orders"')
    s.add_argument("--consumers", type=int, default=2, help="members in this process")
    s.add_argument("--partitions", type=int, default=3, help="partitions of a new orders topic")
    s.set_defaults(func=share)
    p = sub.add_parser("produce", help='send ok-... and fail-... messages to "orders"')
    p.add_argument("--ok", type=int, default=10)
    p.add_argument("--fail", type=int, default=2)
    p.add_argument("--run-id", help="tag in every body (default: random)")
    p.set_defaults(func=produce)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
