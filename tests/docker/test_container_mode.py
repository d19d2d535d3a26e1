"""The pytest plugin's container mode (``RMQ_KAFKA_MODE=container``): the session's broker is
a container of a locally present image, the project's own ``rmq-kafka/kafka:<version>`` when
``apache/kafka:<version>`` is absent, and the plugin says which.  Run by the Docker tier beside
the integration subset it serves (``./run.sh test-docker``); skipped in the other modes."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer, Producer

from adapter.embedded.jars import kafka_version
from adapter.testing.container_images import ImageChoice
from adapter.testing.docker_engine import image_present
from adapter.testing.pytest_plugin import (
    BOOTSTRAP_ENV,
    IMAGE_ENV,
    MODE_ENV,
    detect_kafka_mode,
    pytest_report_header,
)


def test_the_session_broker_runs_in_a_container_of_the_chosen_image(
    kafka_container_image: ImageChoice, kafka_bootstrap_servers: str
) -> None:
    official = f"apache/kafka:{kafka_version()}"
    if os.environ.get(IMAGE_ENV):
        assert kafka_container_image.image == os.environ[IMAGE_ENV]
    elif image_present(official):
        assert kafka_container_image.image == official
    else:
        assert kafka_container_image == ImageChoice(
            f"rmq-kafka/kafka:{kafka_version()}", f"present locally; {official} not"
        )
    docker = pytest.importorskip("docker")
    client = docker.from_env()
    try:
        port = kafka_bootstrap_servers.rsplit(":", 1)[1]
        running = [
            c
            for c in client.containers.list(filters={"publish": port})
            if kafka_container_image.image in c.image.tags
        ]
    finally:
        client.close()
    assert len(running) == 1, f"no container of {kafka_container_image.image} publishes {port}"


def test_a_record_goes_through_the_container_broker(
    kafka_container_image: ImageChoice, kafka_bootstrap_servers: str, kafka_topic: str
) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap_servers})
    producer.produce(kafka_topic, b"through the container")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap_servers,
            "group.id": f"g-{kafka_topic}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([kafka_topic])
        msg = None
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.value() == b"through the container"
    finally:
        consumer.close()


def test_the_run_s_header_names_the_image(
    kafka_container_image: ImageChoice,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(MODE_ENV, "container")
    assert pytest_report_header(request.config) == (
        f"rmq-kafka container mode: Kafka image {kafka_container_image.image} "
        f"({kafka_container_image.reason})"
    )


def test_detection_without_forcing_keeps_the_embedded_broker(
    kafka_container_image: ImageChoice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's image, built for this tier, does not turn the default suite (which needs
    the embedded broker for its fault-injection tests) into container mode: only forcing it
    or the official image does."""
    if image_present(f"apache/kafka:{kafka_version()}"):
        pytest.skip("the official image is present: detection takes it, as documented")
    assert image_present(f"rmq-kafka/kafka:{kafka_version()}")
    for name in (MODE_ENV, BOOTSTRAP_ENV, IMAGE_ENV):
        monkeypatch.delenv(name, raising=False)
    assert detect_kafka_mode() == "embedded"
    monkeypatch.setenv(MODE_ENV, "container")
    assert detect_kafka_mode() == "container"
