"""The console's HTML: what it shows is escaped, the groups page, the ladder."""

from __future__ import annotations

import pytest

from adapter.console import pages

pytestmark = pytest.mark.unit


# --- HTML ------------------------------------------------------------------------------------
def test_pages_escape_what_they_show() -> None:
    evil = '<script>alert("x")</script>'
    data = {
        "groups": [
            {
                "group": evil,
                "state": "STABLE",
                "members": [],
                "lag": 1,
                "retry_lag": 0,
                "dlq": {"size": 2},
                "dlq_growth_1h": 0,
                "circuits": [],
            }
        ],
        "schedule": None,
    }
    html = pages.groups_page(data)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "%3Cscript%3E" in html  # the link's path is URL-quoted


def test_the_groups_page_says_when_no_schedule_service_has_run() -> None:
    sched = {"group": "rmq-schedule-service", "state": "DEAD", "waiting": 4, "lateness_ms": 900}
    idle = pages.groups_page({"groups": [], "schedule": {**sched, "service_seen": False}})
    assert "no ScheduleService has run: retries wait until one starts" in idle
    seen = pages.groups_page({"groups": [], "schedule": {**sched, "service_seen": True}})
    assert "4 waiting" in seen and "no ScheduleService has run" not in seen


def test_ladder_svg_has_a_bar_per_level() -> None:
    svg = pages.ladder_svg(
        [
            {"level": 1, "delay": "1s", "waiting": 0},
            {"level": 3, "delay": "10s", "waiting": 7},
        ]
    )
    assert svg.count("<rect") == 2 and ">7</text>" in svg and "L3 10s" in svg
