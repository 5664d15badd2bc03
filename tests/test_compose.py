"""docker-compose.yml, read: every command it uses is a valid kvmesh command line and the cluster
it describes is wired consistently (fast; tests/docker/ builds the image and runs the file for
real, in the `docker` tier)."""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from kvmesh.cli import main

REPO = Path(__file__).resolve().parents[1]


def parse_cli(args: list[str]) -> list[str]:
    """Resolve `args` through the click tree exactly as `kvmesh` would, without running it.

    Returns the command path; raises a ClickException on any unknown command or option."""
    ctx = main.make_context("kvmesh", list(args), resilient_parsing=False)
    path = ["kvmesh"]
    command: click.Command = main
    while isinstance(command, click.Group):
        with warnings.catch_warnings():
            # Click < 9 keeps the subcommand in `protected_args` (deprecated); Click 9 in `args`.
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*getattr(ctx, "protected_args", []), *ctx.args]
        if not rest:
            break
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
        command = sub
    return path


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return data


def nodes(compose: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in compose["services"].items() if name != "keys"}


def test_every_service_command_parses(compose: dict[str, Any]) -> None:
    services = nodes(compose)
    assert set(services) == {"n1", "n2", "n3"}
    assert parse_cli(compose["services"]["keys"]["command"]) == ["kvmesh", "keys", "cluster"]
    for name, service in services.items():
        assert parse_cli(service["command"]) == ["kvmesh", "node", "run"], name
        kind, shell = service["healthcheck"]["test"]
        assert kind == "CMD-SHELL"
        # Ready: the node answers and its agent's Linux device is KNOWN.
        command, _, check = shell.partition("|")
        args = shlex.split(command)
        assert args[0] == "kvmesh"
        assert parse_cli(args[1:]) == ["kvmesh", "recon", "status"]
        assert shlex.split(check) == ["grep", "-q", '"linux": "KNOWN"']


def test_nodes_peer_by_service_name_on_both_sides(compose: dict[str, Any]) -> None:
    services = nodes(compose)
    peers: dict[str, set[str]] = {}
    for name, service in services.items():
        cmd = service["command"]
        assert cmd[cmd.index("--name") + 1] == name
        peers[name] = {cmd[i + 1].split("=")[0] for i, a in enumerate(cmd) if a == "--peer"}
        for i, arg in enumerate(cmd):
            if arg == "--peer":
                peer, url = cmd[i + 1].split("=")
                assert url == f"tcp://{peer}:60002" and peer in services
    for name, mine in peers.items():
        for peer in mine:
            assert name in peers[peer], f"{name} peers {peer} but not the other way round"


def test_nodes_run_secured_with_the_keys_service_keys(compose: dict[str, Any]) -> None:
    keys_cmd = compose["services"]["keys"]["command"]
    made = set(keys_cmd[keys_cmd.index("--out") + 2:])
    for name, service in nodes(compose).items():
        cmd = service["command"]
        assert "--insecure" not in cmd and "--insecure-any-address" not in cmd
        assert cmd[cmd.index("--key-file") + 1] == f"/keys/keys/{name}.key_secret"
        assert cmd[cmd.index("--authorized-keys") + 1] == "/keys/authorized-keys"
        assert name in made
        assert service["environment"]["KVMESH_SERVER_KEY"] == f"/keys/keys/{name}.key"
        http = cmd[cmd.index("--http") + 1]
        assert http.startswith("127.0.0.1:"), "the REST API is not published unprotected"


def test_parse_cli_rejects_unknown_options() -> None:
    with pytest.raises(click.ClickException):
        parse_cli(["node", "run", "--name", "n1", "--no-such-option"])
    with pytest.raises(click.ClickException):
        parse_cli(["no-such-command"])


def test_dockerfile_installs_the_wheelhouse_offline_with_the_tools_models_need() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG BASE=" in dockerfile and "FROM ${BASE}" in dockerfile
    assert "--no-index --find-links /tmp/wheels kvmesh" in dockerfile
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("dot", "graphviz")):
        assert f"command -v {tool} >/dev/null || missing=\"$missing {package}\"" in dockerfile
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile
    assert "USER kvmesh" in dockerfile
    assert 'ENTRYPOINT ["kvmesh"]' in dockerfile


def test_nodes_run_the_built_image_as_root_with_net_admin_alone(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert service["image"] == "kvmesh:latest" and "build" not in service, name
        assert service["user"] == "root" and service["cap_drop"] == ["ALL"], name
        assert service.get("cap_add", []) == ([] if name == "keys" else ["NET_ADMIN"]), name
    published = [p for s in nodes(compose).values() for p in s.get("ports", [])]
    assert published == ["127.0.0.1:${KVMESH_N1_PORT:-60002}:60002"]


def test_every_node_keeps_its_store_in_a_named_volume(compose: dict[str, Any]) -> None:
    """The default data dir (/var/lib/kvmesh/<name>) sits on a named volume per node, so a
    `docker compose restart` or a power cycle keeps the configuration."""
    volumes = compose.get("volumes") or {}
    for name, service in nodes(compose).items():
        assert "--ephemeral" not in service["command"] and "--data-dir" not in service["command"]
        mounts = service.get("volumes") or []
        assert f"{name}-data:/var/lib/kvmesh" in mounts, name
        assert f"{name}-data" in volumes
