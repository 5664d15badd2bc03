"""The binary-API definitions the emulator speaks: loading, message ids, encoding and decoding.

The definitions come from two places:
- `memclnt.api.json`, bundled with the installed `vpp_papi` client (the socket handshake,
  `control_ping`, `get_api_json`); read from the client package at runtime, never copied;
- the `api/*.api.json` subset written for this project: exactly the messages the VPP southbound
  uses, with names, field layouts and CRCs as in VPP 24.06.

Encoding and decoding reuse vpp_papi's own serializer, so the bytes on the wire are exactly what
the client expects.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vpp_papi.vpp_papi import VPPApiJSONFiles

API_DIR = Path(__file__).with_name("api")

# Order matters: vpp_papi resolves the types of one file against the types already registered,
# so type-only files come before the files that use them (the same order VPP serves them in).
API_FILES = (
    "interface_types",
    "ethernet_types",
    "ip_types",
    "fib_types",
    "vpe",
    "interface",
    "ip",
    "l2",
    "tapv2",
    "af_packet",
    "ip_neighbor",
    "arp",
    "ip6_nd",
    "vxlan",
    "memif",
    "bond",
    "tunnel_types",
    "ipip",
    "ipsec_types",
    "ipsec",
    "sr_types",
    "sr",
    "span",
    "punt",
    # plugins
    "gre",
    "acl_types",
    "acl",
    "abf",
    "nat_types",
    "nat44_ed",
    "lcp",
    "wireguard",
    "l3xc",
)

# vpp_papi hard-codes these two ids for the handshake (vpp_transport_socket.py).
SOCKCLNT_CREATE_ID = 15
SOCKCLNT_CREATE_REPLY_ID = 16
FIRST_DYNAMIC_ID = 100

HEADER = struct.Struct(">QII")
MSG_ID = struct.Struct(">H")


class DecodeError(ValueError):
    """A message body that cannot be decoded with its definition."""


@dataclass(frozen=True)
class MessageInfo:
    name: str
    crc: str  # "0x" + 8 hex digits
    msg_id: int
    fields: tuple[str, ...]

    @property
    def name_crc(self) -> str:
        return f"{self.name}_{self.crc[2:]}"


def _memclnt_json() -> str:
    with importlib.resources.files("vpp_papi.data").joinpath("memclnt.api.json").open() as f:
        return f.read()


def load_api_documents() -> list[dict[str, Any]]:
    """All API files served to clients: memclnt first, then the project's subset."""
    docs = [json.loads(_memclnt_json())]
    for name in API_FILES:
        docs.append(json.loads((API_DIR / f"{name}.api.json").read_text()))
    return docs


def load_api_dir(api_dir: Path) -> list[dict[str, Any]]:
    """Every `*.api.json` of a directory laid out as VPP installs it (/usr/share/vpp/api), in an
    order vpp_papi can resolve: a file whose types need another file's come after it.

    This is how the emulator serves a whole VPP release's message set (`kvmesh vpp-emulator
    --api-dir`): messages the emulator implements behave as VPP does, the others answer as VPP
    does with nothing of theirs configured (server.py, "unimplemented").
    """
    paths = sorted(api_dir.glob("*.api.json"))
    if not paths:
        raise ValueError(f"{api_dir}: no *.api.json files")
    pending = {path.name: json.loads(path.read_text()) for path in paths}
    ordered: list[dict[str, Any]] = []
    if "memclnt.api.json" not in pending:
        ordered.append(json.loads(_memclnt_json()))
    while pending:
        progressed = False
        for name in list(pending):
            try:
                # vpp_papi registers types globally: a file that resolves now stays resolved.
                VPPApiJSONFiles.process_json_str(json.dumps(pending[name]))
            except (ValueError, KeyError):
                continue
            ordered.append(pending.pop(name))
            progressed = True
        if not progressed:
            raise ValueError(f"{api_dir}: unresolved types in {', '.join(sorted(pending))}")
    return ordered


class ApiDefinitions:
    """Message table, serializers and the `get_api_json` document for one emulator instance."""

    def __init__(self, documents: Iterable[Mapping[str, Any]] | None = None) -> None:
        docs = list(documents) if documents is not None else load_api_documents()
        # vpp_papi mutates the documents it processes (it prefixes type names), so it gets copies
        # and `api_json` serves the pristine text, exactly like VPP serves its files.
        self.api_json = json.dumps(docs, separators=(",", ":"))
        self.services: dict[str, dict[str, Any]] = {}
        self._codecs: dict[str, Any] = {}
        for doc in docs:
            messages, services = VPPApiJSONFiles.process_json_str(json.dumps(copy.deepcopy(doc)))
            self._codecs.update(messages)
            self.services.update(services)
        self.by_name: dict[str, MessageInfo] = {}
        self.by_id: dict[int, MessageInfo] = {}
        next_id = FIRST_DYNAMIC_ID
        for name in sorted(self._codecs):
            codec = self._codecs[name]
            if name == "sockclnt_create":
                msg_id = SOCKCLNT_CREATE_ID
            elif name == "sockclnt_create_reply":
                msg_id = SOCKCLNT_CREATE_REPLY_ID
            else:
                msg_id = next_id
                next_id += 1
            info = MessageInfo(name=name, crc=codec.crc, msg_id=msg_id, fields=tuple(codec.fields))
            self.by_name[name] = info
            self.by_id[msg_id] = info

    def message_table(self) -> list[dict[str, Any]]:
        """The `sockclnt_create_reply` table: every message as `<name>_<crc>` with its id."""
        return [
            {"index": info.msg_id, "name": info.name_crc}
            for info in sorted(self.by_id.values(), key=lambda i: i.msg_id)
        ]

    def has_field(self, name: str, field: str) -> bool:
        return field in self.by_name[name].fields

    def field_type(self, name: str, field: str) -> str:
        """The declared type of a message's field (e.g. "i32", "u32")."""
        codec = self._codecs[name]
        return str(codec.fieldtypes[codec.fields.index(field)])

    def decode(self, body: bytes) -> tuple[MessageInfo, Any]:
        """Decode one message body (starting at `_vl_msg_id`) into a namedtuple.

        Type conversion is switched off: addresses stay raw bytes and unions decode into all
        their arms, which is what the handlers want (they choose the arm by address family).
        """
        if len(body) < MSG_ID.size:
            raise DecodeError(f"message of {len(body)} bytes has no message id")
        (msg_id,) = MSG_ID.unpack_from(body)
        info = self.by_id.get(msg_id)
        if info is None:
            raise DecodeError(f"unknown message id {msg_id}")
        try:
            decoded, _size = self._codecs[info.name].unpack(body, ntc=True)
        except Exception as exc:  # the serializer raises struct.error, IndexError, ...
            raise DecodeError(f"{info.name}: cannot decode {len(body)} bytes: {exc}") from exc
        return info, decoded

    def encode(self, name: str, fields: Mapping[str, Any]) -> bytes:
        """Encode a message (reply, details or event) from a dict of its fields."""
        info = self.by_name[name]
        data = dict(fields)
        data["_vl_msg_id"] = info.msg_id
        packed: bytes = self._codecs[name].pack(data)
        return packed


def frame(body: bytes) -> bytes:
    """Wrap a message body in the socket transport's 16-byte header."""
    return HEADER.pack(0, len(body), 0) + body
