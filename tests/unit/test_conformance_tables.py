"""The conformance tier's comparator and its three copies of the accepted differences, checked
in the default tier (no RocketMQ needed).

The tier itself is opt-in (``./run.sh conformance``); these tests keep what it relies on from
rotting between its runs: the comparator reports a difference it should (so the tier can fail),
the accepted-differences table parses and matches as documented, every row still concerns a
scenario that exists, and the conformance page (docs/conformance.md) and ``docs/semantics.md``
§8.1 list exactly the rows of ``tests/conformance/accepted_differences.md`` (every accepted
difference is also a sentence in docs/semantics.md, and the conformance page lists them in
one table) with the scenario count the tier runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import compare
from tests.conformance.scenarios import SCENARIOS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SEMANTICS = (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
ROWS = compare.load_accepted()
NAMES = [s["name"] for s in SCENARIOS]


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    stop = re.compile(rf"\n#{{1,{len(level)}}} ")
    m = stop.search(text, start + len(heading) + 2)
    return text[start : m.start() if m else len(text)]


CONFORMANCE_PAGE = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
SEMANTICS_SECTION = _section(SEMANTICS, "### 8.1 Differences measured against RocketMQ 4.9.7")


def _delivery(key: str, rt: int, call: int, t: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "delivery",
        "key": key,
        "rt": rt,
        "topic": "t",
        "tags": None,
        "keys": key,
        "body": key,
        "props": {},
        "call": call,
        "index": 0,
        "t": t,
        **extra,
    }


SCENARIO = {"name": "later-once", "group": "g-1", "mode": "concurrent"}


class TestCompare:
    def test_identical_records_have_no_difference(self) -> None:
        record = [_delivery("m1", 0, 0, 0), _delivery("m1", 1, 1, 1000)]
        assert compare.compare(SCENARIO, record, list(record)) == []

    def test_a_missing_redelivery_is_a_difference_no_row_accepts(self) -> None:
        ours = [_delivery("m1", 0, 0, 0), _delivery("m1", 1, 1, 1000)]
        diffs = compare.compare(SCENARIO, ours, ours[:1])
        assert diffs == ["deliveries:m1:rocketmq=[0, 1]:adapter=[0]"]
        assert compare.accepted("later-once", diffs[0]) is None

    def test_gaps_are_compared_as_the_nearest_delay_of_the_table(self) -> None:
        ours = [_delivery("m1", 0, 0, 0), _delivery("m1", 1, 1, 1100)]
        near = [_delivery("m1", 0, 0, 0), _delivery("m1", 1, 1, 1400)]
        far = [_delivery("m1", 0, 0, 0), _delivery("m1", 1, 1, 2900)]
        assert compare.compare(SCENARIO, ours, near) == []
        assert compare.compare(SCENARIO, ours, far) == [
            "gap:m1#retry1:rocketmq=~1000ms:adapter=~3000ms"
        ]

    def test_dead_letters_offsets_and_property_values_are_compared(self) -> None:
        dlq = {"type": "dlq", "key": "m1", "rt": 3, "topic": "%DLQ%g-1", "props": {"a": "1"}}
        ours = [dlq, {"type": "offset", "queue": 0, "offset": 1}]
        theirs = [
            {**dlq, "rt": 4, "props": {"a": "2", "UNIQ_KEY": "x"}},
            {"type": "offset", "queue": 0, "offset": 0},
        ]
        assert compare.compare(SCENARIO, ours, theirs) == [
            "dlq-rt:m1:rocketmq=3:adapter=4",
            "offset:rocketmq={0: 1}:adapter={0: 0}",
            "prop-only-adapter:dlq:UNIQ_KEY",
            "prop-value:dlq:a:rocketmq=1:adapter=2",
        ]

    def test_orderly_compares_the_whole_sequence(self) -> None:
        orderly = {**SCENARIO, "mode": "orderly"}
        ours = [_delivery("m1", 0, 0, 0), _delivery("m2", 0, 1, 10)]
        theirs = [_delivery("m2", 0, 0, 0), _delivery("m1", 0, 1, 10)]
        diffs = compare.compare(orderly, ours, theirs)
        assert "order:rocketmq=[('m1', 0), ('m2', 0)]:adapter=[('m2', 0), ('m1', 0)]" in diffs

    def test_patterns_keep_brackets_literal_and_match_whole_texts(self) -> None:
        row = compare.accepted("ack-below-minus1", "deliveries:m2:rocketmq=[0]:adapter=[0, 1]")
        assert row is not None and row.id == "A12"
        assert (
            compare.accepted("ack-below-minus1", "deliveries:m2:rocketmq=[0]:adapter=[0]") is None
        )
        assert compare.accepted("later-once", "deliveries:m2:rocketmq=[0]:adapter=[0, 1]") is None


class TestAcceptedTable:
    def test_rows_have_unique_ids_a_known_kind_and_a_reason(self) -> None:
        ids = [r.id for r in ROWS]
        assert ids and len(ids) == len(set(ids))
        kinds = {"by design", "RocketMQ defect", "no Kafka equivalent"}
        for r in ROWS:
            assert r.kind in kinds, r
            assert r.status in ("by design", "to fix"), r
            assert len(r.reason) > 40, r

    def test_every_row_concerns_a_scenario_the_tier_runs(self) -> None:
        for r in ROWS:
            patterns = [p.strip() for p in r.scenarios.split(",")]
            for p in patterns:
                assert any(compare.matches(p, n) for n in NAMES), (r.id, p)

    def test_the_tier_has_at_least_30_scenarios_with_unique_names(self) -> None:
        assert len(NAMES) >= 30 and len(NAMES) == len(set(NAMES))

    def test_orderly_suspend_times_sit_mid_way_between_gap_boundaries(self) -> None:
        """An orderly gap is rounded to ``ORDERLY_GAP_STEP``: a suspend time that is a multiple
        of it leaves half a step of jitter either side before the gap changes class."""
        step = compare.ORDERLY_GAP_STEP
        for s in SCENARIOS:
            times = [s.get("suspendMillis", step)]
            times += [r["suspendMillis"] for r in s.get("rules", []) if "suspendMillis" in r]
            assert all(t % step == 0 for t in times), (s["name"], times)


def _ids(text: str, pattern: str) -> list[str]:
    return re.findall(pattern, text, flags=re.MULTILINE)


class TestDocsListTheSameRows:
    def test_the_readme_has_one_table_with_every_row_and_its_reason(self) -> None:
        assert _ids(CONFORMANCE_PAGE, r"^\| (A\d+) \|") == [r.id for r in ROWS]
        for r in ROWS:
            line = next(x for x in CONFORMANCE_PAGE.splitlines() if x.startswith(f"| {r.id} |"))
            assert r.reason in line, r.id
            assert f"| {r.kind} |" in line, r.id

    def test_semantics_has_a_sentence_for_every_row(self) -> None:
        assert _ids(SEMANTICS_SECTION, r"^\* \*\*(A\d+)\*\*") == [r.id for r in ROWS]
        flat = " ".join(SEMANTICS_SECTION.split())
        for r in ROWS:
            reason = " ".join(r.reason.split())
            assert reason[1:] in flat, r.id  # the sentence starts with a capital letter there
            assert f"**{r.id}** ({r.kind};" in flat, r.id

    def test_both_state_the_number_of_scenarios_the_tier_runs(self) -> None:
        for text in (CONFORMANCE_PAGE, SEMANTICS_SECTION):
            counts = {int(n) for n in re.findall(r"\bruns (\d+) scenarios\b", text)}
            assert counts == {len(SCENARIOS)}, counts
