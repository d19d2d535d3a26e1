"""Operating the adapter: Prometheus metrics and the admin commands (group progress,
offset resets, message journeys, ScheduleService status)."""
