"""The conformance tier: every scenario of :mod:`scenarios` runs on a real RocketMQ 4.9.x
broker with RocketMQ's official Java client and on the embedded Kafka broker with the adapter,
and the two records must match but for the differences listed in
``accepted_differences.md``.

Opt-in (``./run.sh conformance``, or ``RMQ_CONFORMANCE=1``): the default suite collects the
tests and skips them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import rmq_broker  # noqa: E402

#: ``RMQ_CONFORMANCE=1`` runs the tier
TIER = os.environ.get("RMQ_CONFORMANCE", "").strip() not in ("", "0", "false", "no")

#: The delay table of both sides (RocketMQ's ``messageDelayLevel``, the adapter's
#: ``delay_levels``): 18 levels like the default one, short enough for a scenario to end in
#: seconds, with levels 2 and 18 told apart from the rest by their length.
DELAY_LEVELS = "1s 3s " + "1s " * 15 + "5s"
DELAY_LEVELS = DELAY_LEVELS.strip()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="opt-in conformance tier: ./run.sh conformance")
    for item in items:
        if not TIER and HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def rocketmq() -> Iterator[rmq_broker.RocketMQ]:
    rmq_broker.ensure_runner()
    with rmq_broker.RocketMQ(DELAY_LEVELS) as broker:
        yield broker
