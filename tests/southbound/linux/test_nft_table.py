"""The I/O-free core of the nftables model: canonical form, transactions, marker, baseline."""

from __future__ import annotations

import json

import pytest

from southbound.linux.models.nftables import parse_table, parse_table_key
from southbound.linux.nft import NftError, SerialRunner, error_reason
from southbound.linux.nft_table import (
    MARKER_CHAIN,
    baseline_digest,
    delete_transaction,
    find_marker,
    group_tables,
    readback_value,
    replace_transaction,
    table_spec,
)
from southbound.validation import FieldsInvalidError

ACCEPT = [{"accept": None}]


def rule(chain: str, comment: str) -> dict:
    return {"chain": chain, "expr": ACCEPT, "comment": comment}


def test_canonical_form_ignores_what_does_not_matter_and_keeps_rule_order() -> None:
    one = table_spec("ip", "t", {"chains": [{"name": "b"}, {"name": "a", "table": "t"}],
                                 "sets": [], "rules": [rule("b", "1"), rule("a", "2"),
                                                       rule("b", "3")]})
    two = table_spec("ip", "t", {"chains": [{"name": "a"}, {"name": "b", "family": "ip"}],
                                 "rules": [rule("a", "2"), rule("b", "1"), rule("b", "3")]})
    assert one == two and one.digest == two.digest
    reordered = table_spec("ip", "t", {"chains": [{"name": "a"}, {"family": "ip", "name": "b"}],
                                       "rules": [{"comment": "2", "expr": ACCEPT, "chain": "a"},
                                                 rule("b", "1"), rule("b", "3")]})
    assert reordered == one and reordered.digest == one.digest
    swapped = table_spec("ip", "t", {"chains": [{"name": "a"}, {"name": "b"}],
                                     "rules": [rule("a", "2"), rule("b", "3"), rule("b", "1")]})
    assert swapped.digest != one.digest
    assert table_spec("ip6", "t", {"chains": [{"name": "a"}, {"name": "b"}]}).digest != \
        table_spec("ip", "t", {"chains": [{"name": "a"}, {"name": "b"}]}).digest


def test_replace_is_one_transaction_with_the_marker() -> None:
    spec = table_spec("inet", "f", {"chains": [{"name": "c"}], "sets": [{"name": "s",
                                                                         "type": "ipv4_addr"}],
                                    "rules": [rule("c", "x")]})
    commands = json.loads(replace_transaction(spec))["nftables"]
    table = {"family": "inet", "name": "f"}
    assert commands[:3] == [{"add": {"table": table}}, {"delete": {"table": table}},
                            {"add": {"table": table}}]
    kinds = [next(iter(next(iter(command.values())))) for command in commands[3:]]
    assert kinds == ["chain", "set", "rule", "chain", "rule"]  # chains and sets before rules
    assert json.loads(replace_transaction(spec, fresh=True))["nftables"][0] == {
        "create": {"table": table}}
    marker_rule = commands[-1]["add"]["rule"]
    assert marker_rule["chain"] == MARKER_CHAIN and marker_rule["comment"] == \
        f"kvmesh d={spec.digest}"
    assert json.loads(delete_transaction("inet", "f"))["nftables"][0] == {
        "flush": {"chain": {"family": "inet", "table": "f", "name": MARKER_CHAIN}}}


def listed(packets: int, expires: int, marker: str = "kvmesh d=abc r=def") -> list[dict]:
    return [
        {"table": {"family": "ip", "name": "t", "handle": 1}},
        {"set": {"family": "ip", "table": "t", "name": "dyn", "type": "ipv4_addr",
                 "flags": ["dynamic"], "handle": 2, "elem": [f"10.0.0.{packets}"]}},
        {"set": {"family": "ip", "table": "t", "name": "s", "type": "ipv4_addr", "handle": 3,
                 "elem": [{"elem": {"val": "10.0.0.1", "expires": expires}}]}},
        {"chain": {"family": "ip", "table": "t", "name": "c", "handle": 4}},
        {"chain": {"family": "ip", "table": "t", "name": MARKER_CHAIN, "handle": 5}},
        {"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 6 + packets,
                  "expr": [{"counter": {"packets": packets, "bytes": 60 * packets}},
                           {"quota": {"val": 1, "val_unit": "mbytes", "used": packets,
                                      "used_unit": "bytes"}}]}},
        {"rule": {"family": "ip", "table": "t", "chain": MARKER_CHAIN, "handle": 9,
                  "expr": [{"return": None}], "comment": marker}},
    ]


