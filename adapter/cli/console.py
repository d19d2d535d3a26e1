"""``rmq-kafka console``: serve the operator's page and JSON API over the cluster (``-b`` and
the same ``-X`` / ``--config-file`` security settings every command takes)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from adapter.cli.options import add_kafka_args, admin_config, positive_float, positive_int

__all__ = ["add_parser", "cmd_console"]

TOKEN_ENV = "RMQ_KAFKA_CONSOLE_TOKEN"


def add_parser(sub: Any) -> None:
    c = sub.add_parser(
        "console",
        help="serve the retry console: groups, retry ladders, dead letters, redrive (web page "
        "and JSON API)",
    )
    c.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    c.add_argument("--port", type=int, default=8088, help="port to listen on (default: 8088)")
    c.add_argument(
        "--token",
        help=f"the access token (default: ${TOKEN_ENV}, else one is generated and printed)",
    )
    c.add_argument(
        "--read-only", action="store_true", help="look but do not redrive (redrive answers 403)"
    )
    c.add_argument("--namespace", help="the namespace of the delay-level topics (default: none)")
    c.add_argument(
        "--schedule-group",
        help="the ScheduleService's group (default: rmq-schedule-service[.<namespace>])",
    )
    c.add_argument(
        "--max-redrives",
        type=positive_int,
        default=3,
        help="loop guard: a dead letter redriven this many times is skipped unless forced "
        "(default: 3)",
    )
    c.add_argument("--timeout", type=positive_float, default=30.0, help="seconds to wait for Kafka")
    c.add_argument(
        "--trace-topic",
        default="RMQ_SYS_TRACE_TOPIC",
        help="the consumers' trace topic, for the outcomes per reconsume_times "
        "(default: RMQ_SYS_TRACE_TOPIC)",
    )
    add_kafka_args(c)
    c.set_defaults(func=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    try:
        from adapter.console.server import serve
        from adapter.console.service import ConsoleSettings
    except ImportError as exc:  # the extra is not installed
        from adapter.errors import AdapterError

        raise AdapterError(
            f"the console needs the 'console' extra (pip install 'rmq-kafka-adapter[console]'): "
            f"{exc}"
        ) from None
    from adapter.console.auth import new_token

    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        token = new_token()
        print(f"console token: {token}", file=sys.stderr)
    settings = ConsoleSettings(
        config=admin_config(args),
        token=token,
        read_only=args.read_only,
        namespace=args.namespace,
        schedule_group=args.schedule_group,
        max_redrives=args.max_redrives,
        timeout_s=args.timeout,
        trace_topic=args.trace_topic,
    )
    print(
        f"console on http://{args.host}:{args.port}/{' (read-only)' if args.read_only else ''}",
        file=sys.stderr,
        flush=True,
    )
    serve(settings, host=args.host, port=args.port)
    return 0
