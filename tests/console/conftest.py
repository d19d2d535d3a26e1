"""The console's browser tier: Playwright drives a real Chromium (Debian's ``chromium``
package, or ``RMQ_CONSOLE_CHROMIUM``) through the console on the embedded broker, the
DLQ view is timed with 100 000 dead letters, and ``rmq-kafka dashboard render`` draws the
Grafana dashboard from a real Prometheus (Debian's ``prometheus``, or ``RMQ_PROMETHEUS``).

Opt-in (``./run.sh test-console``, or ``RMQ_CONSOLE_TIER=1``): the default suite collects
the tests and skips them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: ``RMQ_CONSOLE_TIER=1`` runs the tier
TIER = os.environ.get("RMQ_CONSOLE_TIER", "").strip() not in ("", "0", "false", "no")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="opt-in console tier: ./run.sh test-console")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
            if not TIER:
                item.add_marker(skip)
