"""Thin Kafka I/O for the admin commands: one admin client and short-lived readers, all
derived from the user's one config dict (so ``security.*``, ``sasl.*``, ``ssl.*`` reach
every client), with bounded waits that fail fast on refused credentials.

A refused login surfaces in librdkafka's ``error_cb`` long before a request times out, so
every wait here polls in short steps and gives up as soon as the callback reported an
authentication error, raising an :class:`AuthenticationError` that names the user (never
the password).
"""

from __future__ import annotations

import concurrent.futures
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.cimpl import NewTopic

from adapter.core.clock import Clock
from adapter.core.cluster import GroupInfo, Member, PartitionHealth
from adapter.core.types import TP
from adapter.errors import AuthenticationError, BrokerUnavailableError, KafkaClientError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import admin_config, check_kafka_config
from adapter.io.errors import (
    AUTH_CODES,
    UNREACHABLE_S,
    FatalErrorWatch,
    auth_error,
    client_error,
    make_client,
)
from adapter.io.topics import cluster_replication

log = logging.getLogger("adapter.ops")
#: Where the admin commands' clients send librdkafka's log lines (unless the config says).
CLIENT_LOG: Final = logging.getLogger("adapter.ops.librdkafka")

"""``(kafka topic, partition)``."""

#: How long one step of a wait lasts: the granularity of fail-fast.
_STEP_S: Final = 0.1
_T = TypeVar("_T")
_UNREACHABLE: Final = frozenset(
    {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE}
)
#: Answers worth asking again after a pause (the request itself is fine).
_RETRIABLE: Final = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)
_NO_ANSWER: Final = _UNREACHABLE | {KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
#: ``OffsetSpec`` (untyped in confluent-kafka): earliest / latest / for_timestamp.
_SPEC: Any = OffsetSpec


class AdminSession:
    """The clients of one admin command.  ``timeout_s`` bounds every single wait, measured
    on ``clock`` (as is :data:`UNREACHABLE_S`)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        timeout_s: float = 30.0,
        what: str = "rmq-kafka",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = check_kafka_config(config, what)
        # librdkafka's own log lines go to this logger (the CLI silences it unless -v)
        self.config.setdefault("logger", CLIENT_LOG)
        self.timeout_s = timeout_s
        self._now = clock.monotonic
        self.watch = FatalErrorWatch(
            self.config.get("error_cb"), clock.monotonic, config=self.config
        )
        conf = admin_config(self.config)
        conf["error_cb"] = self.watch
        # looking a name up must never create it (brokers with auto.create.topics.enable)
        conf["allow.auto.create.topics"] = False
        self.admin = make_client(AdminClient, conf, what="admin client")
        self._since = self._now()
        self._answered = False  # some call was answered: brokers were reachable once

    def answered(self, result: _T) -> _T:
        """``result`` of a call that Kafka answered (from then on, a broker that cannot be
        reached is waited for: it may be restarting)."""
        self._answered = True
        return result

    # --- errors and waits --------------------------------------------------------------------
    def error(self, exc: BaseException, what: str) -> Exception:
        """The adapter error for a failed call; a refused login names the user."""
        self.admin.poll(0)
        tls = self.watch.tls()
        if tls is not None:
            return tls
        fatal = self._fatal()
        if fatal is not None:
            return auth_error(self.config, what, str(fatal), getattr(fatal, "kafka_error", None))
        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if isinstance(err, KafkaError) and err.code() in AUTH_CODES:
            return auth_error(self.config, what, err.str(), err)
        mapped = client_error(exc, what=what)
        if isinstance(mapped, AuthenticationError):
            return auth_error(self.config, what, str(mapped))
        if isinstance(err, KafkaError) and err.code() in _NO_ANSWER:
            where = self.config.get("bootstrap.servers")
            if isinstance(self.watch.last, BrokerUnavailableError) or err.code() in _UNREACHABLE:
                return BrokerUnavailableError(
                    f"{what}: cannot reach any broker at {where} ({err.str()})", kafka_error=err
                )
            return KafkaClientError(
                f"{what}: {err.str()} (no answer from {where} in time)", kafka_error=err
            )
        return mapped

    def _fatal(self) -> Exception | None:
        current = self.watch.current()
        return current if isinstance(current, AuthenticationError) else None

    def check(self, what: str) -> None:
        """Raise the authentication or TLS error librdkafka reported, if any; and, when no
        broker has answered since the start and librdkafka has found every one of them down
        for :data:`UNREACHABLE_S`, that no broker can be reached (a wrong address or a
        stopped cluster says so in seconds, not after ``timeout_s``)."""
        self.admin.poll(0)
        tls = self.watch.tls()
        if tls is not None:
            raise tls
        fatal = self._fatal()
        if fatal is not None:
            raise auth_error(self.config, what, str(fatal), getattr(fatal, "kafka_error", None))
        if self._answered or self._now() - self._since < UNREACHABLE_S:
            return
        down = self.watch.current()
        if isinstance(down, BrokerUnavailableError):
            where = self.config.get("bootstrap.servers")
            raise BrokerUnavailableError(
                f"{what}: cannot reach any broker at {where} ({down})",
                kafka_error=down.kafka_error,
            )

    def wait(self, future: Any, what: str) -> Any:
        """The result of an admin future, within ``timeout_s``; fails fast on refused logins."""
        deadline = self._now() + self.timeout_s
        while True:
            try:
                return self.answered(future.result(timeout=_STEP_S))
            except concurrent.futures.TimeoutError:
                pass
            except KafkaException as exc:
                raise self.error(exc, what) from None
            self.check(what)
            if self._now() > deadline:
                raise BrokerUnavailableError(
                    f"{what}: no answer from {self.config.get('bootstrap.servers')} "
                    f"within {self.timeout_s:g} s"
                )

    def call(self, request: Callable[[], Any], what: str) -> Any:
        """``wait(request())``, asked again (with back-off, within ``timeout_s``) while Kafka
        answers with a retriable error, e.g. a group coordinator that is still loading."""
        deadline = self._now() + self.timeout_s
        pause = _STEP_S
        while True:
            try:
                return self.wait(request(), what)
            except KafkaClientError as exc:
                err = exc.kafka_error
                if not (isinstance(err, KafkaError) and err.code() in _RETRIABLE):
                    raise
                if self._now() + pause > deadline:
                    raise
                log.debug("%s: %s; asking again in %.1f s", what, err.str(), pause)
                self.admin.poll(pause)
                pause = min(pause * 2, 1.0)

    def metadata(self, what: str = "listing topics") -> Any:
        """Cluster metadata, retried in short steps until ``timeout_s``."""
        deadline = self._now() + self.timeout_s
        while True:
            try:
                return self.answered(self.admin.list_topics(timeout=min(1.0, self.timeout_s)))
            except KafkaException as exc:
                self.check(what)
                if self._now() > deadline:
                    raise self.error(exc, what) from None

    # --- topics ------------------------------------------------------------------------------
    def topics(self) -> dict[str, list[int]]:
        """Every topic this principal may describe: Kafka name → its partitions."""
        return {name: sorted(parts) for name, parts in self.topics_health().items()}

    def topics_health(self) -> dict[str, dict[int, PartitionHealth]]:
        """Every topic this principal may describe: Kafka name → partition → its leader,
        replicas and in-sync replicas (a leaderless partition is listed, leader ``None``)."""
        md = self.metadata()
        return {name: _health(tmd) for name, tmd in md.topics.items() if tmd.error is None}

    def partitions(self, kafka_topic: str, what: str) -> list[int] | None:
        """The partitions of one topic; ``None`` when it does not exist."""
        health = self.partition_health(kafka_topic, what)
        return None if health is None else sorted(health)

    def partition_health(self, kafka_topic: str, what: str) -> dict[int, PartitionHealth] | None:
        """Partition → its leader, replicas and in-sync replicas, of one topic; ``None`` when
        the topic does not exist."""
        deadline = self._now() + self.timeout_s
        while True:
            try:
                md = self.admin.list_topics(topic=kafka_topic, timeout=min(1.0, self.timeout_s))
            except KafkaException as exc:
                self.check(what)
                if self._now() > deadline:
                    raise self.error(exc, what) from None
                continue
            tmd = md.topics.get(kafka_topic)
            if tmd is None:
                return None
            if tmd.error is None:
                return _health(tmd)
            code = tmd.error.code()
            if code in AUTH_CODES:
                raise auth_error(self.config, what, tmd.error.str(), tmd.error)
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                return None
            if self._now() > deadline:
                raise KafkaClientError(f"{what}: {tmd.error.str()}", kafka_error=tmd.error)
            self.admin.poll(_STEP_S)

    def ensure_topic(
        self, kafka_topic: str, partitions: int, config: Mapping[str, str], what: str
    ) -> bool:
        """Create a topic unless it exists; wait until it has leaders.  ``True`` if created."""
        replication = cluster_replication(self.admin, self.timeout_s)
        new = NewTopic(
            kafka_topic,
            num_partitions=partitions,
            replication_factor=replication.factor,
            config={**replication.topic_config(), **config},
        )
        futures = self.admin.create_topics(
            [new], request_timeout=self.timeout_s, operation_timeout=self.timeout_s
        )
        created = True
        try:
            self.wait(futures[kafka_topic], what)
        except KafkaClientError as exc:
            err = exc.kafka_error
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
            created = False
        deadline = self._now() + self.timeout_s
        while True:
            md = self.metadata(what)
            tmd = md.topics.get(kafka_topic)
            if (
                tmd is not None
                and tmd.error is None
                and tmd.partitions
                and all(p.leader >= 0 for p in tmd.partitions.values())
            ):
                return created
            if self._now() > deadline:
                raise KafkaClientError(f"{what}: {kafka_topic} has no leader after creation")
            self.admin.poll(_STEP_S)

    # --- offsets -----------------------------------------------------------------------------
    def _list_offsets(self, specs: dict[Any, Any], what: str) -> dict[TP, int]:
        return self._collect_offsets(self._ask_offsets(specs), specs, what)

    def _ask_offsets(self, specs: dict[Any, Any]) -> dict[Any, Any]:
        """The futures of one ListOffsets request (nothing asked when ``specs`` is empty)."""
        if not specs:
            return {}
        return dict(self.admin.list_offsets(specs, request_timeout=self.timeout_s))

    def _collect_offsets(
        self, futures: Mapping[Any, Any], specs: Mapping[Any, Any], what: str
    ) -> dict[TP, int]:
        out: dict[TP, int] = {}
        for tp, fut in futures.items():
            try:
                info = self.wait(fut, what)
            except KafkaClientError as exc:
                err = exc.kafka_error
                if not (isinstance(err, KafkaError) and err.code() in _RETRIABLE):
                    raise
                info = self.call(self._ask_offset(tp.topic, tp.partition, specs), what)
            out[(tp.topic, tp.partition)] = int(info.offset)
        return out

    def _ask_offset(
        self, topic: str, partition: int, specs: Mapping[Any, Any]
    ) -> Callable[[], Any]:
        """A request of one partition's offset (for :meth:`call` to repeat)."""
        spec = next(v for k, v in specs.items() if (k.topic, k.partition) == (topic, partition))

        def ask() -> Any:
            one = {TopicPartition(topic, partition): spec}
            return next(iter(self.admin.list_offsets(one, request_timeout=self.timeout_s).values()))

        return ask

    def watermarks(
        self, tps: Iterable[TP], what: str = "reading end offsets", *, known_only: bool = False
    ) -> dict[TP, Ends]:
        """``(log start, end)`` of every partition.

        Both requests are in flight at once: a partition whose leader is down but still in
        the metadata (the seconds before the cluster notices) holds each request until its
        timeout, and that happens once, not twice.  librdkafka then answers offset -1001 for
        it, without an error: with ``known_only`` such a partition is left out (its offsets
        are unknown) instead of returned with those offsets."""
        tps = sorted(set(tps))
        low_specs = {TopicPartition(t, p): _SPEC.earliest() for t, p in tps}
        high_specs = {TopicPartition(t, p): _SPEC.latest() for t, p in tps}
        low_futures, high_futures = self._ask_offsets(low_specs), self._ask_offsets(high_specs)
        low = self._collect_offsets(low_futures, low_specs, what)
        high = self._collect_offsets(high_futures, high_specs, what)
        out = {tp: Ends(low[tp], high[tp]) for tp in tps}
        if known_only:
            unknown = [tp for tp, e in out.items() if e.start < 0 or e.end < 0]
            if unknown:
                log.debug("%s: no offsets for %s (leader down?)", what, unknown)
            out = {tp: e for tp, e in out.items() if tp not in unknown}
        return out

    def offsets_for_time(self, tps: Iterable[TP], time_ms: int, what: str) -> dict[TP, int | None]:
        """The first offset at or after ``time_ms`` per partition (``None``: no such record)."""
        found = self._list_offsets(
            {TopicPartition(t, p): _SPEC.for_timestamp(time_ms) for t, p in set(tps)}, what
        )
        return {tp: (o if o >= 0 else None) for tp, o in found.items()}

    # --- groups ------------------------------------------------------------------------------
    def committed(self, group: str) -> dict[TP, int]:
        """Every committed offset of ``group``."""
        what = f"reading the committed offsets of group {group!r}"
        try:
            result = self.call(
                lambda: self.admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
                )[group],
                what,
            )
        except KafkaClientError as exc:
            if _is_missing_group(exc.kafka_error):
                return {}
            raise
        out: dict[TP, int] = {}
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                if tp.error.code() in AUTH_CODES:
                    raise auth_error(self.config, what, tp.error.str(), tp.error)
                continue
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
        return out

    def describe_group(self, group: str) -> GroupInfo:
        what = f"describing group {group!r}"
        try:
            desc = self.call(
                lambda: self.admin.describe_consumer_groups(
                    [group], request_timeout=self.timeout_s
                )[group],
                what,
            )
        except KafkaClientError as exc:
            if _is_missing_group(exc.kafka_error):
                return GroupInfo(group, "DEAD", ())
            raise
        members = []
        for m in desc.members or []:
            assignment = m.assignment.topic_partitions if m.assignment is not None else []
            members.append(
                Member(
                    member_id=m.member_id,
                    client_id=m.client_id or "",
                    host=(m.host or "").lstrip("/"),
                    group_instance_id=m.group_instance_id,
                    assignment=tuple(sorted((tp.topic, tp.partition) for tp in assignment)),
                )
            )
        state = getattr(desc.state, "name", str(desc.state))
        return GroupInfo(group, state, tuple(sorted(members, key=lambda m: m.member_id)))

    def alter_offsets(self, group: str, offsets: Mapping[TP, int]) -> dict[TP, str]:
        """Set ``group``'s committed offsets (Kafka allows it only while the group is empty);
        the partitions Kafka refused, with why."""
        what = f"altering the offsets of group {group!r}"
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        result = self.call(
            lambda: self.admin.alter_consumer_group_offsets(
                [request], request_timeout=self.timeout_s
            )[group],
            what,
        )
        refused: dict[TP, str] = {}
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                if tp.error.code() in AUTH_CODES:
                    raise auth_error(self.config, what, tp.error.str(), tp.error)
                refused[(tp.topic, tp.partition)] = tp.error.str()
        return refused

    # --- readers -----------------------------------------------------------------------------
    def reader(self, **extra: Any) -> Any:
        """A consumer that only ``assign``s (never joins or commits to a group)."""
        conf = admin_config(self.config)
        conf.update(
            {
                "group.id": f"rmq-ops-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "error_cb": self.watch,
                **extra,
            }
        )
        return make_client(_KafkaConsumer, conf, what="reader")

    def read(
        self,
        ranges: Mapping[TP, tuple[int, int]],
        visit: Callable[[Any], bool],
        *,
        what: str,
        max_records: int | None = None,
        idle_timeout_s: float | None = None,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> ReadResult:
        """Read every partition of ``ranges`` from its start to (before) its end offset,
        calling ``visit(kafka message)`` per record; a partition is done early when ``visit``
        returns ``True``.  Stops after ``max_records`` records, or when nothing arrived for
        ``idle_timeout_s`` (default ``timeout_s``)."""
        todo = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        total = sum(end - start for start, end in todo.values())
        result = ReadResult()
        if not todo:
            if progress is not None:
                progress(0, 0)
            return result
        idle = self.timeout_s if idle_timeout_s is None else idle_timeout_s
        consumer = self.reader()
        try:
            consumer.assign([TopicPartition(t, p, s) for (t, p), (s, _) in todo.items()])
            last = self._now()
            while todo:
                if max_records is not None and result.records >= max_records:
                    result.truncated = True
                    break
                want = 500 if max_records is None else min(500, max_records - result.records)
                batch = consumer.consume(want, _STEP_S)
                if not batch:
                    self.check(what)
                    if self._now() - last > idle:
                        result.unfinished = tuple(sorted(todo))
                        break
                    continue
                last = self._now()
                finished: list[TP] = []
                for kmsg in batch:
                    tp = (kmsg.topic(), kmsg.partition())
                    if tp not in todo:
                        continue
                    err = kmsg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            finished.append(tp)
                        elif err.code() in AUTH_CODES:
                            raise auth_error(self.config, what, err.str(), err)
                        else:
                            log.debug("%s: %s", what, err.str())
                        continue
                    if kmsg.offset() >= todo[tp][1]:
                        finished.append(tp)
                        continue
                    result.records += 1
                    if visit(kmsg) or kmsg.offset() + 1 >= todo[tp][1]:
                        finished.append(tp)
                done = [TopicPartition(t, p) for t, p in set(finished) if (t, p) in todo]
                for tp in set(finished):
                    todo.pop(tp, None)
                if done:
                    consumer.pause(done)
                if progress is not None:
                    progress(min(result.records, total), total)
        finally:
            consumer.close()
        return result


@dataclass(frozen=True, slots=True)
class Ends:
    """The log-start and end offsets of a partition."""

    start: int
    end: int


@dataclass(slots=True)
class ReadResult:
    records: int = 0
    truncated: bool = False
    unfinished: tuple[TP, ...] = ()


def _health(tmd: Any) -> dict[int, PartitionHealth]:
    """Partition → health of a confluent-kafka ``TopicMetadata``."""
    return {
        p: PartitionHealth.of(pmd.leader, pmd.replicas, pmd.isrs)
        for p, pmd in tmd.partitions.items()
    }


def _is_missing_group(err: Any) -> bool:
    return isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND
