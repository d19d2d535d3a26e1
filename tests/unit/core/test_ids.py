"""Message ids (``adapter.core.ids``): the format consumers and docs rely on (32 upper-case
hex digits: 20 of prefix, 12 of counter), the counter's wrap, and bad input."""

from __future__ import annotations

import re
import threading

import pytest

from adapter.core.ids import COUNTER_SPAN, MessageIdGenerator
from adapter.errors import InvalidInputError

pytestmark = pytest.mark.unit

PREFIX = bytes(range(1, 11))
PREFIX_HEX = "0102030405060708090A"


def test_ids_are_the_prefix_then_a_counter_from_zero() -> None:
    gen = MessageIdGenerator(PREFIX)
    assert gen.prefix == PREFIX_HEX
    assert [next(gen.ids).decode() for _ in range(3)] == [
        PREFIX_HEX + "000000000000",
        PREFIX_HEX + "000000000001",
        PREFIX_HEX + "000000000002",
    ]
    assert next(gen.ids) == (PREFIX_HEX + "000000000003").encode()
    assert re.fullmatch(r"[0-9A-F]{32}", next(gen.ids).decode())


def test_the_counter_wraps_after_twelve_hex_digits() -> None:
    gen = MessageIdGenerator(b"\xff" * 10, start=COUNTER_SPAN - 2)
    assert [next(gen.ids).decode()[20:] for _ in range(4)] == [
        "FFFFFFFFFFFE",
        "FFFFFFFFFFFF",
        "000000000000",
        "000000000001",
    ]


@pytest.mark.parametrize(
    ("prefix", "start", "field"),
    [
        (b"short", 0, "prefix"),
        ("0102030405060708090A", 0, "prefix"),
        (PREFIX, -1, "start"),
        (PREFIX, COUNTER_SPAN, "start"),
        (PREFIX, True, "start"),
    ],
)
def test_bad_prefix_or_start_is_invalid_input(prefix: object, start: object, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        MessageIdGenerator(prefix, start)  # type: ignore[arg-type]
    assert info.value.field == field


def test_message_ids_are_unique_across_threads_and_32_hex() -> None:
    gen = MessageIdGenerator(b"\x01" * 10)
    out: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        ids = [next(gen.ids).decode() for _ in range(2000)]
        with lock:
            out.extend(ids)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 8000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in out)
    with pytest.raises(ValueError):
        MessageIdGenerator(b"short")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"short",), "prefix=b'short': must be 10 bytes"),
        (("0123456789",), "prefix='0123456789': must be 10 bytes"),
        ((PREFIX, -1), "start=-1: must be an int in [0, 281474976710656)"),
        ((PREFIX, COUNTER_SPAN), "start=281474976710656: must be an int in [0, 281474976710656)"),
        ((PREFIX, True), "start=True: must be an int in [0, 281474976710656)"),
    ],
)
def test_bad_input_errors_read_field_value_cause(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        MessageIdGenerator(*args)  # type: ignore[arg-type]
    assert str(info.value) == message
