"""Tag filter expressions (``TagA || TagB``, ``*``) and their errors."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("TagA || ", "empty tag"),
        ("||", "empty tag"),
        ("TagA |||| TagB", "empty tag"),
        (5, "must be a string"),
        ("TagA && TagB", "only '||'"),  # RocketMQ's tag expressions have no AND
        ("TagA | TagB", "only '||'"),
        ("Tag A", "no spaces"),
        ("TagA || *", "'*' alone"),
        ("a = 1", "only '||'"),  # SQL92 filters are another feature
        ("(TagA)", "only '||'"),
    ],
)
def test_bad_tag_expression_names_the_value(expr: object, says: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(says)) as info:
        TagFilter.parse(expr)  # type: ignore[arg-type]
    assert info.value.field == "subExpression" and info.value.value == expr