def test_baseline_ignores_counters_expiry_dynamic_elements_handles_and_the_marker() -> None:
    assert baseline_digest(listed(0, 30)) == baseline_digest(listed(7, 12, "kvmesh d=x"))
    changed = listed(0, 30)
    changed[5]["rule"]["expr"].append({"drop": None})
    assert baseline_digest(changed) != baseline_digest(listed(0, 30))
    assert baseline_digest(listed(0, 30)[:-2]) != baseline_digest(listed(0, 30))


def test_marker_and_readback() -> None:
    marker = find_marker(listed(0, 30))
    assert marker is not None and (marker.handle, marker.desired, marker.baseline) == (
        9, "abc", "def")
    assert find_marker(listed(0, 30, "someone else")) is None
    assert find_marker(listed(0, 30)[:-1]) is None
    value = readback_value("ip", "t", listed(3, 30))
    assert [c["name"] for c in value["chains"]] == ["c"]
    assert value["rules"][0]["expr"][0] == {"counter": {}}
    assert "dyn" in [s["name"] for s in value["sets"]] and "handle" not in value["sets"][0]
    grouped = group_tables([{"table": {"family": "ip", "name": "a"}},
                            {"chain": {"family": "ip", "table": "a", "name": "c"}},
                            {"table": {"family": "ip6", "name": "a"}}])
    assert {where: len(items) for where, items in grouped.items()} == {("ip", "a"): 2,
                                                                      ("ip6", "a"): 1}


def test_nft_errors_become_one_line() -> None:
    stderr = ("internal:0:0-0: Error: Unknown tcp field 'x'.\n\n"
              "internal:0:0-0: Error: Invalid LHS of relational.\n\n"
              "internal:0:0-0: Error: Unknown tcp field 'x'.\n")
    assert error_reason(stderr) == "Unknown tcp field 'x'.; Invalid LHS of relational."
    assert error_reason("something odd\nmore\n") == "something odd"
    assert error_reason("") == "failed without a message"
    assert not NftError("op", "Could not process rule: No such file or directory").retriable
    assert NftError("op", "Could not process rule: Device or resource busy").retriable


def test_keys() -> None:
    assert parse_table_key("linux/nftables/inet/f") == ("inet", "f")
    assert parse_table_key("linux/nftables/host/inet/f") is None
    assert parse_table_key("linux/nftables/inet") is None
    with pytest.raises(FieldsInvalidError, match="must be 'linux/nftables/<family>/<table>'"):
        parse_table("linux/nftables/inet/a/b", {})
    with pytest.raises(FieldsInvalidError, match="table name must start with a letter"):
        parse_table("linux/nftables/inet/9x", {})


def test_deferred_jobs_run_after_their_operation_and_before_any_later_one() -> None:
    runner = SerialRunner()
    order: list[str] = []

    def failing() -> None:
        raise RuntimeError("a failing job is logged and counted, not raised")

    def first() -> None:
        order.append("first")
        runner.defer(lambda: order.append("deferred"))
        runner.defer(failing)

    runner.run(first)
    runner.run(lambda: order.append("second"))
    assert order == ["first", "deferred", "second"]
    assert runner.wait_idle(10) and runner.deferred_failures == 1
    runner.defer(lambda: order.append("alone"))  # outside any operation: runs on its own
    assert runner.wait_idle(10) and order[-1] == "alone"
