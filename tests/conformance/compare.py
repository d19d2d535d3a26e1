"""Compare a scenario's two records (RocketMQ's and the adapter's, see :mod:`sides`) and say
which differences ``accepted_differences.md`` explains.

Every difference is one line of text, ``<kind>:<where>:<detail>``, e.g.
``deliveries:m1:rocketmq=[0, 1]:adapter=[0, 1, 2]`` or
``prop-only-rocketmq:delivery:CLUSTER``; the accepted-differences table matches them with
shell-style patterns (``*`` and ``?``), per scenario name pattern. What is compared:

* per message (its key; ``<key>#first``, ``<key>#retry<n>``): the ``reconsumeTimes`` of
  every delivery, in order; the topic the listener saw, tags, keys and body; the other
  keys of the batch it came in; the time since its previous delivery, as the nearest delay
  of the table (concurrent) or to 250 ms (orderly: the suspend time);
* orderly: the whole delivery sequence ``(key, reconsumeTimes)``;
* the properties of each delivery and dead letter: present on one side only, or (for those
  whose value is not an id, a time or an offset) a different value;
* the dead letters (key, ``reconsumeTimes``, topic) and the committed offsets.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCEPTED_FILE = Path(__file__).resolve().parent / "accepted_differences.md"

#: properties whose value differs by nature (ids, clocks, offsets): compared by presence
VARYING = {
    "UNIQ_KEY",
    "ORIGIN_MESSAGE_ID",
    "DLQ_ORIGIN_MESSAGE_ID",
    "CONSUME_START_TIME",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "RMQ_DUE_MS",
    "RMQ_ORIGIN_BORN_MS",
    "RMQ_DLQ_TIME_MS",
    "RMQ_ORIGIN_OFFSET",
    "RMQ_ORIGIN_PARTITION",
    "RMQ_FAILURE_MESSAGE",
}
#: the concurrent listener's gaps are classified to the nearest of these (ms): the distinct
#: delays of the tier's table (``conftest.DELAY_LEVELS``)
CONCURRENT_GAPS = (1000, 3000, 5000)
ORDERLY_GAP_STEP = 250


Line = dict[str, Any]


def _deliveries(lines: list[Line]) -> list[Line]:
    return [line for line in lines if line.get("type") == "delivery"]


def _gap_class(ms: int, orderly: bool) -> str:
    if orderly:
        return f"~{round(ms / ORDERLY_GAP_STEP) * ORDERLY_GAP_STEP}ms"
    return f"~{min(CONCURRENT_GAPS, key=lambda g: abs(g - ms))}ms"


def _per_key(lines: list[Line], orderly: bool) -> dict[str, list[dict[str, Any]]]:
    """Each message's deliveries, in order, with their batch mates and the gap class."""
    by_call: dict[int, list[str]] = defaultdict(list)
    for d in _deliveries(lines):
        by_call[d["call"]].append(str(d["key"]))
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    last: dict[str, int] = {}
    for d in sorted(_deliveries(lines), key=lambda x: (x["t"], x["call"], x["index"])):
        key = str(d["key"])
        gap = None if key not in last else _gap_class(d["t"] - last[key], orderly)
        last[key] = d["t"]
        out[key].append({**d, "batch": sorted(by_call[d["call"]]), "gap": gap})
    return out


def _props(where: str, a: dict[str, str], b: dict[str, str], out: set[str]) -> None:
    for name in sorted(set(a) | set(b)):
        if name not in b:
            out.add(f"prop-only-rocketmq:{where}:{name}")
        elif name not in a:
            out.add(f"prop-only-adapter:{where}:{name}")
        elif name not in VARYING and a[name] != b[name]:
            out.add(f"prop-value:{where}:{name}:rocketmq={a[name]}:adapter={b[name]}")


