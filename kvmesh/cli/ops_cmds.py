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

from kvmesh.agent.desired import decode_config_value
from kvmesh.agent.keys import CONFIG, NODE, device_of
from kvmesh.agent.revisions import REVISION
from kvmesh.agent.status import decode_status
from kvmesh.cli.common import KvCommand, KvGroup, cli_context, emit, fail, run_client
from kvmesh.cli.devices import (
    ALLOW_OPTION,
    allow_missing_device_option,
    describe,
    describe_coming,
    describe_pending,
    describe_unchecked,
    missing_devices,
    pending_values,
    unchecked_nodes,
)
from kvmesh.cli.members import allow_unknown_node_option, refuse_unknown_nodes
from kvmesh.settle import status_snapshot, wait_settled
from kvmesh.statefile import NodeDiff, State, StateFileError, diff_state, export_state, parse_state
from kvstore import KvStoreClient

PLAN_TIMEOUT_S = 30.0
# `apply` asks each changed node's scheduler what would stay PENDING; an agent that does not
# answer within this leaves that node unchecked (said, never taken for "nothing missing").
APPLY_CHECK_TIMEOUT_S = 10.0

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


def read_state_file(path: str, code: int = 2) -> State:
    """The state file at `path`; one line and exit `code` when it cannot be read or parsed."""
    try:
        if path == "-":
            return parse_state(sys.stdin.read(), "standard input")
        with open(path, encoding="utf-8") as handle:
            return parse_state(handle.read(), path)
    except (OSError, StateFileError) as exc:
        fail(str(exc), code=code)


def refuse_invalid(state: State) -> None:
    """Every value validated first: one bad value refuses the whole file (nothing written)."""
    from kvmesh.agent.models import invalid_values

    lines: list[str] = []
    for node, values in state.items():
        lines.extend(f"{node}: {exc}" for exc in invalid_values(values).values())
    if lines:
        click.echo("\n".join(f"invalid: {line}" for line in lines), err=True)
        fail(f"{len(lines)} invalid value(s) in the file: nothing was written")


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


def scheduler_plans(client: KvStoreClient, diffs: Mapping[str, NodeDiff],
                    timeout_s: float = PLAN_TIMEOUT_S) -> dict[str, Any]:
    """Each changed node's scheduler plan, from its agent (read-only), or why there is none."""
    from kvmesh.rest_client import AgentRest, RestError, find_agent

    plans: dict[str, Any] = {}
    for node, diff in diffs.items():
        if diff.empty:
            continue
        try:
            rest = AgentRest(find_agent(client, node), timeout_s=timeout_s)
            plans[node] = rest.json("POST", "/scheduler/plan", body={"values": diff.writes()})
        except RestError as exc:
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
            if op.get("details"):
                error += f" waiting for: {', '.join(op['details'])}"
            lines.append(f"    {number}. {op['operation']} {op['key']}{flags}{error}")
    return "\n".join(lines)


