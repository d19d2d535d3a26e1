"""Thin I/O around the pure core: Kafka clients, created lazily."""
