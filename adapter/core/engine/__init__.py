"""The consume engine: what a consumer does with fetched messages, as state machines.

Pure: no Kafka client, no clock reads, no threads.  A consumer's I/O loop feeds each engine
events (records fetched, a listener's result, a copy published or refused, time passing,
partitions assigned or revoked) and carries out the actions it returns (run these batches,
send this copy back, pause or resume a partition, store these offsets).

* :mod:`.tracking` -- a partition's fetched runs and the offset that is safe to commit;
* :mod:`.concurrent` -- RocketMQ's concurrent consumption: batches, ``ack_index``, the
  retry ladder, consume timeouts, local retries after a failed send-back, flow control.
"""

from adapter.core.engine.actions import (
    Action,
    Drain,
    Dropped,
    EngineOptions,
    Hurry,
    Pause,
    Resume,
    RunWork,
    SendBack,
    StoreOffsets,
    TimedOut,
)
from adapter.core.engine.concurrent import ConcurrentEngine
from adapter.core.engine.tracking import Work
from adapter.core.types import TP

__all__ = [
    "TP",
    "Action",
    "ConcurrentEngine",
    "Drain",
    "Dropped",
    "EngineOptions",
    "Hurry",
    "Pause",
    "Resume",
    "RunWork",
    "SendBack",
    "StoreOffsets",
    "TimedOut",
    "Work",
]
