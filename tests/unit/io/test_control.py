"""The control channel's clients (adapter/io/control.py) and the forced reset's command on a
fake clock: a request expires, acknowledgements are waited for and a reset is issued on the
injected clock, not the machine's."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.core.control import ResetRequest, ResetTarget, encode
from tests.unit.core.test_control import request

pytestmark = pytest.mark.unit


class _Clock:
    """A fake clock: wall time ``ms``, monotonic seconds ``s`` (moved by the fake reader)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms
        self.s = 1000.0

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.s


class _Reader:
    """The control topic's reader: ``records`` once, then nothing; each ``poll`` takes its
    timeout on the clock."""

    def __init__(self, clock: _Clock, records: list[Any]) -> None:
        self.clock, self.records, self.polls = clock, records, 0

    def assign(self, _partitions: Any) -> None:
        pass

    def consume(self, _n: int, _timeout: float) -> list[Any]:
        out, self.records = self.records, []
        return out

    def poll(self, timeout: float) -> None:
        self.polls += 1
        self.clock.s += timeout

    def close(self) -> None:
        pass


class _Producer:
    def produce(self, *_: Any, **__: Any) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0


def _fake_clients(monkeypatch: pytest.MonkeyPatch, reader: _Reader) -> None:
    """The admin session and the producer of adapter.io.control, without a broker."""
    from adapter.io import control
    from adapter.io.admin import Ends

    class Session:
        def __init__(self, config: Any, **_: Any) -> None:
            self.config = dict(config)

        def partitions(self, *_: Any) -> list[int]:
            return [0]

        def watermarks(self, tps: Any, *_: Any) -> dict[Any, Ends]:
            return {tp: Ends(0, 0) for tp in tps}

        def reader(self, **_: Any) -> _Reader:
            return reader

        def check(self, _what: str) -> None:
            pass

    monkeypatch.setattr(control, "AdminSession", Session)
    monkeypatch.setattr(control, "make_client", lambda *_, **__: _Producer())


def test_a_member_ignores_a_request_expired_on_its_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from confluent_kafka import Message

    from adapter.core.control import CONTROL_TOPIC
    from adapter.io.control import ControlChannel

    issued = time.time_ns() // 1_000_000
    req = request(issued_ms=issued, expires_ms=issued + 3_600_000)  # valid for the system
    clock = _Clock(ms=req.expires_ms + 1_000)  # the member's clock: a second past it
    record = Message(topic=CONTROL_TOPIC, partition=0, offset=0, key=b"G", value=encode(req))
    _fake_clients(monkeypatch, _Reader(clock, [record]))
    channel = ControlChannel({"bootstrap.servers": "127.0.0.1:1"}, "G", "m-1", clock=clock)
    assert channel.poll() == []


def test_publish_reset_waits_for_acks_until_its_clock_passes_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapter.io.control import publish_reset

    clock = _Clock(ms=1_795_448_000_000)
    reader = _Reader(clock, [])
    _fake_clients(monkeypatch, reader)
    acks = publish_reset(
        {"bootstrap.servers": "127.0.0.1:1"}, request(), {"m-1": [0]}, timeout_s=5.0, clock=clock
    )
    assert acks == {}  # nobody answered
    assert reader.polls in (25, 26)  # 5 s of the fake clock in polls of 0.2 s


def test_a_forced_reset_is_issued_and_expires_on_the_injected_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``group reset-offset --force``: the request's issue and expiry times come from the
    clock given to :func:`adapter.ops.admin.reset_group_offsets`, which also bounds the
    wait for the members' acknowledgements."""
    from adapter.core.cluster import GroupInfo, Member
    from adapter.errors import AdapterError
    from adapter.io.admin import Ends
    from adapter.ops import admin

    class Session:
        def __init__(self, config: Any, **_: Any) -> None:
            self.config = dict(config)

        def partitions(self, *_: Any) -> list[int]:
            return [0]

        def describe_group(self, group: str) -> GroupInfo:
            return GroupInfo(group, "Stable", (Member("m-1", "c1", "h", None, (("orders", 0),)),))

        def committed(self, _group: str) -> dict[Any, int]:
            return {("orders", 0): 3}

        def watermarks(self, tps: Any, *_: Any) -> dict[Any, Ends]:
            return {tp: Ends(0, 10) for tp in tps}

    published: list[tuple[ResetRequest, Any]] = []

    def publish(_config: Any, req: ResetRequest, _owners: Any, **kw: Any) -> dict[str, Any]:
        published.append((req, kw.get("clock")))
        return {}  # no member acknowledged

    monkeypatch.setattr(admin, "AdminSession", Session)
    monkeypatch.setattr(admin, "publish_reset", publish)
    clock = _Clock(ms=1_795_448_000_000)  # not the system's time
    with pytest.raises(AdapterError):
        admin.reset_group_offsets(
            {"bootstrap.servers": "127.0.0.1:1"},
            "G",
            "orders",
            ResetTarget.earliest(),
            force=True,
            timeout_s=30.0,
            clock=clock,
        )
    [(req, clock_used)] = published
    assert (req.issued_ms, req.expires_ms) == (1_795_448_000_000, 1_795_448_030_000)
    assert clock_used is clock
