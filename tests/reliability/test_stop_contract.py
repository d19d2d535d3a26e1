"""The stop contract (docs/semantics.md §4.7), for every consumer kind, on a real broker.

A child process runs one client the way the README shows (``with client:``, no signal
handler of its own; :mod:`tests.support.stop_procs`) with a slow listener (2 s a message,
one message a batch, four workers) over a backlog on one partition.  At a random point the
test sends SIGINT or SIGTERM, or makes the program call ``shutdown()``; then a second
consumer joins the group and takes what is left.  What must hold:

* the process exits within 5 s plus the longest listener call that was running;
* no listener call starts after the signal;
* every message whose call finished is committed (the committed offset is where the
  finished ones end: nothing finished is delivered again), and a call that was running at
  the signal is the only thing a message may be repeated for;
* the first consumer left the group: the second gets the partition within seconds, not
  after a session timeout (45 s);
* every message is handled.
"""

from __future__ import annotations

import random
import signal
import sys
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.child_process import ChildProcess
from tests.support.consumer_helpers import committed_offsets, new_group

pytestmark = [pytest.mark.reliability, pytest.mark.integration, pytest.mark.timeout(240)]

MESSAGES = 24
SLOW_S = 2.0
THREADS = 4
#: the contract: within 5 s plus the longest listener call running at the signal
EXIT_BOUND_S = 5.0 + SLOW_S
#: a member that did not leave would hold the partition for the session timeout (45 s)
TAKEOVER_BOUND_S = 15.0

CASES = [
    ("push", "SIGINT"),
    ("push", "SIGTERM"),
    ("push", "call"),
    ("orderly", "SIGTERM"),
    ("simple", "SIGTERM"),
    ("share", "SIGTERM"),
    ("dropin", "SIGTERM"),
    ("aio", "SIGTERM"),
]


def _child(
    bootstrap: str,
    kind: str,
    topic: str,
    group: str,
    *,
    slow: float,
    stop: str,
    session_ms: int | None = None,
) -> ChildProcess:
    argv = [
        sys.executable,
        "-m",
        "tests.support.stop_procs",
        "--kind",
        kind,
        "-b",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--slow",
        str(slow),
        "--threads",
        str(THREADS),
        "--stop",
        "call" if stop == "call" else "signal",
        *(["--session-ms", str(session_ms)] if session_ms else []),
    ]
    return ChildProcess(argv, f"stop-{kind}", stdin=stop == "call")


def _events(child: ChildProcess, ev: str) -> list[dict[str, Any]]:
    return [e for e in list(child.history) if e.get("ev") == ev]


