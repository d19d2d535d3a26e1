"""The Backend protocol names exactly the public SimpleConsumer operations, and both
backends expose every one of them."""

from __future__ import annotations

import pytest

from adapter.clients.share.share_consumer import ShareSimpleConsumer
from adapter.clients.simple.backend import BACKEND_OPERATIONS
from adapter.clients.simple.simple_consumer import SimpleConsumer


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_protocol_names_the_public_operations() -> None:
    assert set(BACKEND_OPERATIONS) == {
        "subscribe",
        "unsubscribe",
        "subscriptions",
        "start",
        "startup",
        "shutdown",
        "check_alive",
        "await_duration",
        "receive",
        "receive_async",
        "ack",
        "ack_async",
        "change_invisible_duration",
        "change_invisible_duration_async",
        "assignment",
        "stats",
        "running_info",
    }


@pytest.mark.parametrize("cls", [SimpleConsumer, ShareSimpleConsumer])
def test_every_backend_offers_every_operation(cls: type) -> None:
    assert set(BACKEND_OPERATIONS) <= _public(cls)