class PlanCommand(KvCommand):
    """With --detailed-exitcode, 2 means "changes" and nothing else: a usage error exits 1."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        detailed = "--detailed-exitcode" in args  # (parsing consumes `args`)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            if not detailed:
                raise
            raise PlanUsageError(exc.format_message()) from exc


class PlanUsageError(click.ClickException):
    exit_code = 1


@click.command("plan", cls=PlanCommand)
@click.option("-f", "--file", "path", required=True, help="State file (YAML or JSON; - reads "
              "standard input).")
@click.option("--replace", is_flag=True, help="Also remove values the file does not name.")
@click.option("--detailed-exitcode", is_flag=True, help="Exit 2 when there are changes (0: none, "
              "1: an error).")
@click.option("--offline", is_flag=True, help="Only the desired-state diff: do not ask the "
              "nodes' schedulers (otherwise a node whose scheduler cannot be asked is an error).")
@allow_unknown_node_option
@allow_missing_device_option
def plan(path: str, replace: bool, detailed_exitcode: bool, offline: bool,
         allow_unknown: bool, allow_missing_device: bool) -> None:
    """What applying FILE would change; read-only (nothing is written anywhere). Exit 1 on an
    error (a bad file, an unknown node, a node or scheduler that cannot be asked, values for a
    plane a node has no device of unless --allow-missing-device)."""
    wanted = read_state_file(path, code=1)
    refuse_invalid(wanted)

    def action(client: KvStoreClient) -> tuple[dict[str, NodeDiff], dict[str, Any], Any]:
        refuse_unknown_nodes(client, wanted, allow_unknown)
        diffs = compute_diff(client, wanted, replace)
        return (diffs, {} if offline else scheduler_plans(client, diffs),
                missing_devices(client, diffs))

    diffs, plans, missing = run_client(action)
    pending, coming = pending_values(plans, diffs, missing)
    unchecked = unchecked_nodes(plans, diffs, offline)
    changed = any(not d.empty for d in diffs.values())
    as_json = {node: {"added": sorted(d.added), "changed": {
        k: [{"path": c.path, "old": c.old, "new": c.new} for c in changes]
        for k, (_o, _n, changes) in d.changed.items()}, "removed": sorted(d.removed),
        "scheduler": plans.get(node), "missing_device": missing.get(node, {}),
        "would_stay_pending": {key: {"waits_for": list(w.waits_for), "absent": None if w.absent
                                     is None else list(w.absent)}
                               for key, w in pending.get(node, {}).items()},
        "waits_for_provider": {key: {dep: maker for dep, maker in waits}
                               for key, waits in coming.get(node, {}).items()},
        "dependencies_unchecked": unchecked.get(node)}
        for node, d in diffs.items()}
    text = plan_text(diffs, plans) if changed else "no changes"
    notes = [*describe(missing), *describe_pending(pending), *describe_unchecked(unchecked)]
    emit(as_json, "\n".join([text, *(f"= {line}" for line in describe_coming(coming)),
                              *(f"! {line}" for line in notes)]))
    unasked = sorted(node for node, found in plans.items() if "error" in found)
    if unasked:
        fail(f"the scheduler of {', '.join(unasked)} could not be asked (see above; --offline "
             f"plans without asking)")
    if (missing or pending) and not allow_missing_device:
        fail(f"values that would not apply on their node: a device it does not have, or a "
             f"dependency neither on it nor desired (see above); give {ALLOW_OPTION} to plan "
             f"them anyway")
    sys.exit(2 if changed and detailed_exitcode else 0)


# -- apply -------------------------------------------------------------------------------------


def write_batches(client: KvStoreClient, diffs: Mapping[str, NodeDiff], source: str,
                  confirm_timeout_s: float | None) -> dict[str, int]:
    """One KEY_SET per changed node with every change and its revision; node -> revision."""
    from kvmesh.agent.config_writer import WriteRefused, who_am_i, write_node_change

    written = {}
    for node, diff in diffs.items():
        if diff.empty:
            continue
        try:
            written[node] = write_node_change(
                client, node, diff.writes(), diff.previous(), who=who_am_i("kvmesh apply"),
                description=f"apply {source}", confirm_timeout_s=confirm_timeout_s)
        except WriteRefused as exc:
            fail(str(exc))
    return written


def held_devices(client: KvStoreClient, node: str) -> dict[str, str]:
    """Why `node`'s agent holds its devices out of KNOWN (`reason` of node/<N>/device/<dev>),
    by device: a removal waits for that, however long `--wait` waits."""
    prefix = f"{NODE}{node}/device/"
    held = {}
    for key, value in client.dump(prefix=prefix).items():
        record = decode_status(value.value)
        if record is not None and record.get("reason"):
            held[key[len(prefix):]] = str(record["reason"])
    return held


def outcome(wanted: dict[str, Any] | None, record: dict[str, Any] | None,
            done: bool, held: str | None = None) -> tuple[str, str]:
    """(result, details) of one written value for the final table; `held`: why the value's
    device is held out of KNOWN, if it is (told with a value that did not settle)."""
    if not done:
        state = record.get("state") if record else "no status"
        details = f"last state {state}" + (f"; {held}" if held else "")
        return "PENDING" if state == "PENDING" else "TIMEOUT", details
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


def refuse_unappliable(client: KvStoreClient, diffs: Mapping[str, NodeDiff]) -> None:
    """Before `apply` writes: fail if a value would never apply on its node (a plane it has no
    device of, a dependency neither on it nor desired); say which nodes could not be checked."""
    missing = missing_devices(client, diffs)
    changed = {node: diff for node, diff in diffs.items() if not diff.empty}
    plans = scheduler_plans(client, changed, APPLY_CHECK_TIMEOUT_S) if changed else {}
    problems = [*describe(missing), *describe_pending(pending_values(plans, changed, missing)[0])]
    if problems:
        fail("; ".join(problems) + f"; nothing was written (give {ALLOW_OPTION} to write them "
             "anyway)")
    for line in describe_unchecked(unchecked_nodes(plans, changed)):
        click.echo(f"warning: {line}", err=True)


@click.command("apply", cls=KvCommand)
@click.option("-f", "--file", "path", required=True, help="State file (YAML or JSON; - reads "
              "standard input).")
@click.option("--replace", is_flag=True, help="Also remove values the file does not name.")
@click.option("--wait/--no-wait", default=None, help="Follow the statuses until every written "
              "value settled [default: on a terminal].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=60.0,
              show_default=True, help="How long --wait waits (seconds).")
@click.option("--confirm-timeout", "confirm_s", type=click.FloatRange(min=1), default=None,
              help="Roll back unless `kvmesh confirm` runs within S seconds (held by the "
                   "nodes' agents).")
@allow_unknown_node_option
@allow_missing_device_option
def apply(path: str, replace: bool, wait: bool | None, timeout_s: float,
          confirm_s: float | None, allow_unknown: bool, allow_missing_device: bool) -> None:
    """Make the desired state of the file's nodes what FILE declares (one revision per
    changed node; see `kvmesh config history`)."""
    wanted = read_state_file(path)
    refuse_invalid(wanted)
    follow = sys.stdout.isatty() if wait is None else wait

    def action(client: KvStoreClient) -> Any:
        refuse_unknown_nodes(client, wanted, allow_unknown)
        diffs = compute_diff(client, wanted, replace)
        if not allow_missing_device:
            refuse_unappliable(client, diffs)
        before = {node: status_snapshot(client, node) for node, d in diffs.items()
                  if follow and not d.empty}
        revs = write_batches(client, diffs, path, confirm_s)
        if confirm_s is not None and revs:
            click.echo("revision(s) " + ", ".join(f"{n}: {r}" for n, r in revs.items())
                       + f": run `kvmesh confirm` within {confirm_s:g} s or they are rolled "
                       "back", err=True)
        if not follow:
            return diffs, None, {}
        shown: list[str] = []

        def show(line: str) -> None:
            click.echo(f"\r{line}", err=True, nl=False)
            shown.append(line)

        waited = wait_settled(client, diffs, before, timeout_s, progress=show)
        if shown:
            click.echo("", err=True)  # ends the progress line
        unsettled = {node for node, rows in waited.items() if not all(d for d, _r in
                                                                     rows.values())}
        return diffs, waited, {node: held_devices(client, node) for node in unsettled}

    diffs, waited, held = run_client(action)
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
            device = device_of(model_key)
            reason = held.get(node, {}).get(device)
            result, details = outcome(value, record, done,
                                      f"{device}: {reason}" if reason else None)
            rows.append({"node": node, "key": model_key, "result": result, "details": details})
    width = max(len(r["key"]) for r in rows)
    text = [f"{'NODE':<8} {'KEY':<{width}} {'RESULT':<13} DETAILS"]
    text += [f"{r['node']:<8} {r['key']:<{width}} {r['result']:<13} {r['details']}".rstrip()
             for r in rows]
    emit(rows, "\n".join(text))
    if any(r["result"] not in ("applied", "removed") for r in rows):
        sys.exit(1)


# -- revisions: confirm, history, rollback ------------------------------------------------------


def nodes_with_revisions(client: KvStoreClient) -> list[str]:
    nodes = set()
    for key in client.dump(prefix=REVISION):
        node, _, rest = key[len(REVISION):].partition("/")
        if rest:
            nodes.add(node)
    return sorted(nodes)


@click.command("confirm", cls=KvCommand)
@click.argument("nodes", nargs=-1)
def confirm(nodes: tuple[str, ...]) -> None:
    """Confirm the pending revisions of NODES (all nodes when omitted): no rollback."""
    from kvmesh.agent.config_writer import mark, node_revisions
    from kvmesh.agent.revisions import CONFIRMED, is_pending, revision_key

    def action(client: KvStoreClient) -> dict[str, list[int]]:
        done: dict[str, list[int]] = {}
        for node in nodes or nodes_with_revisions(client):
            batch = {revision_key(node, rev): mark(client, value, record, CONFIRMED)
                     for rev, (value, record) in node_revisions(client, node).items()
                     if is_pending(record)}
            if batch:
                refused = client.set(batch)
                if refused:
                    fail(f"{node}: confirm refused: {refused}")
                done[node] = sorted(int(key.rsplit("/", 1)[1]) for key in batch)
        return done

    done = run_client(action)
    if not done:
        fail("no pending revision to confirm (already rolled back, or confirmed)")
    emit(done, "\n".join(f"{node}: confirmed revision(s) {', '.join(map(str, revs))}"
                         for node, revs in done.items()))


@click.command("history", cls=KvCommand)
@click.argument("node")
def config_history(node: str) -> None:
    """NODE's revisions (every apply and rollback): time, who/where, keys changed, state."""
    from kvmesh.agent.config_writer import node_revisions

    kept = run_client(lambda c: node_revisions(c, node))
    rows = [{"rev": rev, "time": record["time"], "who": record["who"],
             "description": record.get("description", ""),
             "keys": sorted(record["changes"]),
             "confirm": (record.get("confirm") or {}).get("state")}
            for rev, (_value, record) in sorted(kept.items())]
    lines = [f"{'REV':>4}  {'TIME':<19}  {'CONFIRM':<11}  WHO / WHAT / KEYS"]
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["time"]))
        lines.append(f"{row['rev']:>4}  {when:<19}  {row['confirm'] or '-':<11}  {row['who']}")
        lines.append(f"{'':>38}{row['description']}: {len(row['keys'])} key(s): "
                     + ", ".join(row["keys"][:5]) + (" ..." if len(row["keys"]) > 5 else ""))
    emit(rows, "\n".join(lines) if rows else f"no revisions for {node}")


