"""The Docker tier asked for by name (``RMQ_DOCKER_TESTS=1``) has what it needs: a docker
CLI, an engine that answers and Compose.  Skipped when not asked for; when asked for, a
missing part fails this test, naming the part and how to install it (so a run without Docker
never passes as if the tier had run)."""

from __future__ import annotations

import pytest

from tests.docker.harness import require_docker

pytestmark = pytest.mark.docker


def test_the_docker_tier_has_an_engine_and_compose() -> None:
    require_docker(compose=True)
