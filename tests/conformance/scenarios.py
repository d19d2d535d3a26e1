"""The conformance scenarios: what is sent, how the consumer is set up, what the listener
answers. Keys are the messages' identities on both sides (``KEYS``); ``rules`` pick the
listener's answer by the first message of a batch (``key``, ``rt`` = its reconsumeTimes,
``rtBelow``), the first match wins, no match is a success.

Concurrent answers: ``success`` / ``later`` (``RECONSUME_LATER``) / ``throw`` / ``null``, with
``ackIndex`` and ``delayLevel`` (``delayLevelWhenNextConsume``) set on the context. Orderly
answers: ``success`` / ``suspend`` / ``throw`` / ``null``, with ``suspendMillis``.

Suspend times are multiples of 250 ms: :mod:`compare` rounds an orderly gap to 250 ms, so a
multiple leaves half a step either side for scheduling jitter on a loaded machine (300 ms,
a quarter step from the next boundary, made ``orderly-batch`` flaky on a shared machine).
"""

from __future__ import annotations

from typing import Any


def msgs(*keys: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"key": k, **fields} for k in keys]


def sc(name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("messages", msgs("m1"))
    spec.setdefault("mode", "concurrent")
    spec.setdefault("model", "CLUSTERING")
    return {"name": name, **spec}


FAIL = {"action": "later"}
BATCH3 = msgs("m1", "m2", "m3")

SCENARIOS: list[dict[str, Any]] = [
    # --- the concurrent listener: success, failures, exhausting the retries -------------------
    sc("success", messages=msgs("m1", "m2", tags="A", properties={"color": "red"})),
    sc("later-once", rules=[{"rt": 0, "action": "later"}]),
    sc("throw-once", rules=[{"rt": 0, "action": "throw"}]),
    sc("null-once", rules=[{"rt": 0, "action": "null"}]),
    sc("later-max3", maxReconsumeTimes=3, rules=[FAIL]),
    sc("throw-max3", maxReconsumeTimes=3, rules=[{"action": "throw"}]),
    sc("null-max3", maxReconsumeTimes=3, rules=[{"action": "null"}]),
    sc("later-max0", maxReconsumeTimes=0, rules=[FAIL]),
    sc("later-max16", maxReconsumeTimes=16, rules=[FAIL], quietMs=7000, maxMs=120000),
    sc(
        "per-message-max",
        maxReconsumeTimes=3,
        messages=msgs("m1", properties={"MAX_RECONSUME_TIMES": "1"}),
        rules=[FAIL],
    ),
    # --- delayLevelWhenNextConsume -------------------------------------------------------------
    sc("level-minus1-dlq", maxReconsumeTimes=3, rules=[{"action": "later", "delayLevel": -1}]),
    sc("level-0-default", maxReconsumeTimes=2, rules=[{"action": "later", "delayLevel": 0}]),
    sc(
        "level-2-in-range",
        maxReconsumeTimes=1,
        quietMs=4500,
        rules=[{"action": "later", "delayLevel": 2}],
    ),
    sc(
        "level-past-table",
        maxReconsumeTimes=1,
        quietMs=6500,
        rules=[{"action": "later", "delayLevel": 99}],
    ),
    # --- ackIndex (batches of 3) ---------------------------------------------------------------
    sc(
        "ack-all",
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "success", "ackIndex": 2}],
    ),
    sc(
        "ack-first-only",
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "success", "ackIndex": 0}],
    ),
    sc(
        "ack-none",
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "success", "ackIndex": -1}],
    ),
    sc(
        "ack-below-minus1",
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "success", "ackIndex": -2}],
    ),
    sc(
        "ack-past-batch",
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "success", "ackIndex": 7}],
    ),
    sc(
        "ack-with-later",
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "later", "ackIndex": 1}],
    ),
    sc("batch-later", batchMaxSize=3, messages=BATCH3, rules=[{"rt": 0, "action": "later"}]),
    # --- tags, keys, properties, producer delay levels -----------------------------------------
    sc(
        "tag-filter",
        expression="A || B",
        messages=[
            {"key": "m1", "tags": "A"},
            {"key": "m2", "tags": "B"},
            {"key": "m3", "tags": "C"},
            {"key": "m4"},
        ],
        rules=[{"key": "m2", "rt": 0, "action": "later"}],
    ),
    sc(
        "props-survive-retry",
        messages=msgs("m1", tags="T", properties={"a": "1", "b": "two words"}),
        rules=[{"rt": 0, "action": "later"}],
    ),
    sc("producer-delay-level", quietMs=4500, messages=msgs("m1", delayLevel=2)),
    sc(
        "producer-delay-then-retry",
        messages=msgs("m1", delayLevel=1),
        rules=[{"rt": 0, "action": "later"}],
    ),
    sc("producer-delay-past-table", quietMs=7000, messages=msgs("m1", delayLevel=40)),
    # --- orderly ------------------------------------------------------------------------------
    sc("orderly-success", mode="orderly", messages=BATCH3),
    sc(
        "orderly-suspend-twice",
        mode="orderly",
        suspendMillis=500,
        messages=BATCH3,
        rules=[{"key": "m2", "rtBelow": 2, "action": "suspend"}],
    ),
    sc(
        "orderly-throw-null",
        mode="orderly",
        suspendMillis=500,
        messages=BATCH3,
        rules=[
            {"key": "m1", "rt": 0, "action": "throw"},
            {"key": "m1", "rt": 1, "action": "null"},
        ],
    ),
    sc(
        "orderly-max3-dlq",
        mode="orderly",
        suspendMillis=250,
        maxReconsumeTimes=3,
        messages=BATCH3,
        rules=[{"key": "m2", "action": "suspend"}],
    ),
    sc(
        "orderly-per-message-max",
        mode="orderly",
        suspendMillis=250,
        maxReconsumeTimes=3,
        messages=msgs("m1", "m2", properties={"MAX_RECONSUME_TIMES": "1"}),
        rules=[{"key": "m1", "action": "suspend"}],
    ),
    sc(
        "orderly-context-suspend",
        mode="orderly",
        messages=msgs("m1"),
        quietMs=4000,
        rules=[{"rt": 0, "action": "suspend", "suspendMillis": 2500}],
    ),
    sc(
        "orderly-batch",
        mode="orderly",
        suspendMillis=250,
        batchMaxSize=3,
        messages=BATCH3,
        rules=[{"rt": 0, "action": "suspend"}],
    ),
    # --- broadcasting -------------------------------------------------------------------------
    sc("broadcast-success", model="BROADCASTING", messages=msgs("m1", "m2")),
    sc(
        "broadcast-failure",
        model="BROADCASTING",
        messages=msgs("m1", "m2"),
        rules=[{"key": "m1", "action": "later"}],
    ),
    sc(
        "broadcast-orderly-max",
        model="BROADCASTING",
        mode="orderly",
        suspendMillis=250,
        maxReconsumeTimes=2,
        messages=msgs("m1", "m2"),
        rules=[{"key": "m1", "action": "suspend"}],
    ),
    # --- consume-from-where for a new group ---------------------------------------------------
    sc(
        "from-last-new-group",
        consumeFromWhere="LAST",
        preSend=msgs("old1", "old2"),
        sendAfterStart=True,
        messages=msgs("new1"),
    ),
    sc(
        "from-first-new-group",
        consumeFromWhere="FIRST",
        preSend=msgs("old1", "old2"),
        sendAfterStart=True,
        messages=msgs("new1"),
    ),
]
