"""``SimpleConsumer`` is a facade over an explicit backend: the ``backend`` argument picks
the class, both backends offer every operation of the Backend protocol, and no registry
is filled by importing a module.  (Nothing here connects: the backends create their
clients at ``start()``.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from adapter import ConfigError
from adapter.clients.simple import simple_consumer, simple_options
from adapter.clients.simple.backend import BACKEND_OPERATIONS
from adapter.clients.simple.classic_backend import ClassicBackend
from adapter.clients.simple.simple_consumer import SimpleConsumer, SimpleConsumerBackend

CONF = {"bootstrap.servers": "127.0.0.1:1"}


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_protocol_names_the_public_operations() -> None:
    assert set(BACKEND_OPERATIONS) == {
        "consumer_group",
        "name",
        "retry_topic",
        "dlq_topic",
        "subscribe",
        "unsubscribe",
        "subscriptions",
        "start",
        "startup",
        "shutdown",
        "check_alive",
        "await_duration",
        "receive",
        "receive_async",
        "ack",
        "ack_async",
        "change_invisible_duration",
        "change_invisible_duration_async",
        "assignment",
        "stats",
        "running_info",
    }


@pytest.mark.parametrize("backend", ["classic", "share"])
def test_the_argument_picks_the_backend(backend: str) -> None:
    sc = SimpleConsumer(CONF, "g", backend=backend)
    assert isinstance(sc, SimpleConsumer)
    assert sc.backend is SimpleConsumerBackend(backend)
    assert sc.name == ("simple consumer g (share)" if backend == "share" else "simple consumer g")


def test_the_default_backend_is_classic() -> None:
    assert SimpleConsumer(CONF, "g").backend is SimpleConsumerBackend.CLASSIC


def test_a_bad_backend_is_named_with_its_value() -> None:
    with pytest.raises(ConfigError) as err:
        SimpleConsumer(CONF, "g", backend="sharded")
    assert "backend" in str(err.value)
    assert "sharded" in str(err.value)


@pytest.mark.parametrize("backend", ["classic", "share"])
def test_the_facade_offers_the_same_surface_on_both_backends(backend: str) -> None:
    sc = SimpleConsumer(CONF, "g", backend=backend)
    facade_only = {"backend", "close", "lock_duration"}
    assert _public(sc) == set(BACKEND_OPERATIONS) | facade_only


def test_every_backend_offers_every_operation() -> None:
    from adapter.clients.share.share_backend import ShareBackend

    for cls in (ClassicBackend, ShareBackend):
        assert set(BACKEND_OPERATIONS) <= _public(cls(CONF, "g")), cls
        assert SimpleConsumer not in cls.__mro__
    assert ClassicBackend not in ShareBackend.__mro__
    assert ShareBackend not in ClassicBackend.__mro__


def test_lock_duration_is_the_share_backends_only() -> None:
    share = SimpleConsumer(CONF, "g", backend="share", lock_duration=15)
    assert share.lock_duration == 15
    classic = SimpleConsumer(CONF, "g")
    with pytest.raises(AttributeError, match="lock_duration"):
        _ = classic.lock_duration
    assert not hasattr(classic, "lock_duration")


def test_no_module_level_backend_registry() -> None:
    for module in (simple_consumer, simple_options):
        assert not hasattr(module, "BACKENDS")
        for value in vars(module).values():
            assert not (isinstance(value, dict) and SimpleConsumerBackend.SHARE in value)


def test_importing_the_adapter_leaves_the_share_backend_unloaded() -> None:
    code = (
        "import sys, adapter\n"
        "from adapter.clients.simple.simple_consumer import SimpleConsumer\n"
        "SimpleConsumer({'bootstrap.servers': '127.0.0.1:1'}, 'g')\n"
        "print('adapter.clients.share.share_backend' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
