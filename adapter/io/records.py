"""Kafka records as :class:`~adapter.core.message.MessageExt` views: the one place that turns a
``confluent_kafka.Message`` into what listeners, tools and the DLQ reader see."""

from __future__ import annotations

from confluent_kafka import Message as KafkaMessage

from adapter.core.codec import logical_topic
from adapter.core.message import MessageExt, view_of
from adapter.core.naming import is_retry_topic


class TopicNames:
    """The logical name of each Kafka topic a client reads (resolved once per topic).

    ``group``: the client's group, which names its own retry and dead-letter topics even
    when their Kafka names are shortened to a digest.
    """

    __slots__ = ("_names", "group")

    def __init__(self, group: str | None = None) -> None:
        self.group = group
        self._names: dict[str, tuple[str, bool]] = {}

    def resolve(self, kafka_topic: str, group_hint: str | None = None) -> tuple[str, bool]:
        """``(logical name, is a retry topic)`` of ``kafka_topic``."""
        known = self._names.get(kafka_topic)
        if known is None:
            logical = logical_topic(kafka_topic, group_hint or self.group)
            known = (logical, is_retry_topic(logical))
            if logical != kafka_topic or group_hint is None:
                self._names[kafka_topic] = known
        return known

    def view(self, record: KafkaMessage) -> MessageExt:
        """A lazy view of one record (headers decoded when first needed)."""
        topic = record.topic()
        assert topic is not None
        logical, retry = self.resolve(topic)
        return view_of(record, logical, retry, [None])
