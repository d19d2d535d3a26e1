"""The TLS tier: every component over ``SSL`` and ``SASL_SSL`` listeners of a real broker
(the pytest plugin's ``kafka_tls`` fixture), the errors a wrong CA or a plaintext port gives
each client, and each role's least-privilege ACL set on a broker with an authorizer.

Opt-in (``./run.sh test-tls``, or ``RMQ_TLS_TIER=1``): its brokers are extra JVMs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: ``RMQ_TLS_TIER=1`` runs the tier (else its tests are skipped).
TIER = os.environ.get("RMQ_TLS_TIER", "").strip() not in ("", "0", "false", "no")
_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if TIER:
        return
    skip = pytest.mark.skip(reason="opt-in TLS tier: ./run.sh test-tls")
    for item in items:
        if Path(str(item.fspath)).resolve().parent == _HERE:
            item.add_marker(skip)
