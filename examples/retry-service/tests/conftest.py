"""The service's tests run against the retry stack: a Kafka container and a ScheduleService
container on one network (fixture ``retry_stack``, from rmq-kafka-adapter's pytest plugin,
started once per session and removed at its end).  Its delay table is short; the service
under test must use the same one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


@pytest.fixture(scope="session")
def retry_stack_delay_levels() -> str:
    # retries after 3 s, 4 s, 5 s (a first retry waits on level 3, as in RocketMQ)
    return "1s 2s 3s 4s 5s 6s"


def eventually(what: str, probe: Callable[[], T], timeout_s: float = 90.0) -> T:
    """``probe()`` until it returns something truthy (a test helper, not the service's)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f}s (last: {value!r})")
        time.sleep(0.5)
