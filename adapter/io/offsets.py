"""The one retry policy for blocking offset and metadata lookups (a group's committed
offsets, a topic's partitions): bounded, with back-off, each failed try logged.

A lookup that fails transiently (a coordinator moving, a leader election) must neither
fail the client nor be taken as "nothing committed" (that would rewind or skip): it is
asked again a few times, and only then does the caller decide what a missing answer means.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tenacity
from confluent_kafka import KafkaException, TopicPartition

__all__ = ["LOOKUP_ATTEMPTS", "LOOKUP_TIMEOUT_S", "committed_offsets", "retrying_lookup"]

log = logging.getLogger("adapter.io.offsets")

#: Bound on one lookup request (seconds).
LOOKUP_TIMEOUT_S = 10.0
#: Tries of one lookup before its error stands (back-off 0.2 s, 0.4 s, 0.8 s between them).
LOOKUP_ATTEMPTS = 4

T = TypeVar("T")


def retrying_lookup(
    call: Callable[[], T],
    *,
    what: str = "lookup",
    logger: logging.Logger = log,
    sleep: Callable[[float], None] = time.sleep,
    give_up: Callable[[], bool] = lambda: False,
) -> T:
    """``call()``, asked again with back-off while it raises ``KafkaException``; the last
    error is raised.  Each failed try is logged as ``"<what> failed (<error>); retrying"`` on
    ``logger`` (the caller's, so the line names the client).  No try follows one after which
    ``give_up()`` is true (a client that is stopping does not wait out the retries)."""
    retrying = tenacity.Retrying(
        stop=lambda state: state.attempt_number >= LOOKUP_ATTEMPTS or give_up(),
        wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
        retry=tenacity.retry_if_exception_type(KafkaException),
        before_sleep=lambda state: logger.warning(
            "%s failed (%s); retrying",
            what,
            state.outcome.exception() if state.outcome else None,
        ),
        sleep=sleep,
        reraise=True,
    )
    return retrying(call)


def committed_offsets(
    consumer: Any,
    partitions: Sequence[Any],
    *,
    timeout: float = LOOKUP_TIMEOUT_S,
    logger: logging.Logger = log,
    sleep: Callable[[float], None] = time.sleep,
    give_up: Callable[[], bool] = lambda: False,
) -> list[Any] | None:
    """The group's committed offsets for ``partitions`` (anything with ``topic`` and
    ``partition``), in their order; ``None`` when the lookup failed even after retries (a
    transient error must never rewind anything), or after a failed try once ``give_up()``."""
    tps = [TopicPartition(p.topic, p.partition) for p in partitions]
    try:
        result: list[Any] = retrying_lookup(
            lambda: consumer.committed(tps, timeout),
            what="reading committed offsets",
            logger=logger,
            sleep=sleep,
            give_up=give_up,
        )
    except KafkaException:
        return None
    return result
