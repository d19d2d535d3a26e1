"""The console in a real browser (Playwright driving Chromium) on the embedded broker: log
in, open a group, see its ladder and DLQ, open a message's journey, dry-run and run a
redrive, see the result and the audit line.  The page's screenshot is taken every run (into
the test's temporary folder); ``RMQ_UPDATE_SCREENSHOTS=1`` writes it to the docs instead, so
that a tier run leaves the work tree as it found it."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter.console.server import RunningConsole, start_background
from adapter.console.service import ConsoleSettings
from adapter.core import naming
from tests.support.console_group import ConsoleGroup, make_console_group
from tests.support.consumer_helpers import end_offsets

ROOT = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOT = ROOT / "docs" / "images" / "console.png"
CHROMIUM = os.environ.get("RMQ_CONSOLE_CHROMIUM", "/usr/bin/chromium")
TOKEN = "browser-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def group(kafka_bootstrap_servers: str) -> ConsoleGroup:
    return make_console_group(kafka_bootstrap_servers)


@pytest.fixture(scope="module")
def console(group: ConsoleGroup) -> Iterator[RunningConsole]:
    settings = ConsoleSettings(
        config={"bootstrap.servers": group.bootstrap},
        token=TOKEN,
        namespace=group.namespace,
        trace_topic=group.trace_topic,
    )
    running = start_background(settings)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (./run.sh test-console)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _retry_end(group: ConsoleGroup) -> int:
    conf = {"bootstrap.servers": group.bootstrap}
    return sum(end_offsets(conf, naming.to_kafka(naming.retry_topic(group.group))).values())


def test_operator_logs_in_inspects_and_redrives(
    group: ConsoleGroup, console: RunningConsole, browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(90_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # every page needs the token: the first visit lands on the login form
    page.goto(console.url + "/")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.fill("#token", "wrong")
    page.click("#login")
    expect(page.locator("p.error")).to_have_text("wrong token")
    page.fill("#token", TOKEN)
    page.click("#login")
    expect(page.locator("h1")).to_have_text("Groups")

    # the groups table, then the group's page: ladder chart and dead letters
    row = page.locator(f'#groups tr[data-group="{group.group}"]')
    expect(row.locator('[data-field="dlq_size"]')).to_have_text("3")
    row.locator("a").click()
    expect(page.locator("h1")).to_have_text(f"Group {group.group}")
    expect(page.locator("#ladder-chart")).to_be_visible()
    expect(page.locator('#ladder td[data-level="3"]')).to_have_text(str(group.parked))
    expect(page.locator("#dlq tbody tr")).to_have_count(3)
    expect(page.locator("#dlq-size")).to_have_text("3")
    expect(page.locator('#outcomes td[data-succeeded="1"]')).to_have_text("1")

    # a message's detail and journey
    page.locator("#dlq tbody tr").first.locator("a").click()
    expect(page.locator("h1")).to_have_text(f"Message {group.dead[0]}")
    expect(page.locator("#journey")).to_contain_text("dead-lettered")
    expect(page.locator("#body-text")).to_contain_text('"order": 0')
    page.go_back()

    # dry run, then the redrive, of the first dead letter
    start = _retry_end(group)
    page.locator("#dlq input.pick").first.check()
    page.click("#dry-run")
    result = page.locator("#redrive-result")
    expect(result).to_contain_text("dry run: would send 1 of 1 selected")
    expect(result).to_contain_text(f"{group.dead[0]} -> %RETRY%{group.group}")
    assert _retry_end(group) == start
    page.click("#run-redrive")
    expect(result).to_contain_text("sent 1 of 1 selected")
    assert _retry_end(group) == start + 1
    expect(page.locator("#audit li.audit-line").first).to_contain_text(
        "redrive 1 id(s): 1 selected, 1 sent, 0 already, 0 refused by the loop guard"
    )
    # the same again sends nothing
    page.click("#run-redrive")
    expect(result).to_contain_text("sent 0 of 1 selected")
    expect(result).to_contain_text("1 already redriven")
    assert _retry_end(group) == start + 1

    # a reload shows the audit log as read back from Kafka, and the redriven flag
    page.reload()
    expect(page.locator("#audit li.audit-line")).to_have_count(3)
    expect(page.locator("#audit li.audit-line").nth(2)).to_contain_text("dry run")
    expect(page.locator("#dlq tbody tr").first).to_contain_text("yes (0)")
    page.locator("#dlq input.pick").nth(1).check()
    page.click("#dry-run")
    expect(result).to_contain_text("would send 1 of 1 selected")
    to_docs = os.environ.get("RMQ_UPDATE_SCREENSHOTS") == "1"
    shot = DOCS_SCREENSHOT if to_docs else tmp_path / "console.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert not errors, errors


def test_read_only_console_shows_no_redrive(group: ConsoleGroup, browser: Any) -> None:
    from playwright.sync_api import expect

    settings = ConsoleSettings(
        config={"bootstrap.servers": group.bootstrap}, token=TOKEN, read_only=True
    )
    running = start_background(settings)
    try:
        page = browser.new_page()
        page.set_default_timeout(90_000)
        page.goto(running.url + "/login")
        page.fill("#token", TOKEN)
        page.click("#login")
        page.goto(f"{running.url}/groups/{group.group}")
        expect(page.locator("header .badge")).to_have_text("read-only")
        expect(page.locator("#run-redrive")).to_have_count(0)
        expect(page.locator("#dlq input.pick").first).to_be_disabled()
    finally:
        running.stop()
