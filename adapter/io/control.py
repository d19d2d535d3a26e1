"""The control topic ``rmq.control``: forced offset resets delivered to a group's live members.

Member side — :class:`ControlChannel`, called from the consumer loop::

    channel = ControlChannel(config, group, member_id=consumer.memberid())
    channel.open()
    ...
    for request in channel.poll():                       # non-blocking
        owned = [(tp.topic, tp.partition) for tp in consumer.assignment()]
        targets = request.offsets_for(owned)             # (kafka topic, partition) -> offset
        ...                                              # seek and commit them
        channel.acknowledge(request, targets)
    ...
    channel.close()

CLI side — :func:`publish_reset` publishes a request and waits (bounded) for the
acknowledgements of the members that own partitions of the topic.

Circuit-breaker states (:mod:`adapter.core.circuit_status`) travel on the same topic: a
member with a breaker publishes them with a :class:`StatusPublisher` (producer only, never
blocking its loop), ``group progress`` reads them with :func:`read_statuses`.

The record formats are in :mod:`adapter.core.control`.  The topic is compacted and keyed by
the group; it is created (1 partition) by whichever side needs it first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka import Producer as _KafkaProducer

from adapter.core import naming
from adapter.core.circuit_status import (
    CircuitStatus,
    decode_status,
    encode_status,
    is_status_key,
    status_key,
)
from adapter.core.clock import Clock
from adapter.core.control import (
    CONTROL_TOPIC,
    ControlMessageError,
    ResetAck,
    ResetRequest,
    decode,
    encode,
)
from adapter.errors import ConfigError, KafkaClientError
from adapter.io.admin import AdminSession
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import producer_config
from adapter.io.errors import AUTH_CODES, auth_error, make_client, send_error

log = logging.getLogger("adapter.io.control")

#: Settings of ``rmq.control`` when it is created: compacted (the key is the group), with
#: hour-long segments so that compaction actually runs on a quiet topic.
CONTROL_TOPIC_CONFIG: Final = {
    "cleanup.policy": "compact",
    "segment.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.1",
}
CONTROL_TOPIC_PARTITIONS: Final = 1
#: Request ids remembered against duplicates (a request is delivered once per channel).
_SEEN_MAX: Final = 1024
_SEND_TIMEOUT_S: Final = 10.0
#: Settings of a member's config its control clients do not take.
_NOT_INHERITED: Final = frozenset({"stats_cb", "statistics.interval.ms"})


def _open_at_end(session: AdminSession, what: str, **reader: Any) -> Any:
    """A reader of every partition of ``rmq.control`` from its current end (resolved now, so
    that nothing published after this call is missed); creates the topic if it is missing
    (only then: a principal without CREATE can use an existing one)."""
    partitions = session.partitions(CONTROL_TOPIC, what)
    if not partitions:
        session.ensure_topic(CONTROL_TOPIC, CONTROL_TOPIC_PARTITIONS, CONTROL_TOPIC_CONFIG, what)
        partitions = session.partitions(CONTROL_TOPIC, what) or []
    ends = session.watermarks([(CONTROL_TOPIC, p) for p in partitions], what)
    consumer = session.reader(**{"enable.partition.eof": False, **reader})
    consumer.assign([TopicPartition(t, p, e.end) for (t, p), e in sorted(ends.items())])
    return consumer


def _producer(session: AdminSession) -> Any:
    conf = producer_config(session.config)
    conf.update({"acks": "all", "linger.ms": 0})
    return make_client(_KafkaProducer, conf, what="control producer")


def _send(producer: Any, key: bytes, value: bytes, what: str) -> None:
    """Produce one control record and wait (bounded) for the broker's acknowledgement."""
    failure: list[Any] = []

    def done(err: Any, kmsg: Any) -> None:
        if err is not None:
            failure.append(send_error(err, kmsg, topic=CONTROL_TOPIC))

    producer.produce(CONTROL_TOPIC, key=key, value=value, on_delivery=done)
    left = producer.flush(_SEND_TIMEOUT_S)
    if failure:
        raise KafkaClientError(f"{what}: {failure[0]}", kafka_error=failure[0].kafka_error)
    if left:
        raise KafkaClientError(f"{what}: not acknowledged by the broker in {_SEND_TIMEOUT_S:g} s")


def _checked_member(member_id: object) -> str:
    """A member id as the group describes it (``Consumer.memberid()``), or a clear error."""
    if not isinstance(member_id, str) or not member_id:
        raise ConfigError("member_id", member_id, "must be the member's non-empty member id")
    return member_id


