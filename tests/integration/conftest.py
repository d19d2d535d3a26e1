"""Fixtures the integration tests share beyond the project's pytest plugin."""

from tests.support.span_capture import spans  # noqa: F401 - the tracing tests' fixture
