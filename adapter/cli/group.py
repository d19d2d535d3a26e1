"""``rmq-kafka group progress|reset-offset``: a consumer group's progress (committed and end
offsets, lag, members, DLQ size) and offset resets (``resetOffsetByTime``)."""

from __future__ import annotations

import argparse
from typing import Any

from adapter.cli.options import add_admin_args, admin_config, emit
from adapter.core.offsets import ConsumeFromWhere

__all__ = ["add_parser", "cmd_group", "reset_target"]

_CONSUME_FROM = {
    "last": ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    "first": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    "unknown": None,
}


def add_parser(sub: Any) -> None:
    g = sub.add_parser("group", help="a consumer group's progress; reset its offsets")
    gsub = g.add_subparsers(dest="action", required=True)
    gp = gsub.add_parser(
        "progress",
        help="committed offset, end offset and lag per partition, members, DLQ size",
    )
    gp.add_argument("--group", required=True, help="the consumer group")
    gp.add_argument(
        "--consume-from",
        choices=("last", "first", "unknown"),
        default="last",
        help="where the group starts on a partition it has no committed offset on (its "
        "consume_from_where: last, the default, counts nothing; first counts from the log "
        "start); its retry topic is always read from its start",
    )
    add_admin_args(gp)
    gp.set_defaults(func=cmd_group)
    gr = gsub.add_parser(
        "reset-offset",
        help="move the group's offsets on a topic (resetOffsetByTime); refuses a live group "
        "unless --force",
    )
    gr.add_argument("--group", required=True, help="the consumer group (stopped, or --force)")
    gr.add_argument("--topic", required=True, help="logical topic name (e.g. orders, %%RETRY%%G)")
    to = gr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-time", metavar="ISO8601", help="e.g. 2026-11-23T10:00:00Z")
    to.add_argument("--to-earliest", action="store_true", help="the earliest retained offset")
    to.add_argument("--to-latest", action="store_true", help="the end: skip everything unread")
    gr.add_argument(
        "--force",
        action="store_true",
        help="on a live group: have its members reset their own partitions (via rmq.control) "
        "and wait for their acknowledgements (--timeout)",
    )
    add_admin_args(gr)
    gr.set_defaults(func=cmd_group)


def cmd_group(args: argparse.Namespace) -> int:
    from adapter.ops.admin import group_progress, reset_group_offsets
    from adapter.ops.errors import ResetIncompleteError

    config = admin_config(args)
    if args.action == "progress":
        progress = group_progress(
            config,
            args.group,
            timeout_s=args.timeout,
            consume_from_where=_CONSUME_FROM[args.consume_from],
        )
        emit(args, progress.to_json(), progress.render())
        return 0
    target = reset_target(args)
    try:
        result = reset_group_offsets(
            config, args.group, args.topic, target, force=args.force, timeout_s=args.timeout
        )
    except ResetIncompleteError as exc:  # say what was applied, then fail
        emit(args, {**exc.result.to_json(), "error": str(exc)}, exc.result.render())
        raise
    emit(args, result.to_json(), result.render())
    return 0


def reset_target(args: argparse.Namespace) -> Any:
    from adapter.core.control import ResetTarget
    from adapter.core.timespec import parse_time

    if args.to_earliest:
        return ResetTarget.earliest()
    if args.to_latest:
        return ResetTarget.latest()
    return ResetTarget.at(parse_time(args.to_time, "--to-time"))
