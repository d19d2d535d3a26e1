"""RocketMQ tag subscription expressions (``*``, ``TagA || TagB``).  Pure."""

from __future__ import annotations

from dataclasses import dataclass

from adapter.errors import InvalidInputError

SUB_ALL = "*"


@dataclass(frozen=True, slots=True)
class TagFilter:
    """``None`` tags means every tag (``*``)."""

    expression: str
    tags: frozenset[str] | None

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        if expression is None:
            return cls(SUB_ALL, None)
        if not isinstance(expression, str):
            raise InvalidInputError(
                "subExpression", expression, "must be a string like 'TagA || TagB'"
            )
        text = expression.strip()
        if text in ("", SUB_ALL):
            return cls(SUB_ALL, None)
        tags = frozenset(t.strip() for t in text.split("||"))
        if "" in tags:
            raise InvalidInputError("subExpression", expression, "empty tag between '||'")
        return cls(expression, tags)

    def matches(self, tag: str | None) -> bool:
        if self.tags is None:
            return True
        return tag is not None and tag in self.tags
