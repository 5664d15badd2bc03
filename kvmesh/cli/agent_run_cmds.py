"""`kvmesh agent run`: the agent process's own command, in a module of its own.

The agent starts through this command (`kvmesh node run --agent` runs it too), so its module
imports only what starting an agent needs: the other agent commands (config, status, the REST
views: kvmesh.cli.agent_cmds) bring the REST client, YAML and the operator commands, which an
agent process never uses (issue 21, lighter processes).
"""

from __future__ import annotations

import signal
import sys
import threading

import click

from kvmesh.agent.keys import validate_node_name
from kvmesh.agent.supervisor import parent_pid_from_env, tell_supervisor_started
from kvmesh.cli.common import (
    KvGroup,
    agent_options,
    cli_context,
    fail,
    http_security_args,
    parse_http,
)


@click.group("agent", cls=KvGroup)
def agent_group() -> None:
    """The node agent (KvStore -> KVScheduler -> southbounds)."""


@agent_group.command("run")
@click.option("--name", required=True, help="The node this agent serves (config/<name>/...).")
@click.option("--node-url", default=None, help="Command URL of the local KvStore [--url].")
@agent_options
def agent_run(name: str, node_url: str | None, linux_netns: str | None, linux: bool,
              linux_state_dir: str | None, vpp_socket: str | None, http: str | None,
              http_cert: str | None, http_key: str | None, http_token_file: str | None,
              http_read_token_file: str | None, http_public_reads: bool,
              http_max_streams: int, downstream_resync_s: float, heartbeat_ms: int,
              assume_current: bool) -> None:
    """Run an agent in the foreground until SIGTERM/SIGINT (exit code 0)."""
    from kvmesh.agent.agent import AgentConfig, SignalStop, StopDeadline, run_agent

    http_security_args(http, http_cert, http_key, http_token_file, http_read_token_file,
                       http_public_reads)
    try:
        validate_node_name(name)
        settings = AgentConfig(
            node=name, kv_url=node_url or cli_context().url, linux_netns=linux_netns,
            linux=linux, linux_state_dir=linux_state_dir, vpp_socket=vpp_socket,
            http=parse_http(http),
            downstream_resync_s=downstream_resync_s, http_cert=http_cert, http_key=http_key,
            http_token_file=http_token_file, http_read_token_file=http_read_token_file,
            http_public_reads=http_public_reads, http_max_streams=http_max_streams,
            heartbeat_ms=heartbeat_ms, assume_current=assume_current,
            parent_pid=parent_pid_from_env())
    except (ValueError, click.BadParameter) as exc:
        fail(str(exc), code=2)
    stop = threading.Event()
    deadline = StopDeadline()
    on_signal = SignalStop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal.handle)
    sys.exit(run_agent(settings, stop, deadline, on_started=tell_supervisor_started,
                       stop_requested=on_signal.requested))


def register(group: click.Group) -> None:
    group.add_command(agent_group)
