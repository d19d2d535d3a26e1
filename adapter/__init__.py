"""RocketMQ's consumer-retry model on Apache Kafka.

Public API::

    from adapter import (Producer, PushConsumer, ScheduleService, Message, MessageExt,
                         ConsumeConcurrentlyStatus, ConsumeConcurrentlyContext, MessageModel,
                         DelayLevels, naming)
"""

from adapter import naming
from adapter.clients.producer import Producer, SendResult, SendStatus
from adapter.clients.push_consumer import (
    ConsumeConcurrentlyContext,
    MessageQueue,
    PushConsumer,
    TopicStats,
)
from adapter.core.delay import DelayLevels
from adapter.core.message import Message, MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus, DeadLetterReason, MessageModel
from adapter.errors import (
    AdapterError,
    AuthenticationError,
    BrokerUnavailableError,
    ConfigError,
    InvalidDelayLevelError,
    InvalidInputError,
    KafkaClientError,
    ListenerResultError,
    MessageTooLargeError,
    PossiblyPersistedError,
    SendError,
    TopicNameError,
    UnknownTopicError,
)
from adapter.io.topics import ensure_group_topics, ensure_topics, plan_topics
from adapter.services.schedule_service import DeliveryGuarantee, ScheduleService

__all__ = [
    "AdapterError",
    "AuthenticationError",
    "BrokerUnavailableError",
    "ConfigError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "DeadLetterReason",
    "DelayLevels",
    "DeliveryGuarantee",
    "InvalidDelayLevelError",
    "InvalidInputError",
    "KafkaClientError",
    "ListenerResultError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageTooLargeError",
    "PossiblyPersistedError",
    "Producer",
    "PushConsumer",
    "ScheduleService",
    "SendError",
    "SendResult",
    "SendStatus",
    "TopicNameError",
    "TopicStats",
    "UnknownTopicError",
    "ensure_group_topics",
    "ensure_topics",
    "naming",
    "plan_topics",
]
