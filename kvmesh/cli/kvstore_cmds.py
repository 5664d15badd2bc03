"""KvStore commands: node run, key, peer, snoop, compare, signature, counters, demo.

Errors print one line on stderr and exit non-zero: 1 for runtime failures (node unreachable,
request refused), 2 for invalid arguments or configuration. Every network call has a timeout
(`KVMESH_TIMEOUT` seconds, default 5).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from kvmesh.cli import kv_format as fmt
from kvmesh.cli.common import (
    KvCommand,
    KvGroup,
    OneLineUsageError,
    agent_options,
    cli_context,
    client_for,
    emit,
    fail,
    http_security_args,
    run_client,
)
from kvstore import (
    I64_MAX,
    KEY_FILE_ENV,
    SERVER_KEY_ENV,
    TTL_INFINITY,
    CurveError,
    KvStoreClient,
    KvStoreError,
    NodeConfig,
    NodeSecurity,
    Value,
    non_loopback,
    record_identity,
    store_signature,
)

F = TypeVar("F", bound=Callable[..., Any])

# `key erase` TTL: short, but above the default flood threshold (500 ms) so the shortened TTL
# still reaches every node instead of expiring only locally.
ERASE_TTL_MS = 1000
DEFAULT_DATA_ROOT = "/var/lib/kvmesh"


# -- node -------------------------------------------------------------------------------------


@click.group("node", cls=KvGroup)
def node_group() -> None:
    """Run a KvStore node."""


@node_group.command("run")
@click.option("--name", required=True, help="Node id (originator id and flood-path id).")
@click.option("--cmd-url", default=None, help="ROUTER command socket [tcp://127.0.0.1:60002].")
@click.option("--pub-url", default=None, help="PUB socket [tcp://127.0.0.1:60001].")
@click.option(
    "--peer",
    "peers",
    multiple=True,
    metavar="NAME=CMD_URL[,PUB_URL]",
    help="Peer to flood to and sync with (repeatable).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file of tuning knobs (see docs/kvstore.md).",
)
@click.option("--data-dir", default=None, type=click.Path(file_okay=False),
              help=f"Directory of the node's durable store [{DEFAULT_DATA_ROOT}/NAME].")
@click.option("--ephemeral", is_flag=True,
              help="Keep the store in memory only: nothing survives a restart.")
@click.option("--discard-corrupt-state", is_flag=True,
              help="Start EMPTY when the database is corrupt (it is moved aside, loudly).")
@click.option("--leaf", is_flag=True, help="Leaf node: store, flood and sync only the keys "
              "matching the filters below (or originated here); one or two core peers (--peer "
              "twice: dual-homed), never a transit between them.")
@click.option("--key-prefix-filter", "key_prefix_filters", multiple=True, metavar="P",
              help="Leaf: keep keys starting with P (repeatable; OR with the others). With "
              "--agent, the default is what the agent needs (config/NAME/, status/NAME/, ...).")
@click.option("--originator-filter", "originator_filters", multiple=True, metavar="O",
              help="Leaf: keep key-values originated by O (repeatable; OR with the others).")
@click.option("--agent", is_flag=True, help="Also run this node's agent, supervised, in its "
              "own process (options below).")
@click.option("--key-file", "node_key_file", type=click.Path(dir_okay=False), default=None,
              help="This node's CurveZMQ secret key (NAME.key_secret): run secured.")
@click.option("--authorized-keys", type=click.Path(file_okay=False), default=None,
              help="Directory of allowed public keys by role (peer/, operator/, reader/).")
@click.option("--insecure", is_flag=True, help="Plaintext, no authentication: only when every "
              "bound and peer address is loopback.")
@click.option("--insecure-any-address", is_flag=True, help="Plaintext on any address (warns).")
@agent_options
def node_run(
    name: str,
    cmd_url: str | None,
    pub_url: str | None,
    peers: Sequence[str],
    config_path: str | None,
    data_dir: str | None,
    ephemeral: bool,
    discard_corrupt_state: bool,
    leaf: bool,
    key_prefix_filters: Sequence[str],
    originator_filters: Sequence[str],
    agent: bool,
    node_key_file: str | None,
    authorized_keys: str | None,
    insecure: bool,
    insecure_any_address: bool,
    linux_netns: str | None,
    linux: bool,
    linux_state_dir: str | None,
    vpp_socket: str | None,
    http: str | None,
    http_cert: str | None,
    http_key: str | None,
    http_token_file: str | None,
    http_read_token_file: str | None,
    http_public_reads: bool,
    downstream_resync_s: float,
    assume_current: bool,
) -> None:
    """Run a node in the foreground until SIGTERM/SIGINT (exit code 0)."""
    from kvstore import ConfigError, load_config, parse_peer, run_node

    agent_args: list[str] = []
    for flag, given in (("--linux-netns", linux_netns), ("--vpp-socket", vpp_socket),
                        ("--http", http), ("--linux-state-dir", linux_state_dir)):
        if given is not None:
            agent_args += [flag, given]
    for flag, on in (("--linux", linux), ("--assume-current", assume_current)):
        if on:
            agent_args.append(flag)
    agent_args += ["--downstream-resync-s", str(downstream_resync_s)]
    if not agent and len(agent_args) > 2:
        fail("agent options (--linux, --linux-netns, --linux-state-dir, --vpp-socket, --http, "
             "--assume-current) need --agent", code=2)
    # Also rejects a bad --http ADDR:PORT, before anything starts.
    agent_args += http_security_args(http, http_cert, http_key, http_token_file,
                                     http_read_token_file, http_public_reads)

    try:
        config = load_config(config_path)
        peer_map = dict(config.peers)
        for text in peers:
            peer_name, address = parse_peer(text)
            peer_map[peer_name] = address
        if ephemeral and data_dir is not None:
            raise ValueError("--ephemeral and --data-dir exclude each other")
        if ephemeral:
            data_dir = ""
        elif data_dir is None and not config.data_dir:
            data_dir = str(Path(DEFAULT_DATA_ROOT) / name)
        config = config.with_overrides(
            name=name, cmd_url=cmd_url, pub_url=pub_url, peers=peer_map, data_dir=data_dir,
            discard_corrupt_state=discard_corrupt_state or None,
            **leaf_overrides(config, name, leaf, agent, key_prefix_filters, originator_filters),
        )
    except (ConfigError, ValueError) as exc:
        fail(str(exc), code=2)
    if linux_state_dir is None and config.data_dir:
        # The agent's durable state lives with the node's (kept by `cluster down`).
        agent_args += ["--linux-state-dir", str(Path(config.data_dir) / "agent")]
    security = node_security(config, node_key_file, authorized_keys, insecure,
                             insecure_any_address)
    if not agent:
        sys.exit(run_node(config, security))
    from kvmesh.agent.supervisor import AgentSupervisor

    if security is not None and node_key_file is not None:
        # The agent authenticates with this node's own key: an operator bound to this node
        # (kvstore.curve.NodeSecurity), the one client that may write status/<name>/.
        os.environ[KEY_FILE_ENV] = node_key_file
        os.environ[SERVER_KEY_ENV] = node_key_file
    supervisor = AgentSupervisor(config.name, config.cmd_url, agent_args)
    try:
        # Started once bound: the agent dials the bound address (a `*` port resolved).
        code = run_node(config, security,
                        on_ready=lambda node: supervisor.start(node.cmd_url))
    finally:
        supervisor.stop()
    sys.exit(code)


def leaf_overrides(config: NodeConfig, name: str, leaf: bool, agent: bool,
                   prefixes: Sequence[str], originators: Sequence[str]) -> dict[str, Any]:
    """The leaf settings of `node run`: flags win over the file; a leaf running its agent
    without filters keeps what the agent needs (docs/kvstore.md, "Leaf nodes")."""
    is_leaf = leaf or config.leaf
    key_prefixes = tuple(prefixes) or config.key_prefix_filters
    key_originators = tuple(originators) or config.key_originator_filters
    if is_leaf and agent and not key_prefixes and not key_originators:
        from kvmesh.agent.keys import agent_leaf_prefixes

        key_prefixes = agent_leaf_prefixes(name)
    return {"leaf": is_leaf, "key_prefix_filters": key_prefixes,
            "key_originator_filters": key_originators}


def node_security(config: NodeConfig, key_file: str | None, authorized_keys: str | None,
                  insecure: bool, insecure_any_address: bool) -> NodeSecurity | None:
    """The node's CurveZMQ setup from its options, or None for plaintext (checked here: plaintext
    only on loopback unless forced); a usage problem exits 2 with one line."""
    plaintext = insecure or insecure_any_address
    if plaintext and (key_file or authorized_keys):
        fail("node run: --insecure and --key-file/--authorized-keys exclude each other", code=2)
    if plaintext:
        urls = [config.cmd_url, config.pub_url, *(p.cmd_url for p in config.peers.values())]
        remote = non_loopback(urls)
        if remote and not insecure_any_address:
            fail(f"node run: --insecure is for loopback only ({', '.join(remote)} is not); "
                 "run secured (--key-file, --authorized-keys) or force --insecure-any-address",
                 code=2)
        if remote:
            click.echo(f"warning: node {config.name} runs PLAINTEXT and unauthenticated on "
                       f"{', '.join(remote)}: anyone who reaches it can write", err=True)
        return None
    if not key_file or not authorized_keys:
        fail("node run: give --key-file FILE --authorized-keys DIR (secured; see "
             "docs/security.md), or --insecure for a loopback-only plaintext node", code=2)
    try:
        return NodeSecurity(key_file, authorized_keys, config.name)
    except CurveError as exc:
        fail(f"node run: {exc}", code=2)


# -- key --------------------------------------------------------------------------------------


@click.group("key", cls=KvGroup)
def key_group() -> None:
    """Read and write key-values."""


@key_group.command("set")
@click.argument("key")
@click.argument("value", required=False)
@click.option("--file", "file_path", type=click.File("rb"), help="Read the value bytes from F.")
@click.option(
    "--version", type=click.IntRange(min=1, max=I64_MAX), default=None, help="[current + 1]"
)
@click.option("--ttl-ms", type=click.IntRange(min=1, max=I64_MAX), default=None, help="[infinite]")
@click.option("--originator", default=None, help="[the node's name]")
def key_set(
    key: str,
    value: str | None,
    file_path: Any,
    version: int | None,
    ttl_ms: int | None,
    originator: str | None,
) -> None:
    """Set KEY to VALUE (text) or to the bytes of --file."""
    if (value is None) == (file_path is None):
        raise OneLineUsageError("key set: give exactly one of VALUE or --file")
    raw: bytes = file_path.read() if file_path is not None else value.encode()  # type: ignore[union-attr]

    def action(client: KvStoreClient) -> tuple[Value, str | None]:
        return client.set_key(
            key,
            raw,
            version=version or 0,
            ttl_ms=ttl_ms if ttl_ms is not None else TTL_INFINITY,
            originator_id=originator,
        )

    sent, reason = run_client(action)
    if reason is not None and reason != "NO_CHANGE":
        fail(f"key {key!r} not applied: {reason} (version {sent.version}, {sent.originator_id})")
    note = " (unchanged)" if reason == "NO_CHANGE" else ""
    emit(
        {key: fmt.value_json(sent)},
        f"set {key} version {sent.version} originator {sent.originator_id}"
        f" ttl {fmt.ttl_text(sent.ttl_ms)}{note}",
    )


@key_group.command("get")
@click.argument("keys", nargs=-1, required=True)
def key_get(keys: Sequence[str]) -> None:
    """Print KEYs (missing keys are left out)."""
    key_vals = run_client(lambda c: c.get(keys))
    emit(fmt.key_vals_json(key_vals), fmt.key_vals_table(key_vals))


@key_group.command("dump")
@click.option("--prefix", default="", help="Only keys starting with P.")
@click.option("--originator", "originators", multiple=True, help="Only keys from O (repeatable).")
def key_dump(prefix: str, originators: Sequence[str]) -> None:
    """Print every key (filtered by prefix and/or originator)."""
    key_vals = run_client(lambda c: c.dump(prefix, originators))
    emit(fmt.key_vals_json(key_vals), fmt.key_vals_table(key_vals))


@key_group.command("hashes")
@click.option("--prefix", default="", help="Only keys starting with P.")
def key_hashes(prefix: str) -> None:
    """Print keys with version, originator, hash and TTL, without values."""
    key_vals = run_client(lambda c: c.hash_dump(prefix))
    emit(
        fmt.key_vals_json(key_vals, with_value=False),
        fmt.key_vals_table(key_vals, with_value=False),
    )


@key_group.command("erase")
@click.argument("key")
@click.option(
    "--ttl-ms", type=click.IntRange(min=1, max=I64_MAX), default=ERASE_TTL_MS, show_default=True
)
def key_erase(key: str, ttl_ms: int) -> None:
    """Make KEY expire soon everywhere (a TTL-only update with a short TTL)."""

    def action(client: KvStoreClient) -> tuple[Value | None, str | None]:
        current = client.get([key]).get(key)
        if current is None:
            return None, None
        if current.ttl_version >= I64_MAX:
            fail(f"key {key!r} not erased: its ttl_version is at the highest value ({I64_MAX})")
        update = Value(
            version=current.version,
            originator_id=current.originator_id,
            value=None,
            ttl_ms=ttl_ms,
            ttl_version=current.ttl_version + 1,
        )
        return update, client.set({key: update}).get(key)

    update, reason = run_client(action)
    if update is None:
        fail(f"key {key!r} not found")
    if reason is not None:
        fail(f"key {key!r} not erased: {reason}")
    emit({key: fmt.value_json(update)}, f"erase {key}: expires in {ttl_ms}ms")


# -- peer -------------------------------------------------------------------------------------


@click.group("peer", cls=KvGroup)
def peer_group() -> None:
    """Manage the node's peers."""


