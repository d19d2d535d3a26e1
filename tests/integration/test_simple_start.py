"""Subscribe, start, then send at once: a new SimpleConsumer group on the default start rule
(``CONSUME_FROM_LAST_OFFSET``) receives every message sent from ``start()`` on, on both
backends, for a topic that existed before the start and for one created after it
(docs/semantics.md §4.4 and §4.13.1).

The share backend's group starts a share-partition without state when a member first
fetches it, which comes seconds after ``start()``: a plain ``latest`` there skipped every
message sent in between (all ten of each trial here, before the fix).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from adapter import Message
from adapter.clients.simple.simple_consumer import SimpleConsumer
from adapter.io.topics import TopicPlan, ensure_with
from tests.support.consumer_helpers import new_group, send
from tests.support.simple_backends import BACKENDS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def consumer(backend: str, bootstrap: str, topic: str) -> SimpleConsumer:
    options: dict[str, Any] = {"await_duration": 1.0, "partitions": 1}
    if backend == "share":
        options["lock_duration"] = 10.0
    return SimpleConsumer(
        {"bootstrap.servers": bootstrap}, new_group(), {topic: "*"}, backend=backend, **options
    )


def receive_bodies(sc: SimpleConsumer, n: int, timeout: float = 45.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for view in sc.receive(32, 5):
            got.append(view.body)
            sc.ack(view)
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("topic_exists", [True, False], ids=["existing-topic", "new-topic"])
def test_messages_sent_right_after_start_are_received(
    kafka_bootstrap_servers: str,
    backend: str,
    topic_exists: bool,
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
    topic = f"start-{uuid.uuid4().hex}"
    if topic_exists:
        ensure_with(admin, [TopicPlan(topic, topic, 2)])
    with consumer(backend, kafka_bootstrap_servers, topic) as sc:
        if not topic_exists:
            ensure_with(admin, [TopicPlan(topic, topic, 2)])
        bodies = [f"m{i}".encode() for i in range(10)]
        send(kafka_bootstrap_servers, [Message(topic=topic, body=b) for b in bodies])
        assert sorted(receive_bodies(sc, len(bodies))) == sorted(bodies)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_topic_created_long_after_start_is_read_from_its_first_message(
    kafka_bootstrap_servers: str, backend: str
) -> None:
    """The share group's reset set at start reaches back only a few seconds; the consumer
    sets it again as time passes, so a topic first fetched long after ``start()`` still
    starts at its first record."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
    topic = f"start-late-{uuid.uuid4().hex}"
    with consumer(backend, kafka_bootstrap_servers, topic) as sc:
        time.sleep(8)  # the consumer runs a while before the topic exists
        sc.check_alive()
        ensure_with(admin, [TopicPlan(topic, topic, 2)])
        bodies = [f"late{i}".encode() for i in range(10)]
        send(kafka_bootstrap_servers, [Message(topic=topic, body=b) for b in bodies])
        assert sorted(receive_bodies(sc, len(bodies))) == sorted(bodies)
