"""Network namespaces for tests: created with a unique name, always deleted.

    with temporary_netns("lx") as ns:        # ip netns add lx-<pid>-<random>
        ns.ip("link", "add", "h0", "type", "veth", "peer", "name", "h1")
        state = ns.dump()                     # links, addresses, routes (comparable snapshot)
    # the namespace is gone here, even if the block raised

Generic on purpose (used by the Linux and VPP southbound tests): nothing here knows kvmesh.
Needs root and iproute2. ``netns_available()`` tells whether the machine can run these tests.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Literal

NETNS_DIR = "/run/netns"


def netns_available() -> bool:
    """Root, iproute2 present: namespace tests can run."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def unique_netns_name(prefix: str = "kvt") -> str:
    # Short: the name appears in interface-free paths only, but keep it readable in `ip netns`.
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def list_netns() -> list[str]:
    result = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


class IpCommandError(RuntimeError):
    """An ``ip`` command failed; carries its stderr."""


class Netns:
    """A named network namespace and helpers to run ``ip`` inside it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Netns({self.name!r})"

    def ip(self, *args: str, check: bool = True) -> str:
        """Run ``ip -n <ns> <args>``; return stdout (raise ``IpCommandError`` on failure)."""
        result = subprocess.run(["ip", "-n", self.name, *args], capture_output=True, text=True)
        if check and result.returncode != 0:
            raise IpCommandError(f"ip -n {self.name} {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def ip_json(self, *args: str) -> Any:
        output = self.ip("-j", *args)
        return json.loads(output) if output.strip() else []

    def batch(self, commands: Sequence[str]) -> None:
        """Run many ``ip`` commands in one process (``ip -n <ns> -batch -``)."""
        result = subprocess.run(["ip", "-n", self.name, "-batch", "-"], input="\n".join(commands),
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise IpCommandError(f"ip -batch in {self.name}: {result.stderr.strip()[:2000]}")

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run any command inside the namespace (``ip netns exec``)."""
        return subprocess.run(["ip", "netns", "exec", self.name, *command], capture_output=True,
                              text=True, check=check)

    def link_names(self) -> set[str]:
        return {link["ifname"] for link in self.ip_json("link", "show")}

    def link(self, name: str) -> dict[str, Any] | None:
        """``ip -d link show <name>`` as a dict, or None when there is no such link."""
        output = self.ip("-j", "-d", "link", "show", "dev", name, check=False)
        if not output.strip():
            return None
        links = json.loads(output)
        return links[0] if links else None

    def addresses(self, name: str) -> list[str]:
        """CIDRs on a link (kernel order), IPv6 link-local ones excluded."""
        data = self.ip_json("addr", "show", "dev", name)
        result = []
        for link in data:
            for info in link.get("addr_info", []):
                if info.get("scope") == "link" and info.get("family") == "inet6":
                    continue
                result.append(f"{info['local']}/{info['prefixlen']}")
        return result

    def routes(self, table: str = "all") -> list[dict[str, Any]]:
        routes: list[dict[str, Any]] = []
        for family in ("-4", "-6"):
            # A table that was never used for a family does not exist: that is "no routes".
            result = subprocess.run(["ip", "-n", self.name, "-j", family, "route", "show",
                                     "table", table], capture_output=True, text=True)
            if result.returncode == 0 and result.stdout.strip():
                routes += json.loads(result.stdout)
        return routes

    def dump(self) -> dict[str, Any]:
        """A comparable snapshot of links, addresses and routes (volatile fields left out).

        IPv6 link-local addresses and their routes are left out too: the kernel adds them on its
        own, asynchronously, whenever a link comes up."""
        links = []
        for link in self.ip_json("-d", "link", "show"):
            info = link.get("linkinfo", {})
            links.append((
                link["ifname"], link.get("link_type"), link.get("mtu"), link.get("address"),
                tuple(sorted(f for f in link.get("flags", []) if f != "LOWER_UP")),
                link.get("master"), link.get("group"), info.get("info_kind"),
                link.get("link"),
            ))
        addresses = []
        for link in self.ip_json("addr", "show"):
            for info in link.get("addr_info", []):
                if _is_ipv6_link_local(info.get("local", "")):
                    continue
                addresses.append((link["ifname"], info.get("family"), info.get("local"),
                                  info.get("prefixlen"), info.get("scope")))
        routes = []
        for route in self.routes():
            if _is_ipv6_link_local(str(route.get("dst", "")).split("/")[0]):
                continue
            routes.append(tuple(sorted((k, str(v)) for k, v in route.items()
                                       if k not in ("flags", "expires", "pref"))))
        return {"links": sorted(links, key=str), "addresses": sorted(addresses, key=str),
                "routes": sorted(routes)}


def _is_ipv6_link_local(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.version == 6 and ip.is_link_local


def delete_netns(name: str) -> None:
    """Delete a namespace; deleting one that is already gone is fine."""
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, text=True)


def netns_fixture(prefix: str = "kvt",
                  scope: Literal["session", "package", "module", "class", "function"] = "function",
                  ) -> Any:
    """A pytest fixture yielding a ``Netns`` (skips without root); use in a conftest:
    ``ns = netns_fixture("kvvpp")``."""
    import pytest

    @pytest.fixture(scope=scope)
    def fixture() -> Iterator[Netns]:
        if not netns_available():
            pytest.skip("needs root and iproute2 for network namespaces")
        with temporary_netns(prefix) as namespace:
            yield namespace

    return fixture


@contextlib.contextmanager
def temporary_netns(prefix: str = "kvt") -> Iterator[Netns]:
    """Create a uniquely named namespace and always delete it on exit."""
    name = unique_netns_name(prefix)
    subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=True)
    try:
        yield Netns(name)
    finally:
        delete_netns(name)