@peer_group.command("add")
@click.argument("name")
@click.argument("cmd_url")
@click.argument("pub_url", required=False, default="")
def peer_add(name: str, cmd_url: str, pub_url: str) -> None:
    """Flood to and sync with NAME at CMD_URL."""
    run_client(lambda c: c.add_peer(name, cmd_url, pub_url))
    emit({"added": name}, f"peer {name} added ({cmd_url})")


@peer_group.command("del")
@click.argument("name")
def peer_del(name: str) -> None:
    """Stop flooding to and syncing with NAME."""
    run_client(lambda c: c.del_peers([name]))
    emit({"deleted": name}, f"peer {name} deleted")


@peer_group.command("dump")
def peer_dump() -> None:
    """List peers with their sync state."""
    peers = run_client(lambda c: c.peers())
    emit(fmt.peers_json(peers), fmt.peers_table(peers))


# -- snoop, compare, signature, counters --------------------------------------------------------


@click.command("snoop", cls=KvCommand)
@click.option("--prefix", default="", help="Only keys starting with P.")
@click.option(
    "--duration", type=click.FloatRange(min=0), default=0.0, help="Stop after S seconds [forever]."
)
@click.option("--pub-url", default=None, help="PUB URL [asked from the node].")
def snoop(prefix: str, duration: float, pub_url: str | None) -> None:
    """Print the publication stream (key-values and expired keys) as it arrives."""
    as_json = cli_context().as_json
    url = pub_url or run_client(lambda c: c.node_info().pub_url)
    deadline = time.monotonic() + duration if duration > 0 else None
    try:
        with client_for().subscribe(prefix, pub_url=url) as subscription:
            if not as_json:
                click.echo(f"snooping {url}" + (f" prefix {prefix!r}" if prefix else ""), err=True)
            while deadline is None or time.monotonic() < deadline:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                publication = subscription.recv(timeout_s=wait)
                if publication is None:
                    continue
                if as_json:
                    click.echo(fmt.dumps(fmt.publication_json(publication)))
                else:
                    for line in fmt.publication_lines(publication):
                        click.echo(line)
    except KvStoreError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass


