"""Tag filter expressions (``TagA || TagB``, ``*``) and their errors."""

from __future__ import annotations

import pytest

from adapter.core.filter import TagFilter
from adapter.errors import InvalidInputError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("expr", "tag", "matches"),
    [
        ("*", None, True),
        ("*", "A", True),
        (None, "A", True),
        ("", "A", True),
        ("TagA || TagB", "TagA", True),
        ("TagA || TagB", "TagB", True),
        ("TagA || TagB", "TagC", False),
        ("TagA||TagB", "TagB", True),
        ("TagA", None, False),
    ],
)
def test_tag_filter(expr: str | None, tag: str | None, matches: bool) -> None:
    assert TagFilter.parse(expr).matches(tag) is matches


_EMPTY = "empty tag between '||'"
_STAR = "'*' alone means every tag; not inside a list"
_ONLY_OR = (
    "a tag expression is '*' or tags joined by '||' (only '||'; SQL92 filters are not supported)"
)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("TagA || ", _EMPTY),
        ("||", _EMPTY),
        ("TagA |||| TagB", _EMPTY),
        (5, "must be a string like 'TagA || TagB'"),
        ("TagA && TagB", _ONLY_OR),  # RocketMQ's tag expressions have no AND
        ("TagA | TagB", _ONLY_OR),
        ("Tag A", "tag 'Tag A': tags have no spaces"),
        ("TagA || *", _STAR),
        ("TagA || Tag*", _STAR),  # a '*' inside a tag is no wildcard either
        ("a = 1", _ONLY_OR),  # SQL92 filters are another feature
        ("(TagA)", _ONLY_OR),
    ],
)
def test_bad_tag_expression_names_the_field_the_value_and_why(expr: object, reason: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        TagFilter.parse(expr)  # type: ignore[arg-type]
    assert (info.value.field, info.value.value, info.value.reason) == (
        "subExpression",
        expr,
        reason,
    )


@pytest.mark.parametrize(
    ("expr", "expression", "tags"),
    [
        (None, "*", None),
        ("", "*", None),
        ("  *  ", "*", None),
        ("TagA || TagB", "TagA || TagB", frozenset({"TagA", "TagB"})),
    ],
)
def test_a_parsed_filter_keeps_what_it_stands_for(
    expr: str | None, expression: str, tags: frozenset[str] | None
) -> None:
    """What a subscription shows (``expression``) and matches (``tags``, ``None``: all)."""
    parsed = TagFilter.parse(expr)
    assert (parsed.expression, parsed.tags) == (expression, tags)
