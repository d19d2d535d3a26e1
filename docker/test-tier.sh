#!/usr/bin/env bash
# The Docker tier (./run.sh test-docker, and .ci/run): what users of the adapter do with
# containers, run for real.
#
#   1. a Docker engine: when none answers and dockerd is installed, it is started here in the
#      background (log: .cache/docker/dockerd.log) and waited for; no docker CLI or no dockerd
#      fails at once, naming what to install
#   2. the images, built offline from the checkout (docker/build.sh kafka app; the Debian base
#      once, then Docker's layer cache); RMQ_DOCKER_REUSE_IMAGES=1 skips the build when both
#      images are present
#   3. a subset of the integration suite (consumer behaviour, ScheduleService, producer,
#      orderly, SimpleConsumer) with the pytest plugin in container mode on the project's own
#      Kafka image (apache/kafka:<version> is not present: no registry is needed)
#   4. the retry stack's own tests (tests/docker/test_retry_stack.py), the examples of
#      docs/testing-your-service.md as written (test_testing_docs.py) and the tier's check of
#      its own needs (tests/docker/test_docker_available.py)
#   5. the example project (examples/retry-service) as a user runs it: a venv of its own, the
#      adapter pip-installed from this checkout, then pytest
#   6. the Docker stack (docker/compose.yaml, one broker) as docker/up.sh brings it up: the
#      retry ladder and the DLQ, the share group, the Spark job's Parquet windows, Prometheus
#      and the retry console (tests/docker/test_stack.py; docker/build.sh builds its images)
#
# Environment: PYTHON (the project's venv python, default .venv/bin/python), RMQ_TEST_WORKERS
# (pytest workers for step 3, default 2), RMQ_DOCKER_TIER_STEPS (default "engine images
# container-mode retry-stack example stack": a subset runs only those).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="${PYTHON:-$ROOT/.venv/bin/python}"
WORK="$ROOT/.cache/docker"
STEPS=" ${RMQ_DOCKER_TIER_STEPS:-engine images container-mode retry-stack example stack} "
step() { case "$STEPS" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$WORK"

need_engine() {
  command -v docker >/dev/null || {
    echo "test-docker: no docker CLI on PATH: install it (Debian/Ubuntu: apt-get install docker.io)" >&2
    exit 1
  }
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || {
    echo "test-docker: no Docker engine answers and dockerd is not installed: install a Docker engine (Debian/Ubuntu: apt-get install docker.io) and start it" >&2
    exit 1
  }
  echo "==> no Docker engine answers: starting dockerd (log: $WORK/dockerd.log)"
  dockerd >"$WORK/dockerd.log" 2>&1 &
  local i
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { echo "    engine up after ${i}s"; return 0; }
    sleep 1
  done
  tail -n 20 "$WORK/dockerd.log" >&2
  echo "test-docker: dockerd did not answer within 60s (log: $WORK/dockerd.log)" >&2
  exit 1
}

KAFKA_IMAGE=rmq-kafka/kafka:4.4.0
APP_IMAGE=rmq-kafka/app:latest
if step engine; then need_engine; fi
if step images; then
  if [ "${RMQ_DOCKER_REUSE_IMAGES:-0}" = 1 ] && docker image inspect "$KAFKA_IMAGE" "$APP_IMAGE" >/dev/null 2>&1; then
    echo "==> images present, reused ($KAFKA_IMAGE, $APP_IMAGE)"
  else
    PYTHON="$PY" docker/build.sh kafka app
  fi
fi

rc=0
if step container-mode; then
  echo "==> integration subset, pytest plugin in container mode (RMQ_KAFKA_MODE=container)"
  RMQ_KAFKA_MODE=container "$PY" -m pytest -p no:cacheprovider -n "${RMQ_TEST_WORKERS:-2}" \
    --dist loadgroup \
    tests/integration/test_consumer_behaviour.py tests/integration/test_schedule_service.py \
    tests/integration/test_producer.py tests/integration/test_orderly.py \
    tests/integration/test_simple_consumer.py tests/docker/test_container_mode.py || rc=1
fi
if step retry-stack; then
  echo "==> the retry stack (Kafka + ScheduleService containers)"
  RMQ_DOCKER_TESTS=1 "$PY" -m pytest -p no:cacheprovider -n0 -s \
    tests/docker/test_docker_available.py tests/docker/test_retry_stack.py \
    tests/docker/test_testing_docs.py || rc=1
fi
if step example; then
  example="$ROOT/examples/retry-service" venv="$ROOT/.cache/examples/retry-service-venv"
  echo "==> the example project, as a user runs it (venv: $venv)"
  rm -rf "$venv" && "$PY" -m venv "$venv"
  # the example sees only what its venv installed (not a PYTHONPATH of the caller's)
  env -u PYTHONPATH "$venv/bin/python" -m pip install -q "$ROOT[containers]"
  env -u PYTHONPATH "$venv/bin/python" -m pip install -q -e "$example[test]"
  (cd "$example" && env -u PYTHONPATH "$venv/bin/python" -m pytest -p no:cacheprovider) || rc=1
fi
if step stack; then
  echo "==> the Docker stack (docker/compose.yaml: broker, ScheduleService, consumers, Spark, Prometheus, console)"
  RMQ_DOCKER_TESTS=1 "$PY" -m pytest -p no:cacheprovider -n0 -s tests/docker/test_stack.py || rc=1
fi
exit "$rc"
