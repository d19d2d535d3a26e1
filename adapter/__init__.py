"""RocketMQ's consumer-retry model on Apache Kafka.

Public API::

    from adapter import (Producer, PushConsumer, SimpleConsumer, ScheduleService, Message,
                         MessageExt, ConsumeConcurrentlyStatus, ConsumeConcurrentlyContext,
                         ConsumeOrderlyStatus, ConsumeOrderlyContext, MessageModel,
                         ConsumeFromWhere, ListenerMode, DelayLevels, naming)

The confluent-kafka-shaped drop-in is :mod:`adapter.kafka` (``from adapter.kafka import
Consumer``); asyncio front ends are in :mod:`adapter.aio`.
"""

# the one place the version is written: pyproject.toml reads it (``dynamic = ["version"]``),
# so the installed distribution's metadata, ``rmq-kafka --version`` and this agree
__version__ = "0.1.0"

from adapter import naming
from adapter.clients.producer import Producer, SendResult, SendStatus
from adapter.clients.push.push_consumer import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageListenerConcurrently,
    MessageListenerOrderly,
    MessageQueue,
    Ordering,
    PushConsumer,
    TopicStats,
)
from adapter.clients.simple.simple_consumer import (
    MessageView,
    SimpleConsumer,
    SimpleConsumerBackend,
)
from adapter.core.breaker import CircuitBreaker, CircuitChange, CircuitState, OpenCircuit
from adapter.core.delay import DelayLevels
from adapter.core.listener import ListenerMode
from adapter.core.message import Message, MessageExt
from adapter.core.offsets import ConsumeFromWhere
from adapter.core.routing import ConsumeConcurrentlyStatus, DeadLetterReason, MessageModel
from adapter.errors import (
    AdapterError,
    AuthenticationError,
    BrokerUnavailableError,
    ClientClosedError,
    ClientLoopError,
    ConfigError,
    DeadLetterBodyError,
    FlowControlError,
    InvalidDelayLevelError,
    InvalidInputError,
    InvalidReceiptHandleError,
    KafkaClientError,
    ListenerResultError,
    MalformedHeaderError,
    MessageTooLargeError,
    PossiblyPersistedError,
    RetriesExhaustedError,
    SendError,
    SendTimeoutError,
    ShutdownTimeoutError,
    TlsError,
    TopicNameError,
    UnackedLimitError,
    UnknownTopicError,
)
from adapter.io.topics import ensure_group_topics, ensure_topics, plan_topics
from adapter.services.schedule import DeliveryGuarantee, ScheduleService

__all__ = [
    "AdapterError",
    "AuthenticationError",
    "BrokerUnavailableError",
    "CircuitBreaker",
    "CircuitChange",
    "CircuitState",
    "ClientClosedError",
    "ClientLoopError",
    "ConfigError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "DeadLetterBodyError",
    "DeadLetterReason",
    "DelayLevels",
    "DeliveryGuarantee",
    "FlowControlError",
    "InvalidDelayLevelError",
    "InvalidInputError",
    "InvalidReceiptHandleError",
    "KafkaClientError",
    "ListenerMode",
    "ListenerResultError",
    "MalformedHeaderError",
    "Message",
    "MessageExt",
    "MessageListenerConcurrently",
    "MessageListenerOrderly",
    "MessageModel",
    "MessageQueue",
    "MessageTooLargeError",
    "MessageView",
    "OpenCircuit",
    "Ordering",
    "PossiblyPersistedError",
    "Producer",
    "PushConsumer",
    "RetriesExhaustedError",
    "ScheduleService",
    "SendError",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "ShutdownTimeoutError",
    "SimpleConsumer",
    "SimpleConsumerBackend",
    "TlsError",
    "TopicNameError",
    "TopicStats",
    "UnackedLimitError",
    "UnknownTopicError",
    "ensure_group_topics",
    "ensure_topics",
    "naming",
    "plan_topics",
]
