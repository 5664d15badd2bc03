"""Errors of the VPP southbound, and VPP's return values (`retval`) by name.

vpp_papi does not raise when VPP refuses a request: the reply simply carries a negative
`retval`. Every call made by this package checks it and raises `VppApiError`, whose message names
the code as VPP does (`VNET_API_ERROR_INVALID_SW_IF_INDEX (-2)`). Whether the scheduler may retry
is decided by `is_retriable`: transient VPP codes and lost connections are retriable, everything
else (invalid values, missing objects) is not.
"""

from __future__ import annotations

# From FDio/vpp src/vnet/error.h (foreach_vnet_error): the codes a southbound can meet.
RETVAL_NAMES: dict[int, tuple[str, str]] = {
    -1: ("UNSPECIFIED", "Unspecified Error"),
    -2: ("INVALID_SW_IF_INDEX", "Invalid sw_if_index"),
    -3: ("NO_SUCH_FIB", "No such FIB / VRF"),
    -4: ("NO_SUCH_INNER_FIB", "No such inner FIB / VRF"),
    -5: ("NO_SUCH_LABEL", "No such label"),
    -6: ("NO_SUCH_ENTRY", "No such entry"),
    -7: ("INVALID_VALUE", "Invalid value"),
    -8: ("INVALID_VALUE_2", "Invalid value #2"),
    -9: ("UNIMPLEMENTED", "Unimplemented"),
    -10: ("INVALID_SW_IF_INDEX_2", "Invalid sw_if_index #2"),
    -11: ("SYSCALL_ERROR_1", "System call error #1"),
    -12: ("SYSCALL_ERROR_2", "System call error #2"),
    -13: ("SYSCALL_ERROR_3", "System call error #3"),
    -14: ("SYSCALL_ERROR_4", "System call error #4"),
    -15: ("SYSCALL_ERROR_5", "System call error #5"),
    -30: ("FEATURE_DISABLED", "Feature disabled by configuration"),
    -50: ("NEXT_HOP_NOT_IN_FIB", "Next hop not in FIB"),
    -51: ("UNKNOWN_DESTINATION", "Unknown destination"),
    -52: ("NO_PATHS_IN_ROUTE", "No paths specified in route"),
    -53: ("NEXT_HOP_NOT_FOUND_MP", "Next hop not found (multipath)"),
    -54: ("NO_MATCHING_INTERFACE", "No matching interface for probe"),
    -55: ("INVALID_VLAN", "Invalid VLAN"),
    -56: ("VLAN_ALREADY_EXISTS", "VLAN subif already exists"),
    -57: ("INVALID_SRC_ADDRESS", "Invalid src address"),
    -58: ("INVALID_DST_ADDRESS", "Invalid dst address"),
    -59: ("ADDRESS_LENGTH_MISMATCH", "Address length mismatch"),
    -60: ("ADDRESS_NOT_FOUND_FOR_INTERFACE", "Address not found for interface"),
    -61: ("ADDRESS_NOT_DELETABLE", "Address not deletable"),
    -62: ("IP6_NOT_ENABLED", "ip6 not enabled"),
    -65: ("NO_SUCH_TABLE", "No such table"),
    -68: ("SUBIF_ALREADY_EXISTS", "Subinterface already exists"),
    -69: ("SUBIF_CREATE_FAILED", "Subinterface creation failed"),
    -70: ("INVALID_MEMORY_SIZE", "Invalid memory size requested"),
    -71: ("INVALID_INTERFACE", "Invalid interface"),
    -73: ("INVALID_ARGUMENT", "Invalid argument"),
    -74: ("UNEXPECTED_INTF_STATE", "Unexpected interface state"),
    -75: ("TUNNEL_EXIST", "Tunnel already exists"),
    -77: ("RESPONSE_NOT_READY", "Response not ready"),
    -78: ("NOT_CONNECTED", "Not connected to the data plane"),
    -79: ("IF_ALREADY_EXISTS", "Interface already exists"),
    -81: ("VALUE_EXIST", "Value already exists"),
    -82: ("SAME_SRC_DST", "Source and destination are the same"),
    -88: ("IP_PREFIX_INVALID", "IP prefix invalid (masked bits set in address"),
    -97: ("INVALID_ADDRESS_FAMILY", "Invalid address family"),
    -98: ("INVALID_SUB_SW_IF_INDEX", "Invalid sub-interface sw_if_index"),
    -105: ("ADDRESS_IN_USE", "Address in use"),
    -106: ("ADDRESS_NOT_IN_USE", "Address not in use"),
    -107: ("QUEUE_FULL", "Queue full"),
    -114: ("ADDRESS_FOUND_FOR_INTERFACE", "Address found for interface"),
    -116: ("ENTRY_ALREADY_EXISTS", "Entry already exists"),
    -119: ("BD_ALREADY_EXISTS", "Bridge domain already exists"),
    -120: ("BD_IN_USE", "Bridge domain has member interfaces"),
    -121: ("BD_NOT_MODIFIABLE", "Bridge domain 0 can't be deleted/modified"),
    -122: ("BD_ID_EXCEED_MAX", "Bridge domain ID exceeds 16M limit"),
    -126: ("UNSUPPORTED", "Unsupported"),
    -127: ("DUPLICATE_IF_ADDRESS", "Address already present on another interface"),
    -142: ("ACL_IN_USE_INBOUND", "Inbound ACL in use"),
    -143: ("ACL_IN_USE_OUTBOUND", "Outbound ACL in use"),
    -144: ("INIT_FAILED", "Initialization Failed"),
    -145: ("NETLINK_ERROR", "Netlink error"),
    -147: ("INSTANCE_IN_USE", "Instance in use"),
    -149: ("ACL_IN_USE_BY_LOOKUP_CONTEXT", "ACL in use by a lookup context"),
    -152: ("BD_ALREADY_HAS_BVI", "Bridge domain already has a BVI interface"),
    -153: ("INVALID_PROTOCOL", "Invalid Protocol"),
    -154: ("INVALID_ALGORITHM", "Invalid Algorithm"),
    -156: ("KEY_LENGTH", "invalid Key Length"),
    -155: ("RSRC_IN_USE", "Resource In Use"),
    -162: ("LIMIT_EXCEEDED", "limit exceeded"),
    -165: ("EAGAIN", "Retry stream call with cursor"),
    -167: ("BUSY", "Busy"),
    -168: ("BUG", "Bug"),
}

