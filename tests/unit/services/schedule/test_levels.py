"""The schedule level topics: their names, delays and pattern."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.core import naming
from adapter.services.schedule import level_delay_ms, level_topics_pattern

pytestmark = pytest.mark.unit


# -- level topics ----------------------------------------------------------------------------
def test_level_topic_names() -> None:
    topic = naming.to_kafka(naming.schedule_topic(3, naming_levels(), "ns"))
    assert level_delay_ms(topic) == (3, 10_000)
    assert level_delay_ms("orders") is None
    import re

    assert re.match(level_topics_pattern("ns"), topic)
    assert not re.match(level_topics_pattern("other"), topic)
    assert not re.match(level_topics_pattern(None), topic)


def naming_levels() -> Any:
    from adapter.core.delay import DelayLevels

    return DelayLevels.coerce("1s 5s 10s")
