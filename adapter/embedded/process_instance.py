"""An embedded Kafka instance that belongs to one process: named ``<prefix>-<pid>[-<suffix>]``,
started fresh, stopped and its data dropped when the process is done with it.  Two processes on
one machine (two pytest sessions, two ``rmq-kafka bench`` runs) never share or stop each other's
broker, and a process killed before its clean-up (``kill -9``) leaves nothing for long: the next
one of the same prefix stops the orphan's broker and drops its data."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from adapter.embedded.broker import EmbeddedKafka, pid_alive

__all__ = ["process_instance", "reap_orphans"]


def reap_orphans(instances: Path, prefix: str) -> None:
    """Stop the brokers of the ``<prefix>-<pid>...`` instances in ``instances`` whose process
    is gone, and drop their data (best effort: one that cannot be stopped is left)."""
    for inst in instances.glob(f"{prefix}-*"):
        owner = inst.name[len(prefix) + 1 :].split("-", 1)[0]
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        with contextlib.suppress(Exception):
            EmbeddedKafka.existing(inst.name, instances_dir=instances).stop(timeout=10)
            shutil.rmtree(inst, ignore_errors=True)


@contextlib.contextmanager
def process_instance(prefix: str, suffix: str = "", **options: Any) -> Iterator[EmbeddedKafka]:
    """This process's instance ``<prefix>-<pid>`` (``-<suffix>`` appended when given), built
    with ``options`` (:class:`EmbeddedKafka`'s): started fresh after the orphans of ``prefix``
    are reaped, yielded running, then stopped and its directory removed."""
    name = f"{prefix}-{os.getpid()}" + (f"-{suffix}" if suffix else "")
    instance = EmbeddedKafka(name, **options)
    reap_orphans(instance.instance_dir.parent, prefix)
    instance.start(fresh=True)
    try:
        yield instance
    finally:
        instance.stop()
        shutil.rmtree(instance.instance_dir, ignore_errors=True)
