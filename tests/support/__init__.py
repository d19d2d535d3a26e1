"""Helpers the test tiers share: child processes, collectors, waits, the bounce workload.
Imported as a package (``tests.support.*``); the child-process modules also run as
``python -m tests.support.<module>`` from the repository root."""
