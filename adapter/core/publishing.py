"""What to do when the broker refuses a copy the adapter produced (a send-back, a dead
letter, a forward).  Pure: the I/O layer classifies the broker's error into a
:class:`Refusal`; :func:`escalate` says what happens next.  Shared by every consumer kind
and the ScheduleService, so a broker refusal is handled by one rule everywhere.

The rules, in order:

1. A copy refused for good (too large, invalid, a policy) while it shared a record batch
   with others is sent again in a batch of its own: the broker judges whole batches (its
   size limit is per batch), so the refusal may be a neighbour's fault.
2. A retry (or forward) copy refused for good on its own (too large, an invalid record, a
   policy violation) goes to the dead-letter topic instead: retrying it can never succeed.
3. A dead-letter copy refused as too large on its own goes without its body (the body
   stays where it was read, named by ``RMQ_BODY_OMITTED``).
4. Anything else (a timeout, a broker away, an unknown topic or partition, an
   authorization error, a dead-letter copy refused for good) is transient: the message is
   held, its offset is not committed, and it is tried again later.
"""

from __future__ import annotations

from enum import Enum


class Refusal(str, Enum):
    """How the broker (or librdkafka) refused one produced record."""

    TOO_LARGE = "TOO_LARGE"
    """Larger than the broker or topic accepts (``MSG_SIZE_TOO_LARGE`` and kin)."""

    PERMANENT = "PERMANENT"
    """The record itself is refused for good: ``INVALID_RECORD``, ``POLICY_VIOLATION``."""

    TRANSIENT = "TRANSIENT"
    """Anything else: may succeed later (timeouts, outages, a topic not visible yet)."""


class Escalation(str, Enum):
    """The next step after a refusal (see the module docstring for the rules)."""

    SEND_ALONE = "SEND_ALONE"
    """Send the same copy again in a record batch (and transaction) of its own."""

    DEAD_LETTER = "DEAD_LETTER"
    """Send the message to the dead-letter topic instead."""

    OMIT_BODY = "OMIT_BODY"
    """Send the dead-letter copy again without its body."""

    HOLD = "HOLD"
    """Keep the message (its offset is held) and try again later."""


def escalate(refusal: Refusal, *, alone: bool, dead_letter: bool, body_omitted: bool) -> Escalation:
    """The next step for a copy refused with ``refusal``.  ``alone``: it was sent in a
    batch of its own; ``dead_letter``: it was a dead-letter copy; ``body_omitted``: a
    dead-letter copy already sent without its body."""
    if refusal is Refusal.TRANSIENT:
        return Escalation.HOLD
    if not alone:
        return Escalation.SEND_ALONE
    if not dead_letter:
        return Escalation.DEAD_LETTER
    if refusal is Refusal.TOO_LARGE and not body_omitted:
        return Escalation.OMIT_BODY
    return Escalation.HOLD
