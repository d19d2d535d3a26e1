"""The cluster tier: tests on a three-node embedded KRaft cluster (fixture ``kafka_cluster``).

Every module here runs on one pytest-xdist worker (``tests/conftest.py`` groups them), so one
cluster serves them all. The full bounce suite is opt-in (``./run.sh test-cluster``, or
``RMQ_CLUSTER_TIER=1``), and so is everything else here: a three-node cluster's three
brokers would take CPU from the whole default suite for checks the tier makes anyway.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import pytest

#: ``RMQ_CLUSTER_TIER=1`` runs the cluster tests (``./run.sh test-cluster`` sets it).
HERE = Path(__file__).resolve().parent
TIER = os.environ.get("RMQ_CLUSTER_TIER", "").strip() not in ("", "0", "false", "no")


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler set-up
def pytest_configure(config: pytest.Config) -> None:
    if not TIER or config.getoption("capture") != "sys":
        return
    # The tier runs with ``--capture=sys`` (``./run.sh test-cluster``): a client library
    # that aborts the process (a librdkafka assertion) writes its reason to file
    # descriptor 2, which fd capture would swallow with the process. Python's fatal-error
    # report then names only the crashing thread, so that reason stays in the last lines
    # a CI log keeps, instead of scrolling away under two dozen idle threads.
    faulthandler.enable(file=sys.__stderr__, all_threads=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="opt-in cluster tier: ./run.sh test-cluster")
    for item in items:
        # this hook sees every collected item, not only this folder's
        if not TIER and Path(str(item.fspath)).parent == HERE:
            item.add_marker(skip)
