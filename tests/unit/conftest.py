"""Hypothesis profiles for the unit tier.

The default profile (100 examples per property, no per-example deadline: a deadline is a
timing test, and the test command shares two cores with a broker and Spark) runs in the test
command.  Hunt for rare
counter-examples with ``HYPOTHESIS_PROFILE=thorough pytest -m unit`` (20 000 examples each).
``./run.sh mutate`` runs the ``mutation`` profile: mutmut calls a property through its own
trampoline, which Hypothesis otherwise reports as "called from multiple different executors".
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "mutation",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