def compare(scenario: dict[str, Any], rocketmq: list[Line], adapter: list[Line]) -> list[str]:
    """Every difference between the two records, as text (sorted, no repeats)."""
    orderly = scenario.get("mode") == "orderly"
    group, diffs = scenario["group"], set()
    ours, theirs = _per_key(rocketmq, orderly), _per_key(adapter, orderly)
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key, []), theirs.get(key, [])
        rts_a, rts_b = [d["rt"] for d in a], [d["rt"] for d in b]
        if rts_a != rts_b:
            diffs.add(f"deliveries:{key}:rocketmq={rts_a}:adapter={rts_b}")
        for n, (x, y) in enumerate(zip(a, b, strict=False)):
            which = f"{key}#retry{n}" if n else f"{key}#first"
            for field in ("topic", "tags", "keys", "body", "batch", "gap"):
                if x.get(field) != y.get(field):
                    diffs.add(f"{field}:{which}:rocketmq={x.get(field)}:adapter={y.get(field)}")
            _props("delivery", x.get("props", {}), y.get("props", {}), diffs)
    if orderly:
        seq_a = [(d["key"], d["rt"]) for d in _deliveries(rocketmq)]
        seq_b = [(d["key"], d["rt"]) for d in _deliveries(adapter)]
        if seq_a != seq_b:
            diffs.add(f"order:rocketmq={seq_a}:adapter={seq_b}")
    dlq_a = {str(d["key"]): d for d in rocketmq if d.get("type") == "dlq"}
    dlq_b = {str(d["key"]): d for d in adapter if d.get("type") == "dlq"}
    for key in sorted(set(dlq_a) | set(dlq_b)):
        x, y = dlq_a.get(key), dlq_b.get(key)
        if x is None or y is None:
            diffs.add(f"dlq-member:{key}:rocketmq={x is not None}:adapter={y is not None}")
            continue
        for field in ("rt", "topic", "tags", "body"):
            if x.get(field) != y.get(field):
                diffs.add(f"dlq-{field}:{key}:rocketmq={x.get(field)}:adapter={y.get(field)}")
        _props("dlq", x.get("props", {}), y.get("props", {}), diffs)
    off_a = {d["queue"]: d["offset"] for d in rocketmq if d.get("type") == "offset"}
    off_b = {d["queue"]: d["offset"] for d in adapter if d.get("type") == "offset"}
    if off_a != off_b:
        diffs.add(f"offset:rocketmq={off_a}:adapter={off_b}")
    return sorted(d.replace(group, "<group>") for d in diffs)


@dataclass(frozen=True)
class Accepted:
    id: str
    scenarios: str
    difference: str
    kind: str
    status: str
    reason: str


def matches(pattern: str, text: str) -> bool:
    """Shell-style, with ``*`` (any text) and ``?`` (one character) only: the differences'
    texts are full of brackets, which stay literal."""
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, text) is not None


_ROW = re.compile(r"^\|\s*([A-Z]\d+)\s*\|(.*)\|\s*$")


def load_accepted(path: Path = ACCEPTED_FILE) -> list[Accepted]:
    """The rows of the accepted-differences table (``| A1 | scenarios | difference | kind |
    status | reason |``; patterns in backticks)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m is None:
            continue
        cells = [c.strip().strip("`") for c in m.group(2).split("|")]
        if len(cells) != 5:
            raise ValueError(f"{path.name}: row {m.group(1)} needs 6 cells: {line}")
        rows.append(Accepted(m.group(1), *cells))
    return rows


@functools.cache
def _rows() -> tuple[Accepted, ...]:
    return tuple(load_accepted())


def accepted(scenario: str, difference: str) -> Accepted | None:
    """The row that explains ``difference`` in ``scenario``, if any."""
    for row in _rows():
        if any(matches(p.strip(), scenario) for p in row.scenarios.split(",")) and matches(
            row.difference, difference
        ):
            return row
    return None


def render(scenario: str, unexplained: list[str], every: list[str]) -> str:
    lines = [f"{scenario}: {len(unexplained)} difference(s) not in {ACCEPTED_FILE.name}:"]
    lines += [f"  - {d}" for d in unexplained]
    explained = [(d, accepted(scenario, d)) for d in every if d not in unexplained]
    if explained:
        lines.append("accepted:")
        lines += [f"  - {d}  [{row.id}]" for d, row in explained if row is not None]
    return "\n".join(lines)
