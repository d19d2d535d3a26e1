"""Moved to :mod:`adapter.core.timespec`; this name stays importable (it is the same module)."""

import sys

from adapter.core import timespec

sys.modules[__name__] = timespec