@click.command("rollback", cls=KvCommand)
@click.argument("node")
@click.argument("rev", type=int)
def config_rollback(node: str, rev: int) -> None:
    """Restore NODE's desired state as it was right after revision REV (a new revision)."""
    from kvmesh.agent.config_writer import (
        WriteRefused,
        desired_values,
        node_revisions,
        who_am_i,
        write_node_change,
    )
    from kvmesh.agent.revisions import restore_values

    def action(client: KvStoreClient) -> tuple[int | None, int]:
        kept = node_revisions(client, node)
        try:
            target = restore_values([record for _v, record in kept.values()], rev)
        except ValueError as exc:
            fail(str(exc), code=2)
        now = desired_values(client, node, target)
        writes = {key: value for key, value in target.items() if now.get(key) != value}
        if not writes:
            return None, 0
        try:
            return write_node_change(
                client, node, writes, now, who=who_am_i("kvmesh config rollback"),
                description=f"rollback to revision {rev}"), len(writes)
        except WriteRefused as exc:
            fail(str(exc))

    new_rev, count = run_client(action)
    if new_rev is None:
        emit({"rev": None, "changed": 0}, f"{node} is already as after revision {rev}")
        return
    emit({"rev": new_rev, "changed": count},
         f"{node}: back to revision {rev} ({count} key(s) written, revision {new_rev})")


@click.command("completion", cls=KvCommand)
@click.argument("shell", type=click.Choice(["bash", "zsh"]))
def completion(shell: str) -> None:
    """Shell completion script (click's): `eval "$(kvmesh completion bash)"`."""
    from click.shell_completion import get_completion_class

    from kvmesh.cli import main

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(main, {}, "kvmesh", "_KVMESH_COMPLETE").source())


def register(group: click.Group) -> None:
    from kvmesh.cli.agent_cmds import config_group

    group.add_command(model_group)
    group.add_command(plan)
    group.add_command(apply)
    group.add_command(confirm)
    group.add_command(completion)
    config_group.add_command(config_export)
    config_group.add_command(config_history)
    config_group.add_command(config_rollback)
