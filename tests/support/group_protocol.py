"""The consumer group protocol a scenario runs under (``group.protocol``: ``classic`` or
``consumer``, KIP-848), and the member settings that go with it.

The scenarios that rebalance (join, leave, crash, broker bounces) take the ``group_protocol``
fixture of tests/conftest.py, and with it the ``group_protocol`` marker.  They run under
``classic`` by default; ``RMQ_GROUP_PROTOCOL`` (``classic``, ``consumer`` or ``both``) picks
the protocol: ``./run.sh test-kip848`` runs every one of them under ``consumer`` (KIP-848),
and ``.ci/run`` runs it after ``./run.sh test``.  A crashed member has to leave
its group in seconds: under ``classic`` the member asks for a 6 s session itself; under
``consumer`` the session is the group's, and the embedded broker's default for it is 6 s.
"""

from __future__ import annotations

import os
from typing import Any

from adapter.errors import ConfigError

ENV = "RMQ_GROUP_PROTOCOL"
PROTOCOLS = ("classic", "consumer")
#: a member's session and heartbeat under ``classic`` (the broker's under ``consumer``)
SESSION_MS = 6000
HEARTBEAT_MS = 500


def protocols() -> list[str]:
    """The protocols the rebalancing scenarios run under (``RMQ_GROUP_PROTOCOL``)."""
    value = os.environ.get(ENV, "classic").strip().lower() or "classic"
    if value == "both":
        return list(PROTOCOLS)
    if value not in PROTOCOLS:
        raise ConfigError(ENV, value, "must be classic, consumer or both")
    return [value]


def member_config(protocol: str) -> dict[str, Any]:
    """A group member's settings under ``protocol``: a crashed member leaves in seconds."""
    if protocol == "consumer":
        return {"group.protocol": "consumer"}
    return {
        "group.protocol": "classic",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
    }
