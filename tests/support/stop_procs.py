"""A client with a slow listener, run the way the README shows, for the stop-contract tests.

``python -m tests.support.stop_procs --kind push -b HOST:PORT --topic T --group G --slow 2``
starts one client kind with the documented ``with client:`` pattern and nothing else: no
signal handler of its own, so SIGINT and SIGTERM reach the client as they would in a
user's program.  ``--stop call`` makes the program call ``shutdown()`` itself when it reads
a line on stdin instead.  One JSON line per event on stdout:

* ``{"ev": "ready"}`` once the client runs;
* ``{"ev": "begin", "off": O, "t": T}`` when the listener (or the poll loop's handler) starts
  on the message at offset ``O``, and ``{"ev": "end", ...}`` when it returns (``t``:
  ``time.time()``, comparable with the test's clock);
* ``{"ev": "stopping", "t": T}`` when ``--stop call`` begins its ``shutdown()``;
* ``{"ev": "exit", "t": T}`` when the ``with`` block has been left.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

KINDS = ("push", "orderly", "simple", "share", "dropin", "aio")

_out_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")
        sys.stdout.flush()


@contextlib.contextmanager
def handling(offset: int) -> Iterator[None]:
    emit("begin", off=offset)
    yield
    emit("end", off=offset)


def wait_for_stop(stop: str) -> None:
    """The program's main wait: for ever (a signal ends it), or until a line on stdin."""
    if stop == "call":
        sys.stdin.readline()
        emit("stopping")
        return
    while True:
        time.sleep(0.2)


def run_push(args: argparse.Namespace, *, orderly: bool) -> None:
    from adapter import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PushConsumer

    session = {"session.timeout.ms": args.session_ms} if args.session_ms else {}
    consumer = PushConsumer(
        {"bootstrap.servers": args.bootstrap, "group.id": args.group, **session},
        consume_message_batch_max_size=1,
        consume_thread_max=args.threads,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **({"ordering": "key"} if orderly else {}),
    )
    consumer.subscribe(args.topic)

    def listener(msgs: list[Any], ctx: Any) -> Any:
        for m in msgs:
            with handling(m.queue_offset):
                time.sleep(args.slow)
        if orderly:
            return ConsumeOrderlyStatus.SUCCESS
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    if orderly:
        consumer.register_message_listener_orderly(listener)
    else:
        consumer.register_message_listener(listener)
    with consumer:
        emit("ready")
        wait_for_stop(args.stop)


def run_simple(args: argparse.Namespace, *, backend: str) -> None:
    from adapter import SimpleConsumer

    consumer = SimpleConsumer(
        {"bootstrap.servers": args.bootstrap},
        args.group,
        backend=backend,
        await_duration=1,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe(args.topic)
    with consumer:
        emit("ready")
        if args.stop == "call":
            threading.Thread(target=wait_for_stop, args=("call",), daemon=True).start()
        while True:
            for view in consumer.receive(1, invisible_duration=20):
                with handling(view.message.queue_offset):
                    time.sleep(args.slow)
                consumer.ack(view)


def run_dropin(args: argparse.Namespace) -> None:
    from adapter.kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([args.topic])
    with consumer:
        emit("ready")
        while True:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            with handling(msg.offset()):
                time.sleep(args.slow)


def run_aio(args: argparse.Namespace) -> None:
    from adapter import ConsumeConcurrentlyStatus
    from adapter.aio import AsyncPushConsumer

    async def main() -> None:
        consumer = AsyncPushConsumer(
            {"bootstrap.servers": args.bootstrap, "group.id": args.group},
            consume_message_batch_max_size=1,
            consume_thread_max=args.threads,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe(args.topic)

        async def listener(msgs: list[Any], ctx: Any) -> Any:
            for m in msgs:
                emit("begin", off=m.queue_offset)
                await asyncio.sleep(args.slow)
                emit("end", off=m.queue_offset)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer.register_message_listener(listener)
        async with consumer:
            emit("ready")
            await asyncio.Event().wait()

    asyncio.run(main())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("-b", "--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--slow", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--stop", choices=("signal", "call"), default="signal")
    parser.add_argument("--session-ms", type=int, default=None)
    args = parser.parse_args(argv)
    # Ctrl-C as in a terminal: a process started in the background of a non-interactive
    # shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    try:
        if args.kind in ("push", "orderly"):
            run_push(args, orderly=args.kind == "orderly")
        elif args.kind in ("simple", "share"):
            run_simple(args, backend="classic" if args.kind == "simple" else "share")
        elif args.kind == "dropin":
            run_dropin(args)
        else:
            run_aio(args)
    except KeyboardInterrupt:
        pass
    emit("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
