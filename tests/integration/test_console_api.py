"""The console's JSON API on the real broker, served by uvicorn: a group whose retries and
dead letters a real PushConsumer made; every view's numbers against what the CLI prints for
the same state; redrive (dry run, once, idempotent, the loop guard, the audit log); the
token, the CSRF checks and the 4xx answers to bad input."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from adapter.console.server import RunningConsole, start_background
from adapter.console.service import ConsoleSettings
from adapter.core import naming
from adapter.io.topics import ensure_topics, plan_topics
from adapter.services.dlq import HEADER_REDRIVE_COUNT, MAX_SPAN, read_dlq_at
from tests.support.console_group import ConsoleGroup, make_console_group, wait_for
from tests.support.consumer_helpers import end_offsets

pytestmark = pytest.mark.integration

TOKEN = "test-token-" + uuid.uuid4().hex
State = ConsoleGroup


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def state(kafka_bootstrap_servers: str) -> State:
    return make_console_group(kafka_bootstrap_servers)


@pytest.fixture(scope="module")
def console(state: State) -> Iterator[RunningConsole]:
    settings = ConsoleSettings(
        config={"bootstrap.servers": state.bootstrap},
        token=TOKEN,
        namespace=state.namespace,
        max_redrives=3,
        trace_topic=state.trace_topic,
    )
    running = start_background(settings)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def api(console: RunningConsole) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=console.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
    ) as client:
        yield client


def _dlq_kafka(group: str) -> str:
    return naming.to_kafka(naming.dlq_topic(group))


def _retry_end(state: State) -> int:
    conf = {"bootstrap.servers": state.bootstrap}
    return sum(end_offsets(conf, naming.to_kafka(naming.retry_topic(state.group))).values())


# --- the views equal the CLI -----------------------------------------------------------------
def test_group_view_equals_group_progress(state: State, api: httpx.Client) -> None:
    r = api.get(f"/api/groups/{state.group}")
    assert r.status_code == 200, r.text
    view = r.json()
    out = cli("group", "progress", "--group", state.group, "--json", "-b", state.bootstrap)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert view["progress"]["lag"] == printed["lag"]
    assert view["progress"]["dlq"] == printed["dlq"]
    assert view["progress"]["dlq"]["size"] == 3
    pick = ("topic", "partition", "committed", "end", "lag")
    assert [{k: p[k] for k in pick} for p in view["progress"]["partitions"]] == [
        {k: p[k] for k in pick} for p in printed["partitions"]
    ]
    assert view["dlq_growth_1h"] == 3


def test_ladder_equals_schedule_status(state: State, api: httpx.Client) -> None:
    """The group's two parked retries wait on level 3: the ladder says so, and ``schedule
    status`` counts the same on that level (the namespace has no other group)."""
    view = api.get(f"/api/groups/{state.group}").json()
    ladder = {lv["level"]: lv for lv in view["ladder"]["levels"]}
    assert ladder[3]["waiting"] == state.parked
    assert ladder[3]["next_due_ms"] is not None
    assert sum(lv["waiting"] for lv in ladder.values()) == state.parked
    out = cli("schedule", "status", "--namespace", state.namespace, "--json", "-b", state.bootstrap)
    assert out.returncode == 0, out.stderr
    printed = {lv["level"]: lv["waiting"] for lv in json.loads(out.stdout)["levels"]}
    assert {lv: w["waiting"] for lv, w in ladder.items()} == printed


def test_outcomes_by_reconsume_times_from_the_trace(state: State, api: httpx.Client) -> None:
    """From the consumer's trace: two ``ok`` and one ``flaky`` message succeeded (the latter
    at its second delivery); the five ``bad`` ones were retried at 0, three of them then
    dead-lettered at 1."""
    outcomes = api.get(f"/api/groups/{state.group}").json()["outcomes"]
    assert outcomes["exists"] and outcomes["events"] == 12
    assert outcomes["by_reconsume_times"] == [
        {"reconsume_times": 0, "succeeded": 2, "retried": 6, "dead_lettered": 0},
        {"reconsume_times": 1, "succeeded": 1, "retried": 0, "dead_lettered": 3},
    ]


def test_groups_list_has_the_group_with_its_dlq(state: State, api: httpx.Client) -> None:
    r = api.get("/api/groups")
    assert r.status_code == 200, r.text
    [row] = [g for g in r.json()["groups"] if g["group"] == state.group]
    assert row["dlq"]["size"] == 3
    assert row["state"] == "EMPTY"
    progress = api.get(f"/api/groups/{state.group}").json()["progress"]
    assert row["lag"] == progress["lag"]


def test_dlq_view_equals_dlq_list_and_pages(state: State, api: httpx.Client) -> None:
    out = cli("dlq", "list", "--group", state.group, "-b", state.bootstrap)
    assert out.returncode == 0, out.stderr
    listed = [json.loads(line) for line in out.stdout.splitlines()]
    r = api.get(f"/api/groups/{state.group}/dlq", params={"limit": 50})
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["total"] == 3 and page["next_cursor"] is None
    keys = ("msg_id", "origin_topic", "reason", "reconsume_times", "failure", "keys", "offset")
    assert [{k: e[k] for k in keys} for e in page["entries"]] == [
        {k: e[k] for k in keys} for e in listed
    ]
    # two pages of two and one: the same entries, each once
    first = api.get(f"/api/groups/{state.group}/dlq", params={"limit": 2}).json()
    assert len(first["entries"]) == 2 and first["next_cursor"]
    second = api.get(
        f"/api/groups/{state.group}/dlq", params={"limit": 2, "cursor": first["next_cursor"]}
    ).json()
    assert second["next_cursor"] is None
    ids = [e["msg_id"] for e in first["entries"] + second["entries"]]
    assert ids == [e["msg_id"] for e in listed]
    # filters
    reason = api.get(
        f"/api/groups/{state.group}/dlq", params={"reason": "MAX_RECONSUME_TIMES"}
    ).json()
    assert len(reason["entries"]) == 3
    other = api.get(f"/api/groups/{state.group}/dlq", params={"reason": "NOPE"}).json()
    assert other["entries"] == [] and other["scanned"] == 3
    later = api.get(f"/api/groups/{state.group}/dlq", params={"since": "2099-01-01T00:00:00Z"})
    assert later.status_code == 200 and later.json()["entries"] == []
    by_key = api.get(f"/api/groups/{state.group}/dlq", params={"key": "k1"}).json()
    assert [e["keys"] for e in by_key["entries"]] == ["k1"]


def test_message_journey_equals_msg_show(state: State, api: httpx.Client) -> None:
    msg_id = state.dead[0]
    r = api.get(f"/api/messages/{msg_id}")
    assert r.status_code == 200, r.text
    view = r.json()
    out = cli("msg", "show", "--id", msg_id, "--json", "-b", state.bootstrap)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert view["journeys"] == printed["journeys"]
    kinds = [hop["kind"] for hop in view["journeys"][0]["hops"]]
    assert kinds == ["failed", "retry", "dead-lettered"], kinds
    missing = api.get(f"/api/messages/{uuid.uuid4().hex}", params={"since": "1h"})
    assert missing.status_code == 404 and "no record" in missing.json()["error"]


# --- redrive ---------------------------------------------------------------------------------
def test_redrive_dry_run_once_again_and_audit(state: State, api: httpx.Client) -> None:
    url = f"/api/groups/{state.group}/dlq/redrive"
    start = _retry_end(state)
    one = state.dead[0]
    dry = api.post(url, json={"ids": [one], "dry_run": True})
    assert dry.status_code == 200, dry.text
    d = dry.json()
    assert d["dry_run"] and d["sent"] == 0 and d["would_send"] == 1
    assert d["plan"] == [{"msg_id": one, "to": naming.retry_topic(state.group)}]
    assert _retry_end(state) == start  # the dry run sent nothing

    sent = api.post(url, json={"ids": [one], "rate": 50}).json()
    assert (sent["sent"], sent["selected"], sent["already_redriven"]) == (1, 1, 0)
    assert _retry_end(state) == start + 1

    again = api.post(url, json={"ids": [one]}).json()
    assert (again["sent"], again["already_redriven"]) == (0, 1)
    assert _retry_end(state) == start + 1  # idempotent: a second redrive sends nothing

    rest = api.post(url, json={"all": True, "rate": 100}).json()
    assert (rest["sent"], rest["already_redriven"]) == (2, 1)
    assert _retry_end(state) == start + 3
    # each copy carries the redrive count the loop guard reads
    copies = _read_all(state.bootstrap, naming.to_kafka(naming.retry_topic(state.group)))
    counts = [dict(m.headers() or []).get(HEADER_REDRIVE_COUNT) for m in copies[-3:]]
    assert counts == [b"1", b"1", b"1"]

    audit = api.get("/api/audit", params={"group": state.group}).json()["records"]
    assert [(a["options"]["dry_run"], a["sent"], a["already_redriven"]) for a in audit[:4]] == [
        (False, 2, 1),
        (False, 0, 1),
        (False, 1, 0),
        (True, 0, 0),
    ]
    assert audit[0]["who"].startswith("token@") and audit[0]["source"] == "console"
    assert audit[0]["selection"] == {"all": True}
    assert audit[3]["selection"] == {"ids": [one]} and audit[3]["would_send"] == 1


def _read_all(bootstrap: str, kafka_topic: str) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[Any] = []
    try:
        c.assign([TopicPartition(kafka_topic, 0, 0)])
        while True:
            m = c.poll(10)
            assert m is not None, "no EOF"
            if m.error() is not None:
                break
            out.append(m)
    finally:
        c.close()
    return out


def test_loop_guard_refuses_a_message_redriven_too_often(
    kafka_bootstrap_servers: str, api: httpx.Client
) -> None:
    """A dead letter redriven 3 times already is refused (counted, not sent) unless forced;
    the CLI's ``dlq redrive --max-redrives`` is the same code."""
    group = f"guard-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    producer = KafkaProducer(conf)
    for i, count in enumerate((b"3", b"0", b"5")):
        headers = [("UNIQ_KEY", f"m{i}".encode()), (HEADER_REDRIVE_COUNT, count)]
        producer.produce(_dlq_kafka(group), value=b"dead", headers=headers)
    assert producer.flush(15) == 0
    retry = naming.to_kafka(naming.retry_topic(group))
    url = f"/api/groups/{group}/dlq/redrive"

    dry = cli(
        "dlq",
        "redrive",
        "--group",
        group,
        "--dry-run",
        "--max-redrives",
        "3",
        "-b",
        kafka_bootstrap_servers,
    )
    assert dry.returncode == 0, dry.stderr
    assert "would redrive 1 of 3" in dry.stdout and "loop guard: m0" in dry.stderr, dry
    assert sum(end_offsets(conf, retry).values()) == 0

    r = api.post(url, json={"ids": ["m0", "m1"], "max_redrives": 3}).json()
    assert (r["sent"], r["refused_by_loop_guard"], r["loop_guarded_ids"]) == (1, 1, ["m0"])
    forced = api.post(url, json={"ids": ["m2"], "max_redrives": 3, "force": True}).json()
    assert (forced["sent"], forced["refused_by_loop_guard"]) == (1, 0)
    copies = _read_all(kafka_bootstrap_servers, retry)
    assert [dict(m.headers() or [])[HEADER_REDRIVE_COUNT] for m in copies] == [b"1", b"6"]
    audit = api.get("/api/audit", params={"group": group}).json()["records"]
    assert [(a["source"], a["refused_by_loop_guard"]) for a in audit] == [
        ("console", 0),
        ("console", 1),
        ("cli", 2),
    ]


