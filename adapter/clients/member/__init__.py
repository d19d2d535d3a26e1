"""What every group member does, whichever client it serves: the poll loop
(:mod:`.group_consumer`), the engine and runner contracts (:mod:`.contracts`), start positions,
lag, offset resets, broadcast offsets, the circuit reporter and the outcome accounting."""
