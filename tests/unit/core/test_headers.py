"""Reading Kafka headers as RocketMQ properties (adapter/core/headers.py)."""

from __future__ import annotations

import pytest

from adapter.core.headers import header_text, parse_non_negative, read_headers

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        (" 7 ", 7),
        ("9" * 19, int("9" * 19)),  # 19 digits: the widest a header number may be
        ("1" + "0" * 19, None),  # 20 digits
        ("-1", None),
        ("1.5", None),
        ("١٢", None),  # digits, but not ASCII ones
        ("", None),
        (None, None),
    ],
)
def test_a_header_number_is_ascii_digits_at_most_nineteen(
    text: str | None, value: int | None
) -> None:
    assert parse_non_negative(text) == value


@pytest.mark.parametrize(
    ("headers", "value"),
    [
        ([("TAGS", b"a"), ("KEYS", b"k"), ("TAGS", b"b")], "b"),  # the last value wins
        ([("KEYS", b"k")], None),  # absent
        ([("TAGS", None)], None),  # null
        (None, None),
        ([("TAGS", b"caf\xe9")], "caf\ufffd"),  # not UTF-8: shown with U+FFFD, never raises
    ],
)
def test_header_text_reads_one_header(
    headers: list[tuple[str, bytes | None]] | None, value: str | None
) -> None:
    assert header_text(headers, "TAGS") == value


def test_read_headers_notes_duplicates_and_bytes_that_are_not_utf8() -> None:
    raw, text, errors = read_headers([("A", b"1"), ("B", b"\xff"), ("A", b"2"), ("C", None)])
    assert text == {"A": "2", "B": "\ufffd"}
    assert errors == (
        "header B is not UTF-8: shown with U+FFFD, kept byte-exact",
        "duplicate header A: last value wins",
    )
    assert raw == (("A", b"1"), ("B", b"\xff"), ("A", b"2"), ("C", None))
    assert read_headers((("A", b"1"),))[2] == ()
