"""VPP's API return values (`retval`), as defined in FDio/vpp `src/vnet/error.h`.

Only the codes the emulator produces are listed. The emulator keeps its own table on purpose:
it plays VPP, and the southbound's mapping of these numbers is tested against it.
"""

from __future__ import annotations

OK = 0
UNSPECIFIED = -1
INVALID_SW_IF_INDEX = -2
NO_SUCH_FIB = -3
NO_SUCH_ENTRY = -6
INVALID_VALUE = -7
UNIMPLEMENTED = -9
INVALID_SW_IF_INDEX_2 = -10
SYSCALL_ERROR_1 = -11
NO_PATHS_IN_ROUTE = -52
NO_MATCHING_INTERFACE = -54
INVALID_VLAN = -55
VLAN_ALREADY_EXISTS = -56
ADDRESS_NOT_FOUND_FOR_INTERFACE = -60
INVALID_INTERFACE = -71
INVALID_VLAN_TAG_COUNT = -72
SUBIF_ALREADY_EXISTS = -68
INVALID_ARGUMENT = -73
UNEXPECTED_INTF_STATE = -74
TUNNEL_EXIST = -75
IF_ALREADY_EXISTS = -79
SAME_SRC_DST = -82
IP_PREFIX_INVALID = -88
INVALID_ADDRESS_FAMILY = -97
INVALID_SUB_SW_IF_INDEX = -98
ADDRESS_IN_USE = -105
ADDRESS_FOUND_FOR_INTERFACE = -114
BD_ALREADY_EXISTS = -119
BD_IN_USE = -120
BD_NOT_MODIFIABLE = -121
ENTRY_ALREADY_EXISTS = -116
BD_ID_EXCEED_MAX = -122
DUPLICATE_IF_ADDRESS = -127
INSTANCE_IN_USE = -147
BD_ALREADY_HAS_BVI = -152


class ApiError(Exception):
    """A request VPP refuses: the handler replies with `retval` and changes nothing."""

    def __init__(self, retval: int, reason: str) -> None:
        super().__init__(f"{reason} ({retval})")
        self.retval = retval
        self.reason = reason

# acl and nat44-ed plugins
INVALID_VALUE_2 = -8
INVALID_SRC_ADDRESS = -57
INVALID_DST_ADDRESS = -58
VALUE_EXIST = -81
ENTRY_ALREADY_EXISTS = -116
UNSUPPORTED = -126
ACL_IN_USE_INBOUND = -142
ACL_IN_USE_OUTBOUND = -143
ACL_IN_USE_BY_LOOKUP_CONTEXT = -149
# nat44-ed's `fail_if_enabled`/`fail_if_disabled` return 1 (not a VNET error) as the retval.
NAT_PLUGIN_STATE = 1

# tunnels (gre plugin, vnet/ipip)
FEATURE_DISABLED = -30
INVALID_SESSION_ID = -148
INVALID_PROTOCOL = -153
# ipsec
SYSCALL_ERROR_2 = -12
INVALID_ALGORITHM = -154
KEY_LENGTH = -156
LIMIT_EXCEEDED = -162
# fib paths, IPv6 links
IP6_NOT_ENABLED = -62
# wireguard, span, punt
INVALID_REGISTRATION = -31
PUNT_REFUSED = -1  # punt.c's refusals are clib errors: the API answers -1


class Unanswered(Exception):
    """A request VPP's handler returns from without any reply (the client waits in vain)."""
