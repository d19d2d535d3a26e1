"""spark-submit entry point: the streaming consume-metrics job over the trace topic.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit \
        --jars "$(.venv/bin/python -m adapter.analytics.jars)" \
        spark/consume_metrics.py -b localhost:9092 --output /data/consume-metrics \
        [--trace-topic RMQ_SYS_TRACE_TOPIC] [--sink parquet --sink console] \
        [--window '1 minute'] [--watermark '2 minutes'] [--available-now] \
        [-X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 ...]

The same as ``rmq-kafka analytics stream ...``; see ``adapter/analytics/jobs.py``.
"""

from __future__ import annotations

import sys

from adapter.cli.analytics import main

if __name__ == "__main__":
    sys.exit(main(["stream", *sys.argv[1:]]))
