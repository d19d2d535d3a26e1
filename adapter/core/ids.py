"""Message ids (``UNIQ_KEY``): a process prefix and a counter, like RocketMQ's client ids.

Pure: the prefix (in the producer: process id and random bits) is made by the caller and
passed in; nothing here reads a clock, the process or a random source.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from adapter.errors import InvalidInputError

#: How many ids a generator makes before its counter (12 hex digits) starts again at 0.
COUNTER_SPAN = 1 << 48


class MessageIdGenerator:
    """32 upper-case hex characters: 20 of process prefix, 12 of counter.

    Thread-safe without a lock: each id is one ``next()`` on a chain of C iterators (a
    counter that wraps at :data:`COUNTER_SPAN`, formatted by ``bytes.__mod__``), which
    the GIL runs as a whole, so the producer's hot path pays one ``next()`` per id.
    """

    __slots__ = ("ids", "prefix")

    def __init__(self, prefix: bytes, start: int = 0) -> None:
        if not isinstance(prefix, bytes) or len(prefix) != 10:
            raise InvalidInputError("prefix", prefix, "must be 10 bytes")
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < COUNTER_SPAN:
            raise InvalidInputError("start", start, f"must be an int in [0, {COUNTER_SPAN})")
        #: the 20 hex digits every id of this generator starts with
        self.prefix = prefix.hex().upper()
        counters = itertools.chain(
            range(start, COUNTER_SPAN),
            itertools.chain.from_iterable(itertools.repeat(range(COUNTER_SPAN))),
        )
        #: the ids as ASCII bytes, as ``UNIQ_KEY`` goes into a header (``next(gen.ids)``)
        self.ids: Iterator[bytes] = map((self.prefix.encode() + b"%012X").__mod__, counters)
