"""Moved to :mod:`adapter.core.views`; this name stays importable (it is the same module)."""

import sys

from adapter.core import views

sys.modules[__name__] = views
