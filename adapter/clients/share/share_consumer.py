"""The share backend's names at their earlier import path: the backend itself lives in
:mod:`adapter.clients.share.share_backend` (create it as
``SimpleConsumer(config, group, backend="share")``)."""

from adapter.clients.share.share_backend import (
    ShareBackend,
    ShareMessageView,
    ShareSimpleConsumerOptions,
)

__all__ = ["ShareBackend", "ShareMessageView", "ShareSimpleConsumerOptions"]