class ControlChannel:
    """A live member's end of the control topic.  Not thread-safe: call it from one thread
    (the consumer loop).

    ``config`` is the member's own config dict (its connection and security settings are
    used; ``group.id`` and other consumer settings are not); ``member_id`` is the member's
    Kafka member id (``Consumer.memberid()``), which the CLI matches against the group's
    description.  Clients are created by :meth:`open` (or the first :meth:`poll`).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        group: str,
        member_id: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.group = naming.check_group(group)
        self.member_id = _checked_member(member_id)
        # the member's connection and security settings; not its statistics callback
        self._config = {k: v for k, v in config.items() if k not in _NOT_INHERITED}
        self._clock = clock  # requests expire on its wall clock
        self._key = group.encode("utf-8")
        self._consumer: Any = None
        self._producer: Any = None
        self._seen: dict[str, None] = {}
        #: Control records that could not be decoded and were skipped.
        self.malformed = 0

    def open(self) -> None:
        """Create the clients (idempotent): a group-less reader assigned to every partition of
        ``rmq.control`` from its current end, and a producer; creates the topic if missing."""
        if self._consumer is not None:
            return
        session = AdminSession(
            self._config, timeout_s=10.0, what="control channel", clock=self._clock
        )
        consumer = _open_at_end(session, "opening the control channel")
        try:
            self._producer = _producer(session)
        except Exception:
            consumer.close()
            raise
        self._consumer = consumer  # the admin client is not needed any more

    def poll(self) -> list[ResetRequest]:
        """The reset requests for this group published since :meth:`open`, each once, minus
        expired ones.  Never blocks; malformed records are logged and skipped."""
        self.open()
        out: list[ResetRequest] = []
        now_ms = self._clock.now_ms()
        for kmsg in self._consumer.consume(100, 0):
            err = kmsg.error()
            if err is not None:
                level = logging.WARNING if err.code() in AUTH_CODES else logging.DEBUG
                log.log(level, "control channel of %s: %s", self.group, err.str())
                continue
            if kmsg.key() != self._key:
                continue
            try:
                message = decode(kmsg.value())
            except ControlMessageError as exc:
                self.malformed += 1
                log.warning(
                    "skipping a malformed control record at offset %d: %s", kmsg.offset(), exc
                )
                continue
            if not isinstance(message, ResetRequest) or message.group != self.group:
                continue
            if message.request_id in self._seen:
                continue
            self._remember(message.request_id)
            if message.expired(now_ms):
                log.warning(
                    "ignoring reset request %s of group %s: expired %d ms ago",
                    message.request_id,
                    self.group,
                    now_ms - message.expires_ms,
                )
                continue
            out.append(message)
        return out

    def acknowledge(self, request: ResetRequest, applied: dict[tuple[str, int], int]) -> None:
        """Tell the CLI that this member applied ``request``: ``applied`` maps
        ``(kafka topic, partition)`` → the offset it seeked to and committed (empty when it
        owns none of the partitions).  Waits for the broker's acknowledgement (≤ 10 s)."""
        self.open()
        ack = ResetAck(request.request_id, self.group, self.member_id, dict(applied))
        _send(self._producer, self._key, encode(ack), f"acknowledging reset {request.request_id}")

    def close(self) -> None:
        """Close the clients (idempotent)."""
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        if producer is not None:
            producer.flush(_SEND_TIMEOUT_S)
        if consumer is not None:
            consumer.close()

    def __enter__(self) -> ControlChannel:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _remember(self, request_id: str) -> None:
        self._seen[request_id] = None
        while len(self._seen) > _SEEN_MAX:
            del self._seen[next(iter(self._seen))]


