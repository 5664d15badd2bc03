"""Agent commands: desired state (config), statuses, and the agent's REST views (`agent run`
is kvmesh.cli.agent_run_cmds: the agent process loads none of these).

`config` and `status` talk only to the KvStore (any node sees the whole cluster). The commands
that show one agent's scheduler (`values`, `history`, `resync`, `graph`, `report`, `recon`) find
that agent's HTTP address in the mesh under `node/<name>/agent`, so they also work from any node.
"""

from __future__ import annotations

import json
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from kvmesh.agent.desired import decode_config_value, encode_config_value
from kvmesh.agent.health import BAD_VALUE_STATES
from kvmesh.agent.keys import (
    STATUS,
    agent_key,
    config_key,
    config_prefix,
    model_key_of,
    status_prefix,
    validate_node_name,
)
from kvmesh.agent.liveness import AgentLiveness, agent_liveness
from kvmesh.agent.status import decode_status
from kvmesh.cli.common import (
    KvCommand,
    KvGroup,
    cli_context,
    emit,
    fail,
    run_client,
)
from kvmesh.cli.members import allow_unknown_node_option, refuse_unknown_nodes
from kvmesh.rest_client import AgentAddress, AgentRest, RestError, find_agent
from kvstore import KvStoreClient, Value, next_version

# -- config -------------------------------------------------------------------------------------


@click.group("config", cls=KvGroup)
def config_group() -> None:
    """Desired state of any node, written to and read from the mesh."""


@config_group.command("set")
@click.argument("node")
@click.argument("model_key")
@click.argument("value_json")
@allow_unknown_node_option
def config_set(node: str, model_key: str, value_json: str, allow_unknown: bool) -> None:
    """Set the desired value of MODEL_KEY on NODE (JSON; validated before it enters the mesh)."""
    from kvmesh.agent.models import ModelError, validate_model

    try:
        validate_node_name(node)
        value = json.loads(value_json)
    except json.JSONDecodeError as exc:
        fail(f"VALUE_JSON is not valid JSON: {exc}", code=2)
    except ValueError as exc:
        fail(str(exc), code=2)
    if not isinstance(value, dict):
        fail("VALUE_JSON must be a JSON object", code=2)
    try:
        validate_model(model_key, value)
    except ModelError as exc:
        fail(str(exc), code=2)
    key = config_key(node, model_key)

    def action(client: KvStoreClient) -> tuple[Value, str | None]:
        refuse_unknown_nodes(client, [node], allow_unknown)
        return client.set_key(key, encode_config_value(value))

    sent, reason = run_client(action)
    if reason is not None:
        fail(f"{key}: not applied ({reason})")
    emit({"key": key, "version": sent.version}, f"{key} set (version {sent.version})")


@config_group.command("del")
@click.argument("node")
@click.argument("model_key")
def config_del(node: str, model_key: str) -> None:
    """Delete MODEL_KEY from NODE's desired state (a tombstone with a higher version)."""
    key = config_key(node, model_key)

    def action(client: KvStoreClient) -> int | None:
        current = client.get([key]).get(key)
        if current is None or not current.value:
            return None
        sent, reason = client.set_key(key, b"", version=next_version(key, current))
        if reason is not None:
            fail(f"{key}: not applied ({reason})")
        return int(sent.version)

    version = run_client(action)
    if version is None:
        fail(f"{key}: no such desired value")
    emit({"key": key, "version": version}, f"{key} deleted (version {version})")


@config_group.command("get")
@click.argument("node")
@click.argument("prefix", required=False, default="")
def config_get(node: str, prefix: str) -> None:
    """Show NODE's desired state (optionally under a model-key PREFIX) as JSON."""
    dump: dict[str, Value] = run_client(lambda c: c.dump(prefix=config_prefix(node) + prefix))
    out: dict[str, Any] = {}
    for key, value in sorted(dump.items()):
        model_key = model_key_of(key, config_prefix(node))
        if model_key is None or not value.value:
            continue
        try:
            out[model_key] = decode_config_value(value.value)
        except ValueError as exc:
            out[model_key] = {"error": str(exc)}
    click.echo(json.dumps(out, indent=2, sort_keys=True))


# -- status -------------------------------------------------------------------------------------


