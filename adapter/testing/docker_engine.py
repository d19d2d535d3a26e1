"""What a Docker tier needs of this host: the docker CLI, a reachable engine, Compose, a
locally present image (never pulled), each missing one named with how to install it."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import socket
import subprocess
from typing import Any

INSTALL_ENGINE = (
    "install a Docker engine (Debian/Ubuntu: apt-get install docker.io) and start it "
    "(systemctl start docker, or dockerd &)"
)
INSTALL_CLI = "install the docker CLI (Debian/Ubuntu: apt-get install docker.io)"
INSTALL_COMPOSE = (
    "install Docker Compose (the docker-compose-plugin package for 'docker compose', "
    "or Debian's docker-compose)"
)


def docker_problems(
    *, cli: bool, engine_problem: str | None, compose: bool | None = None
) -> list[str]:
    """What a Docker tier lacks, each with how to install it (empty: nothing).  ``compose``
    ``None``: the tier does not need Compose."""
    problems = []
    if not cli:
        problems.append(f"no docker CLI on PATH: {INSTALL_CLI}")
    if engine_problem:
        problems.append(f"no Docker engine reachable ({engine_problem}): {INSTALL_ENGINE}")
    if compose is False:
        problems.append(
            f"neither 'docker compose' nor docker-compose is installed: {INSTALL_COMPOSE}"
        )
    return problems


def docker_socket_problem() -> str | None:
    """Cheap pre-check of a local engine's socket (the docker SDK leaks one when it is down)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None  # tcp:// / ssh:// etc.: let the SDK decide
    path = host.removeprefix("unix://") or "/var/run/docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
    return None


def docker_client() -> Any:
    docker: Any = importlib.import_module("docker")
    return docker.from_env(timeout=10)


def docker_engine_problem() -> str | None:
    """Why no Docker engine answers here (``None``: one does)."""
    problem = docker_socket_problem()
    if problem:
        return problem
    try:
        client = docker_client()
    except Exception as exc:
        return f"docker SDK: {exc}"
    try:
        client.ping()
    except Exception as exc:
        return f"ping: {exc}"
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return None


def image_present(image: str) -> bool:
    """``image`` is in the local engine's store (never pulled)."""
    if docker_socket_problem():
        return False
    try:
        client = docker_client()
    except Exception:
        return False
    try:
        client.images.get(image)
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return True


def compose_installed() -> bool:
    """``docker compose`` (v2) or ``docker-compose`` answers."""
    if shutil.which("docker"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            res = subprocess.run(
                ["docker", "compose", "version"], capture_output=True, timeout=30, check=False
            )
            if res.returncode == 0:
                return True
    return shutil.which("docker-compose") is not None
