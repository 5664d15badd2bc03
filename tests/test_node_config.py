"""`kvmesh node run --config FILE [--check]`: one file holds the node's and its agent's whole
configuration (kvmesh/node_config.py; docs/kvstore.md, "The configuration file")."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvmesh.cli import main
from kvmesh.cli.kvstore_cmds import node_run
from kvmesh.node_config import (
    AGENT_SCHEMA,
    FLAG_KEYS,
    NOT_SETTINGS,
    SCHEMA,
    agent_args,
    build_run_config,
    flag_values,
)
from kvstore import ConfigError, NodeConfig, PeerAddress, read_config_file
from kvstore import version as kvstore_version

FILE = """\
name = "n1"
cmd_url = "tcp://127.0.0.1:61002"
pub_url = "tcp://127.0.0.1:61001"
data_dir = "data"
insecure = true
log_level = "warning"
leaf = true

[peers]
n2 = "tcp://127.0.0.1:61012,tcp://127.0.0.1:61011"

[agent]
enabled = true
linux = true
http = "127.0.0.1:0"
http_public_reads = true
downstream_resync_s = 30
heartbeat_ms = 2500
assume_current = true
"""

# The same configuration on the command line (relative to the file's directory).
FLAGS = ["--name", "n1", "--cmd-url", "tcp://127.0.0.1:61002",
         "--pub-url", "tcp://127.0.0.1:61001", "--insecure", "--log-level", "warning",
         "--leaf", "--peer", "n2=tcp://127.0.0.1:61012,tcp://127.0.0.1:61011", "--agent",
         "--linux", "--http", "127.0.0.1:0", "--http-public-reads",
         "--downstream-resync-s", "30", "--heartbeat-ms", "2500", "--assume-current"]


def config_file(tmp_path: Path, text: str = FILE) -> Path:
    path = tmp_path / "n1.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["node", "run", *args, "--check"])
    return result.exit_code, result.output


def test_every_option_of_node_run_is_a_setting() -> None:
    options = {p.name for p in node_run.params if p.expose_value}
    assert options - set(NOT_SETTINGS) == set(FLAG_KEYS)
    assert all(SCHEMA.find(key) is not None for key in FLAG_KEYS.values())


def test_the_file_alone_is_the_command_line(tmp_path: Path) -> None:
    """Everything the flags say, the file says: same node, same agent command line."""
    path = config_file(tmp_path)
    from_file = build_run_config(str(path), {})
    code, output = check("--config", str(path))
    assert code == 0, output
    flagged = CliRunner().invoke(main, ["node", "run", *FLAGS, "--data-dir",
                                        str(tmp_path / "data"), "--check"])
    assert flagged.exit_code == 0, flagged.output
    from_flags = tomllib.loads(flagged.output)
    assert tomllib.loads(output) == from_flags
    assert from_file.node.peers == {
        "n2": PeerAddress("tcp://127.0.0.1:61012", "tcp://127.0.0.1:61011")}
    assert from_file.node.data_dir == str(tmp_path / "data")
    # A leaf running its agent keeps what the agent needs (a default depending on others).
    assert from_file.node.key_prefix_filters[0] == "config/n1/"
    assert agent_args(from_file) == [
        "--http", "127.0.0.1:0", "--linux-state-dir", str(tmp_path / "data" / "agent"),
        "--linux", "--assume-current", "--downstream-resync-s", "30.0", "--heartbeat-ms", "2500",
        "--http-max-streams", "32",
        "--http-public-reads"]


def test_check_prints_each_values_source(tmp_path: Path) -> None:
    path = config_file(tmp_path, FILE.replace("leaf = true", "sync_timeout_ms = 4000"))
    code, output = check("--config", str(path), "--log-level", "debug",
                         "--peer", "n3=tcp://127.0.0.1:61022")
    assert code == 0, output
    lines = output.splitlines()
    for line in ('name = "n1"  # file', 'log_level = "debug"  # flag',
                 "zmq_hwm = 65536  # default", 'n2 = "tcp://127.0.0.1:61012,tcp://127.0.0.1:61011"'
                 "  # file", 'n3 = "tcp://127.0.0.1:61022"  # flag', "enabled = true  # file",
                 "downstream_resync_s = 30.0  # file", "vpp_socket = \"\"  # default",
                 "sync_timeout_ms = 4000  # file"):
        assert line in lines, line
    assert tomllib.loads(output)["peers"]["n3"] == "tcp://127.0.0.1:61022"


@pytest.mark.parametrize(("text", "needle"), [
    ("nmae = 'n1'\n", "unknown key(s) nmae"),
    ("name = 'n1'\n[agent]\nhttp = 5\n", "agent.http must be a string"),
    ("name = 'n1'\n[agent]\nenabled = true\nhttp = 'nowhere'\n", "agent.http: expected ADDR"),
    ("name = 'n1'\n[agent]\nenabled = true\ndownstream_resync_s = 0\n",
     "agent.downstream_resync_s must be >= 1"),
    ("name = 'n1'\n[agent]\nenabled = true\nheartbeat_ms = 10\n",
     "agent.heartbeat_ms must be 100..3600000, got 10"),
    ("name = 'n1'\n[agent]\nlinux = true\n", "agent option(s) agent.linux need --agent"),
    ("name = 'n1'\nzmq_hwm = 1\n", "zmq_hwm must be an integer >= 64"),
    ("name = 'n1'\n[peers]\nn1 = 'tcp://127.0.0.1:1'\n", "peer 'n1' is this node itself"),
    ("cmd_url = 'tcp://127.0.0.1:1'\n", "no node name: give name = \"NAME\" in it, or --name"),
    ("name = 'n1'\ninsecure = true\nkey_file = 'k'\n", "exclude each other"),
    ("name = 'n1'\n", "give --key-file FILE --authorized-keys DIR"),
    ("name = 'n1'\nephemeral = true\ndata_dir = '/d'\n", "ephemeral and data_dir exclude"),
])
def test_a_bad_configuration_is_exit_1_and_one_line_with_check_2_without(
        tmp_path: Path, text: str, needle: str) -> None:
    path = config_file(tmp_path, text)
    code, output = check("--config", str(path))
    assert code == 1 and needle in output and output.count("\n") == 1, output
    run = CliRunner().invoke(main, ["node", "run", "--config", str(path)])
    assert run.exit_code == 2 and needle in run.output, run.output


def test_no_name_anywhere_is_an_error_and_a_flag_can_give_it(tmp_path: Path) -> None:
    code, output = check("--insecure", "--ephemeral")
    assert code == 1 and "no node name: give --name NAME" in output
    path = config_file(tmp_path, "insecure = true\nephemeral = true\n")
    code, output = check("--config", str(path), "--name", "from-flag")
    assert code == 0 and 'name = "from-flag"  # flag' in output


def test_flags_are_checked_like_the_file() -> None:
    with pytest.raises(ConfigError, match="peer must be NAME=CMD_URL"):
        flag_values({}, ("no-equals-sign",))
    run = build_run_config(None, flag_values({"name": "x", "ephemeral": True}, ()))
    assert run.node == NodeConfig(name="x")


def test_the_agents_settings_need_a_restart() -> None:
    """The agent is a process of its own, started with its settings as arguments."""
    assert not any(setting.live for setting in AGENT_SCHEMA.settings)


@pytest.mark.process
def test_version_is_the_packages_and_loads_no_command() -> None:
    probe = ("import sys\nfrom kvmesh.entry import run\nsys.argv = ['kvmesh', '--version']\n"
             "try:\n    run()\nexcept SystemExit as exc:\n    assert exc.code in (0, None)\n"
             "print(sorted(m for m in sys.modules if m.startswith('kvmesh.cli.')))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    printed, loaded = done.stdout.splitlines()
    assert printed == f"kvmesh {version('kvmesh')}"
    assert version("kvmesh") == kvstore_version.__version__
    assert loaded == "['kvmesh.cli.context']", loaded  # no command's module


def test_the_documented_example_is_a_valid_file(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[1] / "docs" / "kvstore.md").read_text()
    example = doc.split("### The configuration file", 1)[1].split("```toml\n", 1)[1]
    path = config_file(tmp_path, example.split("```", 1)[0])
    values = read_config_file(str(path), SCHEMA)
    assert values["name"] == "h1" and values["agent.enabled"] is True
    assert values["key_file"] == str(tmp_path / "keys/h1.key_secret")
    assert set(values) >= {"peers.h2", "peers.h3", "agent.http_token_file", "log_level"}
