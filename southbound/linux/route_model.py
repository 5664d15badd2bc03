"""The canonical form of ``linux/route/<table>/<dst>/<dev>`` values (validated with the model
``southbound.linux.models.LinuxRoute``).

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
from southbound.linux.addr import parse_address, parse_cidr, parse_network
from southbound.linux.errors import InvalidValueError
from southbound.linux.models import SCOPES, LinuxRoute, interface_name_problem
from southbound.validation import KEY_FIELD, validate

SCOPE_NAMES = {number: name for name, number in SCOPES.items()}
MAIN_TABLE = keys.TABLE_NAMES["main"]
TABLE_NAMES = keys.TABLE_NAMES
table_in_key = keys.table_in_key
TABLE_RANGE = (1, 2**32 - 1)
METRIC_RANGE = (0, 2**32 - 1)
IPV6_DEFAULT_METRIC = 1024


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
    """Validate a route value (``models.LinuxRoute``) against its key; raise
    ``InvalidValueError`` listing every bad field."""
    parsed = keys.parse_route_key(key)
    if parsed is None:
        raise InvalidValueError(key, {KEY_FIELD: "must be 'linux/route/<table>/<dst cidr>/<dev>'"})
    table, network, problem = _key_table(parsed.table), None, None
    if table is None:
        problem = (f"table must be one of {', '.join(TABLE_NAMES)} or an integer "
                   f"{TABLE_RANGE[0]}..{TABLE_RANGE[1]}")
    elif table_in_key(table) != parsed.table:
        problem, table = f"write table {parsed.table} as {table_in_key(table)!r}", None
    try:
        network = parse_network(parsed.dst)
    except ValueError:
        problem = problem or "destination must be a network in CIDR notation with host bits zero"
    if network is not None and network.text != parsed.dst:
        # Retrieve reports routes under the canonical key: another spelling would never match.
        problem, network = problem or f"write the destination {parsed.dst} as {network.text}", None
    dev_problem = interface_name_problem(parsed.dev)
    problem = problem or (f"device {dev_problem}" if dev_problem else None)
    model = validate(LinuxRoute, key, value,
                     key_problems={KEY_FIELD: problem} if problem else None,
                     context={"table": table, "network": network, "dev": parsed.dev},
                     error=InvalidValueError)
    assert network is not None and table is not None
    metric = model.metric
    if metric is None or (network.version == 6 and metric == 0):
        metric = default_metric(network.version)
    return RouteSpec(
        table=table,
        dst=network.text,
        dev=parsed.dev,
        gateway=model.gateway,
        metric=metric,
        scope=model.scope or default_scope(network.version, model.gateway),
    )


def _key_table(text: str) -> int | None:
    if text in TABLE_NAMES:
        return TABLE_NAMES[text]
    if not text.isdigit() or not TABLE_RANGE[0] <= int(text) <= TABLE_RANGE[1]:
        return None
    return int(text)


def gateway_in_address(gateway: str, cidr: str) -> bool:
    """Whether an interface address (``10.0.0.1/24``) puts ``gateway`` in a connected subnet."""
    try:
        return parse_cidr(cidr).contains(parse_address(gateway)[1])
    except ValueError:
        return False
