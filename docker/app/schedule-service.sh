#!/bin/sh
# The stack's ScheduleService: `rmq-kafka schedule-service run` with the stack's delay table,
# serving Prometheus metrics on $METRICS_PORT (9400; 0 turns the endpoint off) on every
# interface of the container, where Prometheus scrapes it.
set -eu
marker=/tmp/schedule-service.metrics
rm -f "$marker"
port=${METRICS_PORT:-9400}
if [ "$port" != 0 ]; then
  set -- --metrics-port "$port" --metrics-addr 0.0.0.0 "$@"
  echo "$port" > "$marker"
fi
exec rmq-kafka schedule-service run "$@"
