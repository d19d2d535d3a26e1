"""At-least-once forwards (:class:`AtLeastOnce`): each forward settles when the broker
acknowledges it; offsets are stored and committed in the background.  A crash between a
forward and the commit forwards the entry again (consumers de-duplicate on ``UNIQ_KEY``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from adapter.core import hops
from adapter.core.publishing import Escalation
from adapter.core.types import TP
from adapter.io.config import require_setting
from adapter.io.errors import FatalErrorWatch
from adapter.io.publisher import Publisher
from adapter.services.schedule.delivery import PRODUCER_NAME, Copy, Host, omitted_body
from adapter.services.schedule.options import ScheduleServiceSettings

log = logging.getLogger("adapter.schedule")


class AtLeastOnce:
    """Forwards settle one by one on the broker's acknowledgement; offsets are stored as
    they settle and committed in the background (and at once on revoke and shutdown)."""

    exactly_once = False
    transaction_open = False

    def __init__(
        self,
        host: Host,
        config: Mapping[str, Any],
        options: ScheduleServiceSettings,
        *,
        errors: FatalErrorWatch | None = None,
        make_publisher: Callable[..., Publisher] = Publisher,
    ) -> None:
        self.host = host
        self.engine = host.engine
        self.publisher = make_publisher(
            config,
            what=PRODUCER_NAME,
            on_result=self.on_result,
            errors=errors,
            defaults={"linger.ms": 5, "message.timeout.ms": 300_000},
            transactional_id=None,
        )
        self._consumer: Any = None

    @staticmethod
    def configure_consumer(cconf: dict[str, Any]) -> None:
        require_setting(cconf, "enable.auto.commit", True, "commits follow the delivery")

    def start(self, consumer: Any) -> None:
        self._consumer = consumer
        self.publisher.producer  # noqa: B018 - created now: a bad config fails start()

    def send(self, copy: Copy) -> None:
        self.publisher.send(copy.record, copy, alone=copy.alone)

    def on_result(self, copy: Copy, err: Any, local: bool) -> None:
        entry = copy.entry
        if err is None:
            self.engine.settled(entry)
            return
        refused = self.host.refused(copy, err, local)
        if refused is None:
            return
        step, text = refused
        now_ms = self.host.clock.now_ms()
        if step is Escalation.SEND_ALONE:
            self.send(Copy(entry, copy.record, copy.dead_letter, alone=True, omitted=copy.omitted))
        elif step is Escalation.DEAD_LETTER:
            self.host.dead_letter(entry, f"forward failed permanently: {text}", now_ms)
        elif step is Escalation.OMIT_BODY:
            record = hops.without_body(copy.record, omitted_body(entry))
            self.send(Copy(entry, record, dead_letter=True, omitted=True))
        else:
            rewind = self.engine.failed(entry, now_ms)
            if rewind is not None:
                self.host.apply([rewind])

    def end_pass(self, forwarded: bool) -> None:
        self.publisher.poll(0)

    def linger_s(self) -> float | None:
        return None

    def store_offsets(self, offsets: tuple[tuple[TP, int], ...]) -> None:
        try:
            self._consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets])
        except KafkaException as exc:
            log.debug("store_offsets failed (revoked?): %s", exc)

    def on_lookup_failed(self) -> None:
        pass  # the entry's partition is rewound; nothing else was forwarded with it

    def settle(self, tps: list[TP]) -> None:
        self.publisher.flush(30)  # acknowledgements settle entries (callbacks run)
        self.commit(tps)

    def commit(self, tps: list[TP]) -> None:
        """Store and commit (synchronously) what is settled of ``tps``."""
        offsets = []
        for tp in tps:
            offset = self.engine.committable(tp)
            if offset is not None:
                offsets.append(TopicPartition(tp[0], tp[1], offset))
        if not offsets:
            return
        try:
            self._consumer.store_offsets(offsets=offsets)
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("ScheduleService commit failed: %s", exc)

    def in_flight(self) -> int:
        return self.publisher.in_flight()

    def close(self) -> None:
        self.publisher.close(30)
