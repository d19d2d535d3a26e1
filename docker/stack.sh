# Shared by docker/up.sh and docker/down.sh (sourced): the compose command and the stack's
# settings, with their defaults, exported for docker/compose.yaml.
HERE=${HERE:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-rmq-kafka}
export RMQ_STACK_TAG=${RMQ_STACK_TAG:-latest}
export RMQ_STACK_KAFKA_PORT=${RMQ_STACK_KAFKA_PORT:-29092}
# the three-broker profile's other two nodes (compose.cluster.yaml): the next two ports
export RMQ_STACK_KAFKA_PORT_2=${RMQ_STACK_KAFKA_PORT_2:-$((RMQ_STACK_KAFKA_PORT + 1))}
export RMQ_STACK_KAFKA_PORT_3=${RMQ_STACK_KAFKA_PORT_3:-$((RMQ_STACK_KAFKA_PORT + 2))}
# 1: compose.yaml; 3: compose.cluster.yaml over it (docker/up.sh --brokers sets it)
RMQ_STACK_BROKERS=${RMQ_STACK_BROKERS:-1}
export RMQ_STACK_PROMETHEUS_PORT=${RMQ_STACK_PROMETHEUS_PORT:-9090}
export RMQ_STACK_SCHEDULE_METRICS_PORT=${RMQ_STACK_SCHEDULE_METRICS_PORT:-9400}
export RMQ_STACK_CONSUMER_METRICS_PORT=${RMQ_STACK_CONSUMER_METRICS_PORT:-9401}
export RMQ_STACK_CONSOLE_PORT=${RMQ_STACK_CONSOLE_PORT:-8088}
RMQ_STACK_DATA=${RMQ_STACK_DATA:-$HERE/data}
case "$RMQ_STACK_DATA" in /*) ;; *) RMQ_STACK_DATA=$PWD/$RMQ_STACK_DATA ;; esac
export RMQ_STACK_DATA

# `docker compose` (v2) when the CLI has it, else Debian's docker-compose (1.29)
if [ -n "${COMPOSE_CMD:-}" ]; then
  :
elif docker compose version >/dev/null 2>&1; then
  COMPOSE_CMD="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
  COMPOSE_CMD=docker-compose
else
  echo "$(basename "$0"): neither 'docker compose' nor docker-compose is installed" >&2
  exit 1
fi
# the compose files of $RMQ_STACK_BROKERS, as -f arguments in COMPOSE_FILE_ARGS (set again
# by every compose call: up.sh parses --brokers after sourcing this)
compose_file_args() {
  case "$RMQ_STACK_BROKERS" in
    1) COMPOSE_FILE_ARGS=(-f "$HERE/compose.yaml") ;;
    3) COMPOSE_FILE_ARGS=(-f "$HERE/compose.yaml" -f "$HERE/compose.cluster.yaml") ;;
    *) echo "$(basename "$0"): RMQ_STACK_BROKERS must be 1 or 3, not $RMQ_STACK_BROKERS" >&2
       exit 2 ;;
  esac
}
compose() {
  compose_file_args
  $COMPOSE_CMD "${COMPOSE_FILE_ARGS[@]}" -p "$COMPOSE_PROJECT_NAME" "$@"
}
