"""``rmq-kafka analytics``'s arguments and runner: moved to :mod:`adapter.cli.analytics` (this
name stays as an alias)."""

from adapter.cli.analytics import add_analytics_parser, main, run_analytics

__all__ = ["add_analytics_parser", "main", "run_analytics"]
