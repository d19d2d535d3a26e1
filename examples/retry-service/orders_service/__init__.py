"""An example order service on rmq-kafka-adapter: see ``service.py``."""

from orders_service.service import OrderRejectedError, OrdersService

__all__ = ["OrderRejectedError", "OrdersService"]
