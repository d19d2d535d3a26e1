"""``python -m adapter.cli``: the ``rmq-kafka`` command."""

from __future__ import annotations

import sys

from adapter.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
