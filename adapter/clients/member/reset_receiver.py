"""Forced offset resets reaching a live member (``rmq-kafka group reset-offset --force``).

RocketMQ's ``resetOffsetByTime`` reaches running consumers: the broker tells each one to
move its queues.  Kafka refuses to reset a group with live members, so the CLI publishes the
request on the control topic (:mod:`adapter.io.control`) and every member that owns
partitions of the topic moves them itself, on its loop thread, and acknowledges:

1. wait (bounded) for the running batches of those partitions, as a revoke does;
2. forget what the engine holds for them (their unsettled messages are read again from the
   new position, or skipped past when the reset moves forward: that is what was asked);
3. seek, store and commit the new offsets; acknowledge to the CLI.

:class:`ResetReceiver` does the polling at :data:`POLL_INTERVAL_S`, opens its channel after
the member has joined, and backs off when the control topic cannot be reached (an ACL that
leaves it out, a broker down): the consumer keeps running either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from adapter.core.types import TP
from adapter.errors import AdapterError

log = logging.getLogger("adapter.consumer")

#: How often a member looks for reset requests.
POLL_INTERVAL_S = 1.0
#: Back-off after the control channel could not be opened or read (doubling, capped).
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0


class Channel(Protocol):
    """What :class:`ResetReceiver` needs of :class:`adapter.io.control.ControlChannel`."""

    def poll(self) -> list[Any]: ...
    def acknowledge(self, request: Any, applied: dict[TP, int]) -> None: ...
    def close(self) -> None: ...


class Member(Protocol):
    """What :class:`ResetReceiver` needs of the group member."""

    def member_id(self) -> str | None: ...
    def owned(self) -> list[TP]: ...
    def reset_partitions(self, targets: Mapping[TP, int]) -> dict[TP, int]: ...


class ResetReceiver:
    """Polls the control channel from the member's loop thread (``step(now)``)."""

    def __init__(
        self, member: Member, open_channel: Callable[[str], Channel], *, name: str
    ) -> None:
        self._member = member
        self._open_channel = open_channel
        self._name = name
        self._channel: Channel | None = None
        self._next = 0.0
        self._backoff = RETRY_FIRST_S
        #: requests applied (each acknowledged)
        self.applied = 0

    def step(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + POLL_INTERVAL_S
        try:
            channel = self._channel
            if channel is None:
                member_id = self._member.member_id()
                if not member_id:
                    return  # not in the group yet
                channel = self._channel = self._open_channel(member_id)
            for request in channel.poll():
                targets = request.offsets_for(self._member.owned())
                applied = self._member.reset_partitions(targets) if targets else {}
                channel.acknowledge(request, applied)
                self.applied += 1
                log.info(
                    "%s: applied reset %s: %s", self._name, request.request_id, sorted(applied)
                )
        except AdapterError as exc:
            self._next = now + self._backoff
            log.warning(
                "%s: control channel unavailable (%s); looking for offset resets again in %.0f s",
                self._name,
                exc,
                self._backoff,
            )
            self._backoff = min(RETRY_MAX_S, self._backoff * 2)
            self.close()
            return
        self._backoff = RETRY_FIRST_S

    def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            try:
                channel.close()
            except AdapterError as exc:
                log.debug("%s: closing the control channel: %s", self._name, exc)
