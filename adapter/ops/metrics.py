"""The Prometheus collectors: moved to :mod:`adapter.io.metrics` (this name stays as an alias)."""

from adapter.io.metrics import *  # noqa: F403
from adapter.io.metrics import __all__  # noqa: F401
