"""Local-file offsets for broadcasting consumers (RocketMQ ``LocalFileOffsetStore``)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from adapter.core.naming import escape


class LocalFileOffsetStore:
    """``<dir>/<escaped group>/<escaped instance>.json`` holding ``{"topic:partition": offset}``.

    Written atomically (temp file + rename), so a crash leaves the old or the new file.
    """

    def __init__(self, directory: str | os.PathLike[str], group: str, instance: str) -> None:
        self.path = Path(directory) / escape(group) / f"{escape(instance)}.json"

    def load(self) -> dict[tuple[str, int], int]:
        try:
            raw = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        out: dict[tuple[str, int], int] = {}
        for key, offset in raw.items():
            topic, _, partition = key.rpartition(":")
            out[(topic, int(partition))] = int(offset)
        return out

    def save(self, offsets: dict[tuple[str, int], int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {f"{t}:{p}": o for (t, p), o in sorted(offsets.items())}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".offsets-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
