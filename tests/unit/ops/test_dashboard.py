"""The pure part of ``rmq-kafka dashboard render`` (adapter/ops/dashboard.py): the shipped
dashboard's panels, variable substitution, the metric names a query reads, scaling and
formatting, and the SVG (parsed back, one group per panel, placed by gridPos)."""

from __future__ import annotations

import json
import math
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from adapter.cli import build_parser
from adapter.cli.dashboard import default_dashboard
from adapter.errors import AdapterError, InvalidInputError
from adapter.ops.dashboard import (
    DashboardError,
    Panel,
    QueryRefusedError,
    Series,
    Settings,
    UnknownMetricError,
    axis_bounds,
    check_variable,
    fit,
    format_value,
    legend,
    load_dashboard,
    metric_names,
    nice_max,
    parse_dashboard,
    parse_duration,
    render_svg,
    substitute,
    variables,
)
from adapter.ops.prometheus import PrometheusApi, PrometheusUnreachableError, check_metrics

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "docker" / "grafana" / "rmq-kafka-dashboard.json"
SVG = "{http://www.w3.org/2000/svg}"
END = 1_800_000_000.0


def _settings(**kw: object) -> Settings:
    base: dict[str, object] = {
        "end": END,
        "range_s": 600.0,
        "step_s": 5.0,
        "scrape_interval_s": 1.0,
    }
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


def test_the_shipped_dashboard_is_found_and_read() -> None:
    assert default_dashboard().resolve() == SHIPPED.resolve()
    title, panels = load_dashboard(SHIPPED)
    assert title.startswith("rmq-kafka")
    kinds = {p.kind for p in panels}
    assert kinds == {"row", "stat", "timeseries"}
    assert all(p.targets for p in panels if p.kind != "row")
    assert sum(1 for p in panels if p.kind == "stat") == 6


def test_every_shipped_query_has_every_variable_substituted() -> None:
    _title, panels = load_dashboard(SHIPPED)
    values = variables(_settings(group="orders-service", topic="orders"))
    for p in panels:
        for t in p.targets:
            expr = substitute(p.title, t.expr, values)
            assert "$" not in expr, (p.title, expr)
            assert metric_names(expr), (p.title, expr)


def test_variables_follow_grafana() -> None:
    s = _settings(range_s=600.0, step_s=5.0, scrape_interval_s=15.0)
    values = variables(s)
    assert values["__rate_interval"] == "60s"  # max(5 + 15, 4 x 15)
    assert values["__range"] == "600s"
    assert values["group"] == ".*" and values["topic"] == ".*"
    assert variables(_settings(step_s=10.0, scrape_interval_s=1.0))["__rate_interval"] == "11s"
    expr = 'rate(x{group=~"$group", topic=~"${topic}"}[$__rate_interval])'
    assert substitute("p", expr, {**values, "group": "g", "topic": "t"}) == (
        'rate(x{group=~"g", topic=~"t"}[60s])'
    )


def test_an_unknown_variable_names_the_panel_and_the_variable() -> None:
    with pytest.raises(DashboardError) as info:
        substitute("Lag", 'sum(x{a=~"$cluster"})', {"group": ".*"})
    assert "'Lag'" in str(info.value) and "$cluster" in str(info.value)
    assert isinstance(info.value, AdapterError)


@pytest.mark.parametrize("bad", ['a"b', "a\\d", ""])
def test_a_variable_value_that_would_break_the_query_is_refused(bad: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        check_variable("--group", bad)
    assert info.value.field == "--group"
    assert check_variable("--group", "orders-.*") == "orders-.*"


def test_durations() -> None:
    assert parse_duration("--range", "10m") == 600.0
    assert parse_duration("--range", "1.5h") == 5400.0
    assert parse_duration("--step", "500ms") == 0.5
    for bad in ("10", "ten minutes", "0s", "-1m"):
        with pytest.raises(InvalidInputError) as info:
            parse_duration("--range", bad)
        assert info.value.field == "--range" and info.value.value == bad


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum(rate(rmq_a_total{group=~"x"}[5m]))', ["rmq_a_total"]),
        (
            "histogram_quantile(0.5, sum by (le, group) (rate(rmq_h_bucket[1m])))",
            ["rmq_h_bucket"],
        ),
        ("sum by (g) (rate(a_sum[1m])) / sum by (g) (rate(a_count[1m]))", ["a_sum", "a_count"]),
        ("max by (group, level) (time() - rmq_oldest)", ["rmq_oldest"]),
        ("sum(a) or sum(b) and on (x) c unless d", ["a", "b", "c", "d"]),
        ('up{job="by (x) rmq_fake"} offset 5m', ["up"]),
        ("a * on (x) group_left (y) b", ["a", "b"]),
        ("1 + 2.5e3", []),
    ],
)
def test_metric_names_of_a_query(expr: str, names: list[str]) -> None:
    assert metric_names(expr) == names


