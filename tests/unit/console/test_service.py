"""The console service's request checks: a redrive request's fields, message ids and the body
preview."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.console.service import (
    ConsoleSettings,
    body_preview,
    check_message_id,
    redrive_request,
)
from adapter.errors import InvalidInputError
from adapter.ops.redrive import RedriveOptions

pytestmark = pytest.mark.unit

TOKEN = "s3cret-token"


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
