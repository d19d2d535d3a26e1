"""A class-data sharing archive for the broker's JVMs: the classes a Kafka node loads while it
starts, parsed and verified once and mapped by every later node and storage format.

A JVM that starts a Kafka node spends most of its start-up CPU loading and verifying some
thousands of classes from the jars. Java's class-data sharing (CDS) keeps them, ready, in a
file that every JVM on the same JDK and the same class path maps instead::

    <home>/kafka-<version>/classes-<jdk key>.jsa

:func:`ensure_class_archive` makes it once (``./run.sh setup`` calls it after the jars): a
throw-away node starts with ``-XX:ArchiveClassesAtExit`` and stops, and the JVM writes what it
loaded. :func:`archive_options` gives every node and storage format the option that maps it
when it exists. Nothing depends on it: a missing archive means the JVM loads the classes
itself, and a JVM that cannot use the file (another JDK build, changed jars) says so in the
node's ``stdout.log`` and does the same.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from adapter.embedded.broker import EmbeddedKafka
from adapter.embedded.jars import (
    DUMP_OPTION,
    EmbeddedKafkaError,
    archive_options,
    class_archive,
    ensure_jars,
    make_class_archive,
)

__all__ = ["DUMP_OPTION", "archive_options", "class_archive", "ensure_class_archive"]

_log = logging.getLogger("adapter.embedded")


def ensure_class_archive(home: str | os.PathLike[str] | None = None) -> Path | None:
    """Make the archive for the pinned jars once (a node started and stopped, ~10 s); return
    it, or ``None`` when it cannot be made (logged: nodes then start without it). Another
    process making it at the same time is not waited for."""
    lib = ensure_jars(home)

    def write(tmp: Path) -> bool:
        with tempfile.TemporaryDirectory(prefix="rmq-kafka-classes-") as instances:
            node = EmbeddedKafka(
                "classes", home, instances_dir=instances, jvm_options=[DUMP_OPTION + str(tmp)]
            )
            try:
                node.start(fresh=True)
            except EmbeddedKafkaError as exc:
                _log.warning("no class archive for the broker's JVMs: %s", exc)
                return False
            finally:
                node.stop()  # the JVM writes the archive as it exits
        return True

    return make_class_archive(class_archive(lib), write)
