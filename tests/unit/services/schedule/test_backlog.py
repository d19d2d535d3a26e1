"""The ScheduleService's backlog-gauge options, checked at construction."""

from __future__ import annotations

from typing import Any

import pytest

from adapter import ScheduleService
from adapter.errors import AdapterError

pytestmark = pytest.mark.unit

CONF = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"lag_groups": "orders-service"}, "lag_groups"),  # one name, not a list of names
        ({"lag_groups": [""]}, "lag_groups"),
        ({"lag_groups": ["g"], "lag_horizon_s": -1}, "lag_horizon_s"),
        ({"lag_groups": ["g"], "lag_consume_from_where": "SOMETIME"}, "consume_from_where"),
    ],
)
def test_a_bad_backlog_option_is_refused_naming_it(options: dict[str, Any], field: str) -> None:
    with pytest.raises(AdapterError, match=field):
        ScheduleService(CONF, **options)


def test_good_backlog_options_are_taken() -> None:
    service = ScheduleService(
        CONF,
        lag_groups=["g1", "g2"],
        lag_horizon_s=30,
        lag_consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    assert service.options.lag_groups == ("g1", "g2")
