"""Thin I/O around the pure core: Kafka clients, created lazily."""

# every SimpleConsumer backend registers itself on import
from adapter.clients import share_consumer as share_consumer
