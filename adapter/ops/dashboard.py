"""The Grafana dashboard as one SVG picture, without Grafana (``rmq-kafka dashboard render``).

The pure part: read a dashboard's JSON into :class:`Panel` values (rows, stat and timeseries
panels with their ``gridPos`` and PromQL targets), substitute the variables Grafana would
(:func:`substitute`), name the metrics a query reads (:func:`metric_names`), and draw the
panels with the data Prometheus answered (:func:`render_svg`): rows as headings, stat panels
as numbers, timeseries as polylines with axes and a legend, each panel one ``<g
class="panel">`` placed by its ``gridPos``.  The HTTP part is :mod:`adapter.ops.prometheus`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from adapter.errors import AdapterError, InvalidInputError

__all__ = [
    "DashboardError",
    "Panel",
    "QueryRefusedError",
    "Series",
    "Settings",
    "Target",
    "UnknownMetricError",
    "Variables",
    "format_value",
    "load_dashboard",
    "metric_names",
    "nice_max",
    "parse_duration",
    "render_svg",
    "substitute",
]

#: Grafana's grid: 24 columns; a height unit is 30 px
COLUMNS = 24
COLUMN_PX = 50
UNIT_PX = 30
GAP_PX = 6
HEADER_PX = 48
PALETTE = (
    "#7eb26d",
    "#eab839",
    "#6ed0e0",
    "#ef843c",
    "#e24d42",
    "#1f78c1",
    "#ba43a9",
    "#705da0",
    "#508642",
    "#cca300",
)
MAX_POINTS = 120  # points per series when the step is not given


class DashboardError(InvalidInputError):
    """The dashboard file cannot be read or a panel in it cannot be drawn."""


class QueryRefusedError(AdapterError):
    """Prometheus refused a panel's query; names the panel, the query and its message."""

    def __init__(self, panel: str, query: str, message: str) -> None:
        super().__init__(f"panel {panel!r}: Prometheus refused the query {query!r}: {message}")
        self.panel = panel
        self.query = query
        self.message = message


class UnknownMetricError(AdapterError):
    """A panel's query reads a metric no target scraped by Prometheus exposes."""

    def __init__(self, panel: str, query: str, metrics: Sequence[str]) -> None:
        names = ", ".join(metrics)
        super().__init__(
            f"panel {panel!r}: the query {query!r} reads {names}, which no target scraped "
            "by Prometheus exposes"
        )
        self.panel = panel
        self.query = query
        self.metrics = tuple(metrics)


@dataclass(frozen=True, slots=True)
class Target:
    """One PromQL query of a panel; ``legend`` is Grafana's ``legendFormat``."""

    ref_id: str
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    """A row, stat or timeseries panel and where the grid puts it (columns, height units)."""

    id: int
    kind: str  # "row", "stat" or "timeseries"
    title: str
    x: int
    y: int
    w: int
    h: int
    unit: str = "short"
    targets: tuple[Target, ...] = ()


@dataclass(frozen=True, slots=True)
class Series:
    """One series Prometheus answered: its labels and ``(unix seconds, value)`` points (NaN
    where Prometheus said NaN or Inf)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class Settings:
    """What the picture shows: the time range ``[end - range_s, end]``, the step between
    points, the scrape interval (for ``$__rate_interval``) and the variables' values."""

    end: float
    range_s: float
    step_s: float
    scrape_interval_s: float = 15.0
    group: str = ".*"
    topic: str = ".*"

    @property
    def start(self) -> float:
        return self.end - self.range_s

    @property
    def rate_interval_s(self) -> float:
        """Grafana's ``$__rate_interval``: ``max(step + scrape interval, 4 x scrape interval)``."""
        return max(self.step_s + self.scrape_interval_s, 4 * self.scrape_interval_s)


Variables = Mapping[str, str]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(field: str, text: str) -> float:
    """``"10m"`` -> 600.0 seconds (``ms``, ``s``, ``m``, ``h``, ``d``); a bad one names
    the field."""
    found = _DURATION.match(text.strip())
    if found is None or float(found.group(1)) <= 0:
        raise InvalidInputError(field, text, "expected a positive duration such as 30s, 10m, 1h")
    return float(found.group(1)) * _UNITS_S[found.group(2)]


def promql_duration(seconds: float) -> str:
    """Seconds as a PromQL duration: whole seconds (``600s``), at least ``1s``."""
    return f"{max(1, math.ceil(seconds))}s"