def test_the_shipped_dashboard_reads_only_rmq_metrics() -> None:
    _title, panels = load_dashboard(SHIPPED)
    names = {m for p in panels for t in p.targets for m in metric_names(t.expr)}
    assert names and all(n.startswith("rmq_") for n in names)
    assert "rmq_consumer_listener_duration_seconds_bucket" in names


def test_nice_max_and_formatting() -> None:
    assert [nice_max(v) for v in (0, 0.7, 1, 1.2, 3, 7, 12, 240)] == [
        1,
        1,
        1,
        2,
        5,
        10,
        20,
        250,
    ]
    assert nice_max(math.nan) == 1
    assert format_value(None, "ops") == "No data"
    assert format_value(math.nan, "short") == "NaN"
    assert format_value(12.345, "ops") == "12.3 ops/s"
    assert format_value(0.0123, "s") == "12.3 ms"
    assert format_value(2, "s") == "2 s"
    assert format_value(1530, "short") == "1.53k"
    assert format_value(0, "none") == "0"
    assert format_value(250, "short") == "250"


def test_legend_format() -> None:
    labels = {"group": "g", "level": "3", "__name__": "x"}
    assert legend("{{group}} level {{ level }}", labels) == "g level 3"
    assert legend("{{missing}} p99", labels) == "p99"
    assert legend("", labels) == '{group="g", level="3"}'


