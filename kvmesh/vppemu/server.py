"""The emulator process: VPP's socket transport on one unix socket, JSON control on another.

API socket (what `vpp_papi.VPPApiClient(use_socket=True)` talks to):
- framing: 16-byte header `>QII` (q, data_len, gc_mark) then `data_len` bytes of message; the
  first and last header words are ignored on input and written as 0;
- handshake: `sockclnt_create` (id 15) answered by `sockclnt_create_reply` (id 16) carrying the
  client index and the message table (`<name>_<crc>` -> id);
- requests are handled one at a time per connection, in order; dumps are answered with their
  details followed by the `control_ping_reply` for the ping the client sends after the dump;
- `want_interface_events` registers the connection for `sw_interface_event`.

Control socket (newline-delimited JSON, one reply line per request; see docs/vpp.md):
`ping`, `fail`, `delay`, `drop` (with `message`: fault rules), `clear_faults`, `disconnect`,
`restart`, `state`, `counters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvmesh.vppemu import (  # noqa: F401  (register their handlers)
    abf_handlers,
    acl_handlers,
    bond_handlers,
    handlers_l2l3,
    ipsec_handlers,
    l3_handlers,
    lcp_handlers,
    nat44_handlers,
    punt_handlers,
    span_handlers,
    srv6_handlers,
    tunnel_handlers,
    wireguard_handlers,
)
from kvmesh.vppemu import errors as E
from kvmesh.vppemu.apidef import (
    HEADER,
    ApiDefinitions,
    DecodeError,
    MessageInfo,
    frame,
    load_api_dir,
)
from kvmesh.vppemu.errors import ApiError, Unanswered
from kvmesh.vppemu.faults import FaultPlan, rule_from_request
from kvmesh.vppemu.handlers import HANDLERS, HandlerContext
from kvmesh.vppemu.state import Dataplane, InterfaceEvent

log = logging.getLogger("kvmesh.vppemu")

MAX_MESSAGE_BYTES = 1 << 20
MAX_CONTROL_LINE = 64 * 1024
CONTEXT_FIELD = struct.Struct(">I")


def host_interface_exists(name: str) -> bool:
    """Whether a Linux interface exists in the emulator's own network namespace."""
    try:
        socket.if_nametoindex(name)
    except OSError:
        return False
    return True


@dataclass
class ApiClient:
    """One connection to the API socket."""

    index: int
    writer: asyncio.StreamWriter
    name: str = ""
    events_pid: int | None = None  # set by want_interface_events

    def send(self, body: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame(body))


