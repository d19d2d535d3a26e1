"""``rmq-kafka analytics stream|dlq-report`` and the ``spark/*.py`` spark-submit scripts.

Both take the project's Kafka connection settings (``-b``, ``-X key=value``,
``--config-file``); they reach Spark's Kafka source as ``kafka.*`` options (see
:func:`adapter.analytics.session.kafka_options`).  Java-client settings without a
librdkafka twin can be given as ``--kafka-option kafka.<key>=<value>``.  pyspark is imported
only when a job runs.

The command lives with the other commands.  :func:`main` is the scripts' entry point.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from adapter.cli.options import add_kafka_args as kafka_args
from adapter.cli.options import add_verbose_everywhere, kafka_config
from adapter.constants import TRACE_TOPIC

__all__ = ["add_analytics_parser", "add_parser", "cmd_analytics", "main", "run_analytics"]


def _kv(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected kafka.<key>=<value>, got {item!r}")
        out[key] = value
    return out


def add_analytics_parser(
    sub: Any, add_kafka_args: Callable[[argparse.ArgumentParser], None] = kafka_args
) -> argparse.ArgumentParser:
    """Add ``analytics`` (with ``stream`` and ``dlq-report``) to a subparsers object; each
    job takes the Kafka connection settings ``add_kafka_args`` adds (by default the ones
    every ``rmq-kafka`` command takes, :func:`adapter.cli.options.add_kafka_args`)."""
    a: argparse.ArgumentParser = sub.add_parser(
        "analytics", help="Spark jobs over the trace topic and the DLQ topics (pyspark)"
    )
    jobs = a.add_subparsers(dest="job", required=True)

    s = jobs.add_parser("stream", help="streaming consume metrics -> Parquet and/or console")
    s.add_argument("--trace-topic", default=TRACE_TOPIC, help=f"logical (default {TRACE_TOPIC})")
    s.add_argument("--output", help="Parquet directory (the parquet sink)")
    s.add_argument("--checkpoint", help="checkpoint directory (default <output>/_checkpoint)")
    s.add_argument(
        "--sink",
        action="append",
        choices=["parquet", "console"],
        help="repeatable (default: parquet when --output is given, else console)",
    )
    s.add_argument("--window", default="1 minute", help="event-time window (default: 1 minute)")
    s.add_argument("--slide", help="sliding windows (default: tumbling)")
    s.add_argument("--watermark", default="2 minutes", help="how late an event may arrive")
    s.add_argument(
        "--available-now",
        action="store_true",
        help="process what the topic holds now, then stop (the next run resumes)",
    )
    s.add_argument("--trigger", default="30 seconds", help="micro-batch interval")
    s.add_argument(
        "--starting-offsets",
        default="earliest",
        help="where a new query starts reading (Spark's startingOffsets; default: earliest)",
    )
    s.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch at most")
    s.add_argument(
        "--fail-on-data-loss",
        action="store_true",
        help="fail when records were deleted before they were read (Spark's failOnDataLoss)",
    )
    s.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    s.add_argument(
        "--kafka-option",
        action="append",
        metavar="kafka.KEY=VALUE",
        help="an option for Spark's Kafka source (repeatable)",
    )
    add_kafka_args(s)

    d = jobs.add_parser("dlq-report", help="batch DLQ report -> table, CSV and PNG chart")
    d.add_argument("--group", action="append", help="consumer group (default: every DLQ topic)")
    d.add_argument("--output", required=True, help="report directory")
    d.add_argument(
        "--top-keys", type=int, default=3, help="keys listed per group of dead letters (default: 3)"
    )
    d.add_argument("--export", action="store_true", help="also export every entry as Avro")
    d.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    d.add_argument(
        "--kafka-option",
        action="append",
        metavar="kafka.KEY=VALUE",
        help="an option for Spark's Kafka source (repeatable)",
    )
    add_kafka_args(d)
    return a


def run_analytics(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """Run the job ``args`` names with the Kafka ``config``."""
    from adapter.analytics.dlq_report_job import run_dlq_report
    from adapter.analytics.jobs import StreamJobOptions, run_consume_metrics
    from adapter.analytics.preflight import check_tls
    from adapter.analytics.session import build_spark_session

    extra = _kv(args.kafka_option)
    # a TLS connection that cannot be made is told before a Spark session is built
    check_tls(config, extra, what=f"analytics {args.job}")
    verbose = bool(getattr(args, "verbose", False))
    if not verbose:  # py4j's connection chatter is not the user's business
        logging.getLogger("py4j").setLevel(logging.WARNING)
    if args.job == "stream":
        sinks = tuple(dict.fromkeys(args.sink or (["parquet"] if args.output else ["console"])))
        opts = StreamJobOptions(
            output=args.output,
            checkpoint=args.checkpoint,
            trace_topic=args.trace_topic,
            sinks=sinks,
            window=args.window,
            slide=args.slide,
            watermark=args.watermark,
            available_now=args.available_now,
            processing_time=args.trigger,
            starting_offsets=args.starting_offsets,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            fail_on_data_loss=args.fail_on_data_loss,
            kafka_extra=extra,
        )
        spark = build_spark_session(
            "rmq-kafka consume-metrics",
            master=args.master,
            # a stateful query: adaptive execution does not apply (Spark warns and skips it)
            conf={"spark.sql.adaptive.enabled": "false"},
            verbose=verbose,
        )
        result = run_consume_metrics(spark, config, opts, progress=_progress)
        for item in result:
            _progress(_stream_summary(item, opts))
        print(json.dumps(result))
        return 0
    spark = build_spark_session("rmq-kafka dlq-report", master=args.master, verbose=verbose)
    report = run_dlq_report(
        spark,
        config,
        args.output,
        groups=args.group,
        top_keys=args.top_keys,
        export=args.export,
        kafka_extra=extra,
    )
    _progress(
        f"dlq-report: {report.dead_letters} dead letter(s) in {len(report.topics)} DLQ "
        f"topic(s), every record the topics held when the run started counted once "
        f"(a rerun replaces the report); {report.groups} summary row(s) in {report.table}"
    )
    print(json.dumps(report.summary(), indent=2))
    return 0


def _progress(line: str) -> None:
    """Progress and summary lines: stderr (stdout is the JSON result)."""
    print(line, file=sys.stderr, flush=True)


def _stream_summary(item: dict[str, Any], opts: Any) -> str:
    head = (
        f"{item['query']}: {item['batches']} micro-batch(es), "
        f"{item['input_rows']} trace record(s) read"
    )
    latest = item.get("latest")
    if latest is None:
        return head
    counted = ", ".join(f"{latest.get(k, 0)} {k}" for k in ("consumed", "retried", "dlq_arrivals"))
    return (
        f"{head}, {item['windows_written']} window row(s) written "
        f"({item['final_written']} final, {item['provisional_written']} provisional); "
        f"the table {opts.output} now holds {latest['windows']} window(s), "
        f"{latest['provisional']} provisional (the watermark has not passed them: a later "
        f"run completes them): {counted}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``spark/*.py`` scripts: ``main(["stream", ...])``."""
    from adapter.errors import AdapterError

    parser = argparse.ArgumentParser(prog="rmq-kafka-analytics")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    add_analytics_parser(sub)
    add_verbose_everywhere(parser)
    args = parser.parse_args(["analytics", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return run_analytics(args, kafka_config(args))
    except AdapterError as exc:
        print(f"rmq-kafka analytics: error: {exc}", file=sys.stderr)
        return 2


def add_parser(sub: Any) -> None:
    """``rmq-kafka analytics``."""
    add_analytics_parser(sub).set_defaults(func=cmd_analytics)


def cmd_analytics(args: argparse.Namespace) -> int:
    return run_analytics(args, kafka_config(args))
