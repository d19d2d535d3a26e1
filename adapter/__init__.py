"""RocketMQ's consumer-retry model on Apache Kafka.

Public API (``adapter.__all__``, pinned by ``tests/unit/test_public_api.py``)::

    # clients
    from adapter import Producer, PushConsumer, SimpleConsumer, ScheduleService
    # messages, listeners and their answers
    from adapter import (Message, MessageExt, MessageView, MessageQueue, MessageModel,
                         MessageListenerConcurrently, MessageListenerOrderly, ListenerMode,
                         ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus,
                         ConsumeOrderlyContext, ConsumeOrderlyStatus, DeadLetterReason)
    # options and what the clients report
    from adapter import (ConsumeFromWhere, DelayLevels, DeliveryGuarantee, Ordering,
                         SimpleConsumerBackend, SendResult, SendStatus, TopicStats,
                         CircuitBreaker, CircuitChange, CircuitState, OpenCircuit)
    # topics
    from adapter import naming, ensure_group_topics, ensure_topics, plan_topics
    # errors (all derive from AdapterError)
    from adapter import (AdapterError, AuthenticationError, BrokerUnavailableError,
                         ClientClosedError, ClientLoopError, ConfigError,
                         DeadLetterBodyError, FlowControlError, InvalidDelayLevelError,
                         InvalidInputError, InvalidReceiptHandleError, KafkaClientError,
                         ListenerResultError, MalformedHeaderError, MessageTooLargeError,
                         PossiblyPersistedError, RetriesExhaustedError, SendError,
                         SendTimeoutError, ShutdownTimeoutError, TlsError, TopicNameError,
                         UnackedLimitError, UnknownTopicError)

The confluent-kafka-shaped drop-in is :mod:`adapter.kafka` (``from adapter.kafka import
Consumer``); asyncio front ends are in :mod:`adapter.aio`.

``import adapter`` imports none of them: each name is imported on first use (PEP 562), so
a program that needs the naming rules does not load Kafka clients, and none loads Spark,
the analytics, the benchmarks or the CLI.  ``adapter.__version__`` is the version
(``rmq-kafka --version`` prints it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# the one place the version is written: pyproject.toml reads it (``dynamic = ["version"]``),
# so the installed distribution's metadata, ``rmq-kafka --version`` and this agree
__version__ = "0.1.0"

if TYPE_CHECKING:
    from adapter import naming as naming
    from adapter.clients.producer import (
        Producer as Producer,
    )
    from adapter.clients.producer import (
        SendResult as SendResult,
    )
    from adapter.clients.producer import (
        SendStatus as SendStatus,
    )
    from adapter.clients.push.push_consumer import (
        ConsumeConcurrentlyContext as ConsumeConcurrentlyContext,
    )
    from adapter.clients.push.push_consumer import (
        ConsumeOrderlyContext as ConsumeOrderlyContext,
    )
    from adapter.clients.push.push_consumer import (
        ConsumeOrderlyStatus as ConsumeOrderlyStatus,
    )
    from adapter.clients.push.push_consumer import (
        MessageListenerConcurrently as MessageListenerConcurrently,
    )
    from adapter.clients.push.push_consumer import (
        MessageListenerOrderly as MessageListenerOrderly,
    )
    from adapter.clients.push.push_consumer import (
        MessageQueue as MessageQueue,
    )
    from adapter.clients.push.push_consumer import (
        Ordering as Ordering,
    )
    from adapter.clients.push.push_consumer import (
        PushConsumer as PushConsumer,
    )
    from adapter.clients.push.push_consumer import (
        TopicStats as TopicStats,
    )
    from adapter.clients.simple.simple_consumer import (
        MessageView as MessageView,
    )
    from adapter.clients.simple.simple_consumer import (
        SimpleConsumer as SimpleConsumer,
    )
    from adapter.clients.simple.simple_consumer import (
        SimpleConsumerBackend as SimpleConsumerBackend,
    )
    from adapter.core.breaker import (
        CircuitBreaker as CircuitBreaker,
    )
    from adapter.core.breaker import (
        CircuitChange as CircuitChange,
    )
    from adapter.core.breaker import (
        CircuitState as CircuitState,
    )
    from adapter.core.breaker import (
        OpenCircuit as OpenCircuit,
    )
    from adapter.core.delay import (
        DelayLevels as DelayLevels,
    )
    from adapter.core.listener import (
        ListenerMode as ListenerMode,
    )
    from adapter.core.message import (
        Message as Message,
    )
    from adapter.core.message import (
        MessageExt as MessageExt,
    )
    from adapter.core.offsets import (
        ConsumeFromWhere as ConsumeFromWhere,
    )
    from adapter.core.routing import (
        ConsumeConcurrentlyStatus as ConsumeConcurrentlyStatus,
    )
    from adapter.core.routing import (
        DeadLetterReason as DeadLetterReason,
    )
    from adapter.core.routing import (
        MessageModel as MessageModel,
    )
    from adapter.errors import (
        AdapterError as AdapterError,
    )
    from adapter.errors import (
        AuthenticationError as AuthenticationError,
    )
    from adapter.errors import (
        BrokerUnavailableError as BrokerUnavailableError,
    )
    from adapter.errors import (
        ClientClosedError as ClientClosedError,
    )
    from adapter.errors import (
        ClientLoopError as ClientLoopError,
    )
    from adapter.errors import (
        ConfigError as ConfigError,
    )
    from adapter.errors import (
        DeadLetterBodyError as DeadLetterBodyError,
    )
    from adapter.errors import (
        FlowControlError as FlowControlError,
    )
    from adapter.errors import (
        InvalidDelayLevelError as InvalidDelayLevelError,
    )
    from adapter.errors import (
        InvalidInputError as InvalidInputError,
    )
    from adapter.errors import (
        InvalidReceiptHandleError as InvalidReceiptHandleError,
    )
    from adapter.errors import (
        KafkaClientError as KafkaClientError,
    )
    from adapter.errors import (
        ListenerResultError as ListenerResultError,
    )
    from adapter.errors import (
        MalformedHeaderError as MalformedHeaderError,
    )
    from adapter.errors import (
        MessageTooLargeError as MessageTooLargeError,
    )
    from adapter.errors import (
        PossiblyPersistedError as PossiblyPersistedError,
    )
    from adapter.errors import (
        RetriesExhaustedError as RetriesExhaustedError,
    )
    from adapter.errors import (
        SendError as SendError,
    )
    from adapter.errors import (
        SendTimeoutError as SendTimeoutError,
    )
    from adapter.errors import (
        ShutdownTimeoutError as ShutdownTimeoutError,
    )
    from adapter.errors import (
        TlsError as TlsError,
    )
    from adapter.errors import (
        TopicNameError as TopicNameError,
    )
    from adapter.errors import (
        UnackedLimitError as UnackedLimitError,
    )
    from adapter.errors import (
        UnknownTopicError as UnknownTopicError,
    )
    from adapter.io.topics import (
        ensure_group_topics as ensure_group_topics,
    )
    from adapter.io.topics import (
        ensure_topics as ensure_topics,
    )
    from adapter.io.topics import (
        plan_topics as plan_topics,
    )
    from adapter.services.schedule import (
        DeliveryGuarantee as DeliveryGuarantee,
    )
    from adapter.services.schedule import (
        ScheduleService as ScheduleService,
    )

#: public name -> the module it lives in (imported on first use)
_LAZY: dict[str, str] = {
    "naming": "adapter.naming",
    # adapter.clients.producer
    "Producer": "adapter.clients.producer",
    "SendResult": "adapter.clients.producer",
    "SendStatus": "adapter.clients.producer",
    # adapter.clients.push.push_consumer
    "ConsumeConcurrentlyContext": "adapter.clients.push.push_consumer",
    "ConsumeOrderlyContext": "adapter.clients.push.push_consumer",
    "ConsumeOrderlyStatus": "adapter.clients.push.push_consumer",
    "MessageListenerConcurrently": "adapter.clients.push.push_consumer",
    "MessageListenerOrderly": "adapter.clients.push.push_consumer",
    "MessageQueue": "adapter.clients.push.push_consumer",
    "Ordering": "adapter.clients.push.push_consumer",
    "PushConsumer": "adapter.clients.push.push_consumer",
    "TopicStats": "adapter.clients.push.push_consumer",
    # adapter.clients.simple.simple_consumer
    "MessageView": "adapter.clients.simple.simple_consumer",
    "SimpleConsumer": "adapter.clients.simple.simple_consumer",
    "SimpleConsumerBackend": "adapter.clients.simple.simple_consumer",
    # adapter.core.breaker
    "CircuitBreaker": "adapter.core.breaker",
    "CircuitChange": "adapter.core.breaker",
    "CircuitState": "adapter.core.breaker",
    "OpenCircuit": "adapter.core.breaker",
    # adapter.core.delay
    "DelayLevels": "adapter.core.delay",
    # adapter.core.listener
    "ListenerMode": "adapter.core.listener",
    # adapter.core.message
    "Message": "adapter.core.message",
    "MessageExt": "adapter.core.message",
    # adapter.core.offsets
    "ConsumeFromWhere": "adapter.core.offsets",
    # adapter.core.routing
    "ConsumeConcurrentlyStatus": "adapter.core.routing",
    "DeadLetterReason": "adapter.core.routing",
    "MessageModel": "adapter.core.routing",
    # adapter.errors
    "AdapterError": "adapter.errors",
    "AuthenticationError": "adapter.errors",
    "BrokerUnavailableError": "adapter.errors",
    "ClientClosedError": "adapter.errors",
    "ClientLoopError": "adapter.errors",
    "ConfigError": "adapter.errors",
    "DeadLetterBodyError": "adapter.errors",
    "FlowControlError": "adapter.errors",
    "InvalidDelayLevelError": "adapter.errors",
    "InvalidInputError": "adapter.errors",
    "InvalidReceiptHandleError": "adapter.errors",
    "KafkaClientError": "adapter.errors",
    "ListenerResultError": "adapter.errors",
    "MalformedHeaderError": "adapter.errors",
    "MessageTooLargeError": "adapter.errors",
    "PossiblyPersistedError": "adapter.errors",
    "RetriesExhaustedError": "adapter.errors",
    "SendError": "adapter.errors",
    "SendTimeoutError": "adapter.errors",
    "ShutdownTimeoutError": "adapter.errors",
    "TlsError": "adapter.errors",
    "TopicNameError": "adapter.errors",
    "UnackedLimitError": "adapter.errors",
    "UnknownTopicError": "adapter.errors",
    # adapter.io.topics
    "ensure_group_topics": "adapter.io.topics",
    "ensure_topics": "adapter.io.topics",
    "plan_topics": "adapter.io.topics",
    # adapter.services.schedule
    "DeliveryGuarantee": "adapter.services.schedule",
    "ScheduleService": "adapter.services.schedule",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'adapter' has no attribute {name!r}")
    if name == "naming":
        value: Any = importlib.import_module(module)
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
