"""RocketMQ tag subscription expressions (``*``, ``TagA || TagB``).  Pure.

A tag expression is ``*`` (every tag) or tags joined by ``||``, nothing else: RocketMQ has no
AND, no grouping and no operators in a tag expression (SQL92 property filters are a different
feature, not supported here).  Anything else is refused instead of silently matching nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapter.errors import InvalidInputError

SUB_ALL = "*"
#: characters that mean the user wrote an operator or SQL92 filter, not a tag
_OPERATORS = frozenset("&|()=<>!,'\"")
_FIELD = "subExpression"


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
            raise InvalidInputError(_FIELD, expression, "must be a string like 'TagA || TagB'")
        text = expression.strip()
        if text in ("", SUB_ALL):
            return cls(SUB_ALL, None)
        tags = frozenset(t.strip() for t in text.split("||"))
        for tag in tags:
            _check_tag(tag, expression)
        return cls(expression, tags)

    def matches(self, tag: str | None) -> bool:
        if self.tags is None:
            return True
        return tag is not None and tag in self.tags


def _check_tag(tag: str, expression: str) -> None:
    if not tag:
        raise InvalidInputError(_FIELD, expression, "empty tag between '||'")
    if tag == SUB_ALL or SUB_ALL in tag:
        raise InvalidInputError(_FIELD, expression, "'*' alone means every tag; not inside a list")
    if any(c in _OPERATORS for c in tag):
        raise InvalidInputError(
            _FIELD,
            expression,
            "a tag expression is '*' or tags joined by '||' (only '||'; SQL92 filters are "
            "not supported)",
        )
    if any(c.isspace() for c in tag):
        raise InvalidInputError(_FIELD, expression, f"tag {tag!r}: tags have no spaces")
