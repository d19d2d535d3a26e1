"""A ScheduleService in a child process, for kill -9 tests.

As a script (``python _procs.py --bootstrap ... --namespace ...``) it starts a
:class:`ScheduleService` and runs until SIGTERM/SIGINT (clean shutdown) or SIGKILL.  While it
runs it prints one JSON status line to stdout whenever something changes::

    {"assigned": [["rmq.schedule....", 0], ...], "forwarded": 3, "reparked": 0,
     "invalid": 0, "early": 0, "pauses": 2, "alive": true, "waiting": 3}

``--kill-after-forwards N`` makes it SIGKILL itself right after its N-th forward (see
:func:`_kill_after_forwards`), for the kill-between-forward-and-commit tests.

:class:`ServiceProcess` is the test side: it starts the script, follows its status lines on a
reader thread and offers bounded waits on them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tests.support.child_process import ChildProcess, Status

# --------------------------------------------------------------------------------------------
# the child
# --------------------------------------------------------------------------------------------


def _parse_config(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--config expects key=value, got {pair!r}")
        out[key] = value
    return out


def _status(svc: Any) -> Status:
    stats = svc.stats
    info = svc.running_info()
    return {
        "assigned": sorted([t, p] for t, p in set(svc.assignment)),
        "forwarded": stats.forwarded,
        "reparked": stats.reparked,
        "invalid": stats.invalid,
        "early": stats.early,
        "pauses": stats.pauses,
        "alive": bool(info["running"]),
        "waiting": sum(w["entries"] for w in info["waiting"].values()),
    }


def _kill_after_forwards(svc: Any, limit: int, when: str) -> None:
    """SIGKILL this process once ``limit`` forwards were handed to the producer (``produced``:
    between a produce and the commit that settles it) or, with ``acked``, once the producer's
    queue held records and acknowledgements came back while (exactly-once) the transaction
    is still open (the service's ``running_info()``)."""
    from adapter.services.schedule import DeliveryGuarantee

    eos = svc.options.delivery is DeliveryGuarantee.EXACTLY_ONCE
    while svc.stats.forwarded < limit:
        time.sleep(0.0002)
    if when == "acked":
        # forwards were queued and acknowledgements came back (the queue shrank) while,
        # exactly-once, their transaction is still open: acked, not committed
        queued = 0
        while True:
            info = svc.running_info()
            n = info["in_flight"]
            if n > queued:
                queued = n
            elif queued and n < queued and (not eos or info["transaction_open"]):
                break
            time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    from adapter.services.schedule import (
        DeliveryGuarantee,
        ScheduleService,
    )

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--levels", required=True)
    ap.add_argument("--delivery", default=DeliveryGuarantee.AT_LEAST_ONCE.value)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--group")
    ap.add_argument("--transactional-id")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--kill-after-forwards", type=int, default=0)
    ap.add_argument("--kill-when", choices=["produced", "acked"], default="produced")
    args = ap.parse_args(argv)

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, **_parse_config(args.config)}
    options: dict[str, Any] = {
        "delay_levels": args.levels,
        "namespace": args.namespace,
        "delivery": DeliveryGuarantee(args.delivery),
        "partitions": args.partitions,
    }
    if args.group:
        options["group"] = args.group
    if args.transactional_id:
        options["transactional_id"] = args.transactional_id

    stop = threading.Event()

    def on_signal(_sig: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    svc = ScheduleService(conf, **options).start()
    if args.kill_after_forwards > 0:
        threading.Thread(
            target=_kill_after_forwards,
            args=(svc, args.kill_after_forwards, args.kill_when),
            name="self-kill",
            daemon=True,
        ).start()
    last: Status | None = None
    try:
        while not stop.is_set():
            now = _status(svc)
            if now != last:
                print(json.dumps(now), flush=True)
                last = now
            if not now["alive"]:
                return 2  # the service loop died: the test sees "alive": false and the code
            stop.wait(0.05)
    finally:
        svc.shutdown()
    print(json.dumps({**_status(svc), "stopped": True}), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# the test side
# --------------------------------------------------------------------------------------------


class ServiceProcess(ChildProcess):
    """A child process running one ScheduleService (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        namespace: str,
        levels: str,
        *,
        delivery: str = "AT_LEAST_ONCE",
        partitions: int = 1,
        group: str | None = None,
        transactional_id: str | None = None,
        config: Mapping[str, str | int] | None = None,
        name: str = "svc",
        kill_after_forwards: int = 0,
        kill_when: str = "produced",
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "tests.support.service_procs",
            "--bootstrap",
            bootstrap,
            "--namespace",
            namespace,
            "--levels",
            levels,
            "--delivery",
            delivery,
            "--partitions",
            str(partitions),
        ]
        if group:
            argv += ["--group", group]
        if transactional_id:
            argv += ["--transactional-id", transactional_id]
        for key, value in (config or {}).items():
            argv += ["--config", f"{key}={value}"]
        if kill_after_forwards:
            argv += ["--kill-after-forwards", str(kill_after_forwards), "--kill-when", kill_when]
        super().__init__(argv, name)

    @property
    def status(self) -> Status:
        """The last status line the service printed (``{}`` before the first)."""
        return self.latest


if __name__ == "__main__":
    sys.exit(main())
