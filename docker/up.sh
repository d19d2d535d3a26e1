#!/usr/bin/env bash
# Bring the rmq-kafka stack (docker/compose.yaml) up with one command: build the images when
# they are missing (docker/build.sh), start every service, wait until all are healthy, and
# print where to look.
#
#   docker/up.sh [--brokers 1|3] [--build] [--demo] [--timeout SECONDS]
#     --brokers  3: the three-broker profile (compose.cluster.yaml over compose.yaml: three
#                KRaft nodes, replication factor 3, min.insync.replicas 2); default
#                $RMQ_STACK_BROKERS, else 1
#     --build    rebuild the images first (the project's wheel from the working tree)
#     --demo     then send 10 ok and 2 failing messages through the example consumer
#
# Settings (environment): COMPOSE_PROJECT_NAME (rmq-kafka), RMQ_STACK_KAFKA_PORT (29092;
# with 3 brokers also RMQ_STACK_KAFKA_PORT_2 and _3, default the next two ports),
# RMQ_STACK_PROMETHEUS_PORT (9090), RMQ_STACK_SCHEDULE_METRICS_PORT (9400),
# RMQ_STACK_CONSUMER_METRICS_PORT (9401), RMQ_STACK_CONSOLE_PORT (8088), RMQ_STACK_CONSOLE_TOKEN
# (the console's token; else one generated, in `logs console`), RMQ_STACK_DATA (docker/data), RMQ_STACK_TAG
# (latest), and the rest of compose.yaml's variables.  docker/down.sh stops the stack.
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
# shellcheck source=docker/stack.sh
. "$HERE/stack.sh"

rebuild=0 demo=0 timeout=${RMQ_STACK_TIMEOUT:-420}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) rebuild=1 ;;
    --demo) demo=1 ;;
    --timeout) timeout=$2; shift ;;
    --brokers) RMQ_STACK_BROKERS=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "up.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

compose_file_args  # checks --brokers
docker info >/dev/null 2>&1 || { echo "up.sh: no Docker engine (start dockerd)" >&2; exit 1; }
missing=()
for image in rmq-kafka/kafka:4.4.0 "rmq-kafka/app:$RMQ_STACK_TAG" "rmq-kafka/spark:$RMQ_STACK_TAG" \
             "rmq-kafka/prometheus:$RMQ_STACK_TAG"; do
  docker image inspect "$image" >/dev/null 2>&1 || missing+=("$image")
done
if [ "$rebuild" = 1 ]; then
  "$HERE/build.sh"
elif [ ${#missing[@]} -gt 0 ]; then
  echo "==> images missing (${missing[*]}): docker/build.sh"
  "$HERE/build.sh"
fi

mkdir -p "$RMQ_STACK_DATA"
echo "==> $COMPOSE_CMD ${COMPOSE_FILE_ARGS[*]} up -d (project $COMPOSE_PROJECT_NAME, $RMQ_STACK_BROKERS broker(s))"
# --remove-orphans: a switch between 1 and 3 brokers drops the nodes no longer wanted
compose up -d --remove-orphans

echo "==> waiting until every service is healthy (at most ${timeout}s)"
deadline=$(( $(date +%s) + timeout ))
while :; do
  ids=$(compose ps -q)
  total=0 healthy=0 report=""
  for id in $ids; do
    total=$((total + 1))
    line=$(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id")
    read -r service status health <<<"$line"
    report="$report $service=$status/$health"
    if [ "$status" = running ] && { [ "$health" = healthy ] || [ "$health" = none ]; }; then
      healthy=$((healthy + 1))
    elif [ "$status" = exited ] || [ "$status" = dead ]; then
      echo "up.sh: $service $status:" >&2
      compose logs --tail 40 "$service" >&2 || true
      exit 1
    fi
  done
  if [ "$total" -ge $((4 + RMQ_STACK_BROKERS)) ] && [ "$healthy" = "$total" ]; then
    break
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "up.sh: not healthy after ${timeout}s:$report" >&2
    for id in $ids; do
      docker inspect -f '{{.Name}}: {{if .State.Health}}{{range .State.Health.Log}}{{.Output}}{{end}}{{end}}' "$id" \
        | tail -n 3 >&2
    done
    exit 1
  fi
  sleep 3
done
compose ps

if [ "$demo" = 1 ]; then
  echo "==> demo: 10 ok and 2 failing messages (each failing one: 3 deliveries, then %DLQ%example;"
  echo "    on the share group too: 3 deliveries, each after its 5 s lock, then %DLQ%example-share)"
  compose exec -T example-consumer python /opt/example_app/app.py produce --ok 10 --fail 2
fi

metrics_note=""
if ! compose exec -T example-consumer test -f /tmp/example-consumer.metrics 2>/dev/null; then
  metrics_note="   (off: this adapter build has no metrics_port yet; Prometheus shows the targets down)"
fi
compose_hint="$COMPOSE_CMD ${COMPOSE_FILE_ARGS[*]} -p $COMPOSE_PROJECT_NAME"
exec_hint="$compose_hint exec example-consumer"
down_hint=$HERE/down.sh
[ "$COMPOSE_PROJECT_NAME" = rmq-kafka ] || down_hint="COMPOSE_PROJECT_NAME=$COMPOSE_PROJECT_NAME $down_hint"
console_token_hint="in $compose_hint logs console"
[ -z "${RMQ_STACK_CONSOLE_TOKEN:-}" ] || console_token_hint='$RMQ_STACK_CONSOLE_TOKEN'
host_bootstrap=127.0.0.1:$RMQ_STACK_KAFKA_PORT inner_bootstrap=broker:9092
if [ "$RMQ_STACK_BROKERS" = 3 ]; then
  host_bootstrap=$host_bootstrap,127.0.0.1:$RMQ_STACK_KAFKA_PORT_2,127.0.0.1:$RMQ_STACK_KAFKA_PORT_3
  inner_bootstrap=broker:9092,broker-2:9092,broker-3:9092
fi
cat <<EOF

rmq-kafka stack is up (project $COMPOSE_PROJECT_NAME, $RMQ_STACK_BROKERS broker(s))
  Kafka bootstrap (host)    $host_bootstrap   (inside the stack: $inner_bootstrap)
  Prometheus                http://127.0.0.1:$RMQ_STACK_PROMETHEUS_PORT   (targets: /targets)
  ScheduleService metrics   http://127.0.0.1:$RMQ_STACK_SCHEDULE_METRICS_PORT/metrics$metrics_note
  Example consumer metrics  http://127.0.0.1:$RMQ_STACK_CONSUMER_METRICS_PORT/metrics
  Retry console             http://127.0.0.1:$RMQ_STACK_CONSOLE_PORT   (token: $console_token_hint)
  Spark output (Parquet)    $RMQ_STACK_DATA/consume-metrics   (windows of ${RMQ_STREAM_WINDOW:-10 seconds}, final once the watermark passes)
  Grafana dashboard         $HERE/grafana/rmq-kafka-dashboard.json (import it; data source: the Prometheus above)
  Send messages             $exec_hint python /opt/example_app/app.py produce --ok 10 --fail 2
  Dead letters              $exec_hint rmq-kafka dlq list --group example
                            .venv/bin/rmq-kafka dlq list --group example -b $host_bootstrap
  Share group (SimpleConsumer, backend="share")
                            $compose_hint logs -f example-share-consumer
                            $compose_hint exec example-share-consumer rmq-kafka dlq list --group example-share
  Logs                      $compose_hint logs -f example-consumer
  Stop                      $down_hint   (--volumes: also drop the broker's and Prometheus' data)
EOF
