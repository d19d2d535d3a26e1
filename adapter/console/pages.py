"""The console's HTML, rendered on the server from the same JSON the API answers (every
value escaped).  The ladder chart is an inline SVG drawn here; the page's only script is
the vendored ``static/console.js`` (refresh, redrive)."""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from adapter.core.timespec import format_time


def h(value: Any) -> str:
    return escape("-" if value is None else str(value), quote=True)


def layout(title: str, body: str, *, csrf: str = "", read_only: bool = False) -> str:
    mode = '<span class="badge">read-only</span>' if read_only else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="csrf-token" content="{h(csrf)}">
<title>{h(title)} - rmq-kafka console</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head><body>
<header><a href="/" class="brand">rmq-kafka console</a> {mode}
<form method="post" action="/logout" class="logout"><input type="hidden" name="csrf_token"
 value="{h(csrf)}"><button type="submit">log out</button></form></header>
<main>{body}</main></body></html>"""


def login_page(error: str = "") -> str:
    msg = f'<p class="error" role="alert">{h(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>log in - rmq-kafka console</title>
<link rel="stylesheet" href="/static/console.css"></head><body><main class="login">
<h1>rmq-kafka console</h1>{msg}
<form method="post" action="/login">
<label>Token <input type="password" name="token" id="token" autocomplete="off" autofocus>
</label> <button type="submit" id="login">log in</button></form>
<p class="hint">The token was printed when the console started (or given with --token /
RMQ_KAFKA_CONSOLE_TOKEN).</p></main></body></html>"""


def groups_page(data: dict[str, Any]) -> str:
    rows = []
    for g in data["groups"]:
        dlq = g["dlq"] or {}
        members = ", ".join(m.get("client_id") or m.get("member_id", "?") for m in g["members"])
        circuits = ", ".join(c.get("state", "?") for c in g["circuits"]) or "-"
        rows.append(
            f'<tr data-group="{h(g["group"])}"><td><a href="/groups/{quote(g["group"], safe="")}">'
            f"{h(g['group'])}</a></td><td>{h(g['state'])}</td><td>{h(members or '-')}</td>"
            f'<td class="num" data-field="lag">{h(g["lag"])}</td>'
            f'<td class="num" data-field="retry_lag">{h(g["retry_lag"])}</td>'
            f'<td class="num" data-field="dlq_size">{h(dlq.get("size"))}</td>'
            f'<td class="num" data-field="dlq_growth_1h">{h(g["dlq_growth_1h"])}</td>'
            f"<td>{h(circuits)}</td></tr>"
        )
    sched = data.get("schedule")
    sched_text = (
        "no delay-level topics"
        if sched is None
        else f"ScheduleService {h(sched['group'])} ({h(sched['state'])}): "
        f"{h(sched['waiting'])} waiting, lateness "
        f'<span data-field="lateness_ms">{h(sched["lateness_ms"])}</span> ms'
        + (
            ""
            if sched.get("service_seen", True)
            else ' <b class="warn">no ScheduleService has run: retries wait until one starts</b>'
        )
    )
    body = f"""<h1>Groups</h1>
<p class="schedule">{sched_text}</p>
<table id="groups" data-refresh="/api/groups"><thead><tr><th>group</th><th>state</th>
<th>members</th><th>lag</th><th>%RETRY% lag</th><th>DLQ</th><th>DLQ +1h</th>
<th>circuit</th></tr></thead><tbody>{"".join(rows)}</tbody></table>
<p class="hint">Refreshed every 10 s.</p>"""
    return body