# --- security and bad input ------------------------------------------------------------------
def test_every_call_needs_the_token(state: State, console: RunningConsole) -> None:
    with httpx.Client(base_url=console.url, timeout=60) as anon:
        for path in ("/api/groups", f"/api/groups/{state.group}", "/api/audit"):
            r = anon.get(path)
            assert r.status_code == 401 and "token" in r.json()["error"], path
        wrong = anon.get("/api/groups", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        page = anon.get("/", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login"
        post = anon.post(f"/api/groups/{state.group}/dlq/redrive", json={"all": True})
        assert post.status_code == 401


def test_csrf_refused_and_login_session(state: State, console: RunningConsole) -> None:
    url = f"/api/groups/{state.group}/dlq/redrive"
    body = {"all": True, "dry_run": True}
    with httpx.Client(base_url=console.url, timeout=60) as browser:
        foreign = browser.post(
            "/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        bad = browser.post("/login", data={"token": "x"}, headers={"Origin": console.url})
        assert bad.status_code == 401
        ok = browser.post(
            "/login",
            data={"token": TOKEN},
            headers={"Origin": console.url},
            follow_redirects=False,
        )
        assert ok.status_code == 303
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        page = browser.get("/")
        assert page.status_code == 200 and state.group in page.text
        csrf = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        # the session cookie alone does not make a POST: no token, or a foreign origin
        no_token = browser.post(url, json=body, headers={"Origin": console.url})
        assert no_token.status_code == 403 and "CSRF" in no_token.json()["error"]
        cross = browser.post(
            url, json=body, headers={"Origin": "http://evil.example", "X-CSRF-Token": csrf}
        )
        assert cross.status_code == 403 and "cross-site" in cross.json()["error"]
        no_origin = browser.post(url, json=body, headers={"X-CSRF-Token": csrf})
        assert no_origin.status_code == 403
        good = browser.post(url, json=body, headers={"Origin": console.url, "X-CSRF-Token": csrf})
        assert good.status_code == 200 and good.json()["dry_run"], good.text
    with httpx.Client(base_url=console.url, timeout=60) as other:
        bearer_cross = other.post(
            url,
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"},
        )
        assert bearer_cross.status_code == 403


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "needle"),
    [
        ("GET", "/api/groups/no-such-group-{u}", None, 404, "no such group"),
        ("GET", "/api/groups/no-such-group-{u}/dlq", None, 404, "no such group"),
        ("GET", "/api/groups/{g}/dlq?limit=0", None, 400, "limit"),
        ("GET", "/api/groups/{g}/dlq?limit=abc", None, 400, "limit"),
        ("GET", "/api/groups/{g}/dlq?cursor=zz", None, 400, "cursor"),
        ("GET", "/api/groups/{g}/dlq?since=yesterday", None, 400, "since"),
        ("GET", "/api/messages/" + "x" * 300, None, 400, "message_id"),
        ("GET", "/api/messages/%20padded", None, 400, "message_id"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"all": True, "rate": -5}, 400, "rate"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"all": True, "rate": "fast"}, 400, "rate"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"ids": ["a\nb"]}, 400, "ids"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"ids": "abc"}, 400, "ids"),
        ("POST", "/api/groups/{g}/dlq/redrive", {}, 400, "exactly one"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"all": True, "ids": ["a"]}, 400, "exactly one"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"all": True, "bogus": 1}, 400, "bogus"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"all": True, "max_redrives": 0}, 400, "max_r"),
        ("POST", "/api/groups/{g}/dlq/redrive", {"all": "yes"}, 400, "all"),
        ("POST", "/api/groups/{g}/dlq/redrive", [1, 2], 400, "JSON object"),
        ("POST", "/api/groups/no-such-{u}/dlq/redrive", {"all": True}, 404, "no such group"),
    ],
)
def test_bad_input_gets_a_clear_4xx(  # noqa: PLR0917 - pytest passes the case by name
    state: State,
    api: httpx.Client,
    method: str,
    path: str,
    payload: Any,
    status: int,
    needle: str,
) -> None:
    url = path.format(g=state.group, u=uuid.uuid4().hex[:6])
    r = api.request(method, url, json=payload) if payload is not None else api.request(method, url)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert needle in error and "Traceback" not in error, error