def check_variable(field: str, value: str) -> str:
    """A ``$group`` / ``$topic`` value goes inside ``=~"..."``: a regular expression without
    a double quote or a backslash (which would end or escape the PromQL string)."""
    if not value or '"' in value or "\\" in value:
        raise InvalidInputError(
            field, value, 'expected a non-empty regular expression without " or \\'
        )
    return value


def variables(settings: Settings) -> dict[str, str]:
    """The values of the variables the dashboard's queries use."""
    return {
        "group": settings.group,
        "topic": settings.topic,
        "__rate_interval": promql_duration(settings.rate_interval_s),
        "__interval": promql_duration(settings.step_s),
        "__range": promql_duration(settings.range_s),
    }


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(panel: str, expr: str, values: Variables) -> str:
    """``expr`` with ``$name`` / ``${name}`` replaced by ``values``; a variable without a
    value is an error naming the panel, the query and the variable."""

    def one(found: re.Match[str]) -> str:
        name = found.group(1) or found.group(2)
        if name not in values:
            raise DashboardError(
                f"panel {panel!r} query", expr, f"uses ${name}, which has no value here"
            )
        return values[name]

    return _VARIABLE.sub(one, expr)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        "atan2",
    }
)


def metric_names(expr: str) -> list[str]:
    """The metric names a PromQL expression reads, in order of appearance, each once:
    identifiers that are not functions, keywords, label names or durations."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    found: list[str] = []
    for m in _IDENT.finditer(text):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in _KEYWORDS or name in found:
            continue
        found.append(name)
    return found


def _unit(panel: Mapping[str, Any]) -> str:
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit = defaults.get("unit", "short") if isinstance(defaults, Mapping) else "short"
    return str(unit or "short")


def _panel(raw: Mapping[str, Any], where: str) -> Panel:
    grid = raw.get("gridPos")
    if not isinstance(grid, Mapping) or not all(
        isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")
    ):
        raise DashboardError(f"{where}.gridPos", grid, "expected integers x, y, w and h")
    kind = str(raw.get("type", ""))
    title = str(raw.get("title", ""))
    targets = tuple(
        Target(
            ref_id=str(t.get("refId", "")),
            expr=str(t["expr"]),
            legend=str(t.get("legendFormat") or ""),
        )
        for t in raw.get("targets", [])
        if isinstance(t, Mapping) and t.get("expr")
    )
    if kind in ("stat", "timeseries") and not targets:
        raise DashboardError(f"{where} ({title!r}).targets", [], "a panel needs a PromQL expr")
    return Panel(
        id=int(raw.get("id", 0)),
        kind=kind,
        title=title,
        x=grid["x"],
        y=grid["y"],
        w=grid["w"],
        h=grid["h"],
        unit=_unit(raw),
        targets=targets,
    )


def parse_dashboard(data: Mapping[str, Any]) -> tuple[str, list[Panel]]:
    """The dashboard's title and its panels (a row's nested panels after it), in order."""
    raw = data.get("panels")
    if not isinstance(raw, list):
        raise DashboardError("panels", raw, "a Grafana dashboard has a list of panels")
    panels: list[Panel] = []
    for i, p in enumerate(raw):
        if not isinstance(p, Mapping):
            raise DashboardError(f"panels[{i}]", p, "expected an object")
        panels.append(_panel(p, f"panels[{i}]"))
        for j, child in enumerate(p.get("panels", []) or []):
            panels.append(_panel(child, f"panels[{i}].panels[{j}]"))
    kinds = {"row", "stat", "timeseries"}
    odd = [f"{p.title!r} ({p.kind})" for p in panels if p.kind not in kinds]
    if odd:
        raise DashboardError("panels[].type", odd, "only row, stat and timeseries are drawn")
    return str(data.get("title", "dashboard")), panels


def load_dashboard(path: Path) -> tuple[str, list[Panel]]:
    """:func:`parse_dashboard` of a JSON file; an unreadable one names the path."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise DashboardError("--dashboard", str(path), f"not a readable JSON file: {exc}") from None
    if not isinstance(data, Mapping):
        raise DashboardError("--dashboard", str(path), "expected a JSON object")
    return parse_dashboard(data)


# --- drawing ---------------------------------------------------------------------------


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at least ``value`` (1 for nothing above 0)."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power  # pragma: no cover - the loop ends at 10


