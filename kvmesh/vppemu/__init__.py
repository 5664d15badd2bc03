"""A VPP binary-API emulator: a unix-socket server speaking VPP's socket transport.

It serves the API definitions the client bootstraps from (`get_api_json`), keeps dataplane state
(interfaces, addresses, unnumbered, bridge domains, FIB tables and routes), answers with VPP's
real retvals, emits `sw_interface_event`, and takes fault injection on a JSON control socket.
Start it with `kvmesh vpp-emulator --socket PATH`; see docs/vpp.md.
"""

from kvmesh.vppemu.control import ControlError, EmulatorControl, EmulatorProcess

__all__ = ["ControlError", "EmulatorControl", "EmulatorProcess"]
