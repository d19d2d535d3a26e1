"""The console stays responsive with 100 000 dead letters in one group: a page of the DLQ view
reads at most ``limit`` (or, with a filter, ``scan``) records wherever it starts, so its time
does not grow with the DLQ.  Each timing is printed (``-s``) as a row for the docs."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer as KafkaProducer

from adapter.console.server import start_background
from adapter.console.service import ConsoleSettings
from adapter.core import naming
from adapter.io.topics import ensure_topics, plan_topics
from adapter.services.dlq import read_dlq

DEAD_LETTERS = 100_000
TOKEN = "bench-" + uuid.uuid4().hex


def _fill(bootstrap: str, group: str) -> float:
    """``DEAD_LETTERS`` dead letters, as the consumer writes them, with a raw producer."""
    conf = {"bootstrap.servers": bootstrap}
    ensure_topics(conf, plan_topics(groups=[group], partitions=3, include_schedule=False))
    dlq = naming.to_kafka(naming.dlq_topic(group))
    producer = KafkaProducer({**conf, "linger.ms": 20, "batch.size": 1_000_000})
    began = time.perf_counter()
    for i in range(DEAD_LETTERS):
        headers = [
            ("UNIQ_KEY", f"{i:032X}".encode()),
            ("KEYS", f"order-{i}".encode()),
            ("DLQ_ORIGIN_TOPIC", b"orders"),
            ("RMQ_DLQ_REASON", b"MAX_RECONSUME_TIMES"),
            ("RMQ_FAILURE_TYPE", b"ValueError" if i % 10 else b"TimeoutError"),
            ("RECONSUME_TIME", b"16"),
        ]
        while True:
            try:
                producer.produce(dlq, value=b'{"order": %d}' % i, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def _timed(call: Callable[[], httpx.Response]) -> tuple[float, Any]:
    began = time.perf_counter()
    r = call()
    took = time.perf_counter() - began
    assert r.status_code == 200, r.text
    return took, (r.json() if "json" in r.headers.get("content-type", "") else r.text)


def test_dlq_view_with_100k_dead_letters(kafka_bootstrap_servers: str) -> None:
    group = f"big-{uuid.uuid4().hex[:8]}"
    fill_s = _fill(kafka_bootstrap_servers, group)
    settings = ConsoleSettings(config={"bootstrap.servers": kafka_bootstrap_servers}, token=TOKEN)
    running = start_background(settings)
    rows: list[tuple[str, float, str]] = []
    try:
        with httpx.Client(
            base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300
        ) as api:
            url = f"/api/groups/{group}/dlq"
            api.get(url, params={"limit": 1})  # the first call pays for the client set-up
            took, first = _timed(lambda: api.get(url, params={"limit": 50}))
            assert first["total"] == DEAD_LETTERS and len(first["entries"]) == 50
            rows.append(("first page (limit 50)", took, f"read {first['scanned']}"))
            deep = ".".join(f"{p}-{DEAD_LETTERS // 3 - 100}" for p in range(3))
            took, page = _timed(lambda: api.get(url, params={"limit": 50, "cursor": deep}))
            assert len(page["entries"]) == 50
            rows.append(("a page near the end (cursor)", took, f"read {page['scanned']}"))
            took, page = _timed(lambda: api.get(url, params={"limit": 50, "since": "2m"}))
            rows.append(("since 2m (time index)", took, f"read {page['scanned']}"))
            took, page = _timed(
                lambda: api.get(url, params={"limit": 50, "failure_type": "TimeoutError"})
            )
            assert len(page["entries"]) == 50
            assert all(e["failure"] == "TimeoutError" for e in page["entries"])
            rows.append(("filter failure=TimeoutError", took, f"read {page['scanned']}"))
            took, page = _timed(lambda: api.get(url, params={"limit": 50, "reason": "NONE"}))
            assert page["entries"] == [] and page["scanned"] == 20_000 and page["next_cursor"]
            rows.append(("filter matching nothing", took, f"read {page['scanned']} (cap)"))
            took, _ = _timed(lambda: api.get(f"/groups/{group}"))
            rows.append(("the group's HTML page", took, "first page"))
            picked = first["entries"]
            body = {
                "ids": [e["msg_id"] for e in picked],
                "positions": [f"{e['partition']}-{e['offset']}" for e in picked],
            }
            redrive = f"/api/groups/{group}/dlq/redrive"
            took, plan = _timed(lambda: api.post(redrive, json={**body, "dry_run": True}))
            assert plan["would_send"] == 50
            rows.append(("dry run of the 50 selected on a page", took, "read 50"))
            took, done = _timed(lambda: api.post(redrive, json=body))
            assert done["sent"] == 50
            rows.append(("redrive of the 50 selected on a page", took, "read 50, sent 50"))
        began = time.perf_counter()
        everything = read_dlq({"bootstrap.servers": kafka_bootstrap_servers}, group)
        full = time.perf_counter() - began
        assert len(everything) == DEAD_LETTERS
        rows.append(("for scale: read the whole DLQ (dlq list)", full, f"read {DEAD_LETTERS}"))
    finally:
        running.stop()
    print(f"\nDLQ of {DEAD_LETTERS} dead letters written in {fill_s:.1f} s (raw producer)")
    for what, took, note in rows:
        print(f"| {what} | {took * 1000:.0f} ms | {note} |")
    print(json.dumps({what: round(took, 3) for what, took, _ in rows}))
    views = [took for what, took, _ in rows[:4]]
    selected = [rows[6][1], rows[7][1]]
    paged = views + selected
    # a page costs what it reads, not what the DLQ holds: far below the full read; a redrive
    # of selected messages reads only their positions (and writes them and an audit record)
    assert max(views) < full / 3, rows
    assert max(selected) < full, rows
    if max(paged) > 5.0:
        pytest.fail(f"a DLQ page took {max(paged):.1f} s: {rows}")
