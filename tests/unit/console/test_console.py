"""The console's pure parts: access rules (token, session, CSRF), the redrive plan (marks,
loop guard), pacing, the DLQ cursor, selections and filters, the request checks and the
HTML's escaping."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.console import pages
from adapter.console.auth import Sessions, bearer, check_request, same_origin
from adapter.console.service import (
    ConsoleSettings,
    body_preview,
    check_message_id,
    redrive_request,
)
from adapter.core.message import MessageExt
from adapter.errors import InvalidInputError
from adapter.ops.redrive import DlqFilter, RedriveOptions, Selection
from adapter.services.dlq import HEADER_REDRIVE_COUNT, DeadLetterEntry, format_cursor, parse_cursor
from adapter.services.redrive import Pacer, check_redrive_options, plan_redrive

pytestmark = pytest.mark.unit

TOKEN = "s3cret-token"
HOST = "127.0.0.1:8088"
ORIGIN = f"http://{HOST}"


def _headers(**extra: str) -> dict[str, str]:
    return {"host": HOST, **{k.replace("_", "-"): v for k, v in extra.items()}}


# --- access ----------------------------------------------------------------------------------
def test_bearer_token_lets_in_and_a_wrong_one_does_not() -> None:
    s = Sessions()
    ok = check_request(
        token=TOKEN,
        sessions=s,
        headers=_headers(authorization=f"Bearer {TOKEN}"),
        cookie=None,
        state_changing=False,
    )
    assert ok.ok and not ok.via_cookie
    wrong = check_request(
        token=TOKEN,
        sessions=s,
        headers=_headers(authorization="Bearer nope"),
        cookie=None,
        state_changing=False,
    )
    assert (wrong.ok, wrong.status) == (False, 401)
    none = check_request(
        token=TOKEN, sessions=s, headers=_headers(), cookie=None, state_changing=False
    )
    assert (none.ok, none.status) == (False, 401)
    assert bearer("Basic abc") is None and bearer("bearer  x ") == "x" and bearer("Bearer ") is None


def test_a_session_cookie_post_needs_same_origin_and_its_csrf_token() -> None:
    s = Sessions()
    sid, csrf = s.open()

    def post(**h: str) -> Any:
        return check_request(
            token=TOKEN, sessions=s, headers=_headers(**h), cookie=sid, state_changing=True
        )

    assert post(origin=ORIGIN, x_csrf_token=csrf).ok
    assert post(origin=ORIGIN).status == 403  # no token
    assert post(origin=ORIGIN, x_csrf_token="other").status == 403
    assert post(origin="http://evil.example", x_csrf_token=csrf).status == 403
    assert post(x_csrf_token=csrf).status == 403  # neither Origin nor Referer
    assert post(referer=f"{ORIGIN}/groups/g", x_csrf_token=csrf).ok
    # a GET needs no CSRF token; a closed session is no session
    assert check_request(
        token=TOKEN, sessions=s, headers=_headers(), cookie=sid, state_changing=False
    ).ok
    s.close(sid)
    assert post(origin=ORIGIN, x_csrf_token=csrf).status == 401


def test_a_bearer_post_from_a_foreign_origin_is_refused() -> None:
    s = Sessions()
    auth = f"Bearer {TOKEN}"
    foreign = check_request(
        token=TOKEN,
        sessions=s,
        headers=_headers(authorization=auth, origin="http://evil.example"),
        cookie=None,
        state_changing=True,
    )
    assert foreign.status == 403
    script = check_request(  # curl and scripts send no Origin: the token is enough
        token=TOKEN,
        sessions=s,
        headers=_headers(authorization=auth),
        cookie=None,
        state_changing=True,
    )
    assert script.ok


def test_same_origin() -> None:
    assert same_origin({"host": HOST, "origin": ORIGIN})
    assert not same_origin({"host": HOST, "origin": "null"})
    assert not same_origin({"host": HOST, "origin": "http://127.0.0.1:9999"})
    assert not same_origin({"host": HOST})


# --- the redrive plan ------------------------------------------------------------------------
def _entry(offset: int, count: int | None = None, partition: int = 0) -> DeadLetterEntry:
    props = {} if count is None else {HEADER_REDRIVE_COUNT: str(count)}
    msg = MessageExt(
        topic="%DLQ%g",
        body=b"x",
        msg_id=f"m{partition}-{offset}",
        queue_id=partition,
        queue_offset=offset,
        kafka_topic="rmq.dlq.g",
        properties=props,
    )
    return DeadLetterEntry.of(msg)


def test_plan_skips_what_was_redriven_and_what_the_loop_guard_refuses() -> None:
    entries = [_entry(0), _entry(1, 3), _entry(2, 2), _entry(3, 7), _entry(0, partition=1)]
    plan = plan_redrive(entries, {0: 1}, max_redrives=3)
    assert [e.message.msg_id for e in plan.already] == ["m0-0"]
    assert [e.message.msg_id for e in plan.guarded] == ["m0-1", "m0-3"]
    assert [e.message.msg_id for e in plan.send] == ["m0-2", "m1-0"]
    forced = plan_redrive(entries, {0: 1}, max_redrives=3, force=True)
    assert not forced.guarded and len(forced.send) == 4
    again = plan_redrive(entries, {0: 1}, again=True)
    assert not again.already and len(again.send) == 5  # no guard without max_redrives


def test_redrive_count_reads_the_header() -> None:
    assert _entry(0).redrive_count == 0
    assert _entry(0, 4).redrive_count == 4


@pytest.mark.parametrize(
    ("rate", "guard", "field"),
    [(-1, None, "rate"), (0, None, "rate"), (True, None, "rate"), (None, 0, "max_redrives")],
)
def test_bad_redrive_options_name_the_field(rate: Any, guard: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        check_redrive_options(rate, guard)
    assert err.value.field == field


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t


def test_pacer_spaces_sends_at_the_rate() -> None:
    clock = FakeClock()
    pacer = Pacer(4.0, clock)
    served: list[float] = []

    def serve(s: float) -> None:
        served.append(s)
        clock.t += s

    sent_at = []
    for _ in range(5):
        pacer.wait(serve)
        sent_at.append(clock.t)
    assert [round(t - 100.0, 6) for t in sent_at] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert max(served) <= 0.1


# --- cursor, selection, filter ---------------------------------------------------------------
def test_cursor_round_trip_and_bad_cursor() -> None:
    assert parse_cursor("0-15.1-20") == {0: 15, 1: 20}
    assert format_cursor({1: 20, 0: 15}) == "0-15.1-20"
    for bad in ("zz", "0-", "-1", "0-1.x", "0:1"):
        with pytest.raises(InvalidInputError) as err:
            parse_cursor(bad)
        assert err.value.field == "cursor"


def test_selection_needs_exactly_one_kind() -> None:
    with pytest.raises(InvalidInputError, match="exactly one"):
        Selection()
    with pytest.raises(InvalidInputError, match="exactly one"):
        Selection(ids=("a",), all=True)
    with pytest.raises(InvalidInputError, match="ids"):
        Selection(ids=())
    assert Selection(ids=("m0-1",)).chooses(_entry(1))
    assert not Selection(ids=("m0-1",)).chooses(_entry(2))
    assert Selection(all=True).describe() == {"all": True}


def test_filter_matches_fields() -> None:
    e = DeadLetterEntry(_entry(0).message, "orders", "MAX_RECONSUME_TIMES", "ValueError", "no")
    assert DlqFilter(origin_topic="orders", reason="MAX_RECONSUME_TIMES").matches(e)
    assert not DlqFilter(failure_type="TimeoutError").matches(e)
    assert DlqFilter(msg_id="m0-0").matches(e)
    assert DlqFilter(reason="X").to_json() == {"reason": "X"}


def test_redrive_request_checks_each_field() -> None:
    settings = ConsoleSettings(config={}, token=TOKEN, max_redrives=3)
    selection, options = redrive_request(settings, {"ids": ["a"], "dry_run": True, "rate": 5})
    assert selection.ids == ("a",)
    assert options == RedriveOptions(dry_run=True, rate=5, max_redrives=3)
    _, forced = redrive_request(settings, {"all": True, "force": True, "max_redrives": 9})
    assert forced.force and forced.max_redrives == 9
    cases: list[tuple[Any, str]] = [
        ([], "body"),
        ({"all": True, "rate": -2}, "rate"),
        ({"all": True, "rate": "2"}, "rate"),
        ({"all": 1}, "all"),
        ({"ids": [1]}, "ids"),
        ({"ids": [" a"]}, "ids"),
        ({"filter": {}}, "filter"),
        ({"filter": {"colour": "red"}}, "filter"),
        ({"filter": {"since": "whenever"}}, "since"),
        ({"all": True, "extra": 1}, "body"),
    ]
    for body, field in cases:
        with pytest.raises(InvalidInputError) as err:
            redrive_request(settings, body)
        assert err.value.field == field, body


def test_message_ids_are_checked() -> None:
    assert check_message_id("orders:0:15") == "orders:0:15"
    for bad in ("", " x", "a\nb", "x" * 257, "tab\there"):
        with pytest.raises(InvalidInputError):
            check_message_id(bad)


def test_body_preview_text_hex_json() -> None:
    pv = body_preview(b'{"a": 1}')
    assert pv["json"] == '{\n  "a": 1\n}' and pv["hex"].startswith("7b 22")
    assert body_preview(b"\xff\xfe")["json"] is None
    big = body_preview(b"x" * 5000)
    assert big["truncated"] and len(big["text"]) == 4096


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


def test_the_console_command_takes_every_clients_security_settings(tmp_path: Any) -> None:
    """``rmq-kafka console`` reads ``-b``, ``-X`` and ``--config-file`` as every command does;
    the console's clients get them all."""
    from adapter.cli.main import build_parser
    from adapter.cli.options import kafka_config

    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    args = build_parser().parse_args(
        [
            "console",
            "-b",
            "broker:9093",
            "--config-file",
            str(props),
            "-X",
            "ssl.ca.location=/etc/ca.pem",
            "--read-only",
        ]
    )
    assert kafka_config(args) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "ssl.ca.location": "/etc/ca.pem",
        "bootstrap.servers": "broker:9093",
    }
    assert args.host == "127.0.0.1" and args.port == 8088 and args.read_only
    assert args.max_redrives == 3
