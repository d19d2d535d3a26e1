"""A share-backend SimpleConsumer in a child process, for ``kill -9`` tests.

As a script::

    python share_procs.py --bootstrap B --topic T --group G --lock S

it receives one batch of ``T`` and holds it (never acknowledges; each message for as long
as the group's lock allows), printing ``{"started": true}`` and then ``{"held": [ids]}``,
and waits to be killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from tests.support.child_process import ChildProcess


def main(argv: Sequence[str] | None = None) -> int:
    from adapter.clients.simple.simple_consumer import SimpleConsumer

    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("--bootstrap", "--topic", "--group", "--lock"):
        ap.add_argument(name, required=True)
    args = ap.parse_args(argv)
    lock = float(args.lock)
    conf = {"bootstrap.servers": args.bootstrap}
    with SimpleConsumer(
        conf,
        args.group,
        backend="share",
        lock_duration=lock,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        partitions=1,
        await_duration=0.5,
    ) as sc:
        sc.subscribe(args.topic)
        print(json.dumps({"started": True}), flush=True)
        got: list[Any] = []
        while not got:
            got = list(sc.receive(32, lock * 0.7))
        print(json.dumps({"held": [m.body.decode() for m in got]}), flush=True)
        time.sleep(3600)
    return 0


class ShareConsumerProcess(ChildProcess):
    """One child process running this module (see the module docstring)."""

    def __init__(self, *, bootstrap: str, topic: str, group: str, lock: float) -> None:
        argv = [
            sys.executable,
            "-m",
            "tests.support.share_procs",
            *("--bootstrap", bootstrap, "--topic", topic, "--group", group),
            *("--lock", str(lock)),
        ]
        super().__init__(argv, "share-consumer")


if __name__ == "__main__":
    sys.exit(main())
