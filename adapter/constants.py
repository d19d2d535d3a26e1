"""Every header name, topic prefix and default of the project, in one place.

RocketMQ message properties travel as Kafka headers whose key is the RocketMQ property
name and whose value is a UTF-8 string (docs/semantics.md §3).  Names starting with
``RMQ_`` are this project's own additions; they are documented in the README's header table.
"""

from __future__ import annotations

from typing import Final

# --- RocketMQ properties (MessageConst in RocketMQ 4.x) ------------------------------------
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
#: RocketMQ 5 timer messages: absolute delivery time in epoch milliseconds.
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
#: RocketMQ 5 names for where a dead letter came from.
PROPERTY_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"

# --- this project's own headers --------------------------------------------------------------
#: Epoch milliseconds at which a message parked on a delay topic becomes due.  Set by the
#: sender (send time + level delay).  The record timestamp is never used for this.
HEADER_DUE_MS: Final = "RMQ_DUE_MS"
#: Consumer group that sent a message back (retry and DLQ entries).
HEADER_GROUP: Final = "RMQ_GROUP"
#: Partition the failed message was read from (retry and DLQ entries).
HEADER_ORIGIN_PARTITION: Final = "RMQ_ORIGIN_PARTITION"
#: Offset the failed message was read from (retry and DLQ entries).
HEADER_ORIGIN_OFFSET: Final = "RMQ_ORIGIN_OFFSET"
#: Born timestamp (epoch ms) of the first delivery; set on the first hop and kept, so that
#: analytics can measure time to success across retries.
HEADER_ORIGIN_BORN_MS: Final = "RMQ_ORIGIN_BORN_MS"
#: Exception type (or status) of the last failure, on DLQ entries.
HEADER_FAILURE_TYPE: Final = "RMQ_FAILURE_TYPE"
#: Truncated message of the last failure, on DLQ entries.
HEADER_FAILURE_MESSAGE: Final = "RMQ_FAILURE_MESSAGE"
#: Why a message was dead-lettered: see :class:`adapter.core.routing.DeadLetterReason`.
HEADER_DLQ_REASON: Final = "RMQ_DLQ_REASON"
#: Epoch milliseconds at which a message was dead-lettered.
HEADER_DLQ_TIME_MS: Final = "RMQ_DLQ_TIME_MS"
#: Malformed-header notes the codec made while reading the message (``;``-separated).
HEADER_MALFORMED: Final = "RMQ_MALFORMED"
#: On a DLQ entry whose body was left out because the broker refused even the dead-letter
#: copy (too large): ``<n> bytes; body at <kafka topic>[<partition>]@<offset>``.
HEADER_BODY_OMITTED: Final = "RMQ_BODY_OMITTED"

#: Headers that describe one hop; they are replaced (never duplicated) on every hop.
SYSTEM_HEADERS: Final = frozenset(
    {
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_CONSUME_START_TIMESTAMP,
        PROPERTY_TIMER_DELIVER_MS,
        HEADER_DUE_MS,
        HEADER_GROUP,
        HEADER_ORIGIN_PARTITION,
        HEADER_ORIGIN_OFFSET,
        HEADER_FAILURE_TYPE,
        HEADER_FAILURE_MESSAGE,
        HEADER_DLQ_REASON,
        HEADER_DLQ_TIME_MS,
        HEADER_MALFORMED,
        HEADER_BODY_OMITTED,
        PROPERTY_DLQ_ORIGIN_TOPIC,
        PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    }
)

#: The trace topic consume/forward events go to when tracing is on (RocketMQ's name).
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"

# --- logical topic names (RocketMQ MixAll) ----------------------------------------------------
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
NAMESPACE_SEPARATOR: Final = "%"

# --- physical Kafka topic names (see adapter.core.naming) -------------------------------------
KAFKA_TOPIC_MAX_LENGTH: Final = 249
KAFKA_RETRY_PREFIX: Final = "rmq.retry."
KAFKA_DLQ_PREFIX: Final = "rmq.dlq."
KAFKA_SCHEDULE_PREFIX: Final = "rmq.schedule."
#: Physical names starting with this are reserved for the adapter.
KAFKA_RESERVED_PREFIX: Final = "rmq."

# --- defaults (RocketMQ 4.x DefaultMQPushConsumer / DefaultMQProducer / MessageStoreConfig) ---
DEFAULT_MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: The first retry uses level ``RETRY_LEVEL_BASE + reconsumeTimes`` (3 → 10 s).
RETRY_LEVEL_BASE: Final = 3
DEFAULT_MAX_RECONSUME_TIMES: Final = 16
DEFAULT_SEND_BACK_RETRY_INTERVAL_S: Final = 5.0
DEFAULT_CONSUME_TIMEOUT_S: Final = 15 * 60.0
DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE: Final = 1
DEFAULT_PULL_BATCH_SIZE: Final = 32
DEFAULT_PULL_THRESHOLD_FOR_QUEUE: Final = 1000
DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB: Final = 100
DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN: Final = 2000
DEFAULT_CONSUME_THREAD_MAX: Final = 20
DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS: Final = 1000
DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED: Final = 2
DEFAULT_RETRY_TIMES_WHEN_SEND_ASYNC_FAILED: Final = 2
#: How long a send may wait for the broker's acknowledgement (``message.timeout.ms``):
#: Kafka's producers' ``delivery.timeout.ms`` default, not RocketMQ's ``sendMsgTimeout`` of
#: 3 s.  A leader move on a cluster takes the broker session timeout and an election (about
#: 10 s with Kafka's defaults): with 3 s a send failed on every routine leader move.
DEFAULT_SEND_MSG_TIMEOUT_MS: Final = 120_000
#: How often the adapter's consumers refresh their metadata (``topic.metadata.refresh.
#: interval.ms``, librdkafka's 5 minutes otherwise): a subscribed topic a consumer was told
#: is missing (a retry topic created a moment before on another broker of a cluster, a
#: user topic created after subscribe, a new delay-level topic of a pattern) is looked up
#: again this soon.
METADATA_REFRESH_MS: Final = 10_000
#: How often a group member looks up the subscribed topics it holds no partition of, on its
#: own (:mod:`adapter.core.subscription`): the refresh above did not always come on a cluster.
SUBSCRIPTION_CHECK_S: Final = 15.0
#: The longest a send waits for a topic's metadata (Kafka's producers' ``max.block.ms``).
MAX_BLOCK_MS: Final = 60_000
#: Flow-control back-off of the producer (gRPC connection-backoff style).
BACKOFF_INITIAL_S: Final = 1.0
BACKOFF_MULTIPLIER: Final = 1.6
BACKOFF_JITTER: Final = 0.2
BACKOFF_MAX_S: Final = 120.0
#: ``message.max.bytes`` of the adapter's own producers (send-backs, ScheduleService forwards)
#: unless the config sets it: the broker's default record-batch limit, above librdkafka's
#: 1 000 000, so a record a default producer could write still fits once the retry or DLQ
#: headers are added (the broker still enforces each topic's ``max.message.bytes``).
HOP_MESSAGE_MAX_BYTES: Final = 1_048_588
#: Failure messages stored on DLQ entries are cut to this many characters.
FAILURE_MESSAGE_MAX_CHARS: Final = 512
#: Group id the ScheduleService uses unless told otherwise.
DEFAULT_SCHEDULE_SERVICE_GROUP: Final = "rmq-schedule-service"
#: librdkafka's "any partition" (``RD_KAFKA_PARTITION_UA``): its partitioner picks one.
ANY_PARTITION: Final = -1