def parse_states(text: str | None) -> frozenset[str] | None:
    """`FAILED,INVALID` -> the value states named (exit 2 on an unknown one); None: all."""
    if not text:
        return None
    from scheduler import ValueState

    names = {part.strip().upper() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(ValueState.__members__))
    if unknown or not names:
        fail(f"--state: unknown value state(s) {', '.join(unknown) or repr(text)}; known: "
             f"{', '.join(ValueState.__members__)}", code=2)
    return frozenset(names)


@click.command("status", cls=KvCommand)
@click.argument("node", required=False)
@click.option("--prefix", default="", help="Only model keys starting with P.")
@click.option("--state", "states", default=None, metavar="STATE[,STATE...]",
              help="Only values in these states (e.g. FAILED,INVALID,PENDING).")
@click.option("--watch", is_flag=True, help="Live table, redrawn every --interval (Ctrl-C "
              "ends it).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between redraws with --watch.")
def status(node: str | None, prefix: str, states: str | None, watch: bool,
           interval: float) -> None:
    """Value states of NODE (all nodes when omitted), read from the mesh.

    A node whose agent stopped refreshing is shown as down (since when) and its statuses as
    stale. Exit code (without --watch): 0, or 1 when a value shown is FAILED or INVALID or
    stale (docs/operator.md, "Exit codes").
    """
    wanted = parse_states(states)
    if not watch:
        sys.exit(show_status(node, prefix, wanted))
    try:
        while True:
            text = status_text(status_rows(node, prefix, wanted))
            click.clear()
            click.echo(f"{time.strftime('%H:%M:%S')}  kvmesh status "
                       f"{node or '(all nodes)'}  every {interval:g}s\n{text}")
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def show_status(node: str | None, prefix: str, states: frozenset[str] | None = None) -> int:
    """Print the statuses; the exit code (1: a value shown is FAILED, INVALID or stale)."""
    rows = status_rows(node, prefix, states)
    if cli_context().as_json:
        emit({name: view.values for name, view in rows.items()}, "")
    else:
        click.echo(status_text(rows))
    bad = any(rec["stale"] or rec.get("state") in BAD_VALUE_STATES
              for view in rows.values() for rec in view.values.values())
    return 1 if bad else 0


def status_text(rows: dict[str, NodeStatuses]) -> str:
    lines = [f"{'NODE':<8} {'KEY':<50} {'STATE':<20} {'LAST OP':<8} DETAILS / ERROR"]
    notes = []
    for node_name, view in rows.items():
        if view.agent.known and not view.agent.up:
            notes.append(f"{node_name}: agent {view.agent.describe()}: its statuses are the "
                         "last it published (stale), not current")
        for model_key, rec in view.values.items():
            extra = rec.get("error") or ", ".join(rec.get("details") or ())
            state = f"{rec['state']} (stale)" if rec["stale"] else rec["state"]
            lines.append(f"{node_name:<8} {model_key:<50} {state:<20} "
                         f"{rec.get('last_op', ''):<8} {extra}")
    if len(lines) == 1:
        return "no statuses found"
    return "\n".join(lines + notes)


def refuse_other_node_on_leaf(client: KvStoreClient, node: str | None) -> None:
    """A leaf holds only its own share (docs/kvstore.md, "Leaf nodes"): asked about another
    node, say which non-leaf node to ask instead of answering "nothing found"."""
    info = client.node_info()
    if node is None or node == info.name or info.leaf_filters is None:
        return
    peers = sorted(client.peers())
    where = f"its peer {peers[0]}" if peers else "a non-leaf node"
    fail(f"{info.name} is a leaf node: it holds only its own share, not {node}'s; ask {where}"
         f" (a non-leaf node) instead", 2)


@dataclass
class NodeStatuses:
    """One node's statuses (each record with "stale": its agent is down) and its agent."""

    agent: AgentLiveness
    values: dict[str, dict[str, Any]] = field(default_factory=dict)


