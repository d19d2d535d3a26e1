#!/usr/bin/env bash
# Build the project's Docker images locally, with nothing pulled from a registry:
#
#   rmq-kafka/debian-base:bookworm  a minimal Debian (debootstrap, with a Java 17 JRE and
#                                   Python 3) turned into an image with `docker import`
#   rmq-kafka/kafka:4.1.1           a single-node KRaft broker from the project's pinned Kafka
#                                   jars (Maven Central, cached by `./run.sh setup`), configured
#                                   by KAFKA_* environment variables like the official image
#
# Needs root, a running Docker engine, debootstrap, and the Kafka jars in
# $RMQ_KAFKA_HOME (run `./run.sh setup` first).  The pytest plugin uses the broker image
# with RMQ_KAFKA_MODE=container RMQ_KAFKA_IMAGE=rmq-kafka/kafka:4.1.1 (see README).
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
ROOT=$(cd .. && pwd)
KAFKA_VERSION=4.1.1
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RMQ_KAFKA_HOME="${RMQ_KAFKA_HOME:-$ROOT/.cache/rmq-kafka}"
BASE=rmq-kafka/debian-base:$SUITE
WORK="$ROOT/.cache/docker"

command -v docker >/dev/null || { echo "build.sh: docker is required" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build.sh: no Docker engine (start dockerd)" >&2; exit 1; }

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "build.sh: debootstrap is required" >&2; exit 1; }
  rootfs="$WORK/rootfs-$SUITE"
  rm -rf "$rootfs" && mkdir -p "$rootfs"
  echo "==> debootstrap $SUITE into $rootfs"
  debootstrap --variant=minbase --include=openjdk-17-jre-headless,python3,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  echo "==> docker import $BASE"
  tar -C "$rootfs" -c . | docker import - "$BASE"
  rm -rf "$rootfs"
fi

lib="$RMQ_KAFKA_HOME/kafka-$KAFKA_VERSION/lib"
[ -d "$lib" ] || { echo "build.sh: no Kafka jars in $lib (run ./run.sh setup)" >&2; exit 1; }
ctx="$WORK/kafka-context"
rm -rf "$ctx" && mkdir -p "$ctx"
cp -r "$lib" "$ctx/libs"
cp "$HERE/kafka/Dockerfile" "$HERE/kafka/entrypoint.sh" "$ctx/"
echo "==> docker build rmq-kafka/kafka:$KAFKA_VERSION"
docker build -q --build-arg "BASE=$BASE" -t "rmq-kafka/kafka:$KAFKA_VERSION" "$ctx"
