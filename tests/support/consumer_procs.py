"""A PushConsumer (and optionally its own ScheduleService) in a child process, for kill -9
tests.

As a script::

    python consumer_procs.py --bootstrap B --topic T --group G --namespace NS --log FILE \
        [--slow 0.2] [--fail-mod 10] [--poison-mod 0] [--service] [--option name=value ...] \
        [--config key=value ...]

it consumes ``T`` until SIGTERM/SIGINT (clean shutdown) or SIGKILL.  Every message the
listener handles is appended to ``FILE`` as one line, written with ``O_APPEND`` and fsync'd
before the listener goes on, so the file never claims more than happened::

    <pid> <outcome> <id> <reconsume_times> <kafka topic> <partition> <offset> <batch> <i>/<n>

``outcome`` is ``ok`` (handled), ``fail`` (failed on purpose) or ``nack`` (behind a failed
message in the same batch: ``ack_index`` marks it failed too); one ``begin`` line (for the
batch's first message) opens each listener call.  The message id is the body; ``batch``
numbers the listener calls of the process, ``i``/``n`` is the message's place in it (a batch
with fewer than ``n`` outcome lines after its ``begin`` was cut short, e.g. by SIGKILL).
``--orderly`` registers an orderly listener instead: a batch that holds a message failing
on its first delivery logs ``fail`` for each of its messages and returns
``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (the whole batch comes back); otherwise each message is
logged ``ok`` and the batch returns ``SUCCESS``.
``--slow S`` spreads a sleep of ``S`` seconds over each batch, one slice before each message
is logged, so a SIGKILL lands in the middle of a batch whose first messages are logged ``ok``
but not acknowledged.  A message fails on its first delivery when
``fails_first(id, fail_mod)`` and on every delivery when ``is_poison(id, poison_mod)``
(deterministic: CRC-32 of the id, the same in every process).

It prints JSON status lines to stdout: ``{"started": true, ...}`` once the consumer runs,
then one line whenever its assignment changes.

``--kill-at POINT --kill-after N`` make the process SIGKILL itself at a chosen point once
``N`` messages were logged ``ok``: ``listener`` (in the middle of a listener call, with part
of the batch logged), ``returned`` (a few ms after a listener call returned, before the
auto-commit that would cover it) or ``committed`` (in the ``on_commit`` callback of a
successful commit of the topic).  Just before, it prints ``{"killing": POINT, ...}`` with
what the point concerns (the batch, or the offsets just committed).

:class:`ConsumerProcess` is the test side; :func:`read_log` parses the file.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import signal
import sys
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.child_process import ChildProcess

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


def _crc(msg_id: str) -> int:
    return zlib.crc32(msg_id.encode())


def fails_first(msg_id: str, mod: int) -> bool:
    """Whether ``msg_id`` fails on its first delivery (``reconsume_times == 0``)."""
    return mod > 0 and _crc(msg_id) % mod == 0


def is_poison(msg_id: str, mod: int) -> bool:
    """Whether ``msg_id`` fails on every delivery (uses a different slice of the hash)."""
    return mod > 0 and (_crc(msg_id) // 7919) % mod == 0


@dataclass(frozen=True, slots=True)
class Record:
    pid: int
    outcome: str
    id: str
    reconsume_times: int
    kafka_topic: str
    partition: int
    offset: int
    batch: int
    index: int
    batch_size: int


def read_log(path: str | os.PathLike[str]) -> list[Record]:
    """Every complete line of a listener log (a torn last line is ignored)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.split("\n")[:-1]:  # the part after the last newline is incomplete
        pid, outcome, msg_id, rt, topic, partition, offset, batch, place = line.split(" ")
        index, size = place.split("/")
        out.append(
            Record(
                int(pid),
                outcome,
                msg_id,
                int(rt),
                topic,
                int(partition),
                int(offset),
                int(batch),
                int(index),
                int(size),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# the child
# --------------------------------------------------------------------------------------------


def mark_killed(log: str | os.PathLike[str], pid: int) -> None:
    """Append a line saying ``pid`` is dead (its open listener calls end here)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{pid} killed - 0 - 0 0 0 0/0\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def overlaps(records: list[Record]) -> list[str]:
    """Listener calls of two live processes on one partition at the same time."""
    running: dict[tuple[int, int], list[Any]] = {}  # (pid, batch) -> [topic, partition, left]
    dead: set[int] = set()
    found = []
    for r in records:
        if r.outcome == "killed":
            dead.add(r.pid)
            continue
        key = (r.pid, r.batch)
        if r.outcome == "begin":
            for (pid, batch), (t, p, left) in running.items():
                if pid != r.pid and pid not in dead and (t, p) == (r.kafka_topic, r.partition):
                    found.append(
                        f"{r.pid} began batch {r.batch} on {t}[{p}]@{r.offset} while {pid}'s "
                        f"batch {batch} had {left} message(s) to go"
                    )
            running[key] = [r.kafka_topic, r.partition, r.batch_size]
            continue
        entry = running.get(key)
        if entry is not None:
            entry[2] -= 1
            if entry[2] <= 0:
                del running[key]
    return found


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} expects key=value, got {item!r}")
        out[key] = value
    return out


def _option_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _assignment(consumer: Any) -> list[list[Any]]:
    for _ in range(10):  # the poll thread mutates the set: copy until the copy is clean
        try:
            return sorted([t, p] for t, p in list(consumer.assignment))
        except RuntimeError:
            time.sleep(0.01)
    return []


def main(argv: Sequence[str] | None = None) -> int:
    from adapter import ConsumeConcurrentlyStatus, PushConsumer, ScheduleService
    from adapter.clients.push.push_consumer import ConsumeOrderlyStatus

    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("--bootstrap", "--topic", "--group", "--namespace", "--log"):
        ap.add_argument(name, required=True)
    ap.add_argument("--levels", default=LEVELS)
    ap.add_argument("--slow", type=float, default=0.0, help="seconds of work per batch")
    ap.add_argument("--fail-mod", type=int, default=0)
    ap.add_argument("--poison-mod", type=int, default=0)
    ap.add_argument("--service", action="store_true", help="run a ScheduleService too")
    ap.add_argument("--orderly", action="store_true", help="an orderly listener")
    ap.add_argument("--delivery", default="AT_LEAST_ONCE", help="ScheduleService delivery")
    ap.add_argument("--kill-at", choices=("listener", "returned", "committed"))
    ap.add_argument("--kill-after", type=int, default=0, help="ok messages before --kill-at")
    ap.add_argument("--option", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, **_pairs(args.config, "--config")}
    options = {k: _option_value(v) for k, v in _pairs(args.option, "--option").items()}
    options.setdefault("partitions", 1)
    pid = os.getpid()
    fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lock = threading.Lock()

    class RefusedCommits(logging.Handler):
        """Journal a commit the group refused (``commit-refused``, batch -1): a member that
        revokes or leaves while the group already rebalances without it is refused
        (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), and what it handled since its last
        commit is read again by the next owner."""

        def emit(self, rec: logging.LogRecord) -> None:
            if "commit failed" in rec.getMessage():
                with lock:
                    os.write(fd, f"{pid} commit-refused - 0 - 0 0 -1 0/0\n".encode())
                    os.fsync(fd)

    logging.getLogger("adapter.consumer").addHandler(RefusedCommits(logging.WARNING))

    batches = itertools.count()
    ok_count = itertools.count(1)
    armed = threading.Event()  # the kill point may fire

    def die(point: str, **what: Any) -> None:
        print(json.dumps({"killing": point, **what}), flush=True)
        os.kill(pid, signal.SIGKILL)

    def record(outcome: str, m: Any, batch: int, index: int, size: int) -> None:
        line = (
            f"{pid} {outcome} {m.body.decode()} {m.reconsume_times} "
            f"{m.kafka_topic} {m.queue_id} {m.queue_offset} {batch} {index}/{size}\n"
        )
        with lock:
            os.write(fd, line.encode())
            os.fsync(fd)

    def listener(msgs: list[Any], ctx: Any) -> Any:
        batch, n = next(batches), len(msgs)
        record("begin", msgs[0], batch, 0, n)
        pause = args.slow / n
        for i, m in enumerate(msgs):
            if pause:
                time.sleep(pause)  # the work, before the message is logged as handled
            msg_id = m.body.decode()
            if is_poison(msg_id, args.poison_mod) or (
                m.reconsume_times == 0 and fails_first(msg_id, args.fail_mod)
            ):
                record("fail", m, batch, i, n)
                for j, rest in enumerate(msgs[i + 1 :], i + 1):
                    record("nack", rest, batch, j, n)
                ctx.ack_index = i - 1
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            record("ok", m, batch, i, n)
            if args.kill_at and next(ok_count) >= args.kill_after:
                armed.set()
            if args.kill_at == "listener" and armed.is_set() and 0 < i + 1 < n:
                die("listener", batch=batch, logged=i + 1, size=n)
        if args.kill_at == "returned" and armed.is_set():
            where = [[m.kafka_topic, m.queue_id, m.queue_offset] for m in msgs]
            threading.Timer(0.005, die, ("returned",), {"batch": batch, "where": where}).start()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def orderly(msgs: list[Any], ctx: Any) -> Any:
        batch, n = next(batches), len(msgs)
        record("begin", msgs[0], batch, 0, n)
        if any(
            m.reconsume_times == 0 and fails_first(m.body.decode(), args.fail_mod) for m in msgs
        ):
            for i, m in enumerate(msgs):
                record("fail", m, batch, i, n)
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        pause = args.slow / n
        for i, m in enumerate(msgs):
            if pause:
                time.sleep(pause)
            record("ok", m, batch, i, n)
        return ConsumeOrderlyStatus.SUCCESS

    def on_commit(err: Any, partitions: list[Any]) -> None:
        if args.kill_at != "committed" or err is not None or not armed.is_set():
            return
        mine = [[p.partition, p.offset] for p in partitions if p.topic == args.topic]
        if any(offset > 0 for _, offset in mine) and not any(p.error for p in partitions):
            die("committed", offsets=mine)

    stop = threading.Event()

    def on_signal(_sig: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    consumer = PushConsumer(
        {
            **conf,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            **({"on_commit": on_commit} if args.kill_at == "committed" else {}),
        },
        delay_levels=args.levels,
        namespace=args.namespace,
        **options,
    )
    consumer.subscribe(args.topic)
    if args.orderly:
        consumer.register_message_listener_orderly(orderly)
    else:
        consumer.register_message_listener(listener)
    with contextlib.ExitStack() as stack:
        if args.service:
            stack.enter_context(
                ScheduleService(
                    conf,
                    delay_levels=args.levels,
                    namespace=args.namespace,
                    partitions=options["partitions"],
                    delivery=args.delivery,
                )
            )
        stack.enter_context(consumer)
        print(json.dumps({"started": True, "pid": pid}), flush=True)
        last: list[list[Any]] | None = None
        while not stop.wait(0.05):
            now = _assignment(consumer)
            if now != last:
                print(json.dumps({"assigned": now}), flush=True)
                last = now
    print(json.dumps({"stopped": True}), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# the test side
# --------------------------------------------------------------------------------------------


class ConsumerProcess(ChildProcess):
    """One child process running this module (see the module docstring)."""

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        group: str,
        namespace: str,
        log: str | os.PathLike[str],
        levels: str = LEVELS,
        slow: float = 0.0,
        fail_mod: int = 0,
        poison_mod: int = 0,
        service: bool = False,
        delivery: str = "AT_LEAST_ONCE",
        options: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        name: str = "consumer",
        kill_at: str | None = None,
        kill_after: int = 0,
        orderly: bool = False,
    ) -> None:
        self.log = Path(log)  # the deliveries journal
        argv = [
            sys.executable,
            "-m",
            "tests.support.consumer_procs",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--namespace",
            namespace,
            "--log",
            str(self.log),
            "--levels",
            levels,
            "--slow",
            str(slow),
            "--fail-mod",
            str(fail_mod),
            "--poison-mod",
            str(poison_mod),
            "--delivery",
            delivery,
        ]
        if service:
            argv.append("--service")
        if orderly:
            argv.append("--orderly")
        if kill_at:
            argv += ["--kill-at", kill_at, "--kill-after", str(kill_after)]
        for key, value in (options or {}).items():
            argv += ["--option", f"{key}={value}"]
        for key, value in (config or {}).items():
            argv += ["--config", f"{key}={value}"]
        super().__init__(argv, name)

    def wait_started(self, timeout: float = 60.0) -> None:
        self.wait_for(lambda _: any(s.get("started") for s in self.history), timeout, "start")

    def status(self, key: str) -> dict[str, Any] | None:
        """The last status line that has ``key``."""
        with self._cond:
            return next((s for s in reversed(self.history) if key in s), None)

    def stop(self, timeout: float = 60.0) -> int | None:
        return super().stop(timeout)


if __name__ == "__main__":
    sys.exit(main())