def status_rows(node: str | None, prefix: str,
                states: frozenset[str] | None = None) -> dict[str, NodeStatuses]:
    scan = status_prefix(node) if node else STATUS

    def action(client: KvStoreClient) -> tuple[dict[str, Value], dict[str, Value]]:
        refuse_other_node_on_leaf(client, node)
        dump = client.dump(prefix=scan)
        names = {key[len(STATUS):].partition("/")[0] for key in dump}
        return dump, client.get([agent_key(name) for name in sorted(names)])

    dump, agents = run_client(action)
    now = time.time()
    rows: dict[str, NodeStatuses] = {}
    for key, value in sorted(dump.items()):
        node_name, _, model_key = key[len(STATUS):].partition("/")
        record = decode_status(value.value)
        if record is None or not model_key.startswith(prefix):
            continue
        if states is not None and record.get("state") not in states:
            continue
        view = rows.get(node_name)
        if view is None:
            found = agents.get(agent_key(node_name))
            liveness = agent_liveness(decode_status(found.value) if found else None,
                                      found.ttl_ms if found else None, now)
            view = rows[node_name] = NodeStatuses(liveness)
        # No record at all (a 0.4.0 agent without --http published none): no way to tell.
        view.values[model_key] = {**record, "stale": view.agent.known and not view.agent.up}
    return rows


# -- the agent's REST views ----------------------------------------------------------------------


def agent_rest(node: str | None) -> AgentRest:
    """`node`'s agent REST API (default: the agent of the node we talk to), found in the mesh."""

    def action(client: KvStoreClient) -> AgentAddress:
        refuse_other_node_on_leaf(client, node)
        try:
            return find_agent(client, node or client.node_info().name)
        except RestError as exc:
            fail(str(exc), exc.exit_code)

    address: AgentAddress = run_client(action)
    try:
        return AgentRest(address)
    except RestError as exc:
        fail(str(exc), exc.exit_code)


def http_call(rest: AgentRest, path: str, params: dict[str, Any] | None = None,
              method: str = "GET") -> bytes:
    try:
        return rest.request(method, path, params)
    except RestError as exc:
        fail(str(exc), exc.exit_code)


def http_json(rest: AgentRest, path: str, params: dict[str, Any] | None = None,
              method: str = "GET") -> Any:
    try:
        return rest.json(method, path, params)
    except RestError as exc:
        fail(str(exc), exc.exit_code)


node_option = click.option("--node", default=None, help="Node whose agent to ask [the local one].")


@click.command("values", cls=KvCommand)
@node_option
@click.option("--prefix", default="", help="Only keys starting with P.")
def values(node: str | None, prefix: str) -> None:
    """The scheduler's values and their states (like agentctl values)."""
    rest = agent_rest(node)
    statuses = http_json(rest, "/scheduler/status")
    rows = [s for s in statuses if str(s.get("key", "")).startswith(prefix)]
    if cli_context().as_json:
        emit(rows, "")
        return
    lines = [f"{'KEY':<55} {'STATE':<12} {'ORIGIN':<8} {'LAST OP':<8} DETAILS / ERROR"]
    for st in sorted(rows, key=lambda s: s["key"]):
        extra = st.get("error") or ", ".join(st.get("details") or ())
        lines.append(f"{st['key']:<55} {st['state']:<12} {st.get('origin', ''):<8} "
                     f"{st.get('last_op', ''):<8} {extra or ''}")
    click.echo("\n".join(lines))


@click.command("history", cls=KvCommand)
@click.argument("seq", required=False, type=click.IntRange(min=0))
@node_option
def history(seq: int | None, node: str | None) -> None:
    """Transaction history (or one transaction) in the scheduler's log format."""
    rest = agent_rest(node)
    if cli_context().as_json:
        emit(http_json(rest, "/scheduler/txn-history", {"seq-num": seq}), "")
        return
    click.echo(http_call(rest, "/scheduler/txn-history", {"seq-num": seq, "format": "text"})
               .decode(), nl=False)


@click.command("resync", cls=KvCommand)
@click.option("--retry", is_flag=True, help="Retry failed operations afterwards.")
@click.option("--force", is_flag=True,
              help="Declare the node's KvStore the truth although it is not known to be current "
              "(EMPTY, or RESTORED with no peer synced): its agent may then delete what the "
              "store does not hold.")
@node_option
def resync(retry: bool, force: bool, node: str | None) -> None:
    """Downstream resync: re-read the southbound and repair drift."""
    rest = agent_rest(node)
    if force:
        forced = http_json(rest, "/agent/assume-current", {}, "POST")
        click.echo(f"{node or 'the local node'}: KvStore declared current "
                   f"(was {forced.get('store_state', '?')}); devices reconcile with deletes",
                   err=True)
        if not forced.get("all_known", False):
            emit(forced, "devices not KNOWN yet reconcile now (kvmesh recon status)")
            return
    click.echo(f"downstream resync of {node or 'the local node'} running "
               f"(agent at {rest.address.url})...", err=True)
    started = time.monotonic()
    result = http_json(rest, "/scheduler/downstream-resync",
                       {"retry": "true" if retry else "false", "verbose": "true"}, "POST")
    executed = result.get("executed") or []
    errors = result.get("errors") or {}
    emit(result, f"downstream resync done (transaction {result.get('seq', '?')}): "
                 f"{len(executed)} operation(s), {len(errors)} error(s) in "
                 f"{time.monotonic() - started:.2f}s")


