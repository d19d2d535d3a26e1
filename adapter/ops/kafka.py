"""Moved to :mod:`adapter.io.admin`; this name stays importable (it is the same module)."""

import sys

from adapter.io import admin

sys.modules[__name__] = admin
