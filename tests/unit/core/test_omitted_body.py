"""Unit tests for :mod:`adapter.core.omitted_body` (the ``RMQ_BODY_OMITTED`` header)."""

from __future__ import annotations

import pytest

from adapter.constants import HEADER_BODY_OMITTED
from adapter.core.omitted_body import OmittedBody
from adapter.errors import MalformedHeaderError

pytestmark = pytest.mark.unit

INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    "omitted",
    [
        OmittedBody(10, "orders", 2, 7),
        OmittedBody(0, "rmq.retry.cg", 0, 0),
        OmittedBody(9_999, "a-b_c.d", INT32_MAX, 2**63 - 1),  # the highest partition Kafka has
    ],
)
def test_the_header_reads_back_as_the_body_it_names(omitted: OmittedBody) -> None:
    name, value = omitted.header()
    assert name == HEADER_BODY_OMITTED
    assert OmittedBody.of({HEADER_BODY_OMITTED: value.decode()}) == omitted


def test_a_message_with_its_body_names_none() -> None:
    assert OmittedBody.of({"UNIQ_KEY": "U1"}) is None


@pytest.mark.parametrize(
    "text",
    [
        "10 bytes; body at orders[2]",
        "ten bytes; body at orders[2]@7",
        f"10 bytes; body at orders[{INT32_MAX + 1}]@7",  # past the highest partition
        "10 bytes; body at orders[2]@7 ",
    ],
)
def test_an_unreadable_header_is_an_error_naming_it_its_value_and_the_form(text: str) -> None:
    with pytest.raises(MalformedHeaderError) as raised:
        OmittedBody.of({HEADER_BODY_OMITTED: text})
    assert str(raised.value) == (
        f"{HEADER_BODY_OMITTED}={text!r}: expected '<size> bytes; body at "
        "<kafka topic>[<partition>]@<offset>'"
    )
