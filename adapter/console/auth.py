"""The console's access rules, pure: a token compared in constant time, login sessions (a
random id in an ``HttpOnly; SameSite=Strict`` cookie, each with its own CSRF token) and the
checks a state-changing request must pass.

A request is let in with ``Authorization: Bearer <token>`` or a session cookie a login set.
A state-changing request (POST) must come from the console's own origin (``Origin``, else
``Referer``, naming the host it was sent to); one authenticated by the cookie must also carry
its session's CSRF token (``X-CSRF-Token`` header, or the ``csrf_token`` form field): a
page on another site can make the browser send the cookie, but cannot read the token.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from threading import Lock
from typing import Final
from urllib.parse import urlsplit

SESSION_COOKIE: Final = "rmq_console_session"
CSRF_HEADER: Final = "x-csrf-token"
#: Sessions a console remembers; the oldest is forgotten first.
MAX_SESSIONS: Final = 1000


def new_token() -> str:
    """A token for a console started without one (printed at start)."""
    return secrets.token_urlsafe(24)


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


@dataclass(slots=True)
class Sessions:
    """Login sessions: session id → CSRF token."""

    _csrf: dict[str, str] = field(default_factory=dict)
    _lock: Lock = field(default_factory=Lock)

    def open(self) -> tuple[str, str]:
        """A new session's ``(id, csrf token)``."""
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self._lock:
            while len(self._csrf) >= MAX_SESSIONS:
                self._csrf.pop(next(iter(self._csrf)))
            self._csrf[sid] = csrf
        return sid, csrf

    def csrf(self, sid: str | None) -> str | None:
        """The CSRF token of a live session, ``None`` for an unknown one."""
        if not sid:
            return None
        with self._lock:
            return self._csrf.get(sid)

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._csrf.pop(sid or "", None)


def same_origin(headers: Mapping[str, str]) -> bool:
    """Whether a request names the host it was sent to as its origin (``Origin``, else
    ``Referer``); a request with neither is refused (browsers send ``Origin`` on POST)."""
    host = headers.get("host")
    source = headers.get("origin") or headers.get("referer")
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc == host


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a request may go on; ``status`` and ``why`` when not."""

    ok: bool
    status: int = 200
    why: str = ""
    via_cookie: bool = False


def check_request(
    *,
    token: str,
    sessions: Sessions,
    headers: Mapping[str, str],
    cookie: str | None,
    state_changing: bool,
    form_csrf: str | None = None,
) -> Verdict:
    """Authentication, then (for a state-changing request) the CSRF checks."""
    given = bearer(headers.get("authorization"))
    if given is not None:
        if not token_matches(given, token):
            return Verdict(False, 401, "the bearer token is wrong")
        via_cookie = False
    elif sessions.csrf(cookie) is not None:
        via_cookie = True
    else:
        return Verdict(
            False, 401, "log in, or send the console's token as 'Authorization: Bearer <token>'"
        )
    if state_changing:
        if (headers.get("origin") or headers.get("referer")) and not same_origin(headers):
            return Verdict(False, 403, "cross-site request refused (Origin is not this console)")
        if via_cookie:
            if not same_origin(headers):
                return Verdict(False, 403, "cross-site request refused (no Origin or Referer)")
            sent = headers.get(CSRF_HEADER) or form_csrf
            expected = sessions.csrf(cookie)
            if expected is None or not token_matches(sent, expected):
                return Verdict(False, 403, "missing or wrong CSRF token")
    return Verdict(True, via_cookie=via_cookie)
