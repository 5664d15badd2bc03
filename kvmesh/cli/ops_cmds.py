"""Operator workflow: models, a node's state as a file, plan and apply.

`model list|schema` show the configurable models (JSON Schema generated from them). `config
export` writes the desired state held in the mesh as a state file; `plan -f FILE` shows what
applying it changes (desired-state diff, and each node's scheduler plan fetched read-only from
its agent); `apply -f FILE` validates everything, writes one batch per node and, with `--wait`,
follows the statuses the agents publish until every written value settled.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from kvmesh.agent.desired import decode_config_value, encode_config_value
from kvmesh.agent.keys import CONFIG, agent_key, config_key, status_prefix
from kvmesh.agent.status import decode_status
from kvmesh.cli.common import KvCommand, KvGroup, cli_context, emit, fail, run_client
from kvmesh.statefile import NodeDiff, State, StateFileError, diff_state, export_state, parse_state
from kvstore.client import KvStoreClient, make_value

# RETRYING counts as settled (as FAILED): the value failed; the node keeps retrying on its own.
SETTLED_STATES = frozenset({"CONFIGURED", "FAILED", "RETRYING", "INVALID", "PENDING",
                            "UNIMPLEMENTED"})
GONE_STATES = frozenset({"REMOVED", "NONEXISTENT"})
POLL_S = 0.05
PLAN_TIMEOUT_S = 30.0

# -- models ----------------------------------------------------------------------------------


@click.group("model", cls=KvGroup)
def model_group() -> None:
    """The configurable models and their JSON Schema."""


@model_group.command("list")
def model_list() -> None:
    """The models, their key shapes and what they are."""
    from kvmesh.agent.models import MODELS

    rows = [{"model": m.name, "key": m.shape, "description": m.description} for m in MODELS]
    emit(rows, "\n".join(f"{r['model']:<16} {r['key']:<40} {r['description']}" for r in rows))


@model_group.command("schema")
@click.argument("model", required=False)
def model_schema(model: str | None) -> None:
    """JSON Schema of MODEL (all models when omitted), generated from the models."""
    from kvmesh.agent.models import ModelError, json_schema

    try:
        click.echo(json.dumps(json_schema(model), indent=2, sort_keys=True))
    except ModelError as exc:
        fail(str(exc), code=2)


# -- reading the mesh --------------------------------------------------------------------------


def desired_state(client: KvStoreClient, nodes: list[str] | None = None) -> State:
    """The desired state held in the mesh: node -> model key -> value (tombstones left out)."""
    prefixes = [f"{CONFIG}{node}/" for node in nodes] if nodes else [CONFIG]
    state: State = {node: {} for node in nodes or ()}
    for prefix in prefixes:
        for key, value in client.dump(prefix=prefix).items():
            node, _, model_key = key[len(CONFIG):].partition("/")
            if not model_key or not value.value:
                continue
            try:
                decoded = decode_config_value(value.value)
            except ValueError:
                continue  # not a map: the agent reports it; export cannot reproduce it
            if decoded is not None:
                state.setdefault(node, {})[model_key] = decoded
    return state


def read_state_file(path: str) -> State:
    try:
        if path == "-":
            return parse_state(sys.stdin.read(), "standard input")
        with open(path, encoding="utf-8") as handle:
            return parse_state(handle.read(), path)
    except (OSError, StateFileError) as exc:
        fail(str(exc), code=2)


def refuse_invalid(state: State) -> None:
    """Every value validated first: one bad value refuses the whole file (nothing written)."""
    from kvmesh.agent.models import invalid_values

    lines: list[str] = []
    for node, values in state.items():
        lines.extend(f"{node}: {exc}" for exc in invalid_values(values).values())
    if lines:
        click.echo("\n".join(f"invalid: {line}" for line in lines), err=True)
        fail(f"{len(lines)} invalid value(s) in the file: nothing was written")


def agent_url(client: KvStoreClient, node: str) -> str | None:
    found = client.get([agent_key(node)]).get(agent_key(node))
    record = decode_status(found.value if found else None)
    return f"http://{record['http']}" if record and record.get("http") else None


def agent_post(base: str, path: str, body: Any, timeout_s: float = PLAN_TIMEOUT_S) -> Any:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        raise RuntimeError(f"{path}: HTTP {exc.code}: {detail.strip()}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(f"agent at {base} unreachable: {exc}") from None


# -- export, plan ------------------------------------------------------------------------------


@click.command("export", cls=KvCommand)
@click.argument("nodes", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml",
              show_default=True)
def config_export(nodes: tuple[str, ...], fmt: str) -> None:
    """Desired state of NODES (all when omitted) as a state file (see `kvmesh apply`)."""
    state = run_client(lambda c: desired_state(c, list(nodes) or None))
    click.echo(export_state(state, "json" if cli_context().as_json else fmt), nl=False)


def compute_diff(client: KvStoreClient, wanted: State, replace: bool) -> dict[str, NodeDiff]:
    return diff_state(desired_state(client, sorted(wanted)), wanted, replace)


def scheduler_plans(client: KvStoreClient, diffs: Mapping[str, NodeDiff]) -> dict[str, Any]:
    """Each changed node's scheduler plan, from its agent (read-only), or why there is none."""
    plans: dict[str, Any] = {}
    for node, diff in diffs.items():
        if diff.empty:
            continue
        base = agent_url(client, node)
        if base is None:
            plans[node] = {"error": f"no agent with a REST API registered for {node}"}
            continue
        try:
            plans[node] = agent_post(base, "/scheduler/plan", {"values": diff.writes()})
        except RuntimeError as exc:
            plans[node] = {"error": str(exc)}
    return plans


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def plan_text(diffs: Mapping[str, NodeDiff], plans: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for node, diff in diffs.items():
        lines.append(f"node {node}: {len(diff.added)} to add, {len(diff.changed)} to change, "
                     f"{len(diff.removed)} to remove")
        for key, value in diff.added.items():
            lines.append(f"  + {key} {_short(value)}")
        for key, (_old, _new, changes) in diff.changed.items():
            lines.append(f"  ~ {key}")
            lines.extend(f"      {c.path}: {_short(c.old)} -> {_short(c.new)}" for c in changes)
        for key in diff.removed:
            lines.append(f"  - {key}")
        plan = plans.get(node)
        if plan is None:
            continue
        if "error" in plan:
            lines.append(f"  scheduler plan: unavailable ({plan['error']})")
            continue
        lines.append(f"  scheduler plan ({len(plan['operations'])} operation(s)):")
        for number, op in enumerate(plan["operations"], 1):
            flags = f" [{', '.join(op['flags'])}]" if op["flags"] else ""
            error = f" error: {op['error']}" if op.get("error") else ""
            lines.append(f"    {number}. {op['operation']} {op['key']}{flags}{error}")
    return "\n".join(lines)


@click.command("plan", cls=KvCommand)
@click.option("-f", "--file", "path", required=True, help="State file (YAML or JSON; - reads "
              "standard input).")
@click.option("--replace", is_flag=True, help="Also remove values the file does not name.")
@click.option("--detailed-exitcode", is_flag=True, help="Exit 2 when there are changes.")
def plan(path: str, replace: bool, detailed_exitcode: bool) -> None:
    """What applying FILE would change; read-only (nothing is written anywhere)."""
    wanted = read_state_file(path)
    refuse_invalid(wanted)

    def action(client: KvStoreClient) -> tuple[dict[str, NodeDiff], dict[str, Any]]:
        diffs = compute_diff(client, wanted, replace)
        return diffs, scheduler_plans(client, diffs)

    diffs, plans = run_client(action)
    changed = any(not d.empty for d in diffs.values())
    as_json = {node: {"added": sorted(d.added), "changed": {
        k: [{"path": c.path, "old": c.old, "new": c.new} for c in changes]
        for k, (_o, _n, changes) in d.changed.items()}, "removed": sorted(d.removed),
        "scheduler": plans.get(node)} for node, d in diffs.items()}
    emit(as_json, plan_text(diffs, plans) if changed else "no changes")
    sys.exit(2 if changed and detailed_exitcode else 0)


# -- apply -------------------------------------------------------------------------------------


def write_batches(client: KvStoreClient, diffs: Mapping[str, NodeDiff]) -> None:
    """One KEY_SET per node with every change (versions one above what the mesh holds)."""
    originator = client.node_info().name
    for node, diff in diffs.items():
        writes = diff.writes()
        if not writes:
            continue
        keys = [config_key(node, model_key) for model_key in writes]
        held = client.get(keys)
        batch = {}
        for model_key, value in writes.items():
            key = config_key(node, model_key)
            current = held.get(key)
            batch[key] = make_value(encode_config_value(value),
                                    version=1 if current is None else current.version + 1,
                                    originator_id=originator)
        refused = client.set(batch)
        if refused:
            fail(f"{node}: the mesh refused {len(refused)} value(s): "
                 + "; ".join(f"{k}: {r}" for k, r in sorted(refused.items())))


def status_snapshot(client: KvStoreClient, node: str) -> dict[str, dict[str, Any]]:
    prefix = status_prefix(node)
    out = {}
    for key, value in client.dump(prefix=prefix).items():
        record = decode_status(value.value)
        if record is not None:
            out[key[len(prefix):]] = record
    return out


def settled(wanted: dict[str, Any] | None, before: dict[str, Any] | None,
            now: dict[str, Any] | None) -> bool:
    """Has the agent reported on this write? A new status (another transaction than before)
    in a final state; for a removal, the status gone."""
    if wanted is None:
        return now is None or now.get("state") in GONE_STATES
    if now is None or now.get("state") not in SETTLED_STATES:
        return False
    return before is None or now.get("seq") != before.get("seq")


def outcome(wanted: dict[str, Any] | None, record: dict[str, Any] | None,
            done: bool) -> tuple[str, str]:
    """(result, details) of one written value for the final table."""
    if not done:
        state = record.get("state") if record else "no status"
        return "PENDING" if state == "PENDING" else "TIMEOUT", f"last state {state}"
    if wanted is None:
        return "removed", ""
    assert record is not None
    state = record["state"]
    if state == "CONFIGURED":
        return "applied", ""
    if state == "PENDING":
        missing = ", ".join(record.get("details") or ()) or "unknown dependency"
        return "PENDING", f"waiting for {missing}"
    error = record.get("error") or ", ".join(record.get("details") or ())
    if state == "RETRYING":
        return "FAILED", f"(the node retries) {error}"
    return state, error


def wait_settled(client: KvStoreClient, diffs: Mapping[str, NodeDiff],
                 before: Mapping[str, dict[str, dict[str, Any]]], timeout_s: float,
                 progress: bool) -> dict[str, dict[str, tuple[bool, dict[str, Any] | None]]]:
    deadline = time.monotonic() + timeout_s
    shown = ""
    while True:
        result: dict[str, dict[str, tuple[bool, dict[str, Any] | None]]] = {}
        for node, diff in diffs.items():
            writes = diff.writes()
            if not writes:
                continue
            now = status_snapshot(client, node)
            result[node] = {key: (settled(value, before[node].get(key), now.get(key)),
                                  now.get(key)) for key, value in writes.items()}
        line = "  ".join(f"{node}: {sum(d for d, _r in rows.values())}/{len(rows)} settled"
                         for node, rows in result.items())
        if progress and line != shown:
            click.echo(f"\r{line}", err=True, nl=False)
            shown = line
        all_done = all(d for rows in result.values() for d, _r in rows.values())
        if all_done or time.monotonic() >= deadline:
            if progress and shown:
                click.echo("", err=True)
            return result
        time.sleep(POLL_S)


@click.command("apply", cls=KvCommand)
@click.option("-f", "--file", "path", required=True, help="State file (YAML or JSON; - reads "
              "standard input).")
@click.option("--replace", is_flag=True, help="Also remove values the file does not name.")
@click.option("--wait/--no-wait", default=None, help="Follow the statuses until every written "
              "value settled [default: on a terminal].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=60.0,
              show_default=True, help="How long --wait waits (seconds).")
def apply(path: str, replace: bool, wait: bool | None, timeout_s: float) -> None:
    """Make the desired state of the file's nodes what FILE declares."""
    wanted = read_state_file(path)
    refuse_invalid(wanted)
    follow = sys.stdout.isatty() if wait is None else wait

    def action(client: KvStoreClient) -> Any:
        diffs = compute_diff(client, wanted, replace)
        before = {node: status_snapshot(client, node) for node, d in diffs.items()
                  if follow and not d.empty}
        write_batches(client, diffs)
        if not follow:
            return diffs, None
        return diffs, wait_settled(client, diffs, before, timeout_s, progress=True)

    diffs, waited = run_client(action)
    written = {node: d.writes() for node, d in diffs.items() if not d.empty}
    if not written:
        emit({"changed": {}}, "no changes")
        return
    if waited is None:
        emit({"changed": {n: sorted(w) for n, w in written.items()}},
             "\n".join(f"{node}: {len(w)} value(s) written" for node, w in written.items()))
        return
    rows = []
    for node, keys in written.items():
        for model_key, value in keys.items():
            done, record = waited[node][model_key]
            result, details = outcome(value, record, done)
            rows.append({"node": node, "key": model_key, "result": result, "details": details})
    width = max(len(r["key"]) for r in rows)
    text = [f"{'NODE':<8} {'KEY':<{width}} {'RESULT':<13} DETAILS"]
    text += [f"{r['node']:<8} {r['key']:<{width}} {r['result']:<13} {r['details']}".rstrip()
             for r in rows]
    emit(rows, "\n".join(text))
    if any(r["result"] not in ("applied", "removed") for r in rows):
        sys.exit(1)


def register(group: click.Group) -> None:
    from kvmesh.cli.agent_cmds import config_group

    group.add_command(model_group)
    group.add_command(plan)
    group.add_command(apply)
    config_group.add_command(config_export)
