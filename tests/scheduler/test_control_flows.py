"""The seven control flows of the seed (001_...), each with descriptors of test values."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import (
    Dependency,
    Descriptor,
    KVScheduler,
    RetryPolicy,
    TransactionError,
    TxnOperation,
    TxnType,
    ValueOrigin,
    ValueState,
)
from tests.scheduler.mocksb import MockSB, prefix_descriptor
from tests.util import wait_until

VPP_IF = "vpp/interface/"
VPP_ADDR = "vpp/interface/address/"
VPP_UNNUM = "vpp/interface/unnumbered/"
LINUX_IF = "linux/interface/host-name/"
BD = "vpp/bd/"
ROUTE = "vpp/route/"


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def ops_of(sched: KVScheduler, seq: int) -> list[tuple[str, str]]:
    (record,) = sched.transaction_history(seq=seq)
    return [(op.op.value, op.key) for op in record.executed if not op.noop]


def _is_vpp_interface(key: str) -> bool:
    return key.startswith(VPP_IF) and not key.startswith((VPP_ADDR, VPP_UNNUM))


def vpp_interface_descriptor(sb: MockSB, **extra: Any) -> Descriptor:
    """VPP interfaces: AF-packet depends on its host interface; addresses and the unnumbered
    setting are derived values."""

    def deps(key: str, value: dict[str, Any]) -> list[Dependency]:
        if value.get("type") == "afpacket":
            return [Dependency(label="host-interface", key=LINUX_IF + value["host_if"])]
        return []

    def derived(key: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
        name = key[len(VPP_IF) :]
        out: list[tuple[str, Any]] = [(f"{VPP_ADDR}{name}/{ip}", {}) for ip in value.get("ips", ())]
        if value.get("unnumbered_from"):
            out.append((VPP_UNNUM + name, {"borrow_from": value["unnumbered_from"]}))
        return out

    return Descriptor(
        name="vpp-interface",
        key_selector=_is_vpp_interface,
        key_label=lambda key: key[len(VPP_IF) :],
        create=sb.create,
        delete=sb.delete,
        update=sb.update,
        retrieve=sb.retrieve_for(_is_vpp_interface),
        dependencies=deps,
        derived_values=derived,
        with_metadata=True,
        **extra,
    )


def route_descriptor(sb: MockSB) -> Descriptor:
    return prefix_descriptor(
        sb,
        "vpp-route",
        ROUTE,
        deps=lambda key, value: [Dependency(label="interface", key=VPP_IF + value["iface"])],
    )


# -- AF-packet waiting for an obtained host interface ---------------------------------------


def test_afpacket_pending_until_host_interface_notified(sched: KVScheduler, sb: MockSB) -> None:
    # The host interface watcher only reports (no CRUD): values it pushes are OBTAINED.
    sched.register_descriptor(
        Descriptor(name="linux-interface-watcher", key_selector=lambda k: k.startswith(LINUX_IF))
    )
    sched.register_descriptor(vpp_interface_descriptor(sb))
    afp = VPP_IF + "afp1"
    sched.start_txn().set_value(afp, {"type": "afpacket", "host_if": "eth1"}).commit()
    status = sched.get_value_status(afp)
    assert status.state is ValueState.PENDING
    assert status.details == ("host-interface",)
    assert sb.pop_calls() == []

    sched.push_sb_notification(LINUX_IF + "eth1", {"name": "eth1"}, metadata={"index": 7})
    wait_until(lambda: state(sched, afp) is ValueState.CONFIGURED, message="afpacket created")
    host = sched.get_value_status(LINUX_IF + "eth1")
    assert host.state is ValueState.OBTAINED
    assert host.origin is ValueOrigin.FROM_SB
    assert sb.pop_calls() == [("create", afp)]
    record = sched.transaction_history()[-1]
    assert record.txn_type is TxnType.SB_NOTIFICATION
    assert [(op.op, op.key) for op in record.executed] == [
        (TxnOperation.CREATE, LINUX_IF + "eth1"),
        (TxnOperation.CREATE, afp),
    ]

    # Obtained values are never removed by resync, and NB values may depend on them.
    sched.resync({afp: {"type": "afpacket", "host_if": "eth1"}}, kind="upstream")
    assert state(sched, LINUX_IF + "eth1") is ValueState.OBTAINED
    assert state(sched, afp) is ValueState.CONFIGURED

    # The host interface disappears: the AF-packet is removed and waits again.
    sched.push_sb_notification(LINUX_IF + "eth1", None)
    wait_until(lambda: state(sched, afp) is ValueState.PENDING, message="afpacket re-pended")
    assert state(sched, LINUX_IF + "eth1") is ValueState.NONEXISTENT
    assert sb.pop_calls() == [("delete", afp)]


# -- Bridge domain with derived per-interface bindings --------------------------------------


def bd_descriptors(sb: MockSB) -> list[Descriptor]:
    def bd_derived(key: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
        name = key[len(BD) :]
        return [(f"{BD}{name}/interface/{i}", {"bvi": False}) for i in value.get("interfaces", ())]

    def is_bd(key: str) -> bool:
        return key.startswith(BD) and "/interface/" not in key

    def is_binding(key: str) -> bool:
        return key.startswith(BD) and "/interface/" in key

    bd = Descriptor(
        name="bridge-domain",
        key_selector=is_bd,
        create=sb.create,
        delete=sb.delete,
        update=sb.update,
        derived_values=bd_derived,
        with_metadata=True,
    )
    binding = Descriptor(
        name="bd-interface",
        key_selector=is_binding,
        create=sb.create,
        delete=sb.delete,
        dependencies=lambda key, value: [
            Dependency(label="interface", key=VPP_IF + key.rsplit("/", 1)[1])
        ],
    )
    return [bd, binding]


def test_bridge_domain_with_derived_bindings(sched: KVScheduler, sb: MockSB) -> None:
    for descriptor in bd_descriptors(sb):
        sched.register_descriptor(descriptor)
    sched.register_descriptor(vpp_interface_descriptor(sb))
    seq = sched.start_txn().set_value(BD + "bd1", {"interfaces": ["tap0", "tap1"]}).commit()
    assert state(sched, BD + "bd1") is ValueState.CONFIGURED
    assert state(sched, BD + "bd1/interface/tap0") is ValueState.PENDING
    assert sched.get_value_status(BD + "bd1/interface/tap0").details == ("interface",)
    assert ops_of(sched, seq) == [("CREATE", BD + "bd1")]

    seq = sched.start_txn().set_value(VPP_IF + "tap0", {}).commit()
    assert ops_of(sched, seq) == [
        ("CREATE", VPP_IF + "tap0"),
        ("CREATE", BD + "bd1/interface/tap0"),
    ]
    assert state(sched, BD + "bd1/interface/tap0") is ValueState.CONFIGURED
    assert state(sched, BD + "bd1/interface/tap1") is ValueState.PENDING
    (record,) = sched.transaction_history(seq=seq)
    binding_op = record.executed[1]
    assert binding_op.derived and binding_op.prev_state is ValueState.PENDING

    # Removing one interface unbinds it; the bridge domain and the other binding stay.
    seq = sched.start_txn().set_value(VPP_IF + "tap1", {}).commit()
    seq = sched.start_txn().set_value(VPP_IF + "tap0", None).commit()
    assert ops_of(sched, seq) == [
        ("DELETE", BD + "bd1/interface/tap0"),
        ("DELETE", VPP_IF + "tap0"),
    ]
    assert state(sched, BD + "bd1") is ValueState.CONFIGURED
    assert state(sched, BD + "bd1/interface/tap0") is ValueState.PENDING
    assert state(sched, BD + "bd1/interface/tap1") is ValueState.CONFIGURED

    # Deleting the bridge domain removes its derived bindings immediately (never PENDING).
    seq = sched.start_txn().set_value(BD + "bd1", None).commit()
    assert ops_of(sched, seq) == [("DELETE", BD + "bd1/interface/tap1"), ("DELETE", BD + "bd1")]
    assert state(sched, BD + "bd1/interface/tap0") is ValueState.NONEXISTENT
    assert state(sched, BD + "bd1/interface/tap1") is ValueState.NONEXISTENT


# -- Interface re-creation with a dependent route --------------------------------------------


def test_interface_recreation_repends_and_restores_route(sched: KVScheduler, sb: MockSB) -> None:
    def needs_recreate(key: str, old: Any, new: Any, metadata: Any) -> bool:
        return bool(old.get("rx_ring") != new.get("rx_ring"))

    sched.register_descriptor(vpp_interface_descriptor(sb, update_with_recreate=needs_recreate))
    sched.register_descriptor(route_descriptor(sb))
    tap = VPP_IF + "my-tap"
    route = ROUTE + "my-route"
    sched.start_txn().set_value(tap, {"rx_ring": 256}).set_value(
        route, {"iface": "my-tap"}
    ).commit()
    assert sb.pop_calls() == [("create", tap), ("create", route)]
    seen: list[tuple[str, ValueState]] = []
    sched.watch_value_status(lambda s: seen.append((s.key, s.state)))

    seq = sched.start_txn().set_value(tap, {"rx_ring": 1024}).commit()
    assert sb.pop_calls() == [
        ("delete", route),
        ("delete", tap),
        ("create", tap),
        ("create", route),
    ]
    (record,) = sched.transaction_history(seq=seq)
    assert [(op.op.value, op.key, op.new_state) for op in record.executed] == [
        ("DELETE", route, ValueState.PENDING),
        ("DELETE", tap, ValueState.REMOVED),
        ("CREATE", tap, ValueState.CONFIGURED),
        ("CREATE", route, ValueState.CONFIGURED),
    ]
    assert [op.recreate for op in record.executed[1:3]] == [True, True]
    assert record.planned == record.executed
    assert state(sched, route) is ValueState.CONFIGURED
    assert sb.values[tap] == {"rx_ring": 1024}
    assert dict(sched.get_metadata_map("vpp-interface")) == {"my-tap": sb.metadata[tap]}
    # The status of the route ended where it started: no spurious notification; the tap, which
    # the transaction named, is reported (processed by this transaction) although unchanged.
    assert seen == [(tap, ValueState.CONFIGURED)]


# -- Retry of a failed create ---------------------------------------------------------------


def test_retry_of_failed_create(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(vpp_interface_descriptor(sb))
    tap = VPP_IF + "my-tap"
    sb.fail_next(tap)
    states: list[ValueState] = []
    sched.watch_value_status(lambda s: states.append(s.state), key_selector=lambda k: k == tap)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(tap, {"mtu": 1500}).commit(
            retry=RetryPolicy(period=0.01, max_count=3, exp_backoff=False)
        )
    failed_seq = info.value.seq
    assert info.value.errors[tap][0] == "CREATE"
    # The failed value is refreshed (Retrieve) before the transaction ends.
    wait_until(lambda: state(sched, tap) is ValueState.CONFIGURED, message="retried")
    assert sb.pop_calls() == [("create", tap), ("retrieve", tap), ("create", tap)]
    assert sb.values[tap] == {"mtu": 1500}
    assert states[:2] == [ValueState.RETRYING, ValueState.CONFIGURED]
    retry = sched.transaction_history()[-1]
    assert retry.txn_type is TxnType.RETRY_FAILED_OPS
    assert retry.retry_for == failed_seq and retry.retry_attempt == 1
    assert [(op.op.value, op.key, op.retry) for op in retry.executed] == [("CREATE", tap, True)]


def test_retry_exhausted_becomes_failed(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(vpp_interface_descriptor(sb))
    tap = VPP_IF + "my-tap"
    for _ in range(3):
        sb.fail_next(tap)
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(tap, {}).commit(
            retry=RetryPolicy(period=0.001, max_count=2, exp_backoff=True)
        )
    wait_until(lambda: state(sched, tap) is ValueState.FAILED, message="retries exhausted")
    attempts = [
        r.retry_attempt
        for r in sched.transaction_history()
        if r.txn_type is TxnType.RETRY_FAILED_OPS
    ]
    assert attempts == [1, 2]
    assert [c for c in sb.pop_calls() if c[0] == "create"] == [("create", tap)] * 3


# -- Transaction revert -----------------------------------------------------------------------


def test_transaction_revert(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(vpp_interface_descriptor(sb))
    sched.register_descriptor(route_descriptor(sb))
    tap = VPP_IF + "my-tap"
    route = ROUTE + "my-route"
    sb.fail_next(route)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(tap, {}).set_value(route, {"iface": "my-tap"}).commit(
            revert=True
        )
    assert list(info.value.errors) == [route]
    assert sb.pop_calls() == [
        ("create", tap),
        ("create", route),
        ("retrieve", route),  # the failed value is refreshed first
        ("delete", tap),
    ]
    (record,) = sched.transaction_history(seq=info.value.seq)
    assert [(op.op.value, op.key, op.revert) for op in record.executed] == [
        ("CREATE", tap, False),
        ("CREATE", route, False),
        ("DELETE", route, True),
        ("DELETE", tap, True),
    ]
    assert record.executed[1].new_state is ValueState.FAILED
    # No visible effect is left.
    assert sb.values == {}
    assert state(sched, tap) is ValueState.NONEXISTENT
    assert state(sched, route) is ValueState.NONEXISTENT
    assert sched.dump(view="NB") == []


# -- Unnumbered interface via AnyOf on derived address keys ---------------------------------


def unnumbered_descriptor(sb: MockSB) -> Descriptor:
    def deps(key: str, value: dict[str, Any]) -> list[Dependency]:
        prefix = f"{VPP_ADDR}{value['borrow_from']}/"
        return [
            Dependency(
                label="borrowed-ip",
                any_of=lambda k: k.startswith(prefix),
                key_prefixes=(prefix,),
            )
        ]

    return Descriptor(
        name="unnumbered",
        key_selector=lambda k: k.startswith(VPP_UNNUM),
        create=sb.create,
        delete=sb.delete,
        dependencies=deps,
    )


def test_unnumbered_interface_via_anyof(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(vpp_interface_descriptor(sb))
    sched.register_descriptor(unnumbered_descriptor(sb))  # addresses have no descriptor
    unnum = VPP_UNNUM + "tap1"
    sched.start_txn().set_value(VPP_IF + "tap1", {"unnumbered_from": "tap0"}).commit()
    assert state(sched, VPP_IF + "tap1") is ValueState.CONFIGURED  # available in L2 mode
    assert state(sched, unnum) is ValueState.PENDING
    assert sched.get_value_status(unnum).details == ("borrowed-ip",)

    sched.start_txn().set_value(VPP_IF + "tap0", {}).commit()
    assert state(sched, unnum) is ValueState.PENDING  # tap0 has no IP yet

    seq = sched.start_txn().set_value(VPP_IF + "tap0", {"ips": ["10.0.0.1/24"]}).commit()
    assert ops_of(sched, seq) == [
        ("UPDATE", VPP_IF + "tap0"),
        ("CREATE", VPP_ADDR + "tap0/10.0.0.1/24"),
        ("CREATE", unnum),
    ]
    (record,) = sched.transaction_history(seq=seq)
    assert record.executed[1].property  # derived value without a descriptor
    assert state(sched, unnum) is ValueState.CONFIGURED

    # A second address does not disturb it; removing all addresses returns tap1 to L2 mode only.
    sched.start_txn().set_value(VPP_IF + "tap0", {"ips": ["10.0.0.1/24", "10.0.1.1/24"]}).commit()
    assert state(sched, unnum) is ValueState.CONFIGURED
    sb.pop_calls()
    seq = sched.start_txn().set_value(VPP_IF + "tap0", {"ips": []}).commit()
    assert ops_of(sched, seq) == [
        ("DELETE", VPP_ADDR + "tap0/10.0.1.1/24"),
        ("DELETE", unnum),
        ("DELETE", VPP_ADDR + "tap0/10.0.0.1/24"),
        ("UPDATE", VPP_IF + "tap0"),
    ]
    assert sb.pop_calls() == [("delete", unnum), ("update", VPP_IF + "tap0")]
    assert state(sched, unnum) is ValueState.PENDING
    assert state(sched, VPP_IF + "tap1") is ValueState.CONFIGURED


# -- Route waiting for its interface --------------------------------------------------------


def test_route_waits_for_interface(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(vpp_interface_descriptor(sb))
    sched.register_descriptor(route_descriptor(sb))
    route = ROUTE + "my-route"
    sched.start_txn().set_value(route, {"iface": "my-tap"}).commit()
    assert state(sched, route) is ValueState.PENDING
    assert sched.get_value_status(route).details == ("interface",)
    seq = sched.start_txn().set_value(VPP_IF + "my-tap", {}).commit()
    assert ops_of(sched, seq) == [("CREATE", VPP_IF + "my-tap"), ("CREATE", route)]
    assert state(sched, route) is ValueState.CONFIGURED
    assert sb.pop_calls() == [("create", VPP_IF + "my-tap"), ("create", route)]
