"""The one scenario registry of ``rmq-kafka bench``: scenario name -> the rows it measures.

``--only NAME`` picks entries by these names (the CLI's help lists them from here) and
:func:`~adapter.bench.run.run_bench` runs the picked ones in this order.  A scenario family
module adds a row by adding a function here; each takes the run's :class:`Bench` and
returns its :class:`Scenario` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from adapter.bench.analytics import analytics_scenarios, trace_scenarios
from adapter.bench.breaker import breaker_scenarios
from adapter.bench.consumer import blocking_scenario, consumer_scenarios, pool_scenarios
from adapter.bench.failures import failure_scenarios
from adapter.bench.forwarding import forwarding_scenarios
from adapter.bench.group_protocol import consumer_protocol_scenarios
from adapter.bench.harness import Bench, Scenario
from adapter.bench.lateness import lateness_scenario
from adapter.bench.memory import rss_scenario
from adapter.bench.orderly import orderly_scenarios
from adapter.bench.producer import producer_scenarios
from adapter.bench.pull import pull_scenarios
from adapter.bench.sendback import send_back_scenario
from adapter.bench.share import share_consumer_scenario
from adapter.bench.share_scaling import share_scaling_scenarios
from adapter.bench.tracing import tracing_scenarios
from adapter.services.schedule import DeliveryGuarantee

__all__ = ["ALL", "SCENARIOS", "SPARK_SCENARIO", "ScenarioRun"]

#: What a registry entry is: the run's bench in, its rows out.
ScenarioRun = Callable[[Bench], list[Scenario]]


def _one(make: Callable[[Bench], Scenario]) -> ScenarioRun:
    return lambda bench: [make(bench)]


#: name -> rows, in the order a full run measures them.
SCENARIOS: Mapping[str, ScenarioRun] = {
    "consumer": partial(consumer_scenarios, size=100, batches=(1, 32)),
    "consumer-pool": pool_scenarios,
    "blocking": _one(blocking_scenario),
    "consumer-1k": partial(consumer_scenarios, size=1000, batches=(32,)),
    "failures": partial(failure_scenarios, rows=((1, 32), (10, 32), (100, 32), (1, 1))),
    "consumer-protocol": consumer_protocol_scenarios,
    "sendback": _one(send_back_scenario),
    "breaker": breaker_scenarios,
    "pull": pull_scenarios,
    "share": _one(share_consumer_scenario),
    "share-scaling": share_scaling_scenarios,
    "orderly": orderly_scenarios,
    "producer": producer_scenarios,
    "forwarding": forwarding_scenarios,
    "lateness": lambda bench: [lateness_scenario(bench, d) for d in DeliveryGuarantee],
    "rss": _one(partial(rss_scenario, backlog=1_000_000)),
    "trace": trace_scenarios,
    "tracing": tracing_scenarios,
    "analytics": analytics_scenarios,
}
#: Every scenario name, in order (``--only`` takes these).
ALL: tuple[str, ...] = tuple(SCENARIOS)
#: The scenario that needs pyspark (skipped with ``--no-spark`` or without the extra).
SPARK_SCENARIO = "analytics"