def _wait_for_event(child: ChildProcess, ev: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _events(child, ev):
        assert child.running(), f"{child.name} exited before a {ev!r} line\n{child.log_tail()}"
        assert time.monotonic() < deadline, f"no {ev!r} line within {timeout}s\n{child.log_tail()}"
        time.sleep(0.05)


def _stop(child: ChildProcess, how: str) -> float:
    """Stop ``child`` as ``how`` says; the moment (``time.time()``) it was asked."""
    assert child.proc is not None
    now = time.time()
    if how == "call":
        assert child.proc.stdin is not None
        child.proc.stdin.write("stop\n")
        child.proc.stdin.flush()
    else:
        child.proc.send_signal(getattr(signal, how))
    return now


@pytest.mark.parametrize(("kind", "how"), CASES, ids=[f"{k}-{h}" for k, h in CASES])
def test_a_stopped_client_starts_nothing_new_commits_what_is_done_and_leaves_at_once(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, kind: str, how: str
) -> None:
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory(f"stop-{kind}", partitions=1)
    group = new_group()
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(MESSAGES):
        producer.produce(topic, key=str(i), value=f"m{i}".encode())
    assert producer.flush(30) == 0

    first = _child(bootstrap, kind, topic, group, slow=SLOW_S, stop=how)
    with first:
        _wait_for_event(first, "end", 90)
        time.sleep(random.uniform(0.5, 2 * SLOW_S))  # a random point in the backlog
        asked = _stop(first, how)
        assert first.wait_exit(60) == 0, first.log_tail()
        exited = _events(first, "exit")
        assert exited, f"no exit line:\n{first.log_tail()}"
        took = exited[-1]["t"] - asked
        begins = _events(first, "begin")
        ends = _events(first, "end")
        ended_before = {e["off"] for e in ends if e["t"] <= asked}
        running = {e["off"] for e in begins if e["t"] <= asked} - ended_before
        late = [e["off"] for e in begins if e["t"] > asked + 0.1]
        assert not late, f"listener calls started after the stop: {late}\n{first.log_tail()}"
        assert took <= EXIT_BOUND_S, f"exited {took:.1f}s after the stop\n{first.log_tail()}"
        finished = sorted({e["off"] for e in ends})
        assert finished, "nothing was handled before the stop"
        if kind != "share":  # a share group keeps no offsets: its acks are the broker's
            done_prefix = 0
            while done_prefix in set(finished):
                done_prefix += 1
            committed = committed_offsets({"bootstrap.servers": bootstrap}, group, topic)
            assert committed == {0: done_prefix}, (
                f"finished {finished}, running at the stop {sorted(running)}, committed "
                f"{committed}\n{first.log_tail()}"
            )

    started = time.time()
    with _child(bootstrap, kind, topic, group, slow=0.0, stop="signal") as second:
        _wait_for_event(second, "end", 90)
        takeover = _events(second, "begin")[0]["t"] - started
        handled_by_first = Counter(e["off"] for e in ends)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            seen = set(handled_by_first) | {e["off"] for e in _events(second, "end")}
            if len(seen) >= MESSAGES:
                break
            time.sleep(0.2)
        _stop(second, "SIGTERM")
        assert second.wait_exit(30) == 0, second.log_tail()
    by_second = Counter(e["off"] for e in _events(second, "end"))
    every = handled_by_first + by_second
    assert set(every) == set(range(MESSAGES)), f"never handled: {set(range(MESSAGES)) - set(every)}"
    repeated = {off for off, n in every.items() if n > 1}
    assert repeated <= running, (
        f"repeated {sorted(repeated)}, but only {sorted(running)} were running at the stop"
    )
    assert len(repeated) <= THREADS
    assert takeover <= TAKEOVER_BOUND_S, (
        f"the second consumer waited {takeover:.1f}s for the partition: the first did not "
        "leave the group"
    )


def test_a_second_signal_while_stopping_stops_at_once(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The first SIGTERM waits for the running calls (6 s each here); a second one ends the
    wait: the process is gone within a second or two, and what it had not committed is
    delivered again (nothing is lost)."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("stop-twice", partitions=1)
    group = new_group()
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(12):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0
    # the second signal ends the process without leaving the group: the next member gets the
    # partition after the first one's session (6 s here, not the default 45 s)
    with _child(bootstrap, "push", topic, group, slow=6.0, stop="signal", session_ms=6000) as first:
        _wait_for_event(first, "begin", 90)
        time.sleep(1.0)  # every worker is inside a 6 s call
        _stop(first, "SIGTERM")
        time.sleep(0.5)
        again = _stop(first, "SIGTERM")
        first.wait_exit(30)
        exited = _events(first, "exit")
        assert exited, first.log_tail()
        assert exited[-1]["t"] - again < 2.5, first.log_tail()
    finished = {e["off"] for e in _events(first, "end")}
    with _child(
        bootstrap, "push", topic, group, slow=0.0, stop="signal", session_ms=6000
    ) as second:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = finished | {e["off"] for e in _events(second, "end")}
            if seen >= set(range(12)):
                break
            time.sleep(0.2)
        _stop(second, "SIGTERM")
        second.wait_exit(30)
    assert finished | {e["off"] for e in _events(second, "end")} >= set(range(12))
