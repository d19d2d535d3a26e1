"""The classic SimpleConsumer reads librdkafka on the receiving thread (docs/semantics.md
§4.13), so a rebalance that read serves runs there (one served while the member waits for
records runs on its loop thread).  Members joining and leaving while one works through a
backlog lose nothing, and every handle a revoke invalidates says so."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapter.clients.simple.simple_consumer import SimpleConsumer
from adapter.errors import InvalidReceiptHandleError
from tests.support.consumer_helpers import new_group, new_ids, produce, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

#: Messages waiting when the test starts, the second member's take before it leaves again,
#: and the receiving thread's pause after each receive.
BACKLOG = 30_000
B_TAKES = 100
PACE_S = 0.004


class _Acked:
    """Ids acknowledged by any member (several threads add to it)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def add(self, msg_id: str) -> None:
        with self._lock:
            self._ids.add(msg_id)

    def cover(self, ids: list[str]) -> bool:
        with self._lock:
            return self._ids.issuperset(ids)


def _consumer(bootstrap: str, topic: str, group: str, protocol: str) -> SimpleConsumer:
    return SimpleConsumer(
        {"bootstrap.servers": bootstrap, "group.protocol": protocol},
        group,
        {topic: "*"},
        partitions=1,
        await_duration=0.5,
    )


def _owns(sc: SimpleConsumer, topic: str) -> bool:
    return any(t == topic for t, _ in sc.assignment)


def test_rebalances_while_receiving_a_backlog_lose_nothing(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, group_protocol: str
) -> None:
    topic = kafka_topic_factory("scr", partitions=4)
    group = new_group()
    ids = new_ids(BACKLOG)
    acked = _Acked()
    refused: list[str] = []
    stop = threading.Event()

    def receive_at_a_steady_pace(sc: SimpleConsumer) -> None:
        # paced, so the backlog outlasts the rebalances and every receive reads on this
        # thread (a member waiting for records reads on its loop thread instead)
        while not stop.is_set():
            for view in sc.receive(32, 30):
                try:
                    sc.ack(view)
                except InvalidReceiptHandleError as exc:
                    refused.append(str(exc))  # revoked: the new owner delivers it again
                else:
                    acked.add(view.body.decode())
            stop.wait(PACE_S)

    a = _consumer(kafka_bootstrap_servers, topic, group, group_protocol)
    with a:
        wait_until(lambda: _owns(a, topic), what="a assigned")
        produce(kafka_bootstrap_servers, topic, ids)  # read from where a started
        receiver = threading.Thread(target=receive_at_a_steady_pace, args=(a,), name="receiver")
        receiver.start()
        try:
            for _ in range(2):
                b = _consumer(kafka_bootstrap_servers, topic, group, group_protocol)
                with b:  # joins: a gives partitions up while it reads; then b leaves again
                    wait_until(lambda: _owns(b, topic), what="b assigned")  # noqa: B023
                    taken = 0  # until it has its share, or none is left for it
                    while taken < B_TAKES and (views := b.receive(32, 30)):
                        for view in views:
                            b.ack(view)
                            acked.add(view.body.decode())
                        taken += len(views)
            wait_until(lambda: acked.cover(ids), timeout=90, what="every id acknowledged")
        finally:
            stop.set()
            receiver.join(10)
    assert not receiver.is_alive()
    assert all("revoked" in text for text in refused), refused
