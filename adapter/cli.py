"""``rmq-kafka``: the embedded broker, topics, the ScheduleService, DLQ tools, demo, bench.

Every command that talks to Kafka takes the same connection settings: ``-b`` for
``bootstrap.servers`` (default: ``$KAFKA_BOOTSTRAP_SERVERS``, else the running embedded
broker) and ``-X key=value`` / ``--config-file`` for anything else (``security.protocol``,
``sasl.*``, ``ssl.*``), so every client the command creates gets the same security.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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

    broker = EmbeddedKafka(args.name)
    if args.action == "start":
        print(broker.start())
    elif args.action == "stop":
        print("stopped" if broker.stop() else "not running")
    else:
        status = broker.status()
        if status is None or not status.running:
            print("not running")
            return 1
        print(
            json.dumps(
                {
                    "name": status.name,
                    "pid": status.pid,
                    "bootstrap.servers": status.bootstrap_servers,
                    "data_dir": str(status.data_dir),
                }
            )
        )
    return 0


def _cmd_topics(args: argparse.Namespace) -> int:
    from adapter.core.delay import DelayLevels
    from adapter.io.topics import ensure_topics, plan_topics

    plans = plan_topics(
        groups=args.group or [],
        delay_levels=DelayLevels.coerce(args.delay_levels),
        namespace=args.namespace,
        partitions=args.partitions,
    )
    created = ensure_topics(_kafka_config(args), plans)
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
        **({"group": args.group} if args.group else {}),
    )

    def stop(signum: int, _: Any) -> None:
        logging.getLogger("adapter").info("signal %d: stopping", signum)
        service.shutdown()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    service.run()
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
    from adapter.services.dlq import read_dlq, redrive

    config = _kafka_config(args)
    entries = read_dlq(config, args.group, limit=args.limit)
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
        result = redrive(
            config,
            args.group,
            entries,
            to_origin=args.to_origin,
            skip_missing_bodies=args.skip_missing_bodies,
        )
        for msg_id, where, why in result.skipped:
            print(f"skipped {msg_id} (body at {where}): {why}", file=sys.stderr)
        print(f"redrove {result.sent} of {len(entries)} message(s)")
    return 0


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

    k = sub.add_parser("kafka", help="the embedded single-node Kafka broker (KRaft)")
    k.add_argument("action", choices=["start", "stop", "status"])
    k.add_argument("--name", default="default", help="instance name (default: default)")
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

    m = sub.add_parser("demo", help="end-to-end demo of the retry ladder on the embedded broker")
    m.add_argument("-b", "--bootstrap-servers")
    m.set_defaults(func=_cmd_demo)

    from adapter.analytics.cli import add_analytics_parser

    add_analytics_parser(sub, _add_kafka_args).set_defaults(func=_cmd_analytics)

    b = sub.add_parser("bench", help="benchmarks against raw confluent-kafka in the same run")
    b.add_argument("-b", "--bootstrap-servers")
    b.add_argument("--messages", type=int, default=100_000)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument(
        "--only",
        action="append",
        help="run only these scenarios (consumer, consumer-1k, failures, producer, forwarding, "
        "lateness, rss, trace, analytics)",
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


if __name__ == "__main__":
    sys.exit(main())
