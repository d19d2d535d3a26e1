#!/usr/bin/env bash
# Build the project's Docker images locally, with nothing pulled from a registry:
#
#   rmq-kafka/debian-base:bookworm  a minimal Debian (debootstrap, with a Java 17 JRE and
#                                   Python 3) turned into an image with `docker import`
#   rmq-kafka/kafka:4.4.0           a single-node KRaft broker from the project's pinned Kafka
#                                   jars (Maven Central, cached by `./run.sh setup`), configured
#                                   by KAFKA_* environment variables like the official image
#   rmq-kafka/app:<version>         the project's own wheel and its dependencies (wheels fetched
#                                   from PyPI here, installed offline in the image): the
#                                   rmq-kafka CLI (ScheduleService, DLQ tools) and the example
#                                   consumer app (docker/example_app)
#   rmq-kafka/spark:<version>       the same with the `spark` extra (pyspark 4.1.1) and the
#                                   pinned Spark Kafka/Avro connector jars from the cache
#   rmq-kafka/prometheus:bookworm   Debian's prometheus package with docker/prometheus/prometheus.yml
#
# app, spark and prometheus are also tagged :latest, which docker/compose.yaml uses.  The
# project's wheel is built from the working tree, or from a commit with RMQ_BUILD_REF=HEAD.
#
#   docker/build.sh                 everything
#   docker/build.sh kafka           only the base and the broker (the pytest plugin's container mode)
#   docker/build.sh app spark ...   only these (of base, kafka, app, spark, prometheus); the
#                                   base is built first when missing
#
# Needs root, a running Docker engine, debootstrap (for the base), the project's venv with pip
# (`$PYTHON`, default .venv/bin/python) and the jars in $RMQ_KAFKA_HOME: run `./run.sh setup`
# first.  Python wheels come from PyPI through the host's pip (its index, proxy and cache
# settings); the prometheus image runs apt-get against the Debian mirror inside its build.
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
ROOT=$(cd .. && pwd)
KAFKA_VERSION=4.4.0
SPARK_VERSION=4.1.1
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RMQ_KAFKA_HOME="${RMQ_KAFKA_HOME:-$HOME/.cache/rmq-kafka}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
BASE=rmq-kafka/debian-base:$SUITE
WORK="$ROOT/.cache/docker"

command -v docker >/dev/null || { echo "build.sh: docker is required" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build.sh: no Docker engine (start dockerd)" >&2; exit 1; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(base kafka app spark prometheus)
for t in "${targets[@]}"; do
  case "$t" in base|kafka|app|spark|prometheus|all) ;;
    *) echo "build.sh: unknown target $t (base kafka app spark prometheus)" >&2; exit 2 ;;
  esac
done
[ "${targets[*]}" != all ] || targets=(base kafka app spark prometheus)
wanted() { local t; for t in "${targets[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
present() { docker image inspect "$1" >/dev/null 2>&1; }
build() {  # build <tag> <context> [docker build args...]; the log in .cache/docker/
  local tag=$1 ctx=$2 log; shift 2
  log="$WORK/build-$(echo "$tag" | tr '/:' '--').log"
  echo "==> docker build $tag"
  mkdir -p "$WORK"
  if ! DOCKER_BUILDKIT=0 docker build --force-rm "$@" -t "$tag" "$ctx" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "build.sh: docker build $tag failed (log: $log)" >&2
    exit 1
  fi
}

build_base() {
  present "$BASE" && return 0
  command -v debootstrap >/dev/null || { echo "build.sh: debootstrap is required" >&2; exit 1; }
  local rootfs="$WORK/rootfs-$SUITE"
  rm -rf "$rootfs" && mkdir -p "$rootfs"
  echo "==> debootstrap $SUITE into $rootfs"
  debootstrap --variant=minbase --include=openjdk-17-jre-headless,python3,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  echo "==> docker import $BASE"
  tar -C "$rootfs" -c . | docker import - "$BASE"
  rm -rf "$rootfs"
}

build_kafka() {
  local lib="$RMQ_KAFKA_HOME/kafka-$KAFKA_VERSION/lib" ctx="$WORK/kafka-context"
  [ -d "$lib" ] || { echo "build.sh: no Kafka jars in $lib (run ./run.sh setup)" >&2; exit 1; }
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp -r "$lib" "$ctx/libs"
  cp "$HERE/kafka/Dockerfile" "$HERE/kafka/entrypoint.sh" "$ctx/"
  build "rmq-kafka/kafka:$KAFKA_VERSION" "$ctx" --build-arg "BASE=$BASE"
  rm -rf "$ctx"
}

version() {  # the one place the version is written (pyproject.toml reads it from there)
  "$PY" -c 'import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
           and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["__version__"]))' \
    "$ROOT/adapter/__init__.py"
}