def ladder_svg(levels: list[dict[str, Any]]) -> str:
    """Bars of waiting messages per delay level."""
    if not levels:
        return '<p class="hint">no delay levels</p>'
    width, bar_h, gap, label_w = 640, 18, 6, 120
    top = max((lv["waiting"] for lv in levels), default=0) or 1
    height = len(levels) * (bar_h + gap) + gap
    parts = [
        f'<svg id="ladder-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" role="img" aria-label="messages waiting per delay level">'
    ]
    for i, lv in enumerate(levels):
        y = gap + i * (bar_h + gap)
        w = int((width - label_w - 80) * lv["waiting"] / top)
        parts.append(
            f'<text x="0" y="{y + 13}" class="lbl">L{h(lv["level"])} {h(lv["delay"])}</text>'
            f'<rect x="{label_w}" y="{y}" width="{max(w, 1)}" height="{bar_h}" class="bar">'
            f"<title>{h(lv['waiting'])} waiting</title></rect>"
            f'<text x="{label_w + max(w, 1) + 6}" y="{y + 13}" class="val">'
            f"{h(lv['waiting'])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def group_page(
    detail: dict[str, Any],
    dlq: dict[str, Any],
    audit: list[dict[str, Any]],
    params: dict[str, str],
    *,
    read_only: bool,
    max_redrives: int,
) -> str:
    group = detail["group"]
    g = quote(group, safe="")
    progress = detail["progress"]
    prog_html = '<p class="hint">no offsets or members yet</p>'
    if progress is not None:
        rows = "".join(
            f"<tr><td>{h(p['topic'])}[{h(p['partition'])}]</td><td class='num'>"
            f"{h(p['committed'])}</td><td class='num'>{h(p['end'])}</td>"
            f"<td class='num'>{h(p['lag'])}</td><td>{h(p['owner_client_id'])}</td></tr>"
            for p in progress["partitions"]
        )
        prog_html = (
            f"<p>state {h(progress['state'])}, {len(progress['members'])} member(s), "
            f"total lag <b id='total-lag'>{h(progress['lag'])}</b>, "
            f"DLQ <b id='dlq-size'>{h(progress['dlq']['size'])}</b> "
            f"(+{h(detail['dlq_growth_1h'])} in the last hour)</p>"
            "<table><thead><tr><th>topic[partition]</th><th>committed</th><th>end</th>"
            f"<th>lag</th><th>owner</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    ladder = detail["ladder"]
    if ladder is None:
        ladder_html = '<p class="hint">no delay-level topics (or no ScheduleService) here</p>'
    else:
        lrows = "".join(
            f"<tr><td class='num'>{h(lv['level'])}</td><td>{h(lv['delay'])}</td>"
            f"<td class='num' data-level='{h(lv['level'])}'>{h(lv['waiting'])}"
            f"{'' if lv['complete'] else '+'}</td><td>{h(lv['next_due'])}</td></tr>"
            for lv in ladder["levels"]
            if lv["waiting"]
        )
        ladder_html = (
            f"<p>{h(ladder['waiting'])} message(s) of this group wait on the delay levels.</p>"
            + ladder_svg(ladder["levels"])
            + "<table id='ladder'><thead><tr><th>level</th><th>delay</th><th>waiting</th>"
            f"<th>next due</th></tr></thead><tbody>{lrows}</tbody></table>"
        )
    outcomes = detail.get("outcomes") or {}
    orows = "".join(
        f"<tr><td class='num'>{h(o['reconsume_times'])}</td>"
        f"<td class='num' data-succeeded='{h(o['reconsume_times'])}'>{h(o['succeeded'])}</td>"
        f"<td class='num'>{h(o['retried'])}</td><td class='num'>{h(o['dead_lettered'])}</td></tr>"
        for o in outcomes.get("by_reconsume_times", [])
    )
    outcomes_html = (
        f"<h3>Outcomes by reconsume_times</h3><p class='hint'>from the last records of the "
        f"trace topic {h(outcomes.get('trace_topic'))} ({h(outcomes.get('events'))} event(s) of "
        "this group; consumers with tracing on write them)</p>"
        + (
            "<table id='outcomes'><thead><tr><th>reconsume_times</th><th>succeeded</th>"
            f"<th>retried</th><th>dead-lettered</th></tr></thead><tbody>{orows}</tbody></table>"
            if orows
            else ""
        )
    )
    erows = []
    for e in dlq["entries"]:
        link = f"/messages/{quote(e['msg_id'], safe='')}?" + urlencode(
            {"group": group, "partition": e["partition"], "offset": e["offset"]}
        )
        erows.append(
            f"<tr><td><input type='checkbox' class='pick' value='{h(e['msg_id'])}'"
            f" data-at='{h(e['partition'])}-{h(e['offset'])}'"
            f"{' disabled' if read_only else ''}></td>"
            f"<td><a href='{h(link)}'>{h(e['msg_id'])}</a></td><td>{h(e['origin_topic'])}</td>"
            f"<td>{h(e['reason'])}</td><td>{h(e['failure'])}</td><td>{h(e['keys'])}</td>"
            f"<td>{h(e['time'])}</td><td>{'yes' if e['redriven'] else 'no'}"
            f" ({h(e['redrive_count'])})</td></tr>"
        )
    more = ""
    if dlq["next_cursor"]:
        nxt = urlencode({**params, "cursor": dlq["next_cursor"]})
        more = f"<a id='next-page' href='/groups/{g}?{h(nxt)}'>next page</a>"

    def field(name: str, label: str) -> str:
        return (
            f"<label>{label} <input name='{name}' value='{h(params.get(name, ''))}'"
            " size='12'></label>"
        )

    filters = (
        f"<form method='get' action='/groups/{g}' class='filters'>"
        + field("origin_topic", "origin")
        + field("reason", "reason")
        + field("failure_type", "failure")
        + field("key", "key")
        + field("msg_id", "id")
        + field("since", "since")
        + field("until", "until")
        + "<button type='submit'>filter</button></form>"
    )
    redrive = (
        '<p class="hint">read-only console: redrive is off</p>'
        if read_only
        else f"""<form id="redrive" data-group="{h(group)}" onsubmit="return false">
<label><input type="radio" name="what" value="selected" checked> selected</label>
<label><input type="radio" name="what" value="filter"> the filter above</label>
<label><input type="radio" name="what" value="all"> all</label>
<label>rate/s <input name="rate" id="rate" size="4" value="100"></label>
<label>loop guard <input name="max_redrives" id="max_redrives" size="2"
 value="{max_redrives}"></label>
<label><input type="checkbox" name="force" id="force"> force</label>
<button type="button" id="dry-run">dry run</button>
<button type="button" id="run-redrive">redrive</button></form>
<pre id="redrive-result" aria-live="polite"></pre>"""
    )
    arows = "".join(
        f"<li class='audit-line'>{h(a.get('at'))} {h(a.get('who'))} via {h(a.get('source'))}: "
        f"{'dry run' if (a.get('options') or {}).get('dry_run') else 'redrive'} "
        f"{h(_selection_text(a.get('selection')))}: {h(a.get('selected'))} selected, "
        f"{h(a.get('sent'))} sent, {h(a.get('already_redriven'))} already, "
        f"{h(a.get('refused_by_loop_guard'))} refused by the loop guard</li>"
        for a in audit
    )
    return f"""<h1>Group {h(group)}</h1>
<section><h2>Progress</h2>{prog_html}</section>
<section><h2>Retry ladder</h2>{ladder_html}{outcomes_html}</section>
<section><h2>Dead letters</h2>
<p>{h(dlq["total"])} in %DLQ%{h(group)}; this page read {h(dlq["scanned"])} record(s).</p>
{filters}
<table id="dlq"><thead><tr><th></th><th>message id</th><th>origin</th><th>reason</th>
<th>failure</th><th>keys</th><th>time</th><th>redriven</th></tr></thead>
<tbody>{"".join(erows)}</tbody></table>{more}
<h3>Redrive</h3>{redrive}</section>
<section><h2>Audit log</h2><ul id="audit">{arows or '<li class="hint">none yet</li>'}</ul>
</section>"""


def _selection_text(selection: Any) -> str:
    if not isinstance(selection, dict):
        return "?"
    if "ids" in selection:
        return f"{len(selection['ids'])} id(s)"
    if "filter" in selection:
        return "filter " + ", ".join(f"{k}={v}" for k, v in selection["filter"].items())
    return "all"


def message_page(journey: dict[str, Any], entry: dict[str, Any] | None) -> str:
    lines = "\n".join(journey.get("text") or [])
    detail = ""
    if entry is not None:
        heads = "".join(f"<tr><td>{h(k)}</td><td>{h(v)}</td></tr>" for k, v in entry["headers"])
        pv = entry["preview"]
        tabs = f"<h3>Body ({h(pv['size'])} bytes{', first 4 KiB' if pv['truncated'] else ''})"
        tabs += "</h3><details open><summary>text</summary>"
        tabs += f"<pre id='body-text'>{h(pv['text'])}</pre></details>"
        tabs += f"<details><summary>hex</summary><pre>{h(pv['hex'])}</pre></details>"
        if pv["json"] is not None:
            tabs += f"<details><summary>JSON</summary><pre>{h(pv['json'])}</pre></details>"
        detail = (
            f"<section><h2>Dead letter {h(entry['msg_id'])}</h2>"
            f"<p>reason {h(entry['reason'])}, failure {h(entry['failure'])}: "
            f"{h(entry['failure_message'])}; reconsumed {h(entry['reconsume_times'])} time(s); "
            f"redriven {h(entry['redrive_count'])} time(s)</p>"
            f"<table><thead><tr><th>header</th><th>value</th></tr></thead><tbody>{heads}"
            f"</tbody></table>{tabs}</section>"
        )
    found = len(journey.get("journeys") or [])
    return f"""<h1>Message {h((journey.get("query") or {}).get("id"))}</h1>
{detail}<section><h2>Journey</h2><p>{found} journey(s) found; {h(journey.get("scanned"))}
record(s) scanned since {h(format_time(journey.get("since_ms")))}.</p>
<pre id="journey">{h(lines)}</pre></section>"""


def error_page(status: int, message: str) -> str:
    return (
        f"<h1>{status}</h1><p class='error' role='alert'>{h(message)}</p>"
        "<p><a href='/'>back to the groups</a></p>"
    )
