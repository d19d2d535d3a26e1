"""The console's access rules: token, session, CSRF and same origin."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.console.auth import Sessions, bearer, check_request, same_origin

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
