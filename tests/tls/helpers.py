"""Helpers of the TLS tier: clients on any config dict (the listeners' security included)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapter import Message, Producer
from adapter.io.topics import TopicPlan, ensure_topics

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


def uid() -> str:
    return uuid.uuid4().hex[:10]


def new_topic(conf: Mapping[str, Any], prefix: str, partitions: int = 1) -> str:
    topic = f"{prefix}-{uid()}"
    ensure_topics(conf, [TopicPlan(topic, topic, partitions)])
    return topic


def send(conf: Mapping[str, Any], topic: str, bodies: Sequence[str], **fields: Any) -> None:
    with Producer(conf) as producer:
        for body in bodies:
            producer.send(Message(topic=topic, body=body.encode(), **fields))


def wait_until(cond: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def properties(path: Path, conf: Mapping[str, Any]) -> Path:
    """``conf`` as a ``--config-file`` for the CLI."""
    path.write_text("\n".join(f"{k}={v}" for k, v in conf.items()) + "\n", encoding="utf-8")
    return path


def cli(props: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``rmq-kafka <args> --config-file <props>`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "adapter.cli", *args, "--config-file", str(props)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
