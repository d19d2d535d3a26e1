"""The child processes of the benchmark rows that measure in a process of their own:
``python -m adapter.bench --rss-child MODE BOOTSTRAP TOPIC`` (:func:`~adapter.bench.memory.
rss_child`), ``--raw-forwarder BOOTSTRAP SRC DST TOTAL`` and ``--lateness-reader BOOTSTRAP
TOPIC TOTAL STEADY_FROM_MS`` (:mod:`adapter.bench.lateness`), ``--share-worker raw|ours
BOOTSTRAP TOPIC GROUP`` (:mod:`adapter.bench.share_scaling`)."""

from __future__ import annotations

import sys

from adapter.bench.lateness import lateness_reader, raw_forwarder
from adapter.bench.memory import rss_child
from adapter.bench.share_scaling import share_worker

if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--rss-child":
        rss_child(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 6 and sys.argv[1] == "--raw-forwarder":
        raw_forwarder(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif len(sys.argv) == 6 and sys.argv[1] == "--lateness-reader":
        lateness_reader(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) == 6 and sys.argv[1] == "--share-worker":
        share_worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
