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
    run_client,
)
from kvstore import (
    DEFAULT_DATA_ROOT,
    I64_MAX,
    LOG_LEVELS,
    TTL_INFINITY,
    KvStoreClient,
    KvStoreError,
    ServiceNotifier,
    Value,
    record_identity,
    store_signature,
)

F = TypeVar("F", bound=Callable[..., Any])

# `key erase` TTL: short, but above the default flood threshold (500 ms) so the shortened TTL
# still reaches every node instead of expiring only locally.
ERASE_TTL_MS = 1000


# -- node -------------------------------------------------------------------------------------


@click.group("node", cls=KvGroup)
def node_group() -> None:
    """Run a KvStore node."""


@node_group.command("run")
@click.option("--config", "config_path", type=click.Path(), default=None,
              help="TOML file of the node's whole configuration, its agent's included "
              "(docs/kvstore.md, \"The configuration file\"); the options below override it. "
              "SIGHUP re-reads it.")
@click.option("--check", is_flag=True, help="Print the effective configuration (TOML, each "
              "value's source: default, file or flag) and exit: 0, or 1 with the error.")
@click.option("--name", default=None, help="Node id (originator id and flood-path id) [the "
              "file's name].")
@click.option("--cmd-url", default=None, help="ROUTER command socket [tcp://127.0.0.1:60002].")
@click.option("--pub-url", default=None, help="PUB socket [tcp://127.0.0.1:60001].")
@click.option(
    "--peer",
    "peers",
    multiple=True,
    metavar="NAME=CMD_URL[,PUB_URL]",
    help="Peer to flood to and sync with (repeatable; added to the file's [peers]).",
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
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default=None,
              help="The node's log level [info].")
@agent_options
def node_run(config_path: str | None, check: bool, peers: Sequence[str],
             **options: Any) -> None:
    """Run a node in the foreground until SIGTERM/SIGINT (exit code 0); SIGHUP re-reads --config."""
    from kvmesh.node_config import (
        Reloader,
        agent_args,
        build_run_config,
        flag_values,
        node_security,
        use_node_key_for_agent,
    )
    from kvstore import ConfigError, run_node

    ctx = click.get_current_context()
    given = {option: value for option, value in options.items()
             if ctx.get_parameter_source(option) == click.core.ParameterSource.COMMANDLINE}
    try:
        flags = flag_values(given, tuple(peers))
        run = build_run_config(config_path, flags)
        security = node_security(run)
        args = agent_args(run) if run.agent["enabled"] else []
    except ConfigError as exc:
        fail(str(exc), code=1 if check else 2)
    if check:
        click.echo(run.render(), nl=False)
        sys.exit(0)
    config = run.node
    reload = Reloader(run, flags)
    # systemd's Type=notify (kvstore/sdnotify.py): READY=1 once the node answers and its agent
    # has started, WATCHDOG=1 from the event loop, STOPPING=1 on SIGTERM; no-ops outside systemd.
    notifier = ServiceNotifier.from_env()
    if not run.agent["enabled"]:
        sys.exit(run_node(config, security, on_hangup=reload,
                          log_level=run.effective["log_level"],
                          on_ready=lambda node: notifier.serving(node.stop, ready=True)))
    from kvmesh.agent.supervisor import AgentSupervisor

    use_node_key_for_agent(run)
    supervisor = AgentSupervisor(config.name, config.cmd_url, args,
                                 on_started=notifier.ready if notifier.enabled else None)

    def on_ready(node: Any) -> None:
        notifier.serving(node.stop)
        # Started once bound: the agent dials the bound address (a `*` port resolved).
        supervisor.start(node.cmd_url)

    try:
        code = run_node(config, security, on_ready=on_ready, on_hangup=reload,
                        log_level=run.effective["log_level"])
    finally:
        supervisor.stop()
    sys.exit(code)


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
@click.option("--http", "http_url", default=None, metavar="URL",
              help="Follow an agent's GET /stream at URL (http[s]://HOST:PORT) instead of the "
              "node's ZeroMQ stream: values decoded, no ZeroMQ or Curve keys needed.")
@click.option("--snapshot", is_flag=True, help="With --http: every current key first, then "
              "a `synced` line, then the changes.")
def snoop(prefix: str, duration: float, pub_url: str | None, http_url: str | None,
          snapshot: bool) -> None:
    """Print the publication stream (key-values and expired keys) as it arrives."""
    as_json = cli_context().as_json
    if http_url is not None:
        snoop_http(http_url, prefix, duration, snapshot, as_json)
        return
    if snapshot:
        raise OneLineUsageError("snoop: --snapshot needs --http")
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


def snoop_http(url: str, prefix: str, duration: float, snapshot: bool, as_json: bool) -> None:
    """`snoop --http`: one line per event (JSON with --json: {"event": ..., **data})."""
    import json
    import threading
    import urllib.parse

    from kvmesh.agent.sse import event_line
    from kvmesh.rest_client import AgentRest, RestError

    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OneLineUsageError(f"snoop: --http {url!r}: expected http[s]://HOST:PORT")
    rest = AgentRest.at(parts.netloc, tls=parts.scheme == "https")
    if duration > 0:  # the stream blocks in a read: end the process when the time is up
        timer = threading.Timer(duration, lambda: os._exit(0))
        timer.daemon = True
        timer.start()
    try:
        for event, data in rest.events("/stream", {"prefix": prefix,
                                                   "snapshot": "1" if snapshot else None}):
            if as_json:
                click.echo(json.dumps({"event": event, **json.loads(data)}, sort_keys=True))
            else:
                click.echo(event_line(event, json.loads(data)))
    except RestError as exc:
        fail(str(exc), code=exc.exit_code)
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
