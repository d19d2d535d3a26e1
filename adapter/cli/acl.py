"""``rmq-kafka acl print``: the least-privilege ACLs of a role (consumer, schedule-service,
producer, console), printed one a line (or as JSON), and created with ``--apply``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from adapter.cli.options import add_actions, add_admin_args, admin_config

__all__ = ["add_parser", "cmd_acl"]


def add_parser(sub: Any) -> None:
    a = sub.add_parser("acl", help="the least-privilege ACLs of each role (print, --apply)")
    add_actions(
        a,
        {
            "print": "print the ACLs a role needs (resource, pattern, operation); "
            "--apply creates them"
        },
        _args,
        cmd_acl,
    )


def _args(a: argparse.ArgumentParser, action: str) -> None:
    from adapter.ops.acls import ROLES

    a.add_argument("--role", required=True, choices=ROLES, help="the component")
    a.add_argument("--group", help="the consumer group (consumer, console)")
    a.add_argument(
        "--topic",
        action="append",
        default=[],
        help="a topic the role reads (consumer) or writes (producer, schedule-service: "
        "default every topic); repeat for more",
    )
    a.add_argument("--namespace", help="the delay levels' namespace (default: none)")
    a.add_argument(
        "--principal",
        default="User:<principal>",
        help="who gets them, e.g. User:orders-app (required with --apply)",
    )
    a.add_argument(
        "--no-create",
        action="store_true",
        help="leave out CREATE (the topics exist; clients run with auto_create_topics=False)",
    )
    a.add_argument(
        "--no-exactly-once",
        action="store_true",
        help="schedule-service: leave out the transactional id (delivery AT_LEAST_ONCE)",
    )
    a.add_argument(
        "--share",
        action="store_true",
        help="consumer: the group is a share group (SimpleConsumer backend='share'): also "
        "ALTER_CONFIGS on it (its start, delivery limit and record lock)",
    )
    a.add_argument(
        "--apply",
        action="store_true",
        help="create them on the cluster (the connecting principal needs ALTER on the cluster)",
    )
    add_admin_args(a)


def cmd_acl(args: argparse.Namespace) -> int:
    from adapter.errors import ConfigError
    from adapter.ops.acls import acl_table, apply_acls, role_acls

    specs = role_acls(
        args.role,
        group=args.group,
        topics=args.topic,
        namespace=args.namespace,
        create_topics=not args.no_create,
        exactly_once=not args.no_exactly_once,
        share=args.share,
    )
    if args.json:
        print(json.dumps([s.as_json(args.principal) for s in specs], ensure_ascii=False))
    else:
        print("\n".join(acl_table(specs, args.principal)))
    if args.apply:
        if args.principal.startswith("User:<"):
            raise ConfigError("--principal", args.principal, "--apply needs a principal")
        from adapter.io.admin import AdminSession

        session = AdminSession(admin_config(args), timeout_s=args.timeout, what="acl print")
        applied = apply_acls(session, specs, args.principal)
        if not args.json:
            print(f"applied {applied} ACL(s) for {args.principal}")
    return 0
