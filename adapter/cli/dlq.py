"""``rmq-kafka dlq list|redrive``: a group's dead letters, printed or sent again."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from adapter.cli.options import (
    add_actions,
    add_kafka_args,
    kafka_config,
    positive_float,
    positive_int,
)
from adapter.errors import AdapterError

__all__ = ["add_parser", "cmd_dlq"]


def add_parser(sub: Any) -> None:
    d = sub.add_parser("dlq", help="list or redrive a group's dead letters")
    add_actions(
        d,
        {
            "list": "one JSON line per dead letter (with whether it was redriven)",
            "redrive": "send dead letters back for consumption (each once: a second run sends "
            "only what is new or failed before; --all sends everything again)",
        },
        _args,
        cmd_dlq,
    )


def _args(d: argparse.ArgumentParser, action: str) -> None:
    d.add_argument("--group", required=True, help="the consumer group whose %%DLQ%% it is")
    d.add_argument("--limit", type=int, help="at most this many entries, oldest first")
    if action == "redrive":
        d.add_argument(
            "--to-origin", action="store_true", help="redrive to the original topic (all groups)"
        )
        d.add_argument(
            "--skip-missing-bodies",
            action="store_true",
            help="redrive the others when a body-omitted entry's body is gone (default: refuse)",
        )
        d.add_argument(
            "--all",
            action="store_true",
            help="also entries an earlier redrive sent (redrive them again, on purpose)",
        )
        d.add_argument(
            "--dry-run",
            action="store_true",
            help="print what would be sent where; send nothing",
        )
        d.add_argument(
            "--rate", type=positive_float, help="send at most this many messages a second"
        )
        d.add_argument(
            "--max-redrives",
            type=positive_int,
            metavar="N",
            help="loop guard: skip a message redriven N times already (unless --force)",
        )
        d.add_argument(
            "--force", action="store_true", help="send messages the loop guard would skip"
        )
    add_kafka_args(d)


def cmd_dlq(args: argparse.Namespace) -> int:
    from adapter.ops.progress import ProgressReporter
    from adapter.ops.redrive import RedriveOptions, Selection, run_redrive
    from adapter.services.dlq import read_dlq

    config = kafka_config(args)
    reading = ProgressReporter(f"reading %DLQ%{args.group}")
    try:
        entries = read_dlq(config, args.group, limit=args.limit, progress=reading)
    finally:
        reading.close()
    if not entries:
        _check_dlq_exists(config, args.group)
    if args.action == "list":
        for e in entries:
            print(
                json.dumps(
                    e.summary(),
                    ensure_ascii=False,
                )
            )
        print(f"{len(entries)} dead letter(s) in %DLQ%{args.group}", file=sys.stderr)
    else:
        sending = ProgressReporter("redriving", every=10_000)
        options = RedriveOptions(
            to_origin=args.to_origin,
            skip_missing_bodies=args.skip_missing_bodies,
            again=args.all,
            dry_run=args.dry_run,
            rate=args.rate,
            max_redrives=args.max_redrives,
            force=args.force,
        )
        try:
            outcome = run_redrive(
                config,
                args.group,
                Selection(all=True, limit=args.limit),
                options,
                who=_user(),
                source="cli",
                entries=entries,
                sending=sending,
            )
        finally:
            sending.close()
        result = outcome.result
        for msg_id in result.guarded:
            print(
                f"loop guard: {msg_id} was redriven {args.max_redrives} time(s) already, "
                "not sent (--force sends it)",
                file=sys.stderr,
            )
        if result.dry_run:
            for msg_id, target in result.planned:
                print(f"would send {msg_id} to {target}")
            print(f"dry run: would redrive {len(result.planned)} of {len(entries)} message(s)")
            if result.already:
                print(
                    f"{result.already} were redriven before and would not be sent again "
                    "(--all sends them)",
                    file=sys.stderr,
                )
            return 0
        for msg_id, where, why in result.skipped:
            print(f"skipped {msg_id} (body at {where}): {why}", file=sys.stderr)
        print(f"redrove {result.sent} of {len(entries)} message(s)")
        if result.already:
            print(
                f"{result.already} were redriven before and not sent again (--all sends them)",
                file=sys.stderr,
            )
    return 0


def _user() -> str:
    """Who runs the command, for the audit log."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        return f"uid {os.getuid()}"


def _check_dlq_exists(config: dict[str, Any], group: str) -> None:
    """A DLQ topic that does not exist is a group that never ran (or a misspelt name): an
    error, not an empty list."""
    from adapter.core import naming
    from adapter.io.admin import AdminSession

    what = f"reading %DLQ%{group}"
    session = AdminSession(config, timeout_s=15.0, what=what)
    if session.partitions(naming.to_kafka(naming.dlq_topic(group)), what) is None:
        raise AdapterError(
            f"%DLQ%{group} does not exist: no consumer of group {group!r} has run here "
            "(is the name right?)"
        )
