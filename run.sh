#!/usr/bin/env bash
# One entry point that sets everything up on a fresh machine (Python 3.11+, Java 17, Maven)
# and then runs what you ask for:
#   ./run.sh demo    the end-to-end demo on an embedded local Kafka broker (the main job)
#   ./run.sh test    the whole test suite (unit + integration on a real broker) plus ruff and mypy
#   ./run.sh test-kip848   the rebalancing scenarios again, under the consumer group protocol
#   ./run.sh test-cluster  the opt-in cluster tier: every bounce scenario on a three-node cluster
#   ./run.sh conformance   the opt-in conformance tier: each scenario on a real RocketMQ and on the adapter
#   ./run.sh test-console  the opt-in console tier: the retry console in a real browser (Chromium), the dashboard from a real Prometheus
#   ./run.sh test-docker   the opt-in Docker tier: container mode, the retry stack, examples/retry-service, the Docker stack
#   ./run.sh test-tls      the opt-in TLS tier: every component over SSL and SASL_SSL, TLS errors, ACL sets
#   ./run.sh bench   the benchmarks against raw confluent-kafka (same run, same broker)
#   ./run.sh docs    the documentation site into site/ (MkDocs, --strict, offline)
#   ./run.sh mutate  mutation testing of the pure core and the consume path (mutmut; long)
#   ./run.sh setup   only the set-up
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
# one home for the jars and the embedded brokers, shared with the rmq-kafka CLI
export RMQ_KAFKA_HOME="${RMQ_KAFKA_HOME:-$HOME/.cache/rmq-kafka}"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"

setup() {
  command -v java >/dev/null || { echo "run.sh: java (17+) is required" >&2; exit 1; }
  command -v mvn >/dev/null || { echo "run.sh: mvn (Maven) is required" >&2; exit 1; }
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.rmq-installed" want
  want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "==> installing the project, its test tools and the Spark analytics extra into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test,spark,console]"
    echo "$want" > "$stamp"
  fi
  echo "==> Kafka broker jars (pinned, from Maven Central, cached in $RMQ_KAFKA_HOME)"
  "$VENV/bin/python" -c "from adapter.embedded import ensure_jars; print('    ready:', ensure_jars())"
  echo "==> Spark Kafka/Avro connector jars (pinned to pyspark's version, cached in $RMQ_KAFKA_HOME)"
  "$VENV/bin/python" -c "from adapter.analytics.jars import ensure_spark_jars; jars = ensure_spark_jars(); print(f'    ready: {len(jars)} jars in', jars[0].parent)"
  # made once each, side by side: every later broker node and local Spark driver maps its
  # classes instead of loading them from the jars, and starts on about half the CPU
  echo "==> the class archives of the broker's and the Spark driver's JVMs"
  "$VENV/bin/python" -c "from adapter.embedded.classes import ensure_class_archive; print('    broker:', ensure_class_archive())" &
  local broker_archive=$!
  "$VENV/bin/python" -c "from adapter.analytics.classes import ensure_spark_class_archive; print('    Spark driver:', ensure_spark_class_archive())"
  wait "$broker_archive"
}

