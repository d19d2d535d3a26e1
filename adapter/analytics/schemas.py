"""The Avro schemas and codecs: moved to :mod:`adapter.io.avro` (this name stays as an alias)."""

from adapter.io.avro import *  # noqa: F403
from adapter.io.avro import __all__  # noqa: F401