class Emulator:
    def __init__(
        self,
        socket_path: str,
        control_path: str | None = None,
        host_check: bool = True,
        api: ApiDefinitions | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.control_path = control_path or socket_path + ".ctl"
        self.api = api or ApiDefinitions()
        self._host_check: Callable[[str], bool] = (
            host_interface_exists if host_check else (lambda _n: True)
        )
        self.dataplane = Dataplane(self._host_check)
        self.faults = FaultPlan()
        self.counters: Counter[str] = Counter()
        self.clients: dict[int, ApiClient] = {}
        self._next_client_index = 1
        self._api_server: asyncio.AbstractServer | None = None
        self._control_server: asyncio.AbstractServer | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self.stopped = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        for path in (self.socket_path, self.control_path):
            if _in_use(path):
                raise OSError(f"{path} is in use by another server")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # The control socket first: once the API socket accepts, everything is ready.
        _unlink(self.control_path)
        self._control_server = await asyncio.start_unix_server(
            self._serve_control, path=self.control_path, limit=MAX_CONTROL_LINE
        )
        await self._listen_api()
        log.info("VPP emulator listening on %s (control %s)", self.socket_path, self.control_path)

    async def _listen_api(self) -> None:
        _unlink(self.socket_path)
        self._api_server = await asyncio.start_unix_server(self._serve_api, path=self.socket_path)

    async def _close_api(self) -> None:
        if self._api_server is not None:
            self._api_server.close()
            self._api_server = None
        self.disconnect_all()
        _unlink(self.socket_path)

    async def stop(self) -> None:
        if self._restart_task is not None:
            self._restart_task.cancel()
        await self._close_api()
        self.dataplane.lcp.destroy_all()
        if self._control_server is not None:
            self._control_server.close()
            self._control_server = None
        _unlink(self.control_path)
        self.stopped.set()

    def disconnect_all(self) -> int:
        """Close every API connection (VPP going away, as the clients see it)."""
        count = len(self.clients)
        for client in list(self.clients.values()):
            client.writer.close()
        self.clients.clear()
        self.counters["connections_dropped"] += count
        return count

    async def restart(self, downtime: float) -> None:
        """A VPP restart: connections drop, the socket goes away for `downtime`, state is lost."""
        await self._close_api()
        self.dataplane.lcp.destroy_all()  # a VPP's host taps go with its process
        self.dataplane = Dataplane(self._host_check)
        self.counters["restarts"] += 1
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self._listen_api()

    # ------------------------------------------------------------------ API socket
    async def _serve_api(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = ApiClient(self._next_client_index, writer)
        self._next_client_index += 1
        self.clients[client.index] = client
        self.counters["connections_accepted"] += 1
        try:
            while True:
                header = await reader.readexactly(HEADER.size)
                _q, length, _gc = HEADER.unpack(header)
                if length > MAX_MESSAGE_BYTES:
                    self.counters["oversized_messages"] += 1
                    log.warning("client %d: %d-byte message, closing", client.index, length)
                    break
                body = await reader.readexactly(length)
                if not await self._handle(client, body):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.clients.pop(client.index, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, client: ApiClient, body: bytes) -> bool:
        """Handle one message; False closes the connection."""
        try:
            info, msg = self.api.decode(body)
        except DecodeError as exc:
            self.counters["malformed_messages"] += 1
            log.warning("client %d: %s", client.index, exc)
            self._reply_malformed(client, body)
            return True
        self.counters["requests"] += 1
        self.counters[f"msg.{info.name}"] += 1

        rule = self.faults.take(info.name)
        if rule is not None:
            self.counters[f"fault.{rule.action}"] += 1
            if rule.action == "drop":
                log.info("fault: dropping client %d on %s", client.index, info.name)
                return False
            if rule.action == "delay":
                await asyncio.sleep(rule.seconds)
                if client.index not in self.clients:
                    return False
            if rule.action == "fail":
                self._reply(client, info, _context(msg), retval=rule.retval, fields={})
                return True

        if info.name == "sockclnt_create":
            client.name = msg.name
            client.send(
                self.api.encode(
                    "sockclnt_create_reply",
                    {
                        "client_index": client.index,
                        "context": msg.context,
                        "response": 0,
                        "index": client.index,
                        "count": len(self.api.by_id),
                        "message_table": self.api.message_table(),
                    },
                )
            )
            return True
        if info.name == "sockclnt_delete":
            self._reply(client, info, msg.context, retval=0, fields={}, retval_field="response")
            return True
        if info.name == "control_ping":
            self._reply(
                client, info, msg.context, 0, {"client_index": client.index, "vpe_pid": os.getpid()}
            )
            return True
        if info.name == "get_api_json":
            self._reply(client, info, msg.context, 0, {"json": self.api.api_json})
            return True
        if info.name == "want_interface_events":
            client.events_pid = msg.pid if msg.enable_disable else None
            self._reply(client, info, msg.context, 0, {})
            return True

        handler = HANDLERS.get(info.name)
        if handler is None:
            self._answer_unimplemented(client, info, msg)
            return True
        ctx = HandlerContext(self.dataplane, msg.context)
        try:
            result = handler(ctx, msg)
        except Unanswered as exc:
            self.counters[f"unanswered.{info.name}"] += 1
            log.debug("%s: no reply (%s)", info.name, exc)
        except ApiError as exc:
            self.counters[f"retval.{info.name}.{exc.retval}"] += 1
            log.debug("%s -> %s", info.name, exc)
            self._reply(client, info, msg.context, exc.retval, {})
        else:
            if isinstance(result, list):
                for details_name, fields in result:
                    client.send(self.api.encode(details_name, fields))
                if self.api.services.get(info.name, {}).get("stream_msg"):
                    # A cursor get ends with its reply: retval 0, all sent (cursor ~0).
                    self._reply(client, info, msg.context, 0, {"cursor": 0xFFFFFFFF},
                                force=True)
            else:
                self._reply(client, info, msg.context, 0, result)
        self._publish(self.dataplane.pop_events())
        return True

    def _answer_unimplemented(self, client: ApiClient, info: MessageInfo, msg: Any) -> None:
        """A message the emulator has no handler for answers as VPP 24.06 does when none of
        that message's objects are configured, so a client reading the whole state sees an
        empty dataplane rather than an error:
        - a dump (details, then the client's control_ping) has no details;
        - a cursor get (`stream_msg`, e.g. `lcp_itf_pair_get`) has no details and its reply
          retval 0 (VPP's REPLY_AND_DETAILS_MACRO on an empty pool);
        - `want_*` event registrations succeed (there is nothing to report);
        - a request naming an interface that does not exist gets INVALID_SW_IF_INDEX, as
          VPP's VALIDATE_SW_IF_INDEX answers before any handler logic;
        - anything else would change state the emulator does not keep: UNIMPLEMENTED,
          counted, never a pretended success.
        """
        self.counters["unimplemented"] += 1
        self.counters[f"unimplemented.{info.name}"] += 1
        service = self.api.services.get(info.name, {})
        context = _context(msg)
        if service.get("stream_msg"):
            self._reply(client, info, context, 0, {"cursor": 0}, force=True)
            return
        if info.name.startswith("want_"):
            self._reply(client, info, context, 0, {})
            return
        sw_if_index = getattr(msg, "sw_if_index", None)
        if isinstance(sw_if_index, int) and sw_if_index not in self.dataplane.interfaces:
            self._reply(client, info, context, E.INVALID_SW_IF_INDEX, {})
            return
        self._reply(client, info, context, E.UNIMPLEMENTED, {})

    def _reply(
        self,
        client: ApiClient,
        request: MessageInfo,
        context: int,
        retval: int,
        fields: dict[str, Any],
        retval_field: str = "retval",
        force: bool = False,
    ) -> None:
        service = self.api.services.get(request.name)
        if service is None:
            return
        reply_name = service["reply"]
        if service.get("stream") and not force:
            # A failed dump has no details; the client's control_ping ends it.
            return
        if reply_name not in self.api.by_name:
            return
        data = {"context": context, **fields}
        if self.api.has_field(reply_name, retval_field):
            # A few replies declare retval unsigned (get_f64_endian_value_reply): VPP puts the
            # same 32 bits on the wire.
            unsigned = self.api.field_type(reply_name, retval_field).startswith("u")
            data[retval_field] = retval & 0xFFFFFFFF if unsigned else retval
        client.send(self.api.encode(reply_name, data))

    def _reply_malformed(self, client: ApiClient, body: bytes) -> None:
        """Answer an undecodable request with INVALID_VALUE when its reply can be addressed."""
        if len(body) < 10:
            return
        (msg_id,) = struct.unpack_from(">H", body)
        info = self.api.by_id.get(msg_id)
        if info is None or len(info.fields) < 3:
            return
        offset = 6 if info.fields[1] == "client_index" else 2
        (context,) = CONTEXT_FIELD.unpack_from(body, offset)
        self._reply(client, info, context, E.INVALID_VALUE, {})

    def _publish(self, events: list[InterfaceEvent]) -> None:
        if not events:
            return
        for client in list(self.clients.values()):
            if client.events_pid is None:
                continue
            for event in events:
                client.send(
                    self.api.encode(
                        "sw_interface_event",
                        {
                            "client_index": client.index,
                            "pid": client.events_pid,
                            "sw_if_index": event.sw_if_index,
                            "flags": event.flags,
                            "deleted": event.deleted,
                        },
                    )
                )
                self.counters["events_sent"] += 1

    # ------------------------------------------------------------------ control socket
    async def _serve_control(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # longer than the stream limit
                    self.counters["control_errors"] += 1
                    writer.write(_json_line({"ok": False, "error": "request line too long"}))
                    break
                if not line:
                    break
                reply = await self._control(line)
                writer.write(_json_line(reply))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _control(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
            return {"ok": True, **await self._control_op(request)}
        except (ValueError, TypeError) as exc:
            self.counters["control_errors"] += 1
            return {"ok": False, "error": str(exc)}

    async def _control_op(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":
            return {"pid": os.getpid()}
        if op in ("fail", "delay", "drop"):
            if op == "drop" and "message" not in request:
                raise ValueError("field 'message': required (use op 'disconnect' to drop now)")
            self.faults.add(rule_from_request(request))
            return {"faults": [r.to_dict() for r in self.faults.rules]}
        if op == "clear_faults":
            self.faults.clear()
            return {}
        if op == "disconnect":
            return {"dropped": self.disconnect_all()}
        if op == "restart":
            downtime = request.get("downtime", 0.0)
            if not isinstance(downtime, int | float) or isinstance(downtime, bool):
                raise ValueError("field 'downtime': must be a number of seconds")
            if not 0 <= downtime <= 60:
                raise ValueError("field 'downtime': must be within 0..60 seconds")
            if request.get("wait", True):
                await self.restart(float(downtime))
            else:
                self._restart_task = asyncio.ensure_future(self.restart(float(downtime)))
            return {}
        if op == "state":
            return {"state": self.dataplane.snapshot()}
        if op == "counters":
            return {"counters": dict(self.counters)}
        raise ValueError(
            "field 'op': unknown operation "
            f"{op!r} (ping, fail, delay, drop, clear_faults, disconnect, restart, state, counters)"
        )


def _context(msg: Any) -> int:
    return int(getattr(msg, "context", 0))


def _json_line(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def _in_use(path: str) -> bool:
    """Whether something accepts connections on this unix socket path."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()


async def run(
    socket_path: str,
    control_path: str | None = None,
    host_check: bool = True,
    api_dir: str | None = None,
) -> None:
    """Run an emulator until SIGTERM/SIGINT; `api_dir` serves a whole VPP release's API files
    (apidef.load_api_dir) instead of the project's subset."""
    import signal

    api = ApiDefinitions(load_api_dir(Path(api_dir))) if api_dir else None
    emulator = Emulator(socket_path, control_path, host_check, api=api)
    await emulator.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(emulator.stop()))
    await emulator.stopped.wait()