@click.command("compare", cls=KvCommand)
@click.argument("urls", nargs=-1, required=True)
@click.option("--prefix", default="", help="Only keys starting with P.")
def compare(urls: Sequence[str], prefix: str) -> None:
    """Show which keys differ between the nodes at URLs (with --url when one URL is given)."""
    targets = list(dict.fromkeys(urls if len(urls) > 1 else [cli_context().url, *urls]))
    if len(targets) < 2:
        raise OneLineUsageError("compare: need two different URLs")
    # Full dumps: the comparison is of the value bytes (kvstore.signature), never of the
    # hashes alone, which a sender could have forged.
    dumps = {url: run_client(lambda c: c.dump(prefix), url=url) for url in targets}
    differing: dict[str, dict[str, Any]] = {}
    for key in sorted(set().union(*dumps.values())):
        identities = {
            record_identity(v) if (v := dumps[url].get(key)) else None for url in targets
        }
        if len(identities) > 1:
            differing[key] = {
                url: (fmt.value_json(d[key], with_value=False) if key in d else None)
                for url, d in dumps.items()
            }
    if cli_context().as_json:
        click.echo(fmt.dumps(differing))
        return
    if not differing:
        click.echo(f"in sync: {len(targets)} nodes, {len(dumps[targets[0]])} keys")
        return
    rows = []
    for key, per_url in differing.items():
        rows.append(
            [key]
            + [
                f"v{v['version']} {v['originator']} {(v['hash'] or 0) & 0xFFFFFFFF:08x}"
                if v
                else "(missing)"
                for v in per_url.values()
            ]
        )
    click.echo(fmt.table(["Key", *targets], rows))
    click.echo(f"{len(differing)} key(s) differ")


