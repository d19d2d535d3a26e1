"""A SimpleConsumer in a child process, for ``kill -9`` tests.

As a script::

    python simple_procs.py --bootstrap B --topic T --group G --log FILE

it receives ``T`` (invisible duration 60 s) until SIGTERM or SIGKILL and treats each message
by the CRC-32 of its body (the message id), the same in every process:

* ``crc % 4`` in (0, 1): acknowledged, then logged ``ack``;
* ``crc % 4 == 2``: on its first delivery made visible again at once
  (``change_invisible_duration(m, 0)``, logged ``expire``), so its copy goes through the
  retry topic; received again, it is held (logged ``hold``);
* ``crc % 4 == 3``: held invisible (logged ``hold``).

Every line is ``<event> <id> <delivery attempt>``, written with ``O_APPEND`` and fsync'd
after the action, so the file never claims more than happened.  It prints JSON status lines:
``{"started": true}``, then ``{"received": <distinct ids>, "retried": <deliveries with
attempt >= 2>}`` whenever they change.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path

from tests.support.child_process import ChildProcess


def kind(msg_id: str) -> int:
    return zlib.crc32(msg_id.encode()) % 4


def read_events(path: str | os.PathLike[str]) -> list[tuple[str, str, int]]:
    """Every complete line of the log: (event, id, delivery attempt)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.split("\n")[:-1]:
        event, msg_id, attempt = line.split(" ")
        out.append((event, msg_id, int(attempt)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from adapter.clients.simple.simple_consumer import SimpleConsumer

    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("--bootstrap", "--topic", "--group", "--log"):
        ap.add_argument(name, required=True)
    args = ap.parse_args(argv)
    fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(event: str, msg_id: str, attempt: int) -> None:
        os.write(fd, f"{event} {msg_id} {attempt}\n".encode())
        os.fsync(fd)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    conf = {
        "bootstrap.servers": args.bootstrap,
        "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 100,
        # the group gives a killed member's partitions away after this (not 45 s)
        "session.timeout.ms": 6000,
    }
    received: set[str] = set()
    retried = 0
    last: tuple[int, int] | None = None
    with SimpleConsumer(conf, args.group, partitions=3, await_duration=0.5) as sc:
        sc.subscribe(args.topic)
        print(json.dumps({"started": True}), flush=True)
        while not stop.is_set():
            for m in sc.receive(32, 60):
                msg_id = m.body.decode()
                received.add(msg_id)
                attempt = m.delivery_attempt
                retried += attempt >= 2
                k = kind(msg_id)
                if k in (0, 1):
                    sc.ack(m)
                    record("ack", msg_id, attempt)
                elif k == 2 and attempt == 1:
                    sc.change_invisible_duration(m, 0)
                    record("expire", msg_id, attempt)
                else:
                    record("hold", msg_id, attempt)
            now = (len(received), retried)
            if now != last:
                print(json.dumps({"received": now[0], "retried": now[1]}), flush=True)
                last = now
    return 0


class SimpleConsumerProcess(ChildProcess):
    """One child process running this module (see the module docstring)."""

    def __init__(
        self, *, bootstrap: str, topic: str, group: str, log: str | os.PathLike[str]
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "tests.support.simple_procs",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--log",
            str(log),
        ]
        super().__init__(argv, "simple-consumer")


if __name__ == "__main__":
    sys.exit(main())
