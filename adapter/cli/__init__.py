"""``rmq-kafka``, the command line (entry point :func:`main`, also ``adapter.cli:main``).

* :mod:`adapter.cli.main` -- the parser (:func:`build_parser`) and :func:`main`: one error
  line and exit code 2 for what the adapter or Kafka refuses;
* :mod:`adapter.cli.options` -- the options every command shares (:func:`add_kafka_args`,
  :func:`kafka_config`) and the admin commands' ``--json`` output;
* one module per command family: :mod:`~adapter.cli.broker` (``kafka``),
  :mod:`~adapter.cli.topics`, :mod:`~adapter.cli.schedule` (``schedule-service run``,
  ``schedule status``), :mod:`~adapter.cli.dlq`, :mod:`~adapter.cli.group`,
  :mod:`~adapter.cli.msg`, :mod:`~adapter.cli.demo`, :mod:`~adapter.cli.analytics`,
  :mod:`~adapter.cli.bench`.
"""

from __future__ import annotations

from adapter.cli.main import build_parser, main
from adapter.cli.options import add_kafka_args, kafka_config

__all__ = ["add_kafka_args", "build_parser", "kafka_config", "main"]
