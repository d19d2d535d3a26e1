"""Each role's ACL set (``rmq-kafka acl print``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapter.cli import main as cli_main
from adapter.errors import InvalidInputError
from adapter.ops.acls import AclSpec, role_acls, schedule_prefix

pytestmark = pytest.mark.unit


# --- ACL sets -----------------------------------------------------------------------------
def _set(specs: list[AclSpec]) -> set[tuple[str, str, str, str]]:
    return {(s.operation, s.resource, s.pattern, s.name) for s in specs}


def test_the_consumer_role() -> None:
    got = _set(role_acls("consumer", group="orders", topics=["t1"], namespace="ns"))
    assert got == {
        ("READ", "GROUP", "LITERAL", "orders"),
        ("READ", "TOPIC", "LITERAL", "t1"),
        ("READ", "TOPIC", "LITERAL", "rmq.retry.orders"),
        ("WRITE", "TOPIC", "LITERAL", "rmq.dlq.orders"),
        ("WRITE", "TOPIC", "PREFIXED", "rmq.schedule.ns."),
        ("READ", "TOPIC", "LITERAL", "rmq.control"),
        ("WRITE", "TOPIC", "LITERAL", "rmq.control"),
        ("DESCRIBE", "GROUP", "PREFIXED", "rmq-ops-reader-"),
        ("CREATE", "TOPIC", "LITERAL", "rmq.retry.orders"),
        ("CREATE", "TOPIC", "LITERAL", "rmq.dlq.orders"),
        ("CREATE", "TOPIC", "PREFIXED", "rmq.schedule.ns."),
        ("CREATE", "TOPIC", "LITERAL", "rmq.control"),
    }
    without = _set(role_acls("consumer", group="orders", topics=["t1"], create_topics=False))
    assert not any(op == "CREATE" for op, *_ in without)
    assert ("WRITE", "TOPIC", "PREFIXED", "rmq.schedule.") in without


def test_a_share_group_consumer_also_sets_its_group_configs() -> None:
    plain = _set(role_acls("consumer", group="orders", topics=["t1"]))
    share = _set(role_acls("consumer", group="orders", topics=["t1"], share=True))
    assert share - plain == {("ALTER_CONFIGS", "GROUP", "LITERAL", "orders")}
    with pytest.raises(InvalidInputError) as info:
        role_acls("producer", topics=["t1"], share=True)
    assert info.value.field == "share"


def test_the_schedule_service_role() -> None:
    got = _set(role_acls("schedule-service"))
    assert ("READ", "GROUP", "LITERAL", "rmq-schedule-service") in got
    assert ("READ", "TOPIC", "PREFIXED", "rmq.schedule.") in got
    assert ("WRITE", "TOPIC", "PREFIXED", "rmq.retry.") in got
    assert ("WRITE", "TOPIC", "LITERAL", "*") in got  # every destination
    assert ("WRITE", "TRANSACTIONAL_ID", "PREFIXED", "rmq-schedule-service") in got
    narrow = _set(role_acls("schedule-service", topics=["orders"], exactly_once=False))
    assert ("WRITE", "TOPIC", "LITERAL", "orders") in narrow
    assert ("WRITE", "TOPIC", "LITERAL", "*") not in narrow
    assert not any(r == "TRANSACTIONAL_ID" for _, r, *_ in narrow)


def test_the_producer_and_console_roles() -> None:
    assert _set(role_acls("producer", topics=["orders"], create_topics=False)) == {
        ("WRITE", "TOPIC", "LITERAL", "orders"),
        ("WRITE", "TOPIC", "PREFIXED", "rmq.schedule."),
    }
    console = _set(role_acls("console", group="orders"))
    assert ("READ", "TOPIC", "LITERAL", "*") in console
    assert ("WRITE", "TOPIC", "LITERAL", "rmq.retry.orders") in console  # redrive only
    assert ("READ", "GROUP", "LITERAL", "rmq-dlq-redrive.orders") in console
    writes = {name for op, _, _, name in console if op == "WRITE"}
    assert writes == {"rmq.retry.orders", "rmq.control", "rmq.audit"}  # + the redrive audit log


@pytest.mark.parametrize(
    ("role", "kwargs", "field"),
    [
        ("consumer", {"topics": ["t"]}, "group"),
        ("consumer", {"group": "g"}, "topic"),
        ("producer", {}, "topic"),
        ("console", {}, "group"),
        ("admin", {"group": "g"}, "role"),
        ("producer", {"topics": ["rmq.retry.x"]}, "topic"),
    ],
)
def test_bad_role_input_names_the_field(role: str, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:  # ConfigError, TopicNameError
        role_acls(role, **kwargs)
    assert info.value.field == field


def test_schedule_prefixes() -> None:
    assert schedule_prefix() == "rmq.schedule."
    assert schedule_prefix("ns1") == "rmq.schedule.ns1."


def test_acl_print_prints_one_acl_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["acl", "print", "--role", "producer", "--topic", "orders", "--principal", "User:app"]
    assert cli_main([*args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ALLOW User:app WRITE    TOPIC            LITERAL  orders  # ")
    assert cli_main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0] == {
        "principal": "User:app",
        "permission": "ALLOW",
        "operation": "WRITE",
        "resource": "TOPIC",
        "pattern": "LITERAL",
        "name": "orders",
        "why": "send messages",
    }


def test_acl_print_apply_needs_a_principal(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["acl", "print", "--role", "producer", "--topic", "o", "--apply"])
    assert code == 2
    assert "--principal" in capsys.readouterr().err


def test_the_docs_acl_listing_is_what_acl_print_prints(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    command, listing = re.search(
        r"```sh\n(rmq-kafka acl print [^\n]*)\n```\n\n```text\n(.*?)```", doc, re.S
    ).groups()  # type: ignore[union-attr]
    assert cli_main(shlex.split(command)[1:]) == 0
    assert capsys.readouterr().out == listing
