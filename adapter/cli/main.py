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
import logging
import sys
from collections.abc import Sequence

from confluent_kafka import KafkaException

import adapter
from adapter.cli import (
    acl,
    analytics,
    bench,
    broker,
    console,
    dashboard,
    demo,
    dlq,
    group,
    msg,
    schedule,
    topics,
)
from adapter.cli.options import add_verbose_everywhere
from adapter.embedded.broker import EmbeddedKafkaError
from adapter.errors import AdapterError
from adapter.io.signals import TerminateAsInterrupt

__all__ = ["DESCRIPTION", "build_parser", "main"]

# what ``--help`` shows first: plain text (the module docstring above is reStructuredText)
DESCRIPTION = (
    "rmq-kafka: the embedded Kafka broker, topics, the ScheduleService, DLQ tools, "
    "admin commands (group progress and offset resets, message journeys, ScheduleService "
    "status), the demo and the benchmarks"
)


def build_parser() -> argparse.ArgumentParser:
    """The ``rmq-kafka`` parser: each command family adds its own subcommands, in the order
    ``--help`` lists them."""
    parser = argparse.ArgumentParser(prog="rmq-kafka", description=DESCRIPTION)
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging (also librdkafka's own lines)"
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"rmq-kafka {adapter.__version__}",
        help="print the installed version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    broker.add_parser(sub)
    topics.add_parser(sub)
    schedule.add_service_parser(sub)
    dlq.add_parser(sub)
    group.add_parser(sub)
    msg.add_parser(sub)
    schedule.add_status_parser(sub)
    console.add_parser(sub)
    acl.add_parser(sub)
    dashboard.add_parser(sub)
    demo.add_parser(sub)
    analytics.add_parser(sub)
    bench.add_parser(sub)
    add_verbose_everywhere(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signals = TerminateAsInterrupt()
    signals.enter()  # SIGTERM stops a long-running command as Ctrl-C does
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("rmq-kafka: stopped", file=sys.stderr)
        return 130
    except (AdapterError, EmbeddedKafkaError) as exc:
        print(f"rmq-kafka: error: {exc}", file=sys.stderr)
        return 2
    except KafkaException as exc:  # a client error no layer mapped: still one line
        print(f"rmq-kafka: error: Kafka: {exc}", file=sys.stderr)
        return 2
    finally:
        signals.exit()
