"""The cluster tier: tests on a three-node embedded KRaft cluster (fixture ``kafka_cluster``).

Every module here runs on one pytest-xdist worker (``tests/conftest.py`` groups them), so one
cluster serves them all. The full bounce suite is opt-in (``./run.sh test-cluster``, or
``RMQ_CLUSTER_TIER=1``); one scenario runs in the default suite.
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

#: ``RMQ_CLUSTER_TIER=1`` runs every bounce scenario, not only the default one.
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
        if item.get_closest_marker("cluster_tier") is not None and not TIER:
            item.add_marker(skip)
