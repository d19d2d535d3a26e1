"""The console's ASGI application (Starlette): the pages, the JSON API and the login.

Every route but ``/login`` and ``/static`` needs the token (bearer) or a login session; a
POST must pass the CSRF checks of :mod:`adapter.console.auth`; a read-only console refuses
redrives (403).  Errors: bad input 400 (404 for an unknown group or message), and a Kafka
failure 502, each with ``{"error": "..."}``; never a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from adapter.console import pages
from adapter.console.auth import (
    SESSION_COOKIE,
    Sessions,
    Verdict,
    check_request,
    same_origin,
    token_matches,
)
from adapter.console.service import (
    ConsoleSettings,
    UnknownGroupError,
    audit,
    dlq_entry,
    dlq_page,
    group_detail,
    groups_overview,
    message_journey,
    redrive_group_dlq,
)
from adapter.errors import AdapterError, InvalidInputError
from adapter.ops.errors import GroupNotFoundError, TopicNotFoundError
from adapter.services.redrive import RedriveError

log = logging.getLogger("adapter.console")

STATIC = Path(__file__).parent / "static"
Handler = Callable[[Request], Awaitable[Response]]


class NotFound(AdapterError):
    """Nothing found for a request (a 404)."""


def _status(exc: AdapterError) -> int:
    if isinstance(exc, UnknownGroupError | GroupNotFoundError | TopicNotFoundError | NotFound):
        return 404
    if isinstance(exc, InvalidInputError):
        return 400
    return 502


def create_app(settings: ConsoleSettings) -> Starlette:
    """The console over ``settings.config``'s cluster."""
    sessions = Sessions()

    def verdict(request: Request, *, post: bool, form_csrf: str | None = None) -> Verdict:
        return check_request(
            token=settings.token,
            sessions=sessions,
            headers=request.headers,
            cookie=request.cookies.get(SESSION_COOKIE),
            state_changing=post,
            form_csrf=form_csrf,
        )

    def who(request: Request, v: Verdict) -> str:
        client = request.client.host if request.client else "?"
        return f"{'session' if v.via_cookie else 'token'}@{client}"

    def api(handler: Callable[[Request, Verdict], Awaitable[Any]], *, post: bool = False) -> Any:
        async def endpoint(request: Request) -> Response:
            v = verdict(request, post=post)
            if not v.ok:
                return JSONResponse({"error": v.why}, status_code=v.status)
            if post and settings.read_only:
                return JSONResponse(
                    {"error": "this console is read-only (--read-only): redrive is off"},
                    status_code=403,
                )
            try:
                return JSONResponse(await handler(request, v))
            except RedriveError as exc:
                return JSONResponse({"error": str(exc)}, status_code=502)
            except AdapterError as exc:
                return JSONResponse({"error": str(exc)}, status_code=_status(exc))
            except Exception:
                log.exception("console API %s failed", request.url.path)
                return JSONResponse({"error": "internal error (see the console's log)"}, 500)

        return endpoint

    def page(handler: Callable[[Request, Verdict], Awaitable[str]]) -> Any:
        async def endpoint(request: Request) -> Response:
            v = verdict(request, post=False)
            if not v.ok:
                return RedirectResponse("/login", status_code=303)
            csrf = sessions.csrf(request.cookies.get(SESSION_COOKIE)) or ""
            try:
                body = await handler(request, v)
                status = 200
            except AdapterError as exc:
                status = _status(exc)
                body = pages.error_page(status, str(exc))
            except Exception:
                log.exception("console page %s failed", request.url.path)
                status, body = 500, pages.error_page(500, "internal error (see the console's log)")
            html = pages.layout("console", body, csrf=csrf, read_only=settings.read_only)
            return HTMLResponse(html, status_code=status, headers=_SECURITY_HEADERS)

        return endpoint

    def params(request: Request) -> dict[str, str]:
        return dict(request.query_params)

    # --- API ----------------------------------------------------------------------------------
    async def api_groups(request: Request, _: Verdict) -> Any:
        return await run_in_threadpool(groups_overview, settings)

    async def api_group(request: Request, _: Verdict) -> Any:
        return await run_in_threadpool(group_detail, settings, request.path_params["group"])

    async def api_dlq(request: Request, _: Verdict) -> Any:
        group = request.path_params["group"]
        return await run_in_threadpool(dlq_page, settings, group, params(request))

    async def api_message(request: Request, _: Verdict) -> Any:
        msg_id = request.path_params["message_id"]
        found = await run_in_threadpool(message_journey, settings, msg_id, params(request))
        if not found["journeys"]:
            raise NotFound(f"no record of message {msg_id!r}; {found['text'][-1]}")
        return found

    async def api_redrive(request: Request, v: Verdict) -> Any:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as exc:
            raise InvalidInputError("body", "...", f"is not JSON: {exc}") from None
        group = request.path_params["group"]
        outcome = await run_in_threadpool(redrive_group_dlq, settings, group, body, who(request, v))
        return {**outcome.to_json(), "audit": outcome.audit}

    async def api_audit(request: Request, _: Verdict) -> Any:
        group = request.query_params.get("group") or None
        return {"records": await run_in_threadpool(audit, settings, group, 50)}

    # --- pages --------------------------------------------------------------------------------
    async def groups_html(request: Request, _: Verdict) -> str:
        return pages.groups_page(await run_in_threadpool(groups_overview, settings))

    async def group_html(request: Request, _: Verdict) -> str:
        group = request.path_params["group"]
        query = {k: v for k, v in params(request).items() if v}

        def load() -> tuple[Any, Any, Any]:
            return (
                group_detail(settings, group),
                dlq_page(settings, group, query),
                audit(settings, group, 20),
            )

        detail, dlq, records = await run_in_threadpool(load)
        return pages.group_page(
            detail,
            dlq,
            records,
            {k: v for k, v in query.items() if k != "cursor"},
            read_only=settings.read_only,
            max_redrives=settings.max_redrives,
        )

    async def message_html(request: Request, _: Verdict) -> str:
        msg_id = request.path_params["message_id"]
        q = params(request)

        def load() -> tuple[Any, Any]:
            journey = message_journey(settings, msg_id, q)
            entry = None
            group, part, off = q.get("group"), q.get("partition", ""), q.get("offset", "")
            if group and part.isdigit() and off.isdigit():
                entry = dlq_entry(settings, group, int(part), int(off))
            return journey, entry

        journey, entry = await run_in_threadpool(load)
        return pages.message_page(journey, entry)

    # --- login --------------------------------------------------------------------------------
    async def login_form(request: Request) -> Response:
        return HTMLResponse(pages.login_page(), headers=_SECURITY_HEADERS)

    async def login(request: Request) -> Response:
        if not same_origin(request.headers):  # only this console's own login form
            return HTMLResponse(pages.login_page("cross-site login refused"), status_code=403)
        form = await request.form()
        given = form.get("token")
        if not isinstance(given, str) or not token_matches(given, settings.token):
            return HTMLResponse(pages.login_page("wrong token"), status_code=401)
        sid, _ = sessions.open()
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=False, path="/"
        )
        return response

    async def logout(request: Request) -> Response:
        form = await request.form()
        csrf = form.get("csrf_token")
        v = verdict(request, post=True, form_csrf=csrf if isinstance(csrf, str) else None)
        if not v.ok:
            return JSONResponse({"error": v.why}, status_code=v.status)
        sessions.close(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    routes = [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", page(groups_html)),
        Route("/groups/{group:path}", page(group_html)),
        Route("/messages/{message_id:path}", page(message_html)),
        Route("/api/groups", api(api_groups)),
        Route(
            "/api/groups/{group:path}/dlq/redrive", api(api_redrive, post=True), methods=["POST"]
        ),
        Route("/api/groups/{group:path}/dlq", api(api_dlq)),
        Route("/api/groups/{group:path}", api(api_group)),
        Route("/api/messages/{message_id:path}", api(api_message)),
        Route("/api/audit", api(api_audit)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self'; script-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
