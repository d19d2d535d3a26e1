"""The public API of ``adapter``: its names are pinned, the package docstring lists exactly
them, each resolves, and ``import adapter`` loads none of them (each is imported on first
use), so no Kafka client, Spark, analytics, benchmark or CLI module comes with it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import adapter

pytestmark = pytest.mark.unit

PUBLIC = [
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


def test_the_public_names_are_pinned() -> None:
    assert adapter.__all__ == PUBLIC


def test_the_docstring_lists_exactly_the_public_names() -> None:
    doc = adapter.__doc__ or ""
    block = doc[doc.index("Public API") : doc.index("The confluent-kafka-shaped")]
    code = [line.split("#")[0] for line in block.splitlines()[1:]]
    listed = set(re.findall(r"\b\w+\b", " ".join(code))) - {"from", "adapter", "import"}
    assert listed == set(PUBLIC)


def test_every_public_name_resolves_and_errors_derive_from_the_root() -> None:
    for name in PUBLIC:
        value = getattr(adapter, name)
        assert value is not None, name
        if name.endswith("Error"):
            assert issubclass(value, adapter.AdapterError), name
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        adapter.Nothing  # noqa: B018


HEAVY = ("pyspark", "confluent_kafka", "tenacity", "fastavro", "prometheus_client")
HEAVY_ADAPTER = ("adapter.analytics", "adapter.bench", "adapter.cli", "adapter.clients")


def test_import_adapter_loads_no_client_spark_analytics_bench_or_cli_module() -> None:
    code = "import sys, json, adapter; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    loaded = json.loads(out)
    heavy = [
        m
        for m in loaded
        if m.split(".")[0] in HEAVY or any(m == p or m.startswith(p + ".") for p in HEAVY_ADAPTER)
    ]
    assert heavy == []
    assert [m for m in loaded if m.startswith("adapter")] == ["adapter"]
