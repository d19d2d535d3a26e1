"""Bad input raises errors under the one root (``AdapterError``) naming the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapter.core.delay import DelayLevels
from adapter.core.ids import MessageIdGenerator
from adapter.embedded.broker import EmbeddedKafka
from adapter.errors import AdapterError, InvalidInputError
from adapter.io.avro import decode_trace

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "call",
    [
        lambda: MessageIdGenerator(b"short"),
        lambda: EmbeddedKafka("bad name!"),
        lambda: EmbeddedKafka("x", authorizer=True),
        lambda: DelayLevels.DEFAULT.index(timedelta(milliseconds=7)),
        lambda: decode_trace(b"", "no-such-schema"),
    ],
    ids=["message-id-prefix", "broker-name", "broker-authorizer", "delay-index", "trace-schema"],
)
def test_bad_input_errors_share_the_one_root_and_name_the_field(call: Any) -> None:
    """These raise ``AdapterError``s that are still ``ValueError``s and name the field."""
    with pytest.raises(InvalidInputError) as err:
        call()
    assert isinstance(err.value, AdapterError) and isinstance(err.value, ValueError)
    assert err.value.field in str(err.value)
