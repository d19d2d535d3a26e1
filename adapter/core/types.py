"""Small shared type aliases of the pure core."""

from __future__ import annotations

from typing import TypeAlias

TP: TypeAlias = tuple[str, int]
"""A topic partition as ``(topic, partition)``: the key of every per-partition map."""
