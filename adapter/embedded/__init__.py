"""A real single-node Apache Kafka broker (KRaft) for tests, demos and local development."""

from adapter.embedded.broker import (
    DEFAULT_INSTANCE,
    KAFKA_VERSION,
    BrokerStatus,
    EmbeddedKafka,
    EmbeddedKafkaError,
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
    "ensure_jars",
    "kafka_home",
    "lib_dir",
    "start_default",
    "status_default",
    "stop_default",
]
