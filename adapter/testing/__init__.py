"""Test support: the ``rmq_kafka`` pytest plugin (fixtures for a real Kafka broker)."""

from adapter.testing.pytest_plugin import (
    DEFAULT_IMAGE,
    TopicFactory,
    create_topic,
    detect_kafka_mode,
)

__all__ = ["DEFAULT_IMAGE", "TopicFactory", "create_topic", "detect_kafka_mode"]
