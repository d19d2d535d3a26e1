"""Test tiers by folder: tests/unit → ``unit``; tests/integration → ``integration``.

Run one tier with ``-m unit`` or ``-m integration``; the default runs everything.  The
Kafka fixtures come from the project's own pytest plugin (``adapter.testing``).

The test command runs the suite on several pytest-xdist workers (``--dist loadgroup``):
each worker has its own embedded broker, so a test that kills or pauses its broker only
affects its own worker.  Tests are spread one by one, except the modules below, whose
module-scoped fixtures (a Spark session, a broker of their own) are costly to build twice:
each of those groups runs on one worker (the Spark modules share one: one Spark JVM per
worker process).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.group_protocol import protocols

_TESTS = Path(__file__).resolve().parent
_TIERS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration}

#: module file name -> the xdist group its tests share
_GROUPS = {
    "test_analytics_spark.py": "spark",
    "test_analytics_drain.py": "spark",
    "test_analytics_transforms.py": "spark",
    "test_analytics_classes.py": "spark",
    # the Spark group's session (one Spark JVM fewer): without its Spark row's warm-up
    # jobs (``--no-warm-up``) it adds about a minute to the group, not four
    "test_analytics_bench.py": "spark",
    "test_security.py": "sasl-broker",
    "test_embedded_broker.py": "own-broker",
    # one consumer run makes the group all its tests read
    "test_console_api.py": "console",
    "test_console_security.py": "sasl-broker",
    "test_stack.py": "docker",
    "test_cluster_stack.py": "docker",
    # one three-node cluster per worker: its modules share the worker that has it
    "test_bounce.py": "cluster",
    "test_cluster_admin.py": "cluster",
    "test_cluster.py": "cluster",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "group_protocol" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.group_protocol)
        # the tier is the folder right under tests/ (tests/unit/core/engine/... is ``unit``)
        path = Path(str(item.fspath)).resolve()
        parts = path.relative_to(_TESTS).parts if path.is_relative_to(_TESTS) else ()
        tier = parts[0] if len(parts) > 1 else ""
        marker = _TIERS.get(tier)
        if marker is not None and not any(m.name == tier for m in item.iter_markers()):
            item.add_marker(marker)


@pytest.fixture(params=protocols())
def group_protocol(request: pytest.FixtureRequest) -> str:
    """The consumer group protocol of a rebalancing scenario (each of ``classic`` and
    ``consumer`` unless ``RMQ_GROUP_PROTOCOL`` names one; tests/support/group_protocol.py)."""
    protocol: str = request.param
    return protocol


def _topic_names(admin: AdminClient) -> set[str] | None:
    try:
        return set(admin.list_topics(timeout=10).topics)
    except KafkaException:
        return None


@pytest.fixture(autouse=True)
def _drop_the_tests_topics(request: pytest.FixtureRequest) -> Iterator[None]:
    """Delete the topics a test created on the session broker once it is done (delay-level,
    retry, DLQ and control topics included).  A worker's broker otherwise collects thousands
    of partitions, and a broker restart replays them all: measured on an idle machine, a
    restart took 5-9 s with a handful of topics and 26-29 s with 1 500 x 3 partitions, which
    the broker-kill tests pay several times over.  Grouped modules keep theirs (their
    module-scoped fixtures share topics between tests)."""
    if "kafka_bootstrap_servers" not in request.fixturenames or request.path.name in _GROUPS:
        yield
        return
    admin = AdminClient({"bootstrap.servers": request.getfixturevalue("kafka_bootstrap_servers")})
    before = _topic_names(admin)
    yield
    after = _topic_names(admin)
    if before is None or after is None:
        return
    created = sorted(t for t in after - before if not t.startswith("__"))
    if created:
        admin.delete_topics(created, operation_timeout=0)  # not waited for


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups above, read from the node ids on the controller
    (xdist's own ``xdist_group`` marker does not reach the scheduler under pytest 9, which
    no longer keeps the node id where xdist rewrites it)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileGroups(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            group = _GROUPS.get(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])
            return group if group is not None else str(super()._split_scope(nodeid))

    return FileGroups(config, log)
