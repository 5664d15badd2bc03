"""What the punt models share (punt.api of VPP 24.06): their value, a socket path, and the calls
that register it.

`punt_socket_register` (header version 1; registering what is registered re-points it),
`punt_socket_deregister` (succeeds whether or not anything was registered), read back by
`punt_socket_dump`; exception reasons are VPP's by name (`punt_reason_dump`), their numbers
VPP's own, looked up before each registration: VPP never answers a registration of a reason
number it does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field

from scheduler import Descriptor, ValueOrigin
from southbound.validation import StrictModel
from southbound.vpp.errors import VppError
from southbound.vpp.models import model_descriptor

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

L4, EXCEPTION = 0, 2  # punt_type
HEADER_VERSION = 1  # PUNT_PACKETDESC_VERSION
AF = {"ipv4": 0, "ipv6": 1}
PROTOCOLS = {"udp": 17, "tcp": 6}
SUN_PATH_MAX = 107  # sun_path[108], NUL-terminated


def _socket_path(path: str) -> str:
    if not path.startswith("/") or len(path) > SUN_PATH_MAX or "\0" in path:
        raise ValueError(f"must be an absolute path of at most {SUN_PATH_MAX} characters "
                         "(a unix socket's sun_path)")
    return path


class VppPuntSocket(StrictModel):
    """Where VPP sends what it punts: a unix datagram socket of the receiving application (it
    creates and binds the socket; VPP sends to it)."""

    socket: Annotated[str, AfterValidator(_socket_path)] = Field(
        description="the client socket's absolute path (at most 107 characters)")


def l4_punt(af: str, protocol: str, port: int) -> dict[str, Any]:
    return {"type": L4, "punt": {"l4": {"af": AF[af], "protocol": PROTOCOLS[protocol],
                                        "port": port}}}


def exception_punt(reason: int) -> dict[str, Any]:
    return {"type": EXCEPTION, "punt": {"exception": {"id": reason}}}


class PuntApi:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    def register(self, punt: dict[str, Any], socket: str) -> None:
        self.conn.call("punt_socket_register", header_version=HEADER_VERSION, punt=punt,
                       pathname=socket)

    def deregister(self, punt: dict[str, Any]) -> None:
        self.conn.call("punt_socket_deregister", punt=punt)

    def registrations(self, punt_type: int) -> list[tuple[Any, str]]:
        """(the punt's union, socket path) of each registration of a type."""
        return [(d.punt.punt, str(d.pathname))
                for d in self.conn.dump("punt_socket_dump", type=punt_type)]

    def reasons(self) -> dict[str, int]:
        """VPP's exception punt reasons: name -> number."""
        return {str(d.reason.name): int(d.reason.id)
                for d in self.conn.dump("punt_reason_dump", reason={"name": ""})}

    def reason_id(self, name: str) -> int:
        reasons = self.reasons()
        if name not in reasons:
            raise VppError(f"VPP has no punt reason {name!r} (it has: "
                           f"{', '.join(sorted(reasons)) or 'none'})")
        return reasons[name]


# (api, key, for a create) -> the key's punt (None: nothing to remove, on a delete)
PuntOf = Callable[[PuntApi, str, bool], dict[str, Any] | None]
# (api) -> (key, socket) of what VPP has registered that a key of the model names
Registered = Callable[[PuntApi], list[tuple[str, str]]]


def punt_descriptor(conn: VppConnection, name: str, prefix: str,
                    check: Callable[[str, Any], dict[str, Any]], punt_of: PuntOf,
                    registered: Registered) -> Descriptor:
    """The descriptor of a punt model: register (a new socket re-points in place), deregister,
    read back; what VPP has and the desired state does not name is OBTAINED (no owner)."""
    api = PuntApi(conn)

    def create(key: str, value: Any) -> None:
        api.register(punt_of(api, key, True) or {}, check(key, value)["socket"])

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        create(key, new)

    def delete(key: str, value: Any, metadata: Any) -> None:
        punt = punt_of(api, key, False)
        if punt is not None:
            api.deregister(punt)

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        return [(key, {"socket": socket}, None, ValueOrigin.UNKNOWN)
                for key, socket in registered(api)]

    return model_descriptor(
        name, check, lambda key: key.startswith(prefix),
        create=create,
        update=update,
        delete=delete,
        retrieve=retrieve,
    )
