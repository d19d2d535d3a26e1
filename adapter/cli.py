"""``rmq-kafka``: the embedded broker, topics, the ScheduleService, DLQ tools, admin commands
(group progress and offset resets, message journeys, ScheduleService status), demo, bench.

Every command that talks to Kafka takes the same connection settings: ``-b`` for
``bootstrap.servers`` (default: ``$KAFKA_BOOTSTRAP_SERVERS``, else the running embedded
broker) and ``-X key=value`` / ``--config-file`` for anything else (``security.protocol``,
``sasl.*``, ``ssl.*``), so every client the command creates gets the same security.
The admin commands take and print logical topic names (``--json`` for JSON) and fail with
one line on stderr (exit code 2) on a bad name, a missing group or refused credentials.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from adapter.constants import HEADER_BODY_OMITTED
from adapter.embedded.broker import EmbeddedKafkaError
from adapter.errors import AdapterError
from adapter.services.schedule_service import DeliveryGuarantee


def _kafka_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if args.config_file:
        for raw in Path(args.config_file).read_text("utf-8").splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                key, sep, value = line.partition("=")
                if not sep:
                    raise AdapterError(f"--config-file line without '=': {line!r}")
                config[key.strip()] = value.strip()
    for item in args.X or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise AdapterError(f"-X expects key=value, got {item!r}")
        config[key] = value
    bootstrap = (
        args.bootstrap_servers
        or config.get("bootstrap.servers")
        or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    )
    if not bootstrap:
        from adapter.embedded import status_default

        status = status_default()
        if status is None or not status.running:
            raise AdapterError(
                "no bootstrap servers: pass -b, set KAFKA_BOOTSTRAP_SERVERS, "
                "or run 'rmq-kafka kafka start'"
            )
        bootstrap = status.bootstrap_servers
    config["bootstrap.servers"] = bootstrap
    return config


def _add_kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-b",
        "--bootstrap-servers",
        help="bootstrap.servers (default: $KAFKA_BOOTSTRAP_SERVERS or the embedded broker)",
    )
    p.add_argument(
        "-X",
        action="append",
        metavar="KEY=VALUE",
        help="any confluent-kafka setting, e.g. -X security.protocol=SASL_PLAINTEXT",
    )
    p.add_argument("--config-file", help="a properties file of confluent-kafka settings")


def _cmd_kafka(args: argparse.Namespace) -> int:
    from adapter.embedded import EmbeddedKafka

    broker = (  # stop/status/kill: as many nodes as the instance's last start had
        EmbeddedKafka.existing(args.name)
        if args.brokers is None
        else EmbeddedKafka(args.name, brokers=args.brokers)
    )
    if args.node is not None:
        node = broker.node(args.node)
        if args.action == "start":
            print(node.start())
        elif args.action == "stop":
            print("stopped" if node.stop() else "not running")
        elif args.action == "kill":
            node.kill()
            print("killed")
        else:
            st = node.status()
            print(json.dumps(None if st is None else _node_json(st)))
            return 0 if st is not None and st.running else 1
        return 0
    if args.action == "start":
        print(broker.start())
    elif args.action == "stop":
        print("stopped" if broker.stop() else "not running")
    elif args.action == "kill":
        broker.kill()
        print("killed")
    else:
        status = broker.status()
        if status is None or not status.running:
            if status is not None:
                print(json.dumps({"nodes": [_node_json(n) for n in status.nodes]}))
            print("not running")
            return 1
        print(
            json.dumps(
                {
                    "name": status.name,
                    "pid": status.pid,
                    "bootstrap.servers": status.bootstrap_servers,
                    "data_dir": str(status.data_dir),
                    "brokers": len(status.nodes),
                    "nodes": [_node_json(n) for n in status.nodes],
                }
            )
        )
    return 0


def _node_json(node: Any) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "pid": node.pid,
        "bootstrap.servers": node.bootstrap_servers,
        "running": node.running,
    }


def _cmd_topics(args: argparse.Namespace) -> int:
    from adapter.core.delay import DelayLevels
    from adapter.io.topics import ensure_topics, plan_topics, topic_max_message_bytes

    config = _kafka_config(args)
    size = args.max_message_bytes
    for topic in args.match_topic or []:
        size = max(size or 0, topic_max_message_bytes(config, topic))
    plans = plan_topics(
        groups=args.group or [],
        delay_levels=DelayLevels.coerce(args.delay_levels),
        namespace=args.namespace,
        partitions=args.partitions,
        max_message_bytes=size,
    )
    created = ensure_topics(
        config,
        plans,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
    )
    for plan in plans:
        state = "created" if created.get(plan.logical) else "exists"
        print(f"{state:8} {plan.logical}  ->  {plan.kafka_topic}")
    return 0


def _cmd_schedule(args: argparse.Namespace) -> int:
    from adapter.services.schedule_service import ScheduleService

    service = ScheduleService(
        _kafka_config(args),
        delay_levels=args.delay_levels,
        namespace=args.namespace,
        delivery=DeliveryGuarantee(args.delivery),
        partitions=args.partitions,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        trace_topic=args.trace_topic,
        **({"group": args.group} if args.group else {}),
    )

    stopping = threading.Event()

    def stop(signum: int, _: Any) -> None:
        logging.getLogger("adapter").info("signal %d: stopping", signum)
        stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    # the loop runs on the service's own thread: confluent-kafka cuts blocking calls made on
    # the main thread into slices to look for signals, which made forwards up to ~150 ms
    # later (measured: p99 162 ms on the main thread, 33 ms on a thread of its own)
    service.start()
    try:
        while not stopping.wait(0.5):
            service.check_alive()
    finally:
        service.shutdown()
    print(json.dumps(_service_stats(service)))
    return 0


def _service_stats(service: Any) -> dict[str, Any]:
    s = service.stats
    lat = s.lateness_ms()
    return {
        "forwarded": s.forwarded,
        "reparked": s.reparked,
        "invalid": s.invalid,
        "early": s.early,
        "lateness_ms": {"p50": lat.p50, "p99": lat.p99, "max": lat.max},
    }


def _cmd_dlq(args: argparse.Namespace) -> int:
    from adapter.ops.progress import ProgressReporter
    from adapter.services.dlq import read_dlq, redrive

    config = _kafka_config(args)
    reading = ProgressReporter(f"reading %DLQ%{args.group}")
    try:
        entries = read_dlq(config, args.group, limit=args.limit, progress=reading)
    finally:
        reading.close()
    if args.action == "list":
        for e in entries:
            m = e.message
            print(
                json.dumps(
                    {
                        "msg_id": m.msg_id,
                        "origin_topic": e.origin_topic,
                        "reason": e.reason,
                        "reconsume_times": m.reconsume_times,
                        "failure": e.failure_type,
                        "failure_message": e.failure_message,
                        "keys": m.keys,
                        "tags": m.tags,
                        "partition": m.queue_id,
                        "offset": m.queue_offset,
                        "body": m.body[:200].decode("utf-8", "replace"),
                        "body_omitted": m.properties.get(HEADER_BODY_OMITTED),
                    },
                    ensure_ascii=False,
                )
            )
        print(f"{len(entries)} dead letter(s) in %DLQ%{args.group}", file=sys.stderr)
    else:
        sending = ProgressReporter("redriving", every=10_000)
        try:
            result = redrive(
                config,
                args.group,
                entries,
                to_origin=args.to_origin,
                skip_missing_bodies=args.skip_missing_bodies,
                progress=sending,
            )
        finally:
            sending.close()
        for msg_id, where, why in result.skipped:
            print(f"skipped {msg_id} (body at {where}): {why}", file=sys.stderr)
        print(f"redrove {result.sent} of {len(entries)} message(s)")
    return 0


# --- admin commands --------------------------------------------------------------------------
def _admin_config(args: argparse.Namespace) -> dict[str, Any]:
    """The command's Kafka config; librdkafka's own log lines only with ``-v`` (a refused
    login is reported once, as the command's error)."""
    from adapter.ops.kafka import CLIENT_LOG

    CLIENT_LOG.setLevel(logging.DEBUG if args.verbose else logging.CRITICAL + 1)
    return _kafka_config(args)


def _emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        print("\n".join(lines))


def _cmd_group(args: argparse.Namespace) -> int:
    from adapter.ops.admin import group_progress, reset_group_offsets
    from adapter.ops.errors import ResetIncompleteError

    config = _admin_config(args)
    if args.action == "progress":
        progress = group_progress(config, args.group, timeout_s=args.timeout)
        _emit(args, progress.to_json(), progress.render())
        return 0
    target = _reset_target(args)
    try:
        result = reset_group_offsets(
            config, args.group, args.topic, target, force=args.force, timeout_s=args.timeout
        )
    except ResetIncompleteError as exc:  # say what was applied, then fail
        _emit(args, {**exc.result.to_json(), "error": str(exc)}, exc.result.render())
        raise
    _emit(args, result.to_json(), result.render())
    return 0


def _reset_target(args: argparse.Namespace) -> Any:
    from adapter.core.control import ResetTarget
    from adapter.ops.timespec import parse_time

    if args.to_earliest:
        return ResetTarget.earliest()
    if args.to_latest:
        return ResetTarget.latest()
    return ResetTarget.at(parse_time(args.to_time, "--to-time"))


def _cmd_msg(args: argparse.Namespace) -> int:
    import time

    from adapter.ops.admin import find_message
    from adapter.ops.journey import Matcher
    from adapter.ops.progress import ProgressReporter
    from adapter.ops.timespec import parse_since

    matcher = Matcher(msg_id=args.id, key=args.key)
    since_ms = parse_since(args.since, time.time_ns() // 1_000_000)
    config = _admin_config(args)
    reporter = ProgressReporter("scanning")
    try:
        result = find_message(
            config,
            matcher,
            since_ms=since_ms,
            topic=args.topic,
            max_records=args.max_records,
            timeout_s=args.timeout,
            progress=reporter,
        )
    finally:
        reporter.close()
    if not result.journeys:
        if args.json:
            print(json.dumps(result.to_json(), ensure_ascii=False))
        print(
            f"rmq-kafka: error: no record of {matcher.describe()}; {result.summary()}",
            file=sys.stderr,
        )
        return 1
    _emit(args, result.to_json(), result.render())
    return 0


def _cmd_schedule_status(args: argparse.Namespace) -> int:
    from adapter.ops.admin import schedule_status

    status = schedule_status(
        _admin_config(args), namespace=args.namespace, group=args.group, timeout_s=args.timeout
    )
    _emit(args, status.to_json(), status.render())
    return 0


def _add_admin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=30.0,
        help="seconds to wait for Kafka (and, for a forced reset, the members) (default: 30)",
    )
    _add_kafka_args(p)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _add_admin_parsers(sub: Any) -> None:
    g = sub.add_parser("group", help="a consumer group's progress; reset its offsets")
    gsub = g.add_subparsers(dest="action", required=True)
    gp = gsub.add_parser(
        "progress",
        help="committed offset, end offset and lag per partition, members, DLQ size",
    )
    gp.add_argument("--group", required=True)
    _add_admin_args(gp)
    gp.set_defaults(func=_cmd_group)
    gr = gsub.add_parser(
        "reset-offset",
        help="move the group's offsets on a topic (resetOffsetByTime); refuses a live group "
        "unless --force",
    )
    gr.add_argument("--group", required=True)
    gr.add_argument("--topic", required=True, help="logical topic name (e.g. orders, %%RETRY%%G)")
    to = gr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-time", metavar="ISO8601", help="e.g. 2026-11-23T10:00:00Z")
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    gr.add_argument(
        "--force",
        action="store_true",
        help="on a live group: have its members reset their own partitions (via rmq.control) "
        "and wait for their acknowledgements (--timeout)",
    )
    _add_admin_args(gr)
    gr.set_defaults(func=_cmd_group)

    m = sub.add_parser("msg", help="messages: find one and print its journey")
    msub = m.add_subparsers(dest="action", required=True)
    ms = msub.add_parser(
        "show",
        help="find a message by id or key in its topic, the delay levels, retry topics and "
        "DLQs; print its journey",
    )
    which = ms.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", help="message id (UNIQ_KEY, or ORIGIN_MESSAGE_ID of a copy)")
    which.add_argument("--key", help="one of the message's KEYS")
    ms.add_argument("--topic", help="also scan this topic (logical name), where it was sent")
    ms.add_argument(
        "--since", default="24h", help="look back this long (24h, 90m, 7d) or since an ISO time"
    )
    ms.add_argument(
        "--max-records",
        type=_positive_int,
        default=1_000_000,
        help="stop after reading this many records (default: 1000000)",
    )
    _add_admin_args(ms)
    ms.set_defaults(func=_cmd_msg)

    sc = sub.add_parser("schedule", help="the ScheduleService's delay levels")
    ssub = sc.add_subparsers(dest="action", required=True)
    ss = ssub.add_parser(
        "status", help="entries waiting, oldest due time and lag per delay-level topic"
    )
    ss.add_argument("--namespace")
    ss.add_argument(
        "--group",
        help="the ScheduleService's group (default: rmq-schedule-service[.<namespace>])",
    )
    _add_admin_args(ss)
    ss.set_defaults(func=_cmd_schedule_status)


def _cmd_demo(args: argparse.Namespace) -> int:
    from adapter.demo import run_demo

    return run_demo(bootstrap=args.bootstrap_servers)


def _cmd_analytics(args: argparse.Namespace) -> int:
    from adapter.analytics.cli import run_analytics

    return run_analytics(args, _kafka_config(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    from adapter.bench import run_bench

    return int(run_bench(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rmq-kafka", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    k = sub.add_parser(
        "kafka", help="the embedded Kafka (KRaft): one broker, or a cluster with --brokers 3"
    )
    k.add_argument("action", choices=["start", "stop", "status", "kill"])
    k.add_argument("--name", default="default", help="instance name (default: default)")
    k.add_argument(
        "--brokers",
        type=int,
        help="nodes in the cluster, each broker and controller (start: default 1; "
        "replication factor 3 and min.insync.replicas 2 from 3 nodes on)",
    )
    k.add_argument(
        "--node",
        type=int,
        help="act on this node only (1..brokers): stop is a controlled shutdown, kill is "
        "SIGKILL, start brings it back on the same ports and data",
    )
    k.set_defaults(func=_cmd_kafka)

    t = sub.add_parser("topics", help="topic provisioning")
    t.add_argument("action", choices=["ensure"])
    t.add_argument(
        "--group",
        action="append",
        help="consumer group (repeatable): its %%RETRY%% and %%DLQ%% topics",
    )
    t.add_argument("--delay-levels", help="messageDelayLevel table (default: RocketMQ's 18 levels)")
    t.add_argument("--namespace")
    t.add_argument("--partitions", type=int, default=3)
    t.add_argument(
        "--replication-factor",
        type=int,
        help="copies of each new topic (default: the broker's default.replication.factor, "
        "raised to 3 on a cluster of 3 brokers or more)",
    )
    t.add_argument(
        "--min-insync-replicas",
        type=int,
        help="min.insync.replicas of each new topic (default: 2 where the factor is 3 or "
        "more and the broker's default is lower; else the broker's)",
    )
    t.add_argument(
        "--max-message-bytes",
        type=int,
        help="largest record of the user topics: the planned topics take this plus room for "
        "the retry/DLQ headers (existing topics are raised, never lowered)",
    )
    t.add_argument(
        "--match-topic",
        action="append",
        help="user topic (repeatable) whose max.message.bytes the planned topics must carry",
    )
    _add_kafka_args(t)
    t.set_defaults(func=_cmd_topics)

    s = sub.add_parser("schedule-service", help="the delay-level redelivery service")
    s.add_argument("action", choices=["run"])
    s.add_argument("--delay-levels")
    s.add_argument("--namespace")
    s.add_argument("--group", help="service consumer group (default: rmq-schedule-service)")
    s.add_argument(
        "--delivery",
        choices=[d.value for d in DeliveryGuarantee],
        default=DeliveryGuarantee.EXACTLY_ONCE.value,
        help="EXACTLY_ONCE (default): forwards and offsets in one Kafka transaction per batch",
    )
    s.add_argument("--partitions", type=int, default=3)
    s.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port (/metrics)"
    )
    s.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        help="the address the metrics endpoint binds (0.0.0.0 inside a container)",
    )
    s.add_argument("--trace-topic", help="emit a FORWARDED trace event per forward to this topic")
    _add_kafka_args(s)
    s.set_defaults(func=_cmd_schedule)

    d = sub.add_parser("dlq", help="list or redrive a group's dead letters")
    d.add_argument("action", choices=["list", "redrive"])
    d.add_argument("--group", required=True)
    d.add_argument("--limit", type=int)
    d.add_argument(
        "--to-origin", action="store_true", help="redrive to the original topic (all groups)"
    )
    d.add_argument(
        "--skip-missing-bodies",
        action="store_true",
        help="redrive the others when a body-omitted entry's body is gone (default: refuse)",
    )
    _add_kafka_args(d)
    d.set_defaults(func=_cmd_dlq)

    _add_admin_parsers(sub)

    m = sub.add_parser("demo", help="end-to-end demo of the retry ladder on the embedded broker")
    m.add_argument("-b", "--bootstrap-servers")
    m.set_defaults(func=_cmd_demo)

    from adapter.analytics.cli import add_analytics_parser

    add_analytics_parser(sub, _add_kafka_args).set_defaults(func=_cmd_analytics)

    b = sub.add_parser("bench", help="benchmarks against raw confluent-kafka in the same run")
    b.add_argument("-b", "--bootstrap-servers")
    b.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="nodes of the embedded cluster it starts (without -b): 3 measures on a cluster "
        "(replication factor 3, min.insync.replicas 2), raw confluent-kafka on the same one",
    )
    b.add_argument("--messages", type=int, default=100_000)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument(
        "--only",
        action="append",
        help="run only this scenario (repeatable: consumer, consumer-pool, blocking, "
        "consumer-1k, failures, pull, orderly, producer, forwarding, lateness, rss, trace, "
        "analytics)",
    )
    b.add_argument(
        "--no-spark",
        action="store_true",
        help="skip the Spark analytics row (it needs the spark extra: pyspark)",
    )
    b.add_argument("--json", default="bench-results/latest.json")
    b.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except (AdapterError, EmbeddedKafkaError) as exc:
        print(f"rmq-kafka: error: {exc}", file=sys.stderr)
        return 2
    except KafkaException as exc:  # a client error no layer mapped: still one line
        print(f"rmq-kafka: error: Kafka: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
