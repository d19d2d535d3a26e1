"""The clients' options: unknown and bad options name the field, the typed
keywords name exactly the validated options."""

from __future__ import annotations

import pytest

from adapter.clients.producer import ProducerSettings
from adapter.clients.push.push_consumer import PushConsumerSettings
from adapter.errors import ConfigError, InvalidInputError
from adapter.io.config import build_options

pytestmark = pytest.mark.unit


def test_unknown_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        build_options(PushConsumerSettings, {"max_reconsume_time": 3}, "PushConsumer")
    assert info.value.field == "max_reconsume_time"
    assert "max_reconsume_times" in str(info.value)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"consume_message_batch_max_size": -1}, "consume_message_batch_max_size"),
        ({"consume_message_batch_max_size": 2000}, "consume_message_batch_max_size"),
        ({"max_reconsume_times": -2}, "max_reconsume_times"),
        ({"consume_timeout": 0}, "consume_timeout"),
        ({"message_model": "SIDEWAYS"}, "message_model"),
        ({"delay_levels": "1s 5q"}, "messageDelayLevel token 2"),
    ],
)
def test_bad_consumer_options_name_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        build_options(PushConsumerSettings, options, "PushConsumer")
    assert info.value.field == field


def test_bad_producer_options_name_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        build_options(ProducerSettings, {"send_msg_timeout_ms": 0}, "Producer")
    assert info.value.field == "send_msg_timeout_ms"


@pytest.mark.parametrize(
    ("typed", "validated"),
    [
        ("adapter.clients.push.push_consumer:PushConsumerOptions", "PushConsumerSettings"),
        ("adapter.clients.producer:ProducerOptions", "ProducerSettings"),
        ("adapter.clients.simple.simple_consumer:SimpleConsumerOptions", "SimpleOptions"),
        ("adapter.services.schedule.service:ScheduleServiceOptions", "ScheduleServiceSettings"),
        ("adapter.kafka:DropInOptions", "DropInSettings"),
    ],
)
def test_typed_options_name_exactly_the_validated_options(typed: str, validated: str) -> None:
    """What mypy and editors see (the ``TypedDict`` behind ``**options``) is exactly what
    the client accepts (the dataclass that validates them): no option missing, none extra."""
    import dataclasses
    import importlib
    import typing

    module_name, typed_name = typed.split(":")
    module = importlib.import_module(module_name)
    keys = set(typing.get_type_hints(getattr(module, typed_name)))
    fields = {f.name for f in dataclasses.fields(getattr(module, validated))}
    assert keys == fields, (sorted(keys - fields), sorted(fields - keys))


@pytest.mark.parametrize("port", [-1, 65536, "9100", True])
def test_a_bad_metrics_port_names_the_field_for_every_client(port: object) -> None:
    from adapter.clients.push.push_options import PushConsumerSettings
    from adapter.services.schedule.options import ScheduleServiceSettings

    for settings in (PushConsumerSettings, ScheduleServiceSettings):
        with pytest.raises(ConfigError, match="metrics_port"):
            settings(metrics_port=port)  # type: ignore[arg-type]
    assert PushConsumerSettings(metrics_port=0).metrics_port == 0
    assert ScheduleServiceSettings(metrics_port=65535).metrics_port == 65535
