"""``rmq-kafka dlq list|redrive``: a group's dead letters, printed or sent again."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapter.cli.options import add_kafka_args, kafka_config
from adapter.constants import HEADER_BODY_OMITTED

__all__ = ["add_parser", "cmd_dlq"]


def add_parser(sub: Any) -> None:
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
    add_kafka_args(d)
    d.set_defaults(func=cmd_dlq)


def cmd_dlq(args: argparse.Namespace) -> int:
    from adapter.ops.progress import ProgressReporter
    from adapter.services.dlq import read_dlq, redrive

    config = kafka_config(args)
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
