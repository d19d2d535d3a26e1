"""Message ids (``UNIQ_KEY``): a process prefix and a counter, like RocketMQ's client ids."""

from __future__ import annotations

import itertools
import threading

from adapter.errors import InvalidInputError


class MessageIdGenerator:
    """32 upper-case hex characters: 20 of process prefix, 12 of counter.  Thread-safe."""

    def __init__(self, prefix: bytes) -> None:
        if len(prefix) != 10:
            raise InvalidInputError("prefix", prefix, "must be 10 bytes")
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next_id(self) -> str:
        with self._lock:
            n = next(self._counter)
        return f"{self._prefix}{n & 0xFFFFFFFFFFFF:012X}"
