"""spark-submit entry point: the batch DLQ report (table, CSV, PNG chart, Avro export).

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit \
        --jars "$(.venv/bin/python -m adapter.analytics.jars)" \
        spark/dlq_report.py -b localhost:9092 --output /data/dlq-report \
        [--group my-group ...] [--top-keys 3] [--export] [-X key=value ...]

The same as ``rmq-kafka analytics dlq-report ...``; see ``adapter/analytics/dlq_report_job.py``.
"""

from __future__ import annotations

import sys

from adapter.cli.analytics import main

if __name__ == "__main__":
    sys.exit(main(["dlq-report", *sys.argv[1:]]))
