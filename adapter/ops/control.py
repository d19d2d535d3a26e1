"""Moved to :mod:`adapter.io.control`; this name stays importable (it is the same module)."""

import sys

from adapter.io import control

sys.modules[__name__] = control