def test_a_malformed_dashboard_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(DashboardError) as info:
        parse_dashboard({"panels": [{"type": "stat", "title": "x", "gridPos": {"x": 0}}]})
    assert info.value.field == "panels[0].gridPos"
    with pytest.raises(DashboardError) as info:
        parse_dashboard(
            {
                "panels": [
                    {
                        "type": "piechart",
                        "title": "Pie",
                        "gridPos": dict.fromkeys("xywh", 1),
                        "targets": [{"expr": "up"}],
                    }
                ]
            }
        )
    assert "Pie" in str(info.value) and "piechart" in str(info.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", "utf-8")
    with pytest.raises(DashboardError) as info:
        load_dashboard(bad)
    assert info.value.field == "--dashboard" and str(bad) in str(info.value)


def test_errors_derive_from_the_root_and_name_the_panel() -> None:
    refused = QueryRefusedError("Lag", "sum(x", "parse error: unclosed left parenthesis")
    unknown = UnknownMetricError("Lag", "sum(x)", ["x"])
    for e in (refused, unknown):
        assert isinstance(e, AdapterError) and "'Lag'" in str(e)
    assert "sum(x" in str(refused) and "parse error" in str(refused)
    assert "reads x" in str(unknown)


def _picture(data: dict[int, list[list[Series]]]) -> tuple[ET.Element, list[Panel]]:
    title, panels = load_dashboard(SHIPPED)
    svg = render_svg(title, panels, data, _settings())
    return ET.fromstring(svg), panels


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def test_the_svg_has_one_group_per_panel_placed_by_grid_pos() -> None:
    root, panels = _picture({})
    drawn = _groups(root, "panel")
    assert [g.get("data-title") for g in drawn] == [p.title for p in panels if p.kind != "row"]
    assert [g.get("data-title") for g in _groups(root, "row")] == [
        p.title for p in panels if p.kind == "row"
    ]
    assert root.get("width") == "1200"
    by_id = {f"panel-{p.id}": p for p in panels}
    for g in drawn:
        p = by_id[g.get("id", "")]
        x, y = (float(v) for v in g.get("transform", "")[10:-1].split(","))
        assert x == p.x * 50 + 3 and y == 48 + p.y * 30 + 3
        assert g.get("data-series") == "0"
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert texts.count("No data") == len(drawn)  # stat values and empty plots


def test_a_timeseries_is_drawn_as_polylines_with_a_legend_and_a_stat_as_its_last_value() -> None:
    points = tuple((END - 600 + 5 * i, float(i % 7)) for i in range(121))
    gap = tuple((t, math.nan if 50 <= i < 60 else v) for i, (t, v) in enumerate(points))
    data = {
        2: [[Series({}, ((END, 12.5),))]],  # Consumed / s
        9: [
            [
                Series({"group": "g", "topic": "t", "result": "ok"}, points),
                Series({"group": "g", "topic": "t", "result": "failed"}, gap),
            ]
        ],
    }
    root, _panels = _picture(data)
    [stat] = [g for g in _groups(root, "stat") if g.get("id") == "panel-2"]
    assert "12.5 ops/s" in "".join(stat.itertext()) and stat.get("data-series") == "1"
    [ts] = [g for g in _groups(root, "timeseries") if g.get("id") == "panel-9"]
    lines = list(ts.iter(f"{SVG}polyline"))
    assert len(lines) == 3  # the NaN run breaks the second series in two
    xs = [float(p.split(",")[0]) for p in (lines[0].get("points") or "").split()]
    ys = [float(p.split(",")[1]) for p in (lines[0].get("points") or "").split()]
    assert xs[0] == 54 and xs == sorted(xs)
    assert min(ys) >= 26  # inside the plot: the top is the nice maximum (10 for 6)
    text = "".join(ts.itertext())
    assert "g t ok" in text and "g t failed" in text
    assert "10 ops/s" in text  # the y axis' top


def test_the_cli_takes_the_render_flags() -> None:
    args = build_parser().parse_args(
        [
            "dashboard",
            "render",
            "--prometheus",
            "http://p:9090",
            "--group",
            "g",
            "--out",
            "x.svg",
            "--range",
            "5m",
            "--strict",
        ]
    )
    assert args.prometheus == "http://p:9090" and args.range == "5m" and args.strict


def test_the_shipped_json_is_what_the_docker_stack_imports() -> None:
    # the unit tests above read the same file the Docker stack's Grafana imports
    assert json.loads(SHIPPED.read_text("utf-8"))["uid"] == "rmq-kafka-overview"


class _Known(PrometheusApi):
    """Prometheus as far as the check reads it: the metric names it knows."""

    def __init__(self, names: set[str]) -> None:
        super().__init__("http://127.0.0.1:1")
        self.names = names

    def known_metrics(self) -> set[str]:
        return self.names


def test_a_renamed_metric_fails_the_strict_check_naming_panel_and_metric() -> None:
    _title, panels = load_dashboard(SHIPPED)
    every = {m for p in panels for t in p.targets for m in metric_names(t.expr)}
    check_metrics(_Known(every), panels)  # the real names pass
    renamed = json.loads(
        SHIPPED.read_text("utf-8").replace("rmq_schedule_forwarded_total", "rmq_schedule_fwd_total")
    )
    _title, changed = parse_dashboard(renamed)
    with pytest.raises(UnknownMetricError) as info:
        check_metrics(_Known(every), changed)
    assert info.value.panel == "Forwarded / s (ScheduleService)"
    assert info.value.metrics == ("rmq_schedule_fwd_total",)


def test_axis_bounds_and_fitting() -> None:
    assert axis_bounds([]) == (0.0, 1.0)
    assert axis_bounds([0.0, 0.0]) == (0.0, 1.0)
    assert axis_bounds([0.2, 0.43]) == (0.0, 0.5)
    assert axis_bounds([-1.5, 0.4]) == (-2.0, 0.5)
    assert axis_bounds([-3.0, -1.0]) == (-5.0, 0.0)
    assert fit("Forwarded / s (ScheduleService)", 100, 10) == "Forwarded\u2026"
    assert fit("short", 100, 10) == "short"


def test_a_prometheus_that_does_not_answer_is_one_error_after_the_retries() -> None:
    with socket.socket() as closed:  # bound, not listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        api = PrometheusApi(url, timeout_s=2, attempts=2)
        with pytest.raises(PrometheusUnreachableError) as info:
            api.instant("up", END)
    assert url in str(info.value) and "2 attempt(s)" in str(info.value)
    assert isinstance(info.value, AdapterError)