def publish_reset(
    config: Mapping[str, Any],
    request: ResetRequest,
    owners: Mapping[str, Iterable[int]],
    *,
    timeout_s: float = 30.0,
    on_ack: Callable[[ResetAck], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> dict[str, ResetAck]:
    """Publish ``request`` to ``rmq.control`` and wait up to ``timeout_s`` until every member
    in ``owners`` (member id → its partitions of the topic) has acknowledged it.  Returns the
    acknowledgements received (member id → ack), complete or not: settle them with
    :func:`adapter.core.control.settle`."""
    what = f"reset request {request.request_id} of group {request.group!r}"
    session = AdminSession(
        config, timeout_s=min(timeout_s, 30.0), what="group reset-offset", clock=clock
    )
    # opened before publishing, so that no acknowledgement is missed
    consumer = _open_at_end(session, what, **{"fetch.wait.max.ms": 50})
    acks: dict[str, ResetAck] = {}
    wanted = set(owners)
    try:
        _send(_producer(session), request.group.encode("utf-8"), encode(request), what)
        deadline = clock.monotonic() + timeout_s
        while not wanted <= acks.keys():
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            kmsg = consumer.poll(min(0.2, left))
            session.check(what)
            if kmsg is None:
                continue
            err = kmsg.error()
            if err is not None:
                if err.code() in AUTH_CODES:
                    raise auth_error(session.config, what, err.str(), err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.debug("%s: %s", what, err.str())
                continue
            try:
                message = decode(kmsg.value())
            except ControlMessageError as exc:
                log.debug("skipping a malformed control record: %s", exc)
                continue
            if (
                isinstance(message, ResetAck)
                and message.request_id == request.request_id
                and message.group == request.group
            ):
                acks[message.member_id] = message
                if on_ack is not None:
                    on_ack(message)
    finally:
        consumer.close()
    return acks


class StatusPublisher:
    """A member's publisher of its circuit-breaker status (see
    :mod:`adapter.core.circuit_status`).  :meth:`publish` never blocks: the record is
    queued and its delivery report served by the next call; a failed delivery is logged
    (the next refresh publishes again).  :meth:`close` publishes a tombstone, so that
    compaction forgets the member, and waits (bounded) for it."""

    def __init__(
        self,
        config: Mapping[str, Any],
        group: str,
        member_id: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.group = naming.check_group(group)
        self.member_id = _checked_member(member_id)
        self._config = {k: v for k, v in config.items() if k not in _NOT_INHERITED}
        self._clock = clock
        self._key = status_key(group, member_id)
        self._producer: Any = None
        #: deliveries that failed (each logged)
        self.failed = 0

    def open(self) -> None:
        """Create the producer (idempotent); creates ``rmq.control`` if it is missing."""
        if self._producer is not None:
            return
        session = AdminSession(
            self._config, timeout_s=10.0, what="circuit status", clock=self._clock
        )
        if not session.partitions(CONTROL_TOPIC, "publishing a circuit status"):
            session.ensure_topic(
                CONTROL_TOPIC,
                CONTROL_TOPIC_PARTITIONS,
                CONTROL_TOPIC_CONFIG,
                "publishing a circuit status",
            )
        self._producer = _producer(session)

    def publish(self, status: CircuitStatus) -> None:
        self.open()
        self._producer.produce(
            CONTROL_TOPIC, key=self._key, value=encode_status(status), on_delivery=self._done
        )
        self._producer.poll(0)

    def _done(self, err: Any, kmsg: Any) -> None:
        if err is not None:
            self.failed += 1
            log.warning(
                "circuit status of %s: %s", self.group, send_error(err, kmsg, topic=CONTROL_TOPIC)
            )

    def close(self, timeout_s: float = 5.0) -> None:
        """Publish the tombstone and close (idempotent; bounded by ``timeout_s``)."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.produce(CONTROL_TOPIC, key=self._key, value=None, on_delivery=self._done)
        except Exception as exc:  # a full queue, a fatal producer: compaction is a nicety
            log.debug("circuit status of %s: tombstone: %s", self.group, exc)
        producer.flush(timeout_s)


def read_statuses(
    session: AdminSession, group: str, since_ms: int, what: str
) -> list[CircuitStatus]:
    """The circuit statuses of ``group``'s members published since ``since_ms`` (epoch ms),
    up to the control topic's current end; none when the topic does not exist.  Malformed
    records are skipped."""
    partitions = session.partitions(CONTROL_TOPIC, what)
    if not partitions:
        return []
    tps = [(CONTROL_TOPIC, p) for p in partitions]
    ends = session.watermarks(tps, what, known_only=True)
    starts = session.offsets_for_time(list(ends), since_ms, what)
    ranges = {tp: (start, e.end) for tp, e in ends.items() if (start := starts.get(tp)) is not None}
    out: list[CircuitStatus] = []

    def visit(kmsg: Any) -> bool:
        if kmsg.value() is not None and is_status_key(kmsg.key(), group):
            try:
                out.append(decode_status(kmsg.value()))
            except ControlMessageError as exc:
                log.debug("%s: skipping a malformed status record: %s", what, exc)
        return False

    session.read(ranges, visit, what=what)
    return out