def _number(v: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= limit:
            return f"{v / limit:.3g}{suffix}"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def format_value(value: float | None, unit: str) -> str:
    """A value as the panel's unit shows it: ``ops`` per second, ``s`` seconds (``ms``
    below one), ``short`` / ``none`` a number with k, M, G."""
    if value is None or not math.isfinite(value):
        return "No data" if value is None else "NaN"
    if unit == "ops":
        return f"{_number(value)} ops/s"
    if unit == "s":
        if value != 0 and abs(value) < 1:
            return f"{_number(value * 1000)} ms"
        return f"{_number(value)} s"
    return _number(value)


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's ``legendFormat``: ``{{label}}`` replaced by the series' label value; with
    no template, the labels as ``{a="x", ...}``."""
    if not template:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return f"{{{inner}}}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip()


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


def axis_bounds(values: Sequence[float]) -> tuple[float, float]:
    """The y axis of a plot: from 0 (or a nice negative bottom) to a nice top above the
    largest value (0 to 1 for nothing)."""
    lowest, highest = min([0.0, *values]), max([0.0, *values])
    low = -nice_max(-lowest) if lowest < 0 else 0.0
    high = nice_max(highest) if highest > 0 or low == 0 else 0.0
    return low, high


def fit(text: str, width: float, char_px: float) -> str:
    """``text`` cut to ``width`` pixels (at ``char_px`` a character), ending in an ellipsis."""
    room = max(int(width / char_px), 1)
    return text if len(text) <= room else text[: max(room - 1, 0)] + "\u2026"


def _text(x: float, y: float, text: str, cls: str, anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _box(panel: Panel, top: float) -> tuple[float, float, float, float]:
    x = panel.x * COLUMN_PX + GAP_PX / 2
    y = top + panel.y * UNIT_PX + GAP_PX / 2
    return x, y, panel.w * COLUMN_PX - GAP_PX, panel.h * UNIT_PX - GAP_PX


def _open(panel: Panel, top: float, cls: str, series: int = 0) -> tuple[list[str], float, float]:
    x, y, w, h = _box(panel, top)
    counted = f' data-series="{series}"' if cls != "row" else ""
    parts = [
        f'<g class="{cls}" id="panel-{panel.id}" data-title="{escape(panel.title)}"{counted} '
        f'transform="translate({x:.1f},{y:.1f})">'
    ]
    if cls != "row":
        parts.append(f'<rect class="frame" x="0" y="0" width="{w:.1f}" height="{h:.1f}" rx="3"/>')
        parts.append(_text(8, 16, fit(panel.title, w - 12, 7.2), "title"))
    return parts, w, h


def _row(panel: Panel, top: float) -> str:
    parts, w, h = _open(panel, top, "row")
    parts.append(_text(2, h - 6, panel.title, "row-title"))
    parts.append(f'<line x1="0" y1="{h - 1:.1f}" x2="{w:.1f}" y2="{h - 1:.1f}" class="rule"/>')
    parts.append("</g>")
    return "".join(parts)


def _last(series: Sequence[Series]) -> float | None:
    for s in series:
        for _t, v in reversed(s.points):
            if math.isfinite(v):
                return v
    return None


def _stat(panel: Panel, top: float, data: Sequence[Sequence[Series]]) -> str:
    parts, w, h = _open(panel, top, "panel stat", sum(len(s) for s in data))
    values = [_last(series) for series in data]
    shown = next((v for v in values if v is not None), None)
    cls = "big" if shown is not None else "big none"
    parts.append(_text(w / 2, h / 2 + 18, format_value(shown, panel.unit), cls, "middle"))
    parts.append("</g>")
    return "".join(parts)


def _segments(points: Sequence[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Runs of finite points (a NaN breaks the line, as in Grafana)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for t, v in points:
        if math.isfinite(v):
            runs[-1].append((t, v))
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _timeseries(
    panel: Panel, top: float, data: Sequence[Sequence[Series]], settings: Settings
) -> str:
    parts, w, h = _open(panel, top, "panel timeseries", sum(len(s) for s in data))
    lines = [
        (legend(target.legend, s.labels), s)
        for target, series in zip(panel.targets, data, strict=True)
        for s in series
    ]
    legend_rows = min(len(lines), 4)
    left, right, upper = 54.0, 10.0, 26.0
    lower = 22.0 + 13.0 * max(legend_rows, 1)
    pw, ph = max(w - left - right, 10.0), max(h - upper - lower, 10.0)
    values = [v for _n, s in lines for _t, v in s.points if math.isfinite(v)]
    low, high = axis_bounds(values)
    span_t = max(settings.end - settings.start, 1e-9)
    span_v = max(high - low, 1e-12)

    def sx(t: float) -> float:
        return left + (t - settings.start) / span_t * pw

    def sy(v: float) -> float:
        return upper + ph - (v - low) / span_v * ph

    parts.append(
        f'<g class="axes"><rect class="plot" x="{left}" y="{upper}" '
        f'width="{pw:.1f}" height="{ph:.1f}"/>'
    )
    for i in range(3):
        v = low + span_v * i / 2
        y = sy(v)
        parts.append(
            f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{left + pw:.1f}" y2="{y:.1f}"/>'
        )
        parts.append(_text(left - 4, y + 4, format_value(v, panel.unit), "tick", "end"))
    for i in range(3):
        t = settings.start + span_t * i / 2
        anchor = ("start", "middle", "end")[i]
        parts.append(_text(sx(t), upper + ph + 13, _clock(t), "tick", anchor))
    parts.append("</g>")
    if not lines:
        parts.append(_text(left + pw / 2, upper + ph / 2 + 4, "No data", "none", "middle"))
    for i, (_name, s) in enumerate(lines):
        colour = PALETTE[i % len(PALETTE)]
        for run in _segments(s.points):
            if len(run) == 1:
                t, v = run[0]
                parts.append(f'<circle cx="{sx(t):.1f}" cy="{sy(v):.1f}" r="1.5" fill="{colour}"/>')
                continue
            pts = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in run)
            parts.append(f'<polyline class="line" stroke="{colour}" points="{pts}"/>')
    parts.append('<g class="legend">')
    ly = upper + ph + 28
    for i, (name, _s) in enumerate(lines[:legend_rows]):
        more = len(lines) - legend_rows
        label = name if i < legend_rows - 1 or more == 0 else f"{name} (+{more} more)"
        colour = PALETTE[i % len(PALETTE)]
        y = ly + 13 * i
        parts.append(f'<rect x="{left}" y="{y - 8:.1f}" width="10" height="3" fill="{colour}"/>')
        parts.append(_text(left + 14, y, fit(label, w - left - 18, 5.6), "legend"))
    parts.append("</g></g>")
    return "".join(parts)


_STYLE = (
    "text{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;fill:#d8d9da}"
    ".title{font-size:12px;font-weight:bold}.row-title{font-size:14px;font-weight:bold}"
    ".head{font-size:16px;font-weight:bold}.sub{font-size:11px;fill:#9fa2a7}"
    ".big{font-size:30px;font-weight:bold;fill:#73bf69}.big.none{fill:#9fa2a7;font-size:18px}"
    ".none{fill:#9fa2a7;font-size:12px}.tick{font-size:9px;fill:#9fa2a7}"
    ".legend{font-size:9.5px}.frame{fill:#181b1f;stroke:#2c3235}"
    ".plot{fill:none;stroke:#2c3235}.grid{stroke:#2c3235;stroke-dasharray:2,2}"
    ".rule{stroke:#2c3235}.line{fill:none;stroke-width:1.5}"
)


def render_svg(
    title: str,
    panels: Sequence[Panel],
    data: Mapping[int, Sequence[Sequence[Series]]],
    settings: Settings,
) -> str:
    """The dashboard as one SVG document: a heading saying what it shows, then each panel
    where its ``gridPos`` puts it (``data``: per panel id, per target, the series)."""
    bottom = max((p.y + p.h for p in panels), default=0)
    width = COLUMNS * COLUMN_PX
    height = HEADER_PX + bottom * UNIT_PX
    start = datetime.fromtimestamp(settings.start, UTC).strftime("%Y-%m-%d %H:%M:%S")
    end = datetime.fromtimestamp(settings.end, UTC).strftime("%H:%M:%S UTC")
    sub = (
        f"group=~{settings.group}  topic=~{settings.topic}  {start} to {end}  "
        f"step {promql_duration(settings.step_s)}  "
        f"$__rate_interval {promql_duration(settings.rate_interval_s)}"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f"<style>{_STYLE}</style>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#111217"/>',
        _text(GAP_PX / 2, 20, title, "head"),
        _text(GAP_PX / 2, 38, sub, "sub"),
    ]
    for panel in panels:
        if panel.kind == "row":
            parts.append(_row(panel, HEADER_PX))
        elif panel.kind == "stat":
            parts.append(_stat(panel, HEADER_PX, data.get(panel.id, ())))
        else:
            series = data.get(panel.id) or [() for _t in panel.targets]
            parts.append(_timeseries(panel, HEADER_PX, series, settings))
    parts.append("</svg>\n")
    return "\n".join(parts)
