"""``rmq-kafka console``: an operator's page and JSON API over a cluster (groups, retry
ladders, dead letters, message journeys, safe redrives with an audit log), read from Kafka
only.  Needs the ``console`` extra (Starlette and uvicorn)."""

from adapter.console.service import ConsoleSettings

__all__ = ["ConsoleSettings"]