@click.command("graph", cls=KvCommand)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="FILE.svg (rendered by Graphviz) or FILE.dot.")
@node_option
def graph(out_path: str, node: str | None) -> None:
    """Write the scheduler's dependency graph to a file."""
    fmt = "dot" if out_path.endswith(".dot") else "svg"
    body = http_call(agent_rest(node), "/scheduler/graph", {"format": fmt})
    with open(out_path, "wb") as fh:
        fh.write(body)
    click.echo(f"graph written to {out_path} ({len(body)} bytes)")


@click.command("report", cls=KvCommand)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@node_option
def report(out_path: str, node: str | None) -> None:
    """Zip everything useful for a bug report: history, dumps in all views, status, counters."""
    rest = agent_rest(node)
    parts: Sequence[tuple[str, str, dict[str, Any]]] = (
        ("txn-history.txt", "/scheduler/txn-history", {"format": "text"}),
        ("txn-history.json", "/scheduler/txn-history", {}),
        ("dump-cached.json", "/scheduler/dump", {"view": "cached"}),
        ("dump-NB.json", "/scheduler/dump", {"view": "NB"}),
        ("dump-SB.json", "/scheduler/dump", {"view": "SB"}),
        ("status.json", "/scheduler/status", {}),
        ("stats.json", "/scheduler/stats", {}),
        ("graph.dot", "/scheduler/graph", {"format": "dot"}),
        ("recon.json", "/recon/services", {}),
        ("metrics.txt", "/metrics", {}),
    )
    with zipfile.ZipFile(out_path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i, (name, path, params) in enumerate(parts, 1):
            click.echo(f"[{i}/{len(parts)}] {name}", err=True)
            zf.writestr(name, http_call(rest, path, params))
        counters = run_client(lambda c: c.counters())
        zf.writestr("kvstore-counters.json", json.dumps(counters, indent=2, sort_keys=True))
    click.echo(f"report written to {out_path}")


# -- reconciliation -----------------------------------------------------------------------------


@click.group("recon", cls=KvGroup)
def recon_group() -> None:
    """The reconciliation framework."""


@recon_group.command("services")
@node_option
def recon_services(node: str | None) -> None:
    """Registered services in the order they run."""
    data = http_json(agent_rest(node), "/recon/services")
    lines = [f"{'PRIORITY':>8}  {'NAME':<28} INTENT"]
    lines += [f"{s['priority']:>8}  {s['name']:<28} {s['intent']}" for s in data["services"]]
    emit(data["services"], "\n".join(lines))


@recon_group.command("status")
@click.argument("node", required=False)
def recon_status(node: str | None) -> None:
    """Per-device, per-service reconciliation state and counters."""
    data = http_json(agent_rest(node), "/recon/services")
    lines = [f"{'DEVICE':<8} {'STATE':<13} {'SERVICE':<26} {'SVC STATE':<10} "
             f"{'OK':>4} {'FAIL':>4} LAST ERROR"]
    order = {s["name"]: i for i, s in enumerate(data["services"])}  # priority order
    for device, services in sorted(data["status"].items()):
        dev_state = data["devices"].get(device, "")
        for name, st in sorted(services.items(), key=lambda kv: order.get(kv[0], len(order))):
            lines.append(f"{device:<8} {dev_state:<13} {name:<26} {st['state']:<10} "
                         f"{st['successes']:>4} {st['failures']:>4} {st['last_error']}")
    held = data.get("held") or {}
    lines += [f"{device} held out of KNOWN: {reason}" for device, reason in sorted(held.items())]
    emit({"devices": data["devices"], "status": data["status"], "held": held,
          "store_state": data.get("store_state")}, "\n".join(lines))


def register(group: click.Group) -> None:
    for command in (config_group, status, values, history, resync, graph, report,
                    recon_group):
        group.add_command(command)
