"""The options every ``rmq-kafka`` command shares, and the admin commands' output.

:func:`add_kafka_args` / :func:`kafka_config`: the Kafka connection settings of every
command that talks to Kafka (``-b``, ``-X key=value``, ``--config-file``), so every client a
command creates gets the same security; the analytics commands use them too
(:mod:`adapter.cli.analytics`).  :func:`add_admin_args` / :func:`admin_config` /
:func:`emit`: the admin commands' ``--json``, ``--timeout`` and quiet client logs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from adapter.errors import AdapterError

__all__ = [
    "add_actions",
    "add_admin_args",
    "add_kafka_args",
    "admin_config",
    "emit",
    "kafka_config",
    "positive_float",
    "positive_int",
]


def kafka_config(args: argparse.Namespace) -> dict[str, Any]:
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


def add_kafka_args(p: argparse.ArgumentParser) -> None:
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


def admin_config(args: argparse.Namespace) -> dict[str, Any]:
    """The command's Kafka config; librdkafka's own log lines only with ``-v`` (a refused
    login is reported once, as the command's error)."""
    from adapter.io.admin import CLIENT_LOG

    CLIENT_LOG.setLevel(logging.DEBUG if args.verbose else logging.CRITICAL + 1)
    return kafka_config(args)


def emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        print("\n".join(lines))


def add_admin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="seconds to wait for Kafka (and, for a forced reset, the members) (default: 30)",
    )
    add_kafka_args(p)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def add_actions(
    parser: argparse.ArgumentParser,
    actions: dict[str, str],
    add_args: Any,
    func: Any,
) -> None:
    """Subcommands ``actions`` (name -> help) of a command family, each taking the options
    ``add_args(subparser, name)`` adds and running ``func`` (``args.action`` is the name)."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="{" + ",".join(actions) + "}")
    for name, text in actions.items():
        action = sub.add_parser(name, help=text, description=text)
        add_args(action, name)
        action.set_defaults(func=func)


def add_verbose_everywhere(parser: argparse.ArgumentParser) -> None:
    """``-v`` after the subcommand too (``rmq-kafka dlq list -v``), not only before it."""
    for action in parser._actions:  # argparse has no public way to walk its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if "-v" not in child._option_string_actions:
                    child.add_argument(
                        "-v",
                        "--verbose",
                        action="store_true",
                        default=argparse.SUPPRESS,
                        help="debug logging (also librdkafka's own lines)",
                    )
                add_verbose_everywhere(child)
