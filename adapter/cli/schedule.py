"""The ScheduleService's commands: ``rmq-kafka schedule-service run`` (serve the delay
levels until SIGINT/SIGTERM, then print its own figures as JSON) and ``rmq-kafka schedule
status`` (entries waiting, oldest due time and lag per delay-level topic)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from typing import Any

from adapter.cli.options import (
    add_actions,
    add_admin_args,
    add_kafka_args,
    admin_config,
    emit,
    kafka_config,
)
from adapter.services.schedule import DeliveryGuarantee

__all__ = [
    "add_service_parser",
    "add_status_parser",
    "cmd_schedule_service",
    "cmd_schedule_status",
    "service_stats",
]


def add_service_parser(sub: Any) -> None:
    """``schedule-service run``."""
    s = sub.add_parser("schedule-service", help="the delay-level redelivery service")
    add_actions(
        s,
        {"run": "serve the delay-level topics until interrupted"},
        _service_args,
        cmd_schedule_service,
    )


def _service_args(s: argparse.ArgumentParser, action: str) -> None:
    s.add_argument("--delay-levels", help="messageDelayLevel table (default: RocketMQ's 18 levels)")
    s.add_argument("--namespace", help="serve this namespace's delay-level topics")
    s.add_argument("--group", help="service consumer group (default: rmq-schedule-service)")
    s.add_argument(
        "--delivery",
        choices=[d.value for d in DeliveryGuarantee],
        default=DeliveryGuarantee.EXACTLY_ONCE.value,
        help="EXACTLY_ONCE (default): forwards and offsets in one Kafka transaction per batch",
    )
    s.add_argument(
        "--partitions", type=int, default=3, help="partitions of each delay-level topic it creates"
    )
    s.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port (/metrics)"
    )
    s.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        help="the address the metrics endpoint binds (0.0.0.0 inside a container)",
    )
    s.add_argument("--trace-topic", help="emit a FORWARDED trace event per forward to this topic")
    s.add_argument(
        "--lag-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="serve this consumer group's backlog gauge (rmq_group_backlog) with the metrics "
        "(repeatable; docs/autoscaling.md)",
    )
    s.add_argument(
        "--lag-horizon",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="count a group's retries at the delay levels due within this (default: 60)",
    )
    add_kafka_args(s)


def add_status_parser(sub: Any) -> None:
    """``schedule status`` (an admin command: ``--json``, ``--timeout``)."""
    sc = sub.add_parser("schedule", help="the ScheduleService's delay levels")
    ssub = sc.add_subparsers(dest="action", required=True)
    ss = ssub.add_parser(
        "status", help="entries waiting, oldest due time and lag per delay-level topic"
    )
    ss.add_argument("--namespace", help="the namespace's delay-level topics (default: none)")
    ss.add_argument(
        "--group",
        help="the ScheduleService's group (default: rmq-schedule-service[.<namespace>])",
    )
    add_admin_args(ss)
    ss.set_defaults(func=cmd_schedule_status)


def cmd_schedule_service(args: argparse.Namespace) -> int:
    from adapter.services.schedule import ScheduleService

    service = ScheduleService(
        kafka_config(args),
        delay_levels=args.delay_levels,
        namespace=args.namespace,
        delivery=DeliveryGuarantee(args.delivery),
        partitions=args.partitions,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        trace_topic=args.trace_topic,
        lag_groups=args.lag_group,
        lag_horizon_s=args.lag_horizon,
        **({"group": args.group} if args.group else {}),
    )

    stopping = threading.Event()

    def stop(signum: int, _: Any) -> None:
        logging.getLogger("adapter").info("signal %d: stopping", signum)
        stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    # the loop runs on the service's own thread: confluent-kafka cuts blocking calls made on
    # the main thread into slices to look for signals, which made forwards markedly later
    service.start()
    try:
        while not stopping.wait(0.5):
            service.check_alive()
    finally:
        service.shutdown()
    print(json.dumps(service_stats(service)))
    return 0


def service_stats(service: Any) -> dict[str, Any]:
    s = service.stats
    lat = s.lateness_ms()
    return {
        "forwarded": s.forwarded,
        "reparked": s.reparked,
        "invalid": s.invalid,
        "early": s.early,
        "lateness_ms": {"p50": lat.p50, "p99": lat.p99, "max": lat.max},
    }


def cmd_schedule_status(args: argparse.Namespace) -> int:
    from adapter.ops.admin import schedule_status

    status = schedule_status(
        admin_config(args), namespace=args.namespace, group=args.group, timeout_s=args.timeout
    )
    emit(args, status.to_json(), status.render())
    return 0
