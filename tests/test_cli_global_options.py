"""Global options (--json, --url) are accepted before and after the subcommand, everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kvmesh.cli import main
from kvstore.node_ports import free_tcp_port
from tests.util import modules_loaded


def test_json_after_the_subcommand(tmp_path: Path) -> None:
    runner = CliRunner()
    for args in (["--json", "cluster", "status"], ["cluster", "status", "--json"]):
        out = runner.invoke(main, [*args, "--run-dir", str(tmp_path)])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output) == {"nodes": {}, "running": False}
    listed = runner.invoke(main, ["model", "list", "--json"])
    assert json.loads(listed.output)[0]["model"] == "linux/interface"


def test_url_after_the_subcommand() -> None:
    url = f"tcp://127.0.0.1:{free_tcp_port()}"  # nothing listens there
    out = CliRunner().invoke(main, ["key", "get", "k", "--url", url])
    assert out.exit_code == 1 and url in out.output


def test_every_command_has_both() -> None:
    def walk(group: click.Group):
        for command in group.commands.values():
            yield command
            if isinstance(command, click.Group):
                yield from walk(command)

    for command in walk(main):
        names = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {"--json", "--url"} <= names, command.name


def test_completion_scripts_and_completing() -> None:
    import os
    import subprocess
    import sys

    for shell, marker in (("bash", "complete -o nosort -F"), ("zsh", "compdef")):
        out = CliRunner().invoke(main, ["completion", shell])
        assert out.exit_code == 0 and marker in out.output and "_KVMESH_COMPLETE" in out.output
    env = {**os.environ, "_KVMESH_COMPLETE": "bash_complete", "COMP_WORDS": "kvmesh con",
           "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-m", "kvmesh"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["plain,config", "plain,confirm"], done


def test_command_modules_lists_what_each_module_registers() -> None:
    """The lazy top-level group knows every command's module: the table matches what the
    modules register, and a command loads only its own module (and the ones it extends)."""
    import importlib

    import click

    from kvmesh.cli import COMMAND_MODULES

    for module_name, commands in COMMAND_MODULES.items():
        group = click.Group()
        importlib.import_module(module_name).register(group)
        assert tuple(sorted(group.commands)) == tuple(sorted(commands)), module_name


def test_key_get_loads_neither_the_rest_server_nor_the_models() -> None:
    assert modules_loaded("from kvmesh.cli import main\nmain.get_command(None, 'key')", (
        "kvmesh.agent.http_server", "pydantic", "scheduler", "yaml", "kvmesh.cli.agent_cmds",
    )) == set()


@pytest.mark.parametrize("command", ["status", "config", "history", "resync", "values"])
def test_reading_commands_load_no_model(command: str) -> None:
    """The commands that only read, or write without validating, start without the model
    registry (every southbound's models, pydantic, pyroute2, vpp_papi: 0.35 s of a 0.55 s
    start); `config set` and `plan` validate, and load it when they do."""
    assert modules_loaded(f"from kvmesh.cli import main\nmain.get_command(None, {command!r})",
                          ("kvmesh.agent.models", "pydantic", "pyroute2", "vpp_papi")) == set()


def test_validating_loads_neither_southbounds_runtime() -> None:
    """`config set`, `plan` and `apply` validate with the model registry, which needs pydantic
    but not the libraries that talk to a dataplane: pyroute2 and vpp_papi load when an agent's
    southbound connects (together ~0.15 s of every validating command's start)."""
    assert modules_loaded(
        "from kvmesh.agent.models import validate_model\n"
        "validate_model('linux/interface/br0', {'type': 'bridge'})\n"
        "validate_model('vpp/interface/loop0', {'type': 'loopback'})",
        ("pyroute2", "vpp_papi", "southbound.linux.netlink", "southbound.vpp.connection"),
    ) == set()
