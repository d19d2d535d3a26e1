"""Serve the console with uvicorn (in this thread, or on a background thread for tests and
embedding)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import uvicorn

from adapter.console.app import create_app
from adapter.console.service import ConsoleSettings
from adapter.errors import AdapterError

log = logging.getLogger("adapter.console")


def _server(settings: ConsoleSettings, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    return uvicorn.Server(config)


def serve(settings: ConsoleSettings, *, host: str = "127.0.0.1", port: int = 8088) -> None:
    """Serve until interrupted (SIGINT/SIGTERM)."""
    _server(settings, host, port).run()


@dataclass
class RunningConsole:
    """A console served on a background thread; :meth:`stop` ends it."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start_background(
    settings: ConsoleSettings, *, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 20.0
) -> RunningConsole:
    """Start a console on a background thread (``port`` 0: a free one) and wait until it
    listens."""
    server = _server(settings, host, port)
    thread = threading.Thread(target=server.run, name="rmq-console", daemon=True)
    thread.start()
    tick = threading.Event()  # never set: a bounded wait between looks
    waited = 0.0
    while not server.started and thread.is_alive() and waited < timeout_s:
        tick.wait(0.05)
        waited += 0.05
    if not server.started:
        server.should_exit = True
        raise AdapterError("the console did not start (see the log)")
    sock = server.servers[0].sockets[0]
    bound_host, bound_port = sock.getsockname()[:2]
    return RunningConsole(server, thread, f"http://{bound_host}:{bound_port}")