@click.command("signature", cls=KvCommand)
@click.option("--prefix", default="", help="Only keys starting with P.")
def signature(prefix: str) -> None:
    """Print one digest of the store (equal on nodes whose stores agree)."""
    key_vals = run_client(lambda c: c.dump(prefix))
    sig = store_signature(key_vals)
    emit({"signature": sig, "keys": len(key_vals)}, f"{sig}  ({len(key_vals)} keys)")


@click.command("counters", cls=KvCommand)
@click.option("--prefix", default="", help="Only counters starting with P.")
def counters(prefix: str) -> None:
    """Print the node's counters."""
    values = run_client(lambda c: c.counters())
    values = {k: v for k, v in values.items() if k.startswith(prefix)}
    emit(dict(sorted(values.items())), fmt.counters_table(values))


@click.command("demo", cls=KvCommand)
@click.option("--keep", is_flag=True, help="Leave the cluster running afterwards.")
@click.option("--kvstore-only", is_flag=True,
              help="Only the KvStore mesh: set a key on one node, show it on all, snoop.")
def demo(keep: bool, kvstore_only: bool) -> None:
    """The README's main job: a local 3-node cluster configuring Linux networking from n1
    (needs root for its namespaces); `--kvstore-only` for the replicated store alone."""
    if kvstore_only:
        from kvmesh.demo import run_demo

        sys.exit(run_demo(keep=keep))
    from kvmesh.cluster_demo import run_cluster_demo

    sys.exit(run_cluster_demo(keep=keep))


def register(group: click.Group) -> None:
    """Attach the KvStore commands to the top-level group."""
    for command in (
        node_group,
        key_group,
        peer_group,
        snoop,
        compare,
        signature,
        counters,
        demo,
    ):
        group.add_command(command)
