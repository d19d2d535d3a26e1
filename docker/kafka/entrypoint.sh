#!/bin/sh
# KAFKA_* environment variables become server.properties (like the official apache/kafka
# image: `_` -> `.`, `__` -> `_`, `___` -> `-`); the storage is formatted once, then the
# broker runs in the foreground.
set -eu
conf=/opt/kafka/server.properties
: > "$conf"
env | grep '^KAFKA_' | while IFS='=' read -r name value; do
  case "$name" in KAFKA_HEAP_OPTS|KAFKA_CLUSTER_ID) continue ;; esac
  key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' \
        | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
  printf '%s=%s\n' "$key" "$value" >> "$conf"
done
grep -q '^log.dirs=' "$conf" || echo "log.dirs=/var/lib/kafka/data" >> "$conf"
java_cmd() { exec_main=$1; shift; java ${KAFKA_HEAP_OPTS:--Xmx512m} -cp '/opt/kafka/libs/*' "$exec_main" "$@"; }
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  cluster_id=${KAFKA_CLUSTER_ID:-$(java_cmd kafka.tools.StorageTool random-uuid)}
  # --cluster-id=: a random id may start with "-", which a separate argument would misread
  java_cmd kafka.tools.StorageTool format --cluster-id="$cluster_id" -c "$conf"
fi
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} -cp '/opt/kafka/libs/*' kafka.Kafka "$conf"
