"""A client that knows only VPP 24.06's API files walks every message the emulator serves.

The emulator runs with `--api-dir` on VPP 24.06's own generated definitions (what a real VPP
installs under /usr/share/vpp/api), and a vpp_papi client built from the same files:
- the message table it advertises carries VPP's CRC for every message (a client compares them);
- every dump answers (details decoded with VPP's definitions; an empty dataplane has none of
  most things), every cursor get ends with its reply, every other request gets its reply
  message with a retval: implemented as VPP behaves, or as VPP with nothing configured.
A third-party tool that reads VPP's whole state first must never meet "no such message".
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vpp_papi import VPPApiClient

from kvmesh.vppemu import EmulatorProcess
from tests.parallel import scratch_dir
from tests.southbound.vpp.reference import require_reference_dir

pytestmark = pytest.mark.process

# Requests whose answer is not a reply to the caller (a disconnect, or events on their own).
NOT_WALKED = {"sockclnt_delete", "memclnt_delete", "memclnt_create", "memclnt_create_v2",
              "memclnt_keepalive", "memclnt_read_timeout", "memclnt_rx_thread_suspend",
              "rpc_call", "trace_plugin_msg_ids", "get_first_msg_id", "api_versions",
              "sockclnt_create", "control_ping", "memclnt_keepalive_reply"}


def reference_messages(apidir: Path) -> dict[str, str]:
    """name -> crc of every message in the reference files."""
    crcs = {}
    for path in apidir.glob("*.api.json"):
        for message in json.loads(path.read_text()).get("messages", []):
            crcs[message[0]] = message[-1]["crc"]
    return crcs


class Defaults:
    """Zero arguments for a message, built from VPP's definitions: vpp_papi fills in missing
    scalars itself but cannot pack a fixed-size array (`mtu[4]`, `low_ports[32]`) or a struct
    holding one (`srv6_sid_list`) without them."""

    def __init__(self, apidir: Path) -> None:
        self.types: dict[str, list[Any]] = {}
        self.aliases: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[Any]] = {}
        for path in apidir.glob("*.api.json"):
            doc = json.loads(path.read_text())
            for section in ("types", "unions"):
                for item in doc.get(section, []):
                    self.types[item[0]] = item[1:] if section == "types" else []
            self.aliases.update(doc.get("aliases", {}))
            for message in doc.get("messages", []):
                self.messages[message[0]] = message[1:]

    def value(self, type_name: str, length: int | None) -> Any:
        """A value vpp_papi needs given, or None where its own default works (scalars, enums,
        strings, unions, aliases such as mac_address)."""
        name = type_name.removeprefix("vl_api_").removesuffix("_t")
        if name == "u8":
            return bytes(length) if length else None  # vpp_papi packs u8[N] from bytes
        if name in SCALAR_BYTES:
            return [0] * length if length else None
        if name in self.aliases and length:
            alias = self.aliases[name]
            return [self.value(alias["type"], alias.get("length")) or 0] * length
        if self.types.get(name):
            inner = self.fields(self.types[name])
            if not inner:
                return None
            return [inner] * length if length else inner
        return None

    def fields(self, definition: list[Any]) -> dict[str, Any]:
        result = {}
        for field in definition:
            if not isinstance(field, list) or field[1] in ("_vl_msg_id", "client_index",
                                                            "context"):
                continue
            length = field[2] if len(field) > 2 and isinstance(field[2], int) else None
            if field[0] == "string":
                continue
            value = self.value(field[0], length)
            if value is not None:
                result[field[1]] = value
        return result

    def request(self, name: str) -> dict[str, Any]:
        return self.fields(self.messages[name])


def reference_services(apidir: Path) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = {}
    for path in apidir.glob("*.api.json"):
        services.update(json.loads(path.read_text()).get("services", {}))
    return services


SCALAR_BYTES = {"u8": 1, "i8": 1, "bool": 1, "u16": 2, "i16": 2, "u32": 4, "i32": 4, "f64": 8,
                "u64": 8, "i64": 8}


def reply_size(defaults: Defaults, name: str) -> int:
    """Bytes of a reply made only of scalars (a larger bound for anything else)."""
    size = 0
    for field in defaults.messages[name]:
        if isinstance(field, list):
            size += SCALAR_BYTES.get(field[0], 10)
    return size


@pytest.fixture(scope="module")
def full_emulator() -> Iterator[tuple[EmulatorProcess, Path]]:
    apidir = require_reference_dir()
    workdir = scratch_dir("kvm-vppw-")
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"), api_dir=str(apidir))
    try:
        yield emulator.start(), apidir
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def client(full_emulator) -> Iterator[VPPApiClient]:
    emulator, apidir = full_emulator
    client = VPPApiClient(apidir=str(apidir), server_address=emulator.socket_path,
                          read_timeout=10)
    client.connect("kvmesh-walk")
    try:
        yield client
    finally:
        client.disconnect()


def test_every_message_is_advertised_with_vpp_s_crc(full_emulator, client) -> None:
    _emulator, apidir = full_emulator
    crcs = reference_messages(apidir)
    table = client.transport.message_table
    missing = [name for name, crc in crcs.items() if f"{name}_{crc[2:]}" not in table]
    assert not missing, f"not served with VPP 24.06's CRC: {sorted(missing)[:20]}"


def test_every_request_is_answered(full_emulator, client) -> None:
    emulator, apidir = full_emulator
    services = reference_services(apidir)
    defaults = Defaults(apidir)
    unanswered = []
    walked = 0
    for name, service in sorted(services.items()):
        if name in NOT_WALKED or service.get("reply") == "null":
            continue
        if reply_size(defaults, service["reply"]) < 10:
            # vpp_papi takes a message shorter than 10 bytes for an event without a context
            # (VPPApiClient.has_context): it cannot receive this reply from a real VPP either.
            continue
        function = getattr(client.api, name, None)
        assert function is not None, name
        try:
            result = function(**defaults.request(name))
        except Exception as exc:  # a timeout, a decode error: the message was not answered
            unanswered.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        walked += 1
        if service.get("stream") and not service.get("stream_msg"):
            assert isinstance(result, list), name
            for details in result:
                assert type(details).__name__ == service["reply"], (name, details)
        elif service.get("stream_msg"):
            reply, details = result
            assert reply.retval == 0, (name, reply)
            assert details == [], (name, details)
        else:
            assert type(result).__name__ == service["reply"], (name, result)
    assert not unanswered, "\n".join(unanswered)
    assert walked > 300, walked
    counters = emulator.control.counters()
    assert counters.get("unimplemented", 0) > 0  # the generic answers were used, and counted


def test_empty_dumps_of_unconfigured_objects(client) -> None:
    """What the third-party tool called first: bond and member dumps answer empty."""
    assert client.api.sw_bond_interface_dump(sw_if_index=0xFFFFFFFF) == []
    assert client.api.sw_member_interface_dump(sw_if_index=0xFFFFFFFF) == []
    reply, details = client.api.lcp_itf_pair_get(cursor=0)
    assert (reply.retval, details) == (0, [])


def test_unimplemented_change_is_refused_not_pretended(client) -> None:
    loop = client.api.create_loopback().sw_if_index
    reply = client.api.sw_interface_set_ip_directed_broadcast(sw_if_index=loop, enable=True)
    assert reply.retval == -9  # VNET_API_ERROR_UNIMPLEMENTED: nothing was stored
    reply = client.api.sw_interface_set_ip_directed_broadcast(sw_if_index=999, enable=True)
    assert reply.retval == -2  # VALIDATE_SW_IF_INDEX comes first in VPP
