"""The analytics path: Avro consume traces on a Kafka topic, read by Spark jobs.

* :mod:`adapter.io.avro` -- the ``.avsc`` schemas
  (parsed once) and codecs;
* :mod:`adapter.io.trace_sink` -- :class:`KafkaTraceSink`,
  what ``trace_topic=`` creates;
* :mod:`adapter.analytics.jars` -- the pinned Spark connector jars (fetched once, cached);
* :mod:`adapter.analytics.session` -- SparkSession + Kafka security -> ``kafka.*`` options;
* :mod:`adapter.analytics.transforms` -- pure DataFrame -> DataFrame transformations;
* :mod:`adapter.analytics.kafka_source` -- Spark's Kafka source: row schema, errors in words;
* :mod:`adapter.analytics.jobs` -- the streaming consume-metrics job;
* :mod:`adapter.analytics.dlq_report_job` -- the batch DLQ report;
* :mod:`adapter.bench.analytics` -- the analytics benchmark.

Importing this package (or the trace sink) does not import pyspark: only the consumer's
dependencies are needed to emit traces; the Spark modules need the ``spark`` extra.
"""

from __future__ import annotations

__all__ = ["KafkaTraceSink"]


def __getattr__(name: str) -> object:
    if name == "KafkaTraceSink":
        from adapter.io.trace_sink import KafkaTraceSink

        return KafkaTraceSink
    raise AttributeError(name)
