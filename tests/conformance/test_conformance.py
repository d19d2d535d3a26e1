"""One test per scenario: run it on RocketMQ and on the adapter (at the same time), compare the
two records, fail on any difference that ``accepted_differences.md`` does not list.

``RMQ_CONFORMANCE_DUMP=<dir>`` writes both records of every scenario there (for a new
scenario, or to look at a difference).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import rmq_broker
from compare import accepted, compare, render
from conftest import DELAY_LEVELS
from scenarios import SCENARIOS
from sides import run_adapter, start_rocketmq

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(
    scenario: dict[str, Any], rocketmq: rmq_broker.RocketMQ, kafka_bootstrap_servers: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    run = {**scenario, "topic": f"t-{suffix}", "group": f"g-{suffix}"}
    java = start_rocketmq(run, rocketmq)
    try:
        theirs = run_adapter(run, kafka_bootstrap_servers, DELAY_LEVELS)
    finally:
        ours_timeout = run.get("maxMs", 90000) / 1000 + 60
        reference = java.lines(ours_timeout)
    dump = os.environ.get("RMQ_CONFORMANCE_DUMP")
    if dump:
        out = Path(dump)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{scenario['name']}.json").write_text(
            json.dumps({"rocketmq": reference, "adapter": theirs}, indent=1), encoding="utf-8"
        )
    diffs = compare(run, reference, theirs)
    unexplained = [d for d in diffs if accepted(scenario["name"], d) is None]
    assert not unexplained, render(scenario["name"], unexplained, diffs)
