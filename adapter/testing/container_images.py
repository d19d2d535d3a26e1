"""Which images the container tiers run, in order of preference (pure): the broker's
(``$RMQ_KAFKA_IMAGE``, else the official ``apache/kafka``, then the project's own) and the
ScheduleService's (``$RMQ_SERVICE_IMAGE``, else the project's ``rmq-kafka/app``), and the
first of them present locally (:func:`choose_image`; images are never pulled)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

KAFKA_IMAGE_ENV = "RMQ_KAFKA_IMAGE"
SERVICE_IMAGE_ENV = "RMQ_SERVICE_IMAGE"
PROJECT_KAFKA_REPO = "rmq-kafka/kafka"
PROJECT_SERVICE_REPO = "rmq-kafka/app"


@dataclass(frozen=True)
class ImageChoice:
    """The image to run and why it was taken (logged, and shown in the test report)."""

    image: str
    reason: str


def kafka_image_candidates(
    version: str, configured: str | None = None, *, project_image: bool = True
) -> list[str]:
    """The broker images to try, in order: ``configured`` (``$RMQ_KAFKA_IMAGE``) alone when
    set, else the official ``apache/kafka:<version>``, then (with ``project_image``) the
    project's own ``rmq-kafka/kafka:<version>``."""
    if configured:
        return [configured]
    official = f"apache/kafka:{version}"
    return [official, f"{PROJECT_KAFKA_REPO}:{version}"] if project_image else [official]


def service_image_candidates(adapter_version: str, configured: str | None = None) -> list[str]:
    """The ScheduleService images to try: ``configured`` (``$RMQ_SERVICE_IMAGE``) alone when
    set, else ``rmq-kafka/app:<adapter version>``, then ``rmq-kafka/app:latest``."""
    if configured:
        return [configured]
    return [f"{PROJECT_SERVICE_REPO}:{adapter_version}", f"{PROJECT_SERVICE_REPO}:latest"]


def choose_image(
    candidates: Sequence[str], present: Callable[[str], bool], *, configured: bool = False
) -> ImageChoice | None:
    """The first of ``candidates`` present locally (never pulled), or ``None``."""
    for i, image in enumerate(candidates):
        if present(image):
            if configured:
                reason = "configured"
            elif i == 0:
                reason = "present locally"
            else:
                reason = f"present locally; {', '.join(candidates[:i])} not"
            return ImageChoice(image, reason)
    return None
