"""The emulator through the socket, driven by the unmodified vpp_papi client."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from vpp_papi import VPPApiClient

from kvmesh.vppemu import ControlError, EmulatorControl
from tests.southbound.vpp.conftest import connect
from tests.util import wait_until

ANY = 0xFFFFFFFF
LABELS: list[dict] = [{}] * 16


def path_to(sw_if_index, next_hop="0.0.0.0", weight=1, proto=0):
    family = "ip6" if proto == 1 else "ip4"
    return {
        "sw_if_index": sw_if_index,
        "weight": weight,
        "proto": proto,
        "nh": {"address": {family: next_hop}},
        "label_stack": LABELS,
    }


def route(prefix, paths, table_id=0):
    return {"table_id": table_id, "prefix": prefix, "n_paths": len(paths), "paths": paths}


def test_handshake_serves_the_api_subset_with_real_crcs(papi):
    table = papi.transport.message_table
    for name_crc in (
        "sockclnt_create_455fb9c4",
        "control_ping_51077d14",
        "create_loopback_42bb5d22",
        "sw_interface_details_6c221fc7",
        "sw_interface_add_del_address_5463d73b",
        "ip_route_add_del_b8ecfe0d",
        "ip_route_details_bda8f315",
        "bridge_domain_add_del_v2_600b7170",
        "sw_interface_set_l2_bridge_d0678b13",
        "tap_create_v3_3f3fd1df",
        "af_packet_create_v3_b3a809d4",
        "sw_interface_event_2d3d95a7",
    ):
        assert name_crc in table
    assert table["sockclnt_create_455fb9c4"] == 15
    version = papi.api.show_version()
    assert version.retval == 0 and version.program == "vpe"
    assert papi.api.control_ping().vpe_pid > 0


def test_loopback_lifecycle(papi):
    reply = papi.api.create_loopback(mac_address="02:00:00:00:00:aa")
    assert reply.retval == 0
    idx = reply.sw_if_index
    assert papi.api.sw_interface_tag_add_del(is_add=True, sw_if_index=idx, tag="lo-a").retval == 0
    details = {d.sw_if_index: d for d in papi.api.sw_interface_dump()}
    assert details[0].interface_name == "local0"
    assert details[idx].interface_name == "loop0"
    assert details[idx].tag == "lo-a"
    assert str(details[idx].l2_address) == "02:00:00:00:00:aa"
    only = papi.api.sw_interface_dump(sw_if_index=idx)
    assert [d.sw_if_index for d in only] == [idx]
    assert papi.api.delete_loopback(sw_if_index=idx).retval == 0
    assert papi.api.delete_loopback(sw_if_index=idx).retval == -2
    assert papi.api.sw_interface_dump(sw_if_index=idx) == []


def test_admin_state_mtu_mac_and_events(papi):
    events = []
    papi.register_event_callback(lambda name, msg: events.append((name, msg)))
    assert papi.api.want_interface_events(enable_disable=1, pid=4242).retval == 0
    idx = papi.api.create_loopback().sw_if_index
    assert papi.api.sw_interface_set_flags(sw_if_index=idx, flags=1).retval == 0
    assert papi.api.hw_interface_set_mtu(sw_if_index=idx, mtu=1400).retval == 0
    assert papi.api.hw_interface_set_mtu(sw_if_index=idx, mtu=20).retval == -7
    mac = "02:11:22:33:44:55"
    assert papi.api.sw_interface_set_mac_address(sw_if_index=idx, mac_address=mac).retval == 0
    (d,) = papi.api.sw_interface_dump(sw_if_index=idx)
    assert d.flags == 3 and d.link_mtu == 1400 and str(d.l2_address) == mac
    assert papi.api.sw_interface_set_flags(sw_if_index=99, flags=1).retval == -2
    papi.api.delete_loopback(sw_if_index=idx)
    wait_until(lambda: len(events) >= 2, timeout=20, message="interface events")
    got = list(events)
    assert [n for n, _ in got[:2]] == ["sw_interface_event", "sw_interface_event"]
    up, deleted = got[0][1], got[1][1]
    assert (up.sw_if_index, int(up.flags), up.deleted, up.pid) == (idx, 3, False, 4242)
    assert (deleted.sw_if_index, deleted.deleted) == (idx, True)


def test_addresses_and_their_errors(papi):
    a = papi.api.create_loopback().sw_if_index
    b = papi.api.create_loopback().sw_if_index
    add = papi.api.sw_interface_add_del_address
    assert add(sw_if_index=a, is_add=True, prefix="10.0.0.1/24").retval == 0
    assert add(sw_if_index=a, is_add=True, prefix="fd00::1/64").retval == 0
    assert add(sw_if_index=a, is_add=True, prefix="10.0.0.1/24").retval == -105
    assert add(sw_if_index=b, is_add=True, prefix="10.0.0.9/24").retval == -105
    assert add(sw_if_index=77, is_add=True, prefix="10.5.0.1/24").retval == -2
    assert add(sw_if_index=a, is_add=False, prefix="10.9.0.1/24").retval == -60
    v4 = papi.api.ip_address_dump(sw_if_index=a, is_ipv6=False)
    v6 = papi.api.ip_address_dump(sw_if_index=a, is_ipv6=True)
    assert [str(d.prefix) for d in v4] == ["10.0.0.1/24"]
    assert [str(d.prefix) for d in v6] == ["fd00::1/64"]
    assert papi.api.ip_address_dump(sw_if_index=999, is_ipv6=False) == []
    assert add(sw_if_index=a, is_add=False, del_all=True).retval == 0
    assert papi.api.ip_address_dump(sw_if_index=a, is_ipv6=True) == []


def test_vrf_tables(papi):
    idx = papi.api.create_loopback().sw_if_index
    assert papi.api.sw_interface_set_table(sw_if_index=idx, vrf_id=5).retval == -3
    table = {"table_id": 5, "is_ip6": False}
    assert papi.api.ip_table_add_del(is_add=True, table=table).retval == 0
    assert papi.api.ip_table_add_del(is_add=True, table=table).retval == 0  # idempotent
    assert papi.api.sw_interface_set_table(sw_if_index=idx, vrf_id=5).retval == 0
    assert papi.api.sw_interface_get_table(sw_if_index=idx).vrf_id == 5
    assert papi.api.sw_interface_get_table(sw_if_index=idx, is_ipv6=True).vrf_id == 0
    tables = {(t.table.table_id, t.table.is_ip6) for t in papi.api.ip_table_dump()}
    assert tables == {(0, False), (0, True), (5, False)}
    papi.api.sw_interface_add_del_address(sw_if_index=idx, is_add=True, prefix="10.0.0.1/24")
    assert papi.api.sw_interface_set_table(sw_if_index=idx, vrf_id=0).retval == -114


def test_unnumbered(papi):
    with_ip = papi.api.create_loopback().sw_if_index
    borrower = papi.api.create_loopback().sw_if_index
    set_unnumbered = papi.api.sw_interface_set_unnumbered
    assert (
        set_unnumbered(sw_if_index=with_ip, unnumbered_sw_if_index=borrower, is_add=True).retval
        == 0
    )
    dump = papi.api.ip_unnumbered_dump()
    assert [(d.sw_if_index, d.ip_sw_if_index) for d in dump] == [(borrower, with_ip)]
    assert set_unnumbered(sw_if_index=with_ip, unnumbered_sw_if_index=50, is_add=True).retval == -10
    set_unnumbered(sw_if_index=with_ip, unnumbered_sw_if_index=borrower, is_add=False)
    assert papi.api.ip_unnumbered_dump() == []


def test_bridge_domains(papi):
    a = papi.api.create_loopback().sw_if_index
    b = papi.api.create_loopback().sw_if_index
    add_del = papi.api.bridge_domain_add_del_v2
    reply = add_del(bd_id=10, flood=True, forward=True, learn=True, is_add=True)
    assert (reply.retval, reply.bd_id) == (0, 10)
    assert add_del(bd_id=10, is_add=True).retval == -119
    assert add_del(bd_id=0, is_add=True).retval == -121
    allocated = add_del(bd_id=ANY, is_add=True)
    assert allocated.retval == 0 and allocated.bd_id not in (0, 10)
    bridge = papi.api.sw_interface_set_l2_bridge
    assert bridge(rx_sw_if_index=a, bd_id=10, port_type=1, enable=True).retval == 0
    assert bridge(rx_sw_if_index=b, bd_id=10, port_type=0, enable=True).retval == 0
    flags = papi.api.bridge_flags(bd_id=10, is_set=True, flags=16)
    assert flags.retval == 0
    assert papi.api.bridge_flags(bd_id=99, is_set=True, flags=16).retval == -6
    (bd,) = papi.api.bridge_domain_dump(bd_id=10)
    assert (bd.flood, bd.forward, bd.learn, bd.uu_flood, bd.arp_term) == (
        True,
        True,
        True,
        False,
        True,
    )
    assert bd.bvi_sw_if_index == a
    assert sorted(m.sw_if_index for m in bd.sw_if_details) == [a, b]
    assert [d.bd_id for d in papi.api.bridge_domain_dump(sw_if_index=b)] == [10]
    assert add_del(bd_id=10, is_add=False).retval == -120
    bridge(rx_sw_if_index=a, bd_id=10, enable=False)
    bridge(rx_sw_if_index=b, bd_id=10, enable=False)
    assert add_del(bd_id=10, is_add=False).retval == 0
    assert add_del(bd_id=10, is_add=False).retval == -6


def test_routes_ipv4_ipv6_multipath(papi):
    idx = papi.api.create_loopback().sw_if_index
    papi.api.sw_interface_add_del_address(sw_if_index=idx, is_add=True, prefix="10.0.0.1/24")
    add = papi.api.ip_route_add_del
    r1 = route("10.1.0.0/16", [path_to(idx, "10.0.0.2")])
    r2 = route("10.1.0.0/16", [path_to(idx, "10.0.0.3", weight=3)])
    assert add(is_add=True, is_multipath=True, route=r1).retval == 0
    assert add(is_add=True, is_multipath=True, route=r2).retval == 0
    r6 = route("fd01::/64", [path_to(idx, "fd00::2", proto=1)])
    assert add(is_add=True, is_multipath=True, route=r6).retval == 0
    v4 = {str(d.route.prefix): d.route for d in papi.api.ip_route_dump(table={"table_id": 0})}
    # VPP's own entries come with the table and with every address
    assert {"0.0.0.0/0", "224.0.0.0/4", "10.0.0.0/24", "10.0.0.1/32"} <= set(v4)
    hops = sorted((str(p.nh.address.ip4), p.weight) for p in v4["10.1.0.0/16"].paths)
    assert hops == [("10.0.0.2", 1), ("10.0.0.3", 3)]
    v6 = papi.api.ip_route_dump(table={"table_id": 0, "is_ip6": True})
    v6_routes = {str(d.route.prefix): d.route for d in v6}
    assert str(v6_routes["fd01::/64"].paths[0].nh.address.ip6) == "fd00::2"
    assert add(is_add=False, is_multipath=True, route=r1).retval == 0
    v4 = {str(d.route.prefix): d.route for d in papi.api.ip_route_dump(table={"table_id": 0})}
    assert [str(p.nh.address.ip4) for p in v4["10.1.0.0/16"].paths] == ["10.0.0.3"]
    assert add(is_add=True, route=route("10.2.0.0/16", [path_to(idx)], table_id=9)).retval == -3
    assert add(is_add=True, route=route("10.2.0.1/16", [path_to(idx)])).retval == -88
    assert add(is_add=True, route=route("10.2.0.0/16", [])).retval == -52
    # fib_api_path_decode: a path through an interface VPP lacks is NO_MATCHING_INTERFACE (not
    # INVALID_SW_IF_INDEX); one without an interface needs its next hop's table (NO_SUCH_FIB).
    assert add(is_add=True, route=route("10.2.0.0/16", [path_to(55)])).retval == -54
    unresolved = {**path_to(0xFFFFFFFF, "10.0.0.9"), "table_id": 9}
    assert add(is_add=True, route=route("10.2.0.0/16", [unresolved])).retval == -3


def test_tap_v2_interfaces(papi):
    create = papi.api.tap_create_v3
    reply = create(
        id=ANY,
        use_random_mac=True,
        rx_ring_sz=1024,
        tx_ring_sz=512,
        host_if_name_set=True,
        host_if_name="kvtap0",
        tag="my-tap",
    )
    assert reply.retval == 0
    (tap,) = papi.api.sw_interface_tap_v2_dump()
    assert (tap.sw_if_index, tap.rx_ring_sz, tap.tx_ring_sz, tap.host_if_name) == (
        reply.sw_if_index,
        1024,
        512,
        "kvtap0",
    )
    (d,) = papi.api.sw_interface_dump(sw_if_index=reply.sw_if_index)
    assert (d.interface_name, d.interface_dev_type, d.tag) == ("tap0", "virtio", "my-tap")
    assert create(id=0, rx_ring_sz=256, tx_ring_sz=256).retval == -71
    assert create(id=ANY, rx_ring_sz=300, tx_ring_sz=256).retval == -7
    assert papi.api.tap_delete_v2(sw_if_index=reply.sw_if_index).retval == 0
    assert papi.api.tap_delete_v2(sw_if_index=reply.sw_if_index).retval == -2


def test_af_packet_needs_the_host_interface(papi):
    create = papi.api.af_packet_create_v3
    # `lo` exists in every network namespace
    reply = create(host_if_name="lo", use_random_hw_addr=True, mode=1)
    assert reply.retval == 0
    assert [(d.sw_if_index, d.host_if_name) for d in papi.api.af_packet_dump()] == [
        (reply.sw_if_index, "lo")
    ]
    assert create(host_if_name="lo", use_random_hw_addr=True, mode=1).retval == -79
    assert create(host_if_name="no-such-if", use_random_hw_addr=True, mode=1).retval == -71
    assert papi.api.af_packet_delete(host_if_name="lo").retval == 0
    assert papi.api.af_packet_delete(host_if_name="lo").retval == -11


def test_fault_fail_next_calls_with_a_retval(emulator, papi):
    emulator.control.fail("create_loopback", retval=-12, count=2)
    assert papi.api.create_loopback().retval == -12
    assert papi.api.create_loopback().retval == -12
    assert papi.api.create_loopback().retval == 0
    # a failed call changes nothing
    assert len(papi.api.sw_interface_dump()) == 2
    assert emulator.control.counters()["fault.fail"] == 2


def test_fault_delay_and_client_timeout(emulator):
    slow = connect(emulator.socket_path)
    slow.transport.read_timeout = 1.0  # after the handshake, which may be slow on a busy host
    try:
        emulator.control.delay("show_version", seconds=8)
        with pytest.raises(VPPApiClient.VPPIOError):
            slow.api.show_version()
    finally:
        slow.disconnect()
    patient = connect(emulator.socket_path)
    try:
        emulator.control.delay("show_version", seconds=0.2)
        assert patient.api.show_version().retval == 0
        assert emulator.control.counters()["fault.delay"] == 2
    finally:
        patient.disconnect()


def test_fault_drop_connection_then_reconnect(emulator, papi):
    emulator.control.drop_on("create_loopback")
    with pytest.raises(VPPApiClient.VPPIOError):
        papi.api.create_loopback()
    again = connect(emulator.socket_path)
    try:
        # the dropped call was not executed
        assert [d.interface_name for d in again.api.sw_interface_dump()] == ["local0"]
    finally:
        again.disconnect()


def test_restart_loses_state_and_connections(emulator, papi):
    papi.api.create_loopback()
    papi.api.bridge_domain_add_del_v2(bd_id=3, is_add=True)
    thread = papi.transport.message_thread
    emulator.control.restart(downtime=0.2)
    wait_until(lambda: not thread.is_alive(), timeout=20, message="client notices the restart")
    fresh = connect(emulator.socket_path)
    try:
        assert [d.interface_name for d in fresh.api.sw_interface_dump()] == ["local0"]
        assert fresh.api.bridge_domain_dump() == []
    finally:
        fresh.disconnect()
    assert emulator.control.counters()["restarts"] >= 1


def raw_connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def read_message(sock):
    header = b""
    while len(header) < 16:
        chunk = sock.recv(16 - len(header))
        if not chunk:
            return None
        header += chunk
    _, length, _ = struct.unpack(">QII", header)
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return body


def test_bad_input_is_counted_and_the_server_keeps_running(emulator, papi):
    table = papi.transport.message_table
    with raw_connect(emulator.socket_path) as sock:
        # unknown message id: ignored
        sock.sendall(struct.pack(">QII", 0, 12, 0) + struct.pack(">HII", 9999, 0, 1) + b"xx")
        # a known request cut short: answered with INVALID_VALUE (-7)
        show_version = table["show_version_51077d14"]
        sock.sendall(struct.pack(">QII", 0, 10, 0) + struct.pack(">HII", show_version, 0, 77))
        ping = table["control_ping_51077d14"]
        # a real request still works on the same connection afterwards
        sock.sendall(struct.pack(">QII", 0, 10, 0) + struct.pack(">HII", ping, 0, 78))
        body = read_message(sock)
        _msg_id, context, retval = struct.unpack_from(">HIi", body)
        assert (context, retval) == (77, 0)  # show_version has no fields: not malformed
        body = read_message(sock)
        assert struct.unpack_from(">HIi", body)[1:] == (78, 0)
    with raw_connect(emulator.socket_path) as sock:
        truncated = table["create_loopback_42bb5d22"]
        body = struct.pack(">HII", truncated, 0, 5) + b"\x02"
        sock.sendall(struct.pack(">QII", 0, len(body), 0) + body)
        body = read_message(sock)
        assert struct.unpack_from(">HIi", body)[1:] == (5, -7)
    with raw_connect(emulator.socket_path) as sock:
        sock.sendall(struct.pack(">QII", 0, 1 << 30, 0))
        assert read_message(sock) is None  # oversized: the connection is closed
    counters = emulator.control.counters()
    assert counters["malformed_messages"] >= 2
    assert counters["oversized_messages"] == 1
    assert papi.api.show_version().retval == 0


def test_control_channel_rejects_bad_requests(emulator):
    control = emulator.control
    with pytest.raises(ControlError, match="field 'op'"):
        control.request(op="explode")
    with pytest.raises(ControlError, match="field 'retval'"):
        control.request(op="fail", message="create_loopback", retval=3)
    with pytest.raises(ControlError, match="field 'seconds'"):
        control.request(op="delay", message="*", seconds=-1)
    with pytest.raises(ControlError, match="field 'downtime'"):
        control.request(op="restart", downtime="soon")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(control.control_path)
        sock.sendall(b"{not json\n")
        reply = json.loads(sock.makefile().readline())
    assert reply["ok"] is False
    assert control.counters()["control_errors"] == 5
    assert isinstance(EmulatorControl(control.control_path).ping(), int)


def test_cli_help_names_the_command():
    out = subprocess.run(
        [sys.executable, "-m", "kvmesh", "vpp-emulator", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "--socket" in out and "--no-host-check" in out


def test_process_stops_on_sigterm_and_refuses_a_socket_in_use(emulator_process):
    import signal

    from kvmesh.vppemu import EmulatorProcess

    workdir = Path(emulator_process.socket_path).parent
    second = EmulatorProcess(str(workdir / "sub" / "api2.sock"), host_check=False)
    second.start()  # creates the missing directory
    proc = second.process
    assert proc is not None
    busy = subprocess.run(
        [sys.executable, "-m", "kvmesh", "vpp-emulator", "--socket", second.socket_path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert busy.returncode != 0 and "in use" in busy.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not Path(second.socket_path).exists()
    assert not Path(second.control_path).exists()
    second.process = None
