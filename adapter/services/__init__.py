"""Long-running services built from the clients: the ScheduleService."""
