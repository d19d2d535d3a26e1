"""Test tiers by folder: tests/unit → ``unit``; tests/integration → ``integration``.

Run one tier with ``-m unit`` or ``-m integration``; the default runs everything.  The
Kafka fixtures come from the project's own pytest plugin (``adapter.testing``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_TIERS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        marker = _TIERS.get(tier)
        if marker is not None and not any(m.name == tier for m in item.iter_markers()):
            item.add_marker(marker)
