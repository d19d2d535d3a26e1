"""Errors of the admin commands (all :class:`adapter.errors.AdapterError`s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from adapter.errors import AdapterError, InvalidInputError

if TYPE_CHECKING:
    from adapter.ops.views import Member, ResetResult


class GroupNotFoundError(InvalidInputError):
    """The group has no committed offsets and no members: Kafka knows nothing about it."""

    def __init__(self, group: str) -> None:
        super().__init__("group", group, "has no committed offsets and no members")
        self.args = (f"group {group!r} has no committed offsets and no members",)


class TopicNotFoundError(InvalidInputError):
    """A topic named on the command line does not exist."""

    def __init__(self, topic: str, kafka_topic: str) -> None:
        where = f" (Kafka topic {kafka_topic!r})" if kafka_topic != topic else ""
        super().__init__("topic", topic, f"does not exist{where}")
        self.args = (f"topic {topic!r} does not exist{where}",)


class GroupLiveError(AdapterError):
    """The group has live members, so Kafka refuses to alter its offsets from outside."""

    def __init__(self, group: str, members: Sequence[Member], hint: str) -> None:
        names = ", ".join(m.label for m in members)
        super().__init__(
            f"group {group!r} has {len(members)} live member(s): {names}; "
            f"Kafka refuses to alter the offsets of a group with members: {hint}"
        )
        self.group = group
        self.members = tuple(members)


class ResetIncompleteError(AdapterError):
    """Some live members did not apply a forced reset; ``result`` says what was applied."""

    def __init__(self, message: str, result: ResetResult) -> None:
        super().__init__(message)
        self.result = result