INVALID_SW_IF_INDEX = -2
NO_SUCH_FIB = -3
NO_SUCH_ENTRY = -6
INVALID_VALUE = -7
IP6_NOT_ENABLED = -62
VALUE_EXIST = -81
INVALID_INTERFACE = -71
EAGAIN = -165  # a cursor get stopped half-way: go on from its cursor
UNSUPPORTED = -126
ADDRESS_NOT_FOUND_FOR_INTERFACE = -60
SYSCALL_ERROR_1 = -11

# Codes a later attempt can get past: VPP was busy, not ready, or out of queue space.
TRANSIENT_RETVALS = frozenset({-77, -78, -107, -165, -167})


def retval_name(retval: int) -> str:
    name, _text = RETVAL_NAMES.get(retval, (f"UNKNOWN_{-retval}", "unknown error"))
    return f"VNET_API_ERROR_{name} ({retval})"


class VppError(Exception):
    """Base class of every error raised by this package."""

    retriable = False


class VppApiError(VppError):
    """VPP answered a request with a non-zero retval."""

    def __init__(self, message: str, retval: int, detail: str = "") -> None:
        self.message_name = message
        self.retval = retval
        self.retriable = retval in TRANSIENT_RETVALS
        _name, text = RETVAL_NAMES.get(retval, ("", "unknown error"))
        suffix = f" [{detail}]" if detail else ""
        super().__init__(f"{message}: {retval_name(retval)}: {text}{suffix}")


class VppConnectionError(VppError):
    """VPP is not reachable (not connected yet, went away, or did not answer in time)."""

    retriable = True


class VppUnsupportedError(VppError):
    """VPP does not offer a message this package needs (absent, or a different CRC)."""


class MissingInterfaceError(VppError):
    """A value refers to an interface the southbound has no sw_if_index for."""

    retriable = True


class L2ModeConflictError(VppError):
    """An interface wanted in a bridge domain and in a cross-connect: the second waits (a retry
    succeeds once the first is removed)."""

    retriable = True


def is_retriable(exc: BaseException) -> bool:
    """The scheduler's `is_retriable_failure`: only errors a retry can fix."""
    return bool(getattr(exc, "retriable", False)) and isinstance(exc, VppError)
