"""The embedded node's coordinator arithmetic: Java's String.hashCode and Kafka's coordinator
partition."""

from __future__ import annotations

import pytest

from adapter.embedded.node import coordinator_partition, java_string_hash

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "java"),
    [("", 0), ("hello", 99162322), ("polygenelubricants", -(1 << 31)), ("ä€😀", 16603051)],
)
def test_java_string_hash_matches_java(text: str, java: int) -> None:
    assert java_string_hash(text) == java


def test_coordinator_partition_is_kafkas_abs_hash_modulo() -> None:
    # Utils.abs maps Integer.MIN_VALUE to 0
    assert coordinator_partition("polygenelubricants", 10) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert coordinator_partition("rmq-schedule", 10) == abs(java_string_hash("rmq-schedule")) % 10