cmd="${1:-help}"
shift || true
case "$cmd" in
  setup) setup ;;
  demo)
    setup
    exec "$VENV/bin/rmq-kafka" demo "$@"
    ;;
  test)
    setup
    # the suite's brokers live minutes: the client compiler alone starts them on about half
    # the CPU (CHANGELOG.md, "suite time"); set RMQ_KAFKA_JVM_OPTS= to run them as shipped
    export RMQ_KAFKA_JVM_OPTS="${RMQ_KAFKA_JVM_OPTS--XX:TieredStopAtLevel=1}"
    echo "==> ruff"
    "$VENV/bin/ruff" check adapter tests
    # mypy runs beside pytest (it needs no broker); its verdict is checked at the end
    mypy_log=$(mktemp)
    "$VENV/bin/mypy" adapter >"$mypy_log" 2>&1 &
    mypy_pid=$!
    workers=${RMQ_TEST_WORKERS:-6}
    echo "==> pytest (unit + integration, $workers workers; RMQ_TEST_WORKERS=0 runs in one process) and mypy"
    rc=0
    # the slowest tests are listed at the end: where the suite's ten minutes go
    if [ "$workers" = 0 ]; then
      "$VENV/bin/python" -m pytest --durations=20 "$@" || rc=$?
    else
      "$VENV/bin/python" -m pytest -n "$workers" --dist loadgroup --durations=20 "$@" || rc=$?
    fi
    echo "==> mypy"
    if ! wait "$mypy_pid"; then rc=1; fi
    cat "$mypy_log"
    rm -f "$mypy_log"
    exit "$rc"
    ;;
  test-kip848)
    setup
    export RMQ_KAFKA_JVM_OPTS="${RMQ_KAFKA_JVM_OPTS--XX:TieredStopAtLevel=1}"
    echo "==> every rebalancing scenario under group.protocol=consumer (KIP-848); ./run.sh test runs them under classic"
    RMQ_GROUP_PROTOCOL=consumer exec "$VENV/bin/python" -m pytest -p no:cacheprovider \
      -n "${RMQ_TEST_WORKERS:-6}" --dist loadgroup -m group_protocol "$@"
    ;;
  test-cluster)
    setup
    echo "==> the cluster tier: every bounce scenario on a three-node KRaft cluster (minutes)"
    RMQ_CLUSTER_TIER=1 exec "$VENV/bin/python" -m pytest -p no:cacheprovider --capture=sys tests/cluster "$@"
    ;;
  test-tls)
    setup
    echo "==> the TLS tier: every component over SSL and SASL_SSL, the TLS errors, each role's ACL set (minutes)"
    RMQ_TLS_TIER=1 exec "$VENV/bin/python" -m pytest -p no:cacheprovider -n0 tests/tls "$@"
    ;;
  conformance)
    setup
    echo "==> RocketMQ $(sed -n 's:.*<artifactId>rocketmq-broker</artifactId><version>\(.*\)</version>.*:\1:p' tests/conformance/java/pom.xml) jars (from Maven Central, cached in $RMQ_KAFKA_HOME) and the scenario runner"
    "$VENV/bin/python" -c "import sys; sys.path.insert(0, 'tests/conformance'); import rmq_broker; print('    ready:', rmq_broker.ensure_runner())"
    echo "==> the conformance tier: every scenario on a real RocketMQ broker and on the adapter (minutes)"
    RMQ_CONFORMANCE=1 exec "$VENV/bin/python" -m pytest -p no:cacheprovider -n0 tests/conformance "$@"
    ;;
  test-console)
    setup
    if [ ! -x "${RMQ_CONSOLE_CHROMIUM:-/usr/bin/chromium}" ]; then
      echo "==> installing Debian's chromium (Playwright drives it)"
      if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium
      else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi
    fi
    if [ ! -x "${RMQ_PROMETHEUS:-/usr/bin/prometheus}" ]; then
      echo "==> installing Debian's prometheus (the dashboard picture is drawn from what it scrapes)"
      if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq prometheus
      else sudo apt-get update -qq && sudo apt-get install -y -qq prometheus; fi
    fi
    echo "==> the console tier: the retry console in a real browser, its DLQ view with 100 000 dead letters, the dashboard drawn from a real Prometheus"
    RMQ_CONSOLE_TIER=1 exec "$VENV/bin/python" -m pytest -p no:cacheprovider -n0 -s tests/console "$@"
    ;;
  test-docker)
    setup
    missing=""
    command -v dockerd >/dev/null || missing="$missing docker.io"
    command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing="$missing docker-compose"
    command -v debootstrap >/dev/null || missing="$missing debootstrap"
    if [ -n "$missing" ]; then
      echo "==> installing Debian's$missing (the Docker engine, Compose, and the base image's bootstrap)"
      if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $missing
      else sudo apt-get update -qq && sudo apt-get install -y -qq $missing; fi
    fi
    echo "==> the Docker tier (docker/test-tier.sh): images built offline, containers (minutes)"
    PYTHON="$VENV/bin/python" exec docker/test-tier.sh
    ;;
  bench)
    setup
    exec "$VENV/bin/rmq-kafka" bench "$@"
    ;;
  docs)
    # no Java needed: only the venv and the docs extra (MkDocs, Material, mkdocstrings)
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    docs_want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$VENV/.rmq-docs-installed" 2>/dev/null)" != "$docs_want" ]; then
      echo "==> installing the project's docs extra into $VENV"
      "$VENV/bin/python" -m pip install -q -e ".[docs]"
      echo "$docs_want" > "$VENV/.rmq-docs-installed"
    fi
    echo "==> mkdocs build --strict (into site/)"
    NO_MKDOCS_2_WARNING=1 exec "$VENV/bin/mkdocs" build --strict "$@"
    ;;
  mutate)
    setup
    # mutation testing ([tool.mutmut] in pyproject.toml): the pure core and the consume path
    # against the unit tests, in a copy under mutants/ (the mutated package first on the
    # path).  Arguments select mutants, e.g. ./run.sh mutate 'adapter.core.engine.pull*'.
    echo "==> mutmut over adapter/core and the group member (all of it: about 20-30 min on two cores)"
    # made first: a path missing when the interpreter starts is never looked in again
    mkdir -p "$ROOT/mutants"
    HYPOTHESIS_PROFILE=mutation PYTHONPATH="$ROOT/mutants" "$VENV/bin/mutmut" run "$@" || true
    PYTHONPATH="$ROOT/mutants" "$VENV/bin/mutmut" export-cicd-stats
    "$VENV/bin/python" -c "import json; print(json.dumps(json.load(open('mutants/mutmut-cicd-stats.json')), indent=2))"
    PYTHONPATH="$ROOT/mutants" exec "$VENV/bin/mutmut" results
    ;;
  *)
    sed -n '2,15p' "$0"
    exit 2
    ;;
esac
