#!/bin/sh
# The stack's ScheduleService: `rmq-kafka schedule-service run` with the stack's delay table,
# plus `--metrics-port $METRICS_PORT` when this build of the adapter has the flag (the
# Prometheus metrics land separately; without them the service runs, unscraped).
set -eu
marker=/tmp/schedule-service.metrics
rm -f "$marker"
port=${METRICS_PORT:-9400}
if [ "$port" != 0 ] && rmq-kafka schedule-service run --help 2>/dev/null | grep -q -- '--metrics-port'; then
  set -- --metrics-port "$port" "$@"
  echo "$port" > "$marker"
else
  echo "schedule-service.sh: this adapter build has no --metrics-port; metrics are off" >&2
fi
exec rmq-kafka schedule-service run "$@"
