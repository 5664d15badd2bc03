"""The route model: validation and canonical form of ``linux/route/<table>/<dst>/<dev>`` values.

The key carries the route's identity (table, destination, device); the value may repeat those
fields (they must then agree with the key) and adds ``gateway``, ``metric`` and ``scope``.

Canonical defaults (what the kernel does, so Retrieve reports the same thing): ``metric`` 0 for
IPv4 and 1024 for IPv6 (the kernel turns an IPv6 metric of 0 into 1024); ``scope`` ``link`` for an
IPv4 route without gateway and ``universe`` otherwise (IPv6 routes only have ``universe``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from southbound.linux import keys
from southbound.linux.addr import Cidr, parse_address, parse_cidr, parse_network
from southbound.linux.fields import FieldChecker, interface_name_problem

SCOPES = {"universe": 0, "site": 200, "link": 253, "host": 254, "nowhere": 255}
SCOPE_NAMES = {number: name for name, number in SCOPES.items()}
MAIN_TABLE = keys.TABLE_NAMES["main"]
TABLE_NAMES = keys.TABLE_NAMES
table_in_key = keys.table_in_key
TABLE_RANGE = (1, 2**32 - 1)
METRIC_RANGE = (0, 2**32 - 1)
IPV6_DEFAULT_METRIC = 1024
FIELDS = ("dst", "dev", "gateway", "metric", "table", "scope")


@dataclass(frozen=True, slots=True)
class RouteSpec:
    table: int
    dst: str
    dev: str
    gateway: str | None
    metric: int
    scope: str

    def to_value(self) -> dict[str, Any]:
        return {
            "dst": self.dst,
            "dev": self.dev,
            "gateway": self.gateway,
            "metric": self.metric,
            "table": self.table,
            "scope": self.scope,
        }

    def identity(self) -> tuple[Any, ...]:
        """What the kernel identifies a route by (besides dev): changing it means re-create."""
        return (self.table, self.dst, self.dev, self.metric)


def default_metric(version: int) -> int:
    return IPV6_DEFAULT_METRIC if version == 6 else 0


def default_scope(version: int, gateway: str | None) -> str:
    return "link" if version == 4 and gateway is None else "universe"


def parse_route(key: str, value: object) -> RouteSpec:
    """Validate a route value against its key; raise ``InvalidValueError`` listing bad fields."""
    check = FieldChecker(key, value)
    parsed = keys.parse_route_key(key)
    if parsed is None:
        check.fail("(key)", "must be 'linux/route/<table>/<dst cidr>/<dev>'")
        check.raise_if_any()
        raise AssertionError("unreachable")
    check.reject_unknown(FIELDS)
    table = _key_table(check, parsed.table)
    network = _key_network(check, parsed.dst)
    dev = parsed.dev
    problem = interface_name_problem(dev)
    if problem:
        check.fail("(key)", f"device {problem}")
    if isinstance(check.value.get("table"), str) and check.value["table"] in TABLE_NAMES:
        _agrees_with_key(check, "table", None if table is None else table_in_key(table))
    else:
        _agrees_with_key(check, "table", table)
    _agrees_with_key(check, "dev", dev)
    value_dst = check.take_network("dst")
    if value_dst is not None and network is not None and value_dst != network:
        check.fail("dst", f"must match the key ({network.text})")
    gateway = check.take_ip("gateway")
    metric = check.take_int("metric", *METRIC_RANGE)
    scope = check.take_choice("scope", SCOPES)
    if network is not None:
        if gateway is not None and gateway.version != network.version:
            check.fail("gateway", f"must be an IPv{network.version} address like the destination")
        if network.version == 6 and scope not in (None, "universe"):
            check.fail("scope", "IPv6 routes only support 'universe'")
        if gateway is not None and scope in ("link", "host", "nowhere"):
            check.fail("scope", "a route with a gateway must have scope 'universe' or 'site'")
    check.raise_if_any()
    assert network is not None and table is not None
    gateway_text = str(gateway) if gateway is not None else None
    if metric is None or (network.version == 6 and metric == 0):
        metric = default_metric(network.version)
    return RouteSpec(
        table=table,
        dst=network.text,
        dev=dev,
        gateway=gateway_text,
        metric=metric,
        scope=scope or default_scope(network.version, gateway_text),
    )


def _key_table(check: FieldChecker, text: str) -> int | None:
    if text in TABLE_NAMES:
        return TABLE_NAMES[text]
    if not text.isdigit() or not TABLE_RANGE[0] <= int(text) <= TABLE_RANGE[1]:
        check.fail("(key)", f"table must be one of {', '.join(TABLE_NAMES)} or an integer "
                            f"{TABLE_RANGE[0]}..{TABLE_RANGE[1]}")
        return None
    if table_in_key(int(text)) != text:
        check.fail("(key)", f"write table {text} as {table_in_key(int(text))!r}")
        return None
    return int(text)


def _key_network(check: FieldChecker, text: str) -> Cidr | None:
    try:
        network = parse_network(text)
    except ValueError:
        check.fail("(key)", "destination must be a network in CIDR notation with host bits zero")
        return None
    if network.text != text:
        # Retrieve reports routes under the canonical key: another spelling would never match.
        check.fail("(key)", f"write the destination {text} as {network.text}")
        return None
    return network


def _agrees_with_key(check: FieldChecker, field: str, expected: object) -> None:
    raw = check.value.get(field)
    if raw is None or expected is None:
        return
    if raw != expected or isinstance(raw, bool):
        check.fail(field, f"must match the key ({expected})")


def gateway_in_address(gateway: str, cidr: str) -> bool:
    """Whether an interface address (``10.0.0.1/24``) puts ``gateway`` in a connected subnet."""
    try:
        return parse_cidr(cidr).contains(parse_address(gateway)[1])
    except ValueError:
        return False
