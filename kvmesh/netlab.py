"""An isolated test network: one network namespace per node, veth links to a bridge.

    lab = create_lab(["n1", "n2", "n3"])   # namespaces, bridge, addresses
    lab.address("n2")                     # '198.18.37.2' (inside n2's namespace)
    destroy_lab(lab)                      # everything it made is gone

Layout: the bridge `br0` lives in a namespace of its own; each node namespace has a veth `eth0`
whose other end is a port of that bridge, with an address from 198.18.0.0/15 (the range set aside
for network tests, RFC 2544). Every lab takes its own /24 of that range, so labs of concurrent runs
do not collide: the choice (a /24 no host route uses yet) and the host address that claims it are
made under a machine-wide lock (`/run/kvmesh-netlab.lock`, flock), else two labs made at the same
moment could both see a /24 free and take it. The host (root namespace) gets one veth into the
bridge too, with the .254 address, so tools on the host (the launcher, the chaos checker) reach
every node; the nodes reach each other over the bridge, never over loopback. Only veth and bridge
links are used (the machine's kernel has no dummy/vlan links and no netem). Names include a random
tag, so several labs (and the tests' own namespaces) coexist; `destroy_lab` removes all of it and
tolerates pieces already gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Lab", "LabError", "attach_namespace", "create_lab", "destroy_lab", "in_namespace",
           "random_peers"]

RANGE_PREFIX = "198.18"
HOST_OCTET = 254
MAX_NODES = 200
SUBNET_LOCK = "/run/kvmesh-netlab.lock"  # root's: a lab needs root anyway


class LabError(RuntimeError):
    pass


@dataclass
class Lab:
    tag: str
    subnet: int  # third octet: the lab's addresses are 198.18.<subnet>.0/24
    bridge_ns: str
    host_link: str
    namespaces: dict[str, str] = field(default_factory=dict)  # node -> namespace
    octets: dict[str, int] = field(default_factory=dict)  # node -> last address octet

    def address(self, node: str) -> str:
        return f"{RANGE_PREFIX}.{self.subnet}.{self.octets[node]}"

    @property
    def host_address(self) -> str:
        return f"{RANGE_PREFIX}.{self.subnet}.{HOST_OCTET}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Lab:
        return cls(**raw)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    """Held from picking a /24 until the host address claims it (its route then shows)."""
    fd = os.open(SUBNET_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _pick_subnet(rng: random.Random) -> int:
    """A /24 of 198.18.0.0/16 that no route on the host uses yet."""
    used = _ip("-4", "route", "show").stdout
    for _ in range(200):
        candidate = rng.randrange(1, 254)
        if f"{RANGE_PREFIX}.{candidate}." not in used:
            return candidate
    raise LabError("no free /24 left in 198.18.0.0/16")


def create_lab(nodes: list[str], tag: str | None = None) -> Lab:
    """Build the namespaces, bridge and links for `nodes`; on failure, remove what was made."""
    if not 1 <= len(nodes) <= MAX_NODES:
        raise LabError(f"a lab holds 1..{MAX_NODES} nodes, not {len(nodes)}")
    tag = tag or uuid.uuid4().hex[:6]
    lab = Lab(tag=tag, subnet=0, bridge_ns=f"kvb-{tag}", host_link=f"kvh{tag}")
    try:
        _ip("netns", "add", lab.bridge_ns)
        _ip("-n", lab.bridge_ns, "link", "set", "lo", "up")
        _ip("-n", lab.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", lab.bridge_ns, "link", "set", "br0", "up")
        _ip("link", "add", lab.host_link, "type", "veth", "peer", "name", "uplink",
            "netns", lab.bridge_ns)
        _ip("-n", lab.bridge_ns, "link", "set", "uplink", "master", "br0", "up")
        with _subnet_lock():
            lab.subnet = _pick_subnet(random.Random())
            _ip("addr", "add", f"{lab.host_address}/24", "dev", lab.host_link)
            _ip("link", "set", lab.host_link, "up")
        for index, node in enumerate(nodes, start=1):
            _add_namespace(lab, node, index)
    except BaseException:
        destroy_lab(lab)
        raise
    return lab


def attach_namespace(lab: Lab, name: str) -> str:
    """One more namespace on the lab's bridge, for a client that must not see the host's
    network (a browser: Chromium aborts its requests with ERR_NETWORK_CHANGED whenever the
    host's links change, as they do while other labs come and go). Removed by `destroy_lab`."""
    if name in lab.namespaces:
        raise LabError(f"{name!r} is already in the lab")
    octet = max(lab.octets.values(), default=0) + 1
    if octet >= HOST_OCTET:
        raise LabError("the lab's /24 is full")
    # No IPv6 link-local address on its link: that address appears, then turns from tentative
    # to valid (DAD), a second or so after the link comes up, and each step is a change of the
    # namespace's network to Chromium (a first page load failed with ERR_NETWORK_CHANGED so).
    return _add_namespace(lab, name, octet, link_local=False)


def _add_namespace(lab: Lab, name: str, octet: int, link_local: bool = True) -> str:
    """Namespace `name` with `eth0` on the bridge and address .`octet` (recorded in `lab`
    as soon as it exists, so that `destroy_lab` removes it); without `link_local`, eth0 gets
    no IPv6 link-local address."""
    namespace = f"kvn-{lab.tag}-{name}"
    _ip("netns", "add", namespace)
    lab.namespaces[name], lab.octets[name] = namespace, octet
    port = f"p{octet}"
    _ip("-n", namespace, "link", "set", "lo", "up")
    _ip("-n", namespace, "link", "add", "eth0", "type", "veth", "peer", "name", port,
        "netns", lab.bridge_ns)
    _ip("-n", lab.bridge_ns, "link", "set", port, "master", "br0", "up")
    _ip("-n", namespace, "addr", "add", f"{lab.address(name)}/24", "dev", "eth0")
    if not link_local:
        _ip("-n", namespace, "link", "set", "eth0", "addrgenmode", "none")
    _ip("-n", namespace, "link", "set", "eth0", "up")
    return namespace


def in_namespace(namespace: str, executable: str, directory: Path) -> Path:
    """A script that runs `executable` (with its arguments) inside `namespace`: for a launcher
    that takes an executable path only (Playwright's `executable_path`)."""
    script = directory / f"{Path(executable).name}-in-{namespace}"
    script.write_text(f"#!/bin/sh\nexec ip netns exec {shlex.quote(namespace)} "
                      f"{shlex.quote(executable)} \"$@\"\n")
    script.chmod(0o700)
    return script


def destroy_lab(lab: Lab) -> None:
    """Remove every namespace and link of the lab (pieces already gone are fine)."""
    _ip("link", "del", lab.host_link, check=False)
    for namespace in lab.namespaces.values():
        _ip("netns", "del", namespace, check=False)
    _ip("netns", "del", lab.bridge_ns, check=False)


def random_peers(names: list[str], degree: int, seed: int) -> set[tuple[str, str]]:
    """A connected random graph where every node has at least `degree` links (capped at n-1).

    A ring in a seeded random order makes it connected (every node has 2 links), then random
    links are added between nodes still short of `degree`, then between any nodes if none is
    left to pair. The same names, degree and seed always give the same graph.
    """
    if degree < 2:
        raise ValueError("a random topology needs --degree >= 2 (a ring keeps it connected)")
    rng = random.Random(seed)
    order = list(names)
    rng.shuffle(order)
    n = len(order)
    links: set[tuple[str, str]] = set()
    degrees = dict.fromkeys(order, 0)  # kept as links are added: counting them is O(links)

    def link(a: str, b: str) -> None:
        pair = (a, b) if a < b else (b, a)
        if pair not in links:
            links.add(pair)
            degrees[a] += 1
            degrees[b] += 1

    if n == 2:
        link(order[0], order[1])
    elif n > 2:
        for i in range(n):
            link(order[i], order[(i + 1) % n])
    target = min(degree, n - 1)
    deg = degrees.__getitem__

    for node in order:
        while deg(node) < target:
            free = [other for other in order if other != node
                    and (min(node, other), max(node, other)) not in links]
            short = [other for other in free if deg(other) < target]
            link(node, rng.choice(short or free))
    return links