def test_pages_answer_a_bad_group_with_an_error_page(state: State, api: httpx.Client) -> None:
    page = api.get(f"/groups/no-such-{uuid.uuid4().hex[:6]}")
    assert page.status_code == 404 and "no such group" in page.text
    assert "Traceback" not in page.text
    bad = api.get(f"/groups/{state.group}", params={"limit": "-1"})
    assert bad.status_code == 400 and "limit" in bad.text
    ok = api.get(f"/groups/{state.group}")
    assert ok.status_code == 200 and 'id="ladder-chart"' in ok.text


def test_a_body_that_is_not_json_is_a_400(state: State, api: httpx.Client) -> None:
    r = api.post(
        f"/api/groups/{state.group}/dlq/redrive",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and "not JSON" in r.json()["error"]


def test_read_only_console_refuses_redrive(state: State) -> None:
    settings = ConsoleSettings(
        config={"bootstrap.servers": state.bootstrap}, token=TOKEN, read_only=True
    )
    running = start_background(settings)
    try:
        with httpx.Client(
            base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as client:
            start = _retry_end(state)
            r = client.post(
                f"/api/groups/{state.group}/dlq/redrive", json={"all": True, "again": True}
            )
            assert r.status_code == 403 and "read-only" in r.json()["error"]
            assert _retry_end(state) == start
            assert client.get(f"/api/groups/{state.group}/dlq").status_code == 200
    finally:
        running.stop()


def test_the_console_binds_loopback_by_default(kafka_bootstrap_servers: str) -> None:
    """``rmq-kafka console`` prints a generated token, listens on 127.0.0.1 and lets the
    printed token in."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapter.cli",
            "console",
            "--port",
            str(port),
            "-b",
            kafka_bootstrap_servers,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("console on" in line for line in lines), 30, "the start line")
        text = "".join(lines)
        assert f"console on http://127.0.0.1:{port}/" in text, text
        token = text.split("console token: ", 1)[1].split()[0]

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/login", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answers, 30, "the console to listen")
        url = f"http://127.0.0.1:{port}/api/audit"
        assert httpx.get(url, timeout=30).status_code == 401
        ok = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert ok.status_code == 200, ok.text
    finally:
        proc.terminate()
        proc.wait(30)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "console.md"


def test_the_docs_shell_snippets_run_as_written(
    kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    """docs/console.md's commands, as a user pastes them (the install line aside), on a group
    with dead letters: the group, the broker and the port made this run's."""
    blocks = re.findall(r"```sh\n(.*?)```", DOCS.read_text("utf-8"), re.S)
    runnable = [b for b in blocks if not b.startswith("pip install")]
    assert len(runnable) == 2, blocks
    group = f"docs-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    producer = KafkaProducer(conf)
    for i in range(3):
        producer.produce(
            _dlq_kafka(group),
            value=b"dead",
            headers=[("UNIQ_KEY", f"d{i}".encode()), ("RMQ_DLQ_REASON", b"MAX_RECONSUME_TIMES")],
        )
    assert producer.flush(15) == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    outs = []
    for block in runnable:
        script = (
            block.replace("orders-service", group)
            .replace("localhost:9092", kafka_bootstrap_servers)
            .replace("8088", port)
        )
        # the console started in the background stops with the script
        path = tmp_path / "snippet.sh"
        path.write_text("set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script)
        out = subprocess.run(
            ["bash", str(path)], capture_output=True, text=True, timeout=180, env=env, check=False
        )
        assert out.returncode == 0, (script, out.stdout, out.stderr[-3000:])
        outs.append(out.stdout)
    assert "would redrive 3 of 3" in outs[0] and "redrove 3 of 3" in outs[0], outs[0]
    lines, text, decoder = [], outs[1], json.JSONDecoder()
    while text.strip():  # curl prints each answer without a newline
        value, end = decoder.raw_decode(text.strip())
        lines.append(value)
        text = text.strip()[end:]
    assert any(g["group"] == group for g in lines[0]["groups"])
    assert len(lines[1]["entries"]) == 3
    assert lines[2]["dry_run"] and lines[2]["already_redriven"] == 3


def test_redrive_by_ids_reads_where_the_page_says_and_falls_back(
    kafka_bootstrap_servers: str, api: httpx.Client
) -> None:
    """Ids with their positions (as the page sends them) are read there only; a position
    that holds another message is only a hint: the id is looked for in the DLQ."""
    group = f"pos-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    producer = KafkaProducer(conf)
    for i in range(4):
        producer.produce(_dlq_kafka(group), value=b"dead", headers=[("UNIQ_KEY", f"p{i}".encode())])
    assert producer.flush(15) == 0
    at = read_dlq_at(conf, group, [(0, 1), (0, 3), (0, 99)])
    assert at is not None and [e.message.msg_id for e in at] == ["p1", "p3"]
    assert read_dlq_at(conf, group, [(0, 0), (0, MAX_SPAN + 5)]) is None
    url = f"/api/groups/{group}/dlq/redrive"
    right = api.post(url, json={"ids": ["p1"], "positions": ["0-1"], "dry_run": True}).json()
    assert [p["msg_id"] for p in right["plan"]] == ["p1"]
    wrong = api.post(url, json={"ids": ["p2"], "positions": ["0-3"], "dry_run": True}).json()
    assert [p["msg_id"] for p in wrong["plan"]] == ["p2"] and wrong["missing_ids"] == []
    began = time.monotonic()
    body = {"ids": ["p1", "p3"], "positions": ["0-1", "0-3"], "rate": 2}
    sent = api.post(url, json=body).json()
    assert sent["sent"] == 2
    assert time.monotonic() - began >= 0.5  # the second send waited for the rate
    retry = naming.to_kafka(naming.retry_topic(group))
    assert sum(end_offsets(conf, retry).values()) == 2
    for body, needle in (
        ({"all": True, "positions": ["0-1"]}, "only go with ids"),
        ({"ids": ["p1"], "positions": ["first"]}, "partition-offset"),
        ({"ids": ["p1"], "positions": "0-1"}, "list"),
    ):
        r = api.post(url, json=body)
        assert r.status_code == 400 and needle in r.json()["error"], (body, r.text)
