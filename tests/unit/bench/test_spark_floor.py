"""The Spark row's stage table (:mod:`adapter.bench.spark_floor`): what each stage adds over
the one before, and its ratio to the plain count."""

from __future__ import annotations

import pytest

from adapter.bench.spark_floor import STAGES, StageResult, render

pytestmark = pytest.mark.unit


def test_the_stages_run_from_the_count_to_the_whole_job() -> None:
    names = [name for name, _ in STAGES]
    assert names[0] == "count" and names[-1] == "job"
    assert len(names) == len(set(names)) == 6


def test_render_gives_each_stage_what_it_adds_and_its_ratio() -> None:
    table = render(
        [
            StageResult("count", 2.0, 50_000.0, 10.0, 1.0),
            StageResult("decode", 3.5, 28_571.4, 20.0, 0.571),
            StageResult("job", 8.0, 12_500.0, 60.0, 0.25),
        ]
    ).splitlines()
    assert table[0].startswith("| stage | seconds | rows/s |")
    assert table[2] == "| count | 2.00 | 50 000 | - | 1.000 |"
    assert table[3] == "| decode | 3.50 | 28 571 | +1.50 | 0.571 |"
    assert table[4] == "| job | 8.00 | 12 500 | +4.50 | 0.250 |"
