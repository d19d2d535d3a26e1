"""Reading Kafka headers as RocketMQ properties.  Pure.

Malformed headers never raise here: duplicate keys keep the last value (Kafka's
``lastHeader``), a null value reads as absent, bytes that are not UTF-8 are shown with
U+FFFD (the raw bytes are kept for re-emitting), and each of these leaves a note.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: One Kafka header as it travels: key and raw value (``None`` is a null value).
RawHeader = tuple[str, bytes | None]

#: More digits than any count, partition or epoch-ms time can have (int64 has 19): such a
#: header is malformed, and ``int()`` refuses strings above 4300 digits with a ValueError.
_MAX_DIGITS = 19


def parse_non_negative(text: str | None) -> int | None:
    """A whole number >= 0 written in ASCII digits (at most 19), else ``None``."""
    if text is None:
        return None
    stripped = text.strip()
    if not stripped.isdigit() or not stripped.isascii() or len(stripped) > _MAX_DIGITS:
        return None
    return int(stripped)


@dataclass(frozen=True, slots=True)
class HeaderView:
    """Headers read once: last value per key, as text, plus notes about malformed ones."""

    raw: tuple[RawHeader, ...]
    text: dict[str, str]
    errors: tuple[str, ...]

    @classmethod
    def read(cls, headers: Iterable[tuple[str, bytes | None]] | None) -> HeaderView:
        if not headers:
            return EMPTY_VIEW
        return cls(*read_headers(headers))

    def last_raw(self) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for key, value in self.raw:
            out.pop(key, None)  # keep the position of the last occurrence
            out[key] = value
        return out


EMPTY_VIEW = HeaderView((), {}, ())


def read_headers(
    headers: Iterable[tuple[str, bytes | None]],
) -> tuple[tuple[RawHeader, ...], dict[str, str], tuple[str, ...]]:
    """``(raw, text, errors)`` of :class:`HeaderView`, without making one (the consumers'
    hot path reads every message's headers this way)."""
    raw = headers if isinstance(headers, tuple) else tuple(headers)
    text: dict[str, str] = {}
    errors: list[str] | None = None
    for key, value in raw:
        if key in text:
            errors = errors or []
            errors.append(f"duplicate header {key}: last value wins")
        if value is None:
            text.pop(key, None)
            continue
        try:
            text[key] = value.decode("utf-8")
        except UnicodeDecodeError:
            text[key] = value.decode("utf-8", "replace")
            errors = errors or []
            errors.append(f"header {key} is not UTF-8: shown with U+FFFD, kept byte-exact")
    return raw, text, tuple(errors) if errors else ()


def header_text(headers: Iterable[tuple[str, bytes | None]] | None, name: str) -> str | None:
    """The last value of one header as text (``None`` when absent or null), without reading
    the others: what a tag filter needs per message."""
    found: bytes | None = None
    for key, value in headers or ():
        if key == name:
            found = value
    return None if found is None else found.decode("utf-8", "replace")
