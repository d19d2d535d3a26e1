"""The trace sink: moved to :mod:`adapter.io.trace_sink` (this name stays as an alias)."""

from adapter.io.trace_sink import *  # noqa: F403
from adapter.io.trace_sink import __all__  # noqa: F401
