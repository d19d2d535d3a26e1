"""``rmq-kafka topics ensure``: create the retry, DLQ and delay-level topics a deployment
needs (raising ``max.message.bytes`` where a user topic needs more)."""

from __future__ import annotations

import argparse
from typing import Any

from adapter.cli.options import add_actions, add_kafka_args, kafka_config

__all__ = ["add_parser", "cmd_topics"]


def add_parser(sub: Any) -> None:
    t = sub.add_parser("topics", help="topic provisioning")
    add_actions(
        t,
        {"ensure": "create the retry, DLQ and delay-level topics that are missing"},
        _args,
        cmd_topics,
    )


def _args(t: argparse.ArgumentParser, action: str) -> None:
    t.add_argument(
        "--group",
        action="append",
        help="consumer group (repeatable): its %%RETRY%% and %%DLQ%% topics",
    )
    t.add_argument("--delay-levels", help="messageDelayLevel table (default: RocketMQ's 18 levels)")
    t.add_argument("--namespace", help="the delay-level topics' namespace (default: none)")
    t.add_argument(
        "--partitions", type=int, default=3, help="partitions of each new topic (default: 3)"
    )
    t.add_argument(
        "--replication-factor",
        type=int,
        help="copies of each new topic (default: the broker's default.replication.factor, "
        "raised to 3 on a cluster of 3 brokers or more)",
    )
    t.add_argument(
        "--min-insync-replicas",
        type=int,
        help="min.insync.replicas of each new topic (default: 2 where the factor is 3 or "
        "more and the broker's default is lower; else the broker's)",
    )
    t.add_argument(
        "--max-message-bytes",
        type=int,
        help="largest record of the user topics: the planned topics take this plus room for "
        "the retry/DLQ headers (existing topics are raised, never lowered)",
    )
    t.add_argument(
        "--match-topic",
        action="append",
        help="user topic (repeatable) whose max.message.bytes the planned topics must carry",
    )
    add_kafka_args(t)


def cmd_topics(args: argparse.Namespace) -> int:
    from adapter.core.delay import DelayLevels
    from adapter.io.topics import ensure_topics, plan_topics, topic_max_message_bytes

    config = kafka_config(args)
    size = args.max_message_bytes
    for topic in args.match_topic or []:
        size = max(size or 0, topic_max_message_bytes(config, topic))
    plans = plan_topics(
        groups=args.group or [],
        delay_levels=DelayLevels.coerce(args.delay_levels),
        namespace=args.namespace,
        partitions=args.partitions,
        max_message_bytes=size,
    )
    created = ensure_topics(
        config,
        plans,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
    )
    for plan in plans:
        state = "created" if created.get(plan.logical) else "exists"
        print(f"{state:8} {plan.logical}  ->  {plan.kafka_topic}")
    return 0
