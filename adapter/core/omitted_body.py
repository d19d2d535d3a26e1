"""Where the body of a dead letter sent without it stays: the ``RMQ_BODY_OMITTED`` header
written and read (:class:`OmittedBody`).  Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from adapter.constants import HEADER_BODY_OMITTED
from adapter.errors import MalformedHeaderError

_OMITTED = re.compile(
    r"([0-9]{1,19}) bytes; body at ([A-Za-z0-9._-]{1,249})\[([0-9]{1,10})\]@([0-9]{1,19})"
)
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class OmittedBody:
    """Where the body of a dead letter sent without it stays (header ``RMQ_BODY_OMITTED``).

    The broker refused even the dead-letter copy (too large), so the DLQ entry names the
    record it was read from instead; ``dlq redrive`` fetches the body from there.
    """

    size: int
    kafka_topic: str
    partition: int
    offset: int

    def header(self) -> tuple[str, bytes]:
        return HEADER_BODY_OMITTED, f"{self.size} bytes; body at {self.where}".encode()

    @property
    def where(self) -> str:
        return f"{self.kafka_topic}[{self.partition}]@{self.offset}"

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> OmittedBody | None:
        """The omitted body named by a decoded message's properties; ``None`` if it has its body.

        Raises :class:`MalformedHeaderError` (naming the header and its value) when the header
        is there but unreadable.
        """
        text = properties.get(HEADER_BODY_OMITTED)
        if text is None:
            return None
        m = _OMITTED.fullmatch(text)
        if m is None or int(m[3]) > _INT32_MAX:
            raise MalformedHeaderError(
                HEADER_BODY_OMITTED,
                text,
                "expected '<size> bytes; body at <kafka topic>[<partition>]@<offset>'",
            )
        return cls(int(m[1]), m[2], int(m[3]), int(m[4]))