project_wheel() {  # the project's own wheel, built once per run from the working tree
  local dist="$WORK/dist"
  if [ -z "${PROJECT_WHEEL:-}" ]; then
    [ -x "$PY" ] || { echo "build.sh: no Python at $PY (run ./run.sh setup or set PYTHON)" >&2; exit 1; }
    rm -rf "$dist" && mkdir -p "$dist"
    local src="$ROOT"
    if [ -n "${RMQ_BUILD_REF:-}" ]; then  # a committed state instead of the working tree
      src="$WORK/src"
      rm -rf "$src" && mkdir -p "$src"
      git -C "$ROOT" archive "$RMQ_BUILD_REF" | tar -x -C "$src"
    fi
    echo "==> project wheel from ${RMQ_BUILD_REF:-the working tree}"
    # fixed zip timestamps: the same sources give the same wheel, so Docker's cache holds
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800} \
      "$PY" -m pip wheel -q --no-deps --no-cache-dir -w "$dist" "$src"
    PROJECT_WHEEL=$(ls "$dist"/rmq_kafka_adapter-*.whl)
  fi
}

build_app() {
  local ctx="$WORK/app-context" v
  project_wheel
  v=$(version)
  rm -rf "$ctx" && mkdir -p "$ctx/wheels" "$ctx/project"
  echo "==> wheels of the dependencies (PyPI, pinned by pyproject.toml)"
  # prometheus-client: the metrics endpoints (a no-op when the adapter already requires it)
  "$PY" -m pip wheel -q -w "$ctx/wheels" "$PROJECT_WHEEL[console]" prometheus-client pip
  rm -f "$ctx/wheels"/rmq_kafka_adapter-*.whl
  cp "$PROJECT_WHEEL" "$ctx/project/"
  cp "$HERE/app/Dockerfile" "$HERE/app/healthcheck.py" "$HERE/app/schedule-service.sh" "$ctx/"
  mkdir -p "$ctx/example_app" && cp "$HERE/example_app/"*.py "$ctx/example_app/"
  build "rmq-kafka/app:$v" "$ctx" --build-arg "BASE=$BASE"
  docker tag "rmq-kafka/app:$v" rmq-kafka/app:latest
  rm -rf "$ctx"
}

build_spark() {
  local ctx="$WORK/spark-context" jars="$RMQ_KAFKA_HOME/spark-connectors-$SPARK_VERSION/jars" v
  [ -f "$jars/.rmq-spark-complete" ] || {
    echo "build.sh: no Spark connector jars in $jars (run ./run.sh setup)" >&2; exit 1; }
  project_wheel
  v=$(version)
  rm -rf "$ctx" && mkdir -p "$ctx/wheels" "$ctx/project"
  echo "==> wheels of the dependencies with the spark extra (PyPI, pinned by pyproject.toml)"
  "$PY" -m pip wheel -q -w "$ctx/wheels" "$PROJECT_WHEEL[spark]" prometheus-client pip
  rm -f "$ctx/wheels"/rmq_kafka_adapter-*.whl
  cp "$PROJECT_WHEEL" "$ctx/project/"
  cp -r "$jars" "$ctx/spark-connectors"
  cp "$HERE/spark/Dockerfile" "$ctx/"
  build "rmq-kafka/spark:$v" "$ctx" --build-arg "BASE=$BASE"
  docker tag "rmq-kafka/spark:$v" rmq-kafka/spark:latest
  rm -rf "$ctx"
}

build_prometheus() {
  build rmq-kafka/prometheus:$SUITE "$HERE/prometheus" --build-arg "BASE=$BASE"
  docker tag rmq-kafka/prometheus:$SUITE rmq-kafka/prometheus:latest
}

build_base  # everything builds on it
if wanted kafka; then build_kafka; fi
if wanted app; then build_app; fi
if wanted spark; then build_spark; fi
if wanted prometheus; then build_prometheus; fi
# images of ours that a rebuild replaced (untagged now)
docker image prune -f --filter label=io.rmq-kafka.stack >/dev/null
docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' 'rmq-kafka/*' | sort
