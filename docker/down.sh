#!/usr/bin/env bash
# Stop the rmq-kafka stack that docker/up.sh started (same COMPOSE_PROJECT_NAME), with one
# broker or three (the files of the three-broker profile name every service of both).
#
#   docker/down.sh [--volumes] [--purge]
#     --volumes  also remove the brokers' and Prometheus' data volumes
#     --purge    --volumes, and remove the Spark output in $RMQ_STACK_DATA/consume-metrics
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
RMQ_STACK_BROKERS=3
# shellcheck source=docker/stack.sh
. "$HERE/stack.sh"

volumes=0 purge=0
for arg in "$@"; do
  case "$arg" in
    -v|--volumes) volumes=1 ;;
    --purge) volumes=1 purge=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "down.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
args=(down --remove-orphans)
[ "$volumes" = 0 ] || args+=(--volumes)
compose "${args[@]}"
if [ "$purge" = 1 ] && [ -d "$RMQ_STACK_DATA/consume-metrics" ]; then
  # written by the Spark container as root
  docker run --rm -v "$RMQ_STACK_DATA:/data" rmq-kafka/debian-base:bookworm \
    rm -rf /data/consume-metrics
  echo "removed $RMQ_STACK_DATA/consume-metrics"
fi
