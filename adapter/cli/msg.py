"""``rmq-kafka msg show``: find a message by id or key in its topic, the delay levels, retry
topics and DLQs, and print its journey."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapter.cli.options import add_admin_args, admin_config, emit, positive_int

__all__ = ["add_parser", "cmd_msg"]


def add_parser(sub: Any) -> None:
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
        type=positive_int,
        default=1_000_000,
        help="stop after reading this many records (default: 1000000)",
    )
    add_admin_args(ms)
    ms.set_defaults(func=cmd_msg)


def cmd_msg(args: argparse.Namespace) -> int:
    from adapter.core.timespec import parse_since
    from adapter.io.clock import SYSTEM_CLOCK
    from adapter.ops.admin import find_message
    from adapter.ops.journey import Matcher
    from adapter.ops.progress import ProgressReporter

    matcher = Matcher(msg_id=args.id, key=args.key)
    since_ms = parse_since(args.since, SYSTEM_CLOCK.now_ms())
    config = admin_config(args)
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
    emit(args, result.to_json(), result.render())
    return 0
