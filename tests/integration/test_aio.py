"""asyncio on a real broker: ``async def`` PushConsumer listeners (own event-loop thread or
the application's loop) and the async SimpleConsumer, none of which blocks the loop."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from adapter import ConsumeConcurrentlyStatus, PushConsumer, ScheduleService
from adapter.aio import AsyncPushConsumer, AsyncSimpleConsumer
from tests.support.consumer_helpers import LEVELS, new_group, new_namespace, produce, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def conf_of(bootstrap: str, group: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}


class Ticker:
    """Counts event-loop ticks: a blocked loop stops ticking."""

    def __init__(self) -> None:
        self.ticks = 0
        self.longest_gap = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now
            self.ticks += 1

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()


def test_async_listener_runs_on_an_event_loop_within_consume_thread_max(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("aio")
    ids = [f"m{i:02d}" for i in range(24)]
    produce(kafka_bootstrap_servers, topic, ids)
    lock = threading.Lock()
    state = {"running": 0, "max": 0}
    seen: list[tuple[str, int, str]] = []

    async def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            state["running"] += 1
            state["max"] = max(state["max"], state["running"])
        try:
            await asyncio.sleep(0.1)
            m = msgs[0]
            with lock:
                seen.append((m.body.decode(), m.reconsume_times, threading.current_thread().name))
            return LATER if m.body == b"m03" and m.reconsume_times == 0 else OK
        finally:
            with lock:
                state["running"] -= 1

    ns = new_namespace()
    consumer = PushConsumer(
        conf_of(kafka_bootstrap_servers, new_group()),
        consume_thread_max=4,
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    service = ScheduleService(
        {"bootstrap.servers": kafka_bootstrap_servers},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    )
    with service, consumer:
        wait_until(lambda: len(seen) >= len(ids) + 1, 40, "every message and m03's retry")
    assert sorted(b for b, t, _ in seen if t == 0) == ids
    assert ("m03", 1) in [(b, t) for b, t, _ in seen]  # RECONSUME_LATER: back via the ladder
    assert all(name.startswith("rmq-aio-") for *_, name in seen)
    assert state["max"] == 4  # batches overlap, never more than consume_thread_max


def test_async_push_consumer_runs_listeners_on_the_applications_loop(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("aio")
    produce(kafka_bootstrap_servers, topic, ["a", "b", "c"])

    async def main() -> tuple[list[str], bool, float]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        on_loop: list[bool] = []
        done = asyncio.Event()

        async def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            on_loop.append(asyncio.get_running_loop() is loop)
            seen.extend(m.body.decode() for m in msgs)
            if len(seen) >= 3:
                done.set()
            return OK

        ticker = Ticker()
        ticker.start()
        consumer = AsyncPushConsumer(conf_of(kafka_bootstrap_servers, new_group()), partitions=1)
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)
        async with consumer:
            await asyncio.wait_for(done.wait(), 30)
        ticker.stop()
        return sorted(seen), all(on_loop), ticker.longest_gap

    seen, on_loop, gap = asyncio.run(main())
    assert seen == ["a", "b", "c"] and on_loop
    assert gap < 1.0  # start (a group join) and shutdown never blocked the loop


def test_async_simple_consumer_awaits_without_blocking_the_loop(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("aio")

    async def main() -> tuple[list[tuple[str, int]], float, int]:
        ticker = Ticker()
        ticker.start()
        got: list[tuple[str, int]] = []
        async with AsyncSimpleConsumer(
            {"bootstrap.servers": kafka_bootstrap_servers, "auto.offset.reset": "earliest"},
            new_group(),
            {topic: "*"},
            partitions=1,
            await_duration=5,
        ) as sc:
            waiting = asyncio.ensure_future(sc.receive(8, 1.0))  # nothing there yet
            await asyncio.sleep(0.5)
            ticks = ticker.ticks
            await asyncio.to_thread(produce, kafka_bootstrap_servers, topic, ["x"])
            [first] = await waiting
            got.append((first.body.decode(), first.delivery_attempt))
            # not acknowledged: it comes back after its invisible duration (1 s)
            again: list[Any] = []
            while not again:
                again = await sc.receive(8, 10)
            got.append((again[0].body.decode(), again[0].delivery_attempt))
            await sc.change_invisible_duration(again[0], 30)
            await sc.ack(again[0])
        ticker.stop()
        return got, ticker.longest_gap, ticks

    got, gap, ticks = asyncio.run(main())
    assert got == [("x", 1), ("x", 2)]
    assert ticks >= 20  # the loop ran while receive waited
    assert gap < 1.0
