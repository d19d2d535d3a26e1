"""A real Apache Kafka (KRaft) on 127.0.0.1 for tests, demos and local development: one
broker, or a cluster of several (``EmbeddedKafka(brokers=3)``) whose nodes can be bounced."""

from adapter.embedded.broker import (
    DEFAULT_INSTANCE,
    KAFKA_VERSION,
    BrokerStatus,
    EmbeddedKafka,
    EmbeddedKafkaError,
    KafkaNode,
    NodeStatus,
    ensure_jars,
    kafka_home,
    lib_dir,
    start_default,
    status_default,
    stop_default,
)

__all__ = [
    "DEFAULT_INSTANCE",
    "KAFKA_VERSION",
    "BrokerStatus",
    "EmbeddedKafka",
    "EmbeddedKafkaError",
    "KafkaNode",
    "NodeStatus",
    "ensure_jars",
    "kafka_home",
    "lib_dir",
    "start_default",
    "status_default",
    "stop_default",
]
