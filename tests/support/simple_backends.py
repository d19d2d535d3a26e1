"""One SimpleConsumer factory for both backends (docs/semantics.md §4.13, §4.13.1), so a
test whose rule holds on both runs on both.

The share backend's options come from here for every share test: a short group lock (the
embedded broker allows 1 s, its ``group.share.min.record.lock.duration.ms``), reading from
the first offset, one retry/DLQ partition.  The classic backend commits stored offsets
often, so tests can watch the committed offset move.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapter.clients.simple.simple_consumer import SimpleConsumer
from adapter.embedded.jars import kafka_version

#: The oldest Kafka release the share backend runs on: it sets the group's own
#: ``share.delivery.count.limit``, a group config from Kafka 4.3 (4.2 refuses it as unknown,
#: and the backend fails at start with a ConfigError naming ``max_delivery_attempts``).
SHARE_BACKEND_MIN_KAFKA = (4, 3)


def share_backend_unsupported() -> bool:
    """The embedded broker is older than the share backend needs."""
    major, minor = (int(x) for x in kafka_version().split(".")[:2])
    return (major, minor) < SHARE_BACKEND_MIN_KAFKA


#: ``@pytest.mark.parametrize("backend", BACKENDS)``: the test ids read ``[classic]``, ``[share]``
#: (the share cases skipped on an embedded broker older than the share backend needs).
BACKENDS = (
    "classic",
    pytest.param(
        "share",
        marks=pytest.mark.skipif(
            share_backend_unsupported(),
            reason="the share backend needs Kafka 4.3+ (per-group share.delivery.count.limit)",
        ),
    ),
)

#: The share group's record lock of most share tests (expiries take seconds).
LOCK_S = 3.0

#: Commit stored offsets often, so tests can watch the committed offset move (classic).
FAST = {"auto.commit.interval.ms": 100, "auto.offset.reset": "earliest"}

#: The classic backend's option that the share backend does not take.
_SHARE_ONLY = ("lock_duration",)

#: What ``InvalidReceiptHandleError`` says of a handle whose invisible duration ran out.
EXPIRED = {"classic": "expired", "share": "ran out"}


def simple_consumer(
    backend: str, bootstrap: str, topic: str | None, group: str, **options: Any
) -> SimpleConsumer:
    """A consumer of ``group`` on ``backend``, subscribed to ``topic``, not started (a
    ``with`` block or ``start()`` starts it).  ``lock_duration`` is ignored on classic."""
    options.setdefault("partitions", 1)
    if backend == "share":
        options.setdefault("lock_duration", LOCK_S)
        options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    else:
        for name in _SHARE_ONLY:
            options.pop(name, None)
        conf = {"bootstrap.servers": bootstrap, **FAST}
    sc = SimpleConsumer(conf, group, backend=backend, **options)
    if topic is not None:
        sc.subscribe(topic)
    return sc
