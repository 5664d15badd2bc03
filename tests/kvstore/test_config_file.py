"""The node's configuration file (docs/kvstore.md, "The configuration file"): layering with
sources, printing, what a SIGHUP may apply, and the file's trust checks."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

import pytest

from kvstore.config import (
    LIVE,
    NODE_SCHEMA,
    ConfigError,
    NodeConfig,
    node_config,
    read_config_file,
    settle_data_dir,
)
from kvstore.config_layers import Schema, Setting, layer, plan_reload, render

SCHEMA = NODE_SCHEMA + Schema((Setting("extra.flag", False), Setting("extra.path", "", path=True)))


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_flags_beat_the_file_which_beats_the_defaults(tmp_path: Path) -> None:
    file = read_config_file(write(tmp_path / "n.toml", 'name = "n1"\nzmq_hwm = 128\n'
                                  '[peers]\nn2 = "tcp://10.0.0.2:1"\nn3 = "tcp://10.0.0.3:1"\n'),
                            SCHEMA)
    effective = layer(SCHEMA, file, {"zmq_hwm": 256, "peers.n3": "tcp://10.9.9.9:1"})
    assert (effective["name"], effective.sources["name"]) == ("n1", "file")
    assert (effective["zmq_hwm"], effective.sources["zmq_hwm"]) == (256, "flag")
    assert (effective["max_peers"], effective.sources["max_peers"]) == (512, "default")
    # A flag adds or replaces one peer; the file's others stay.
    assert effective.section("peers") == {"n2": "tcp://10.0.0.2:1", "n3": "tcp://10.9.9.9:1"}
    assert effective.sources["peers.n3"] == "flag" and effective.sources["peers.n2"] == "file"


def test_printed_configuration_reads_back_to_the_same_values(tmp_path: Path) -> None:
    path = write(tmp_path / "n.toml", 'name = "n \\"quoted\\" é"\nsync_interval_s = 2\n'
                 'leaf = true\nkey_prefix_filters = ["a/", "b\\\\c"]\n'
                 '[peers]\n"odd name" = "tcp://1.2.3.4:5,tcp://1.2.3.4:6"\n'
                 '"h1.example.org" = "tcp://1.2.3.4:7"\n'
                 '[extra]\nflag = true\n', 0o644)
    effective = layer(SCHEMA, read_config_file(path, SCHEMA), {"log_level": "debug"})
    text = render(SCHEMA, effective)
    assert 'log_level = "debug"  # flag' in text and "zmq_hwm = 65536  # default" in text
    assert "sync_interval_s = 2.0  # file" in text
    again = layer(SCHEMA, SCHEMA.flatten(tomllib.loads(text), "printed"), {})
    assert dict(again.values) == dict(effective.values)
    assert again.section("peers").keys() == {"odd name", "h1.example.org"}


@pytest.mark.parametrize(("text", "needle"), [
    ("nmae = 'typo'\n", "unknown key(s) nmae"),
    ("[peers]\nn2 = 5\n", "peers.n2 must be a string"),
    ("[extra]\nflag = 'yes'\n", "extra.flag must be true or false"),
    ("[extra]\nnope = 1\n", "unknown key(s) extra.nope"),
    ("extra = 1\n", "extra must be a table"),
    ("log_level = 'loud'\n", "log_level must be one of debug, info, warning, error"),
    ("durability = 'maybe'\n", "durability must be one of"),
    ("key_prefix_filters = 'a/'\n", "key_prefix_filters must be a list of strings"),
    ("sync_interval_s = nan\n", "sync_interval_s must be a number"),
    ("max_peers = 1.5\n", "max_peers must be an integer"),
    ("name = [\n", "invalid TOML"),
    ("# only a comment\n\n", "empty"),
    ("", "empty"),
])
def test_bad_files_are_one_line_errors_naming_the_file_and_key(
        tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(ConfigError) as caught:
        read_config_file(path, SCHEMA)
    message = str(caught.value)
    assert needle in message and str(path) in message and "\n" not in message


def test_bytes_that_are_not_utf8_are_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(ConfigError, match="invalid TOML: not UTF-8"):
        read_config_file(path)


@pytest.mark.parametrize(("mode", "needle"), [
    (0o646, "writable by group or others (mode 0646"),
    (0o664, "writable by group or others (mode 0664"),
])
def test_a_file_others_may_write_is_refused(tmp_path: Path, mode: int, needle: str) -> None:
    path = write(tmp_path / "n.toml", 'name = "n1"\n', mode)
    with pytest.raises(ConfigError, match=r"refusing .*n\.toml: " + needle.replace("(", r"\(")):
        read_config_file(path)
    path.chmod(0o644)  # readable by all is fine: a config file holds no secret
    assert read_config_file(path)["name"] == "n1"


def test_a_directory_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"refusing {tmp_path}: it is a directory"):
        read_config_file(tmp_path)
    with pytest.raises(ConfigError, match=r"absent\.toml: cannot read: No such file"):
        read_config_file(tmp_path / "absent.toml")
    os.mkfifo(tmp_path / "fifo.toml")  # opened without blocking, then refused
    with pytest.raises(ConfigError, match="not a regular file"):
        read_config_file(tmp_path / "fifo.toml")


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's file needs root")
def test_a_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "n.toml", 'name = "n1"\n', 0o644)
    os.chown(path, 65534, -1)
    with pytest.raises(ConfigError, match=r"owned by uid 65534.*not by the invoking uid 0"):
        read_config_file(path)
    # ... and so is one in a directory another user could swap it out of.
    inner = tmp_path / "theirs"
    inner.mkdir()
    os.chown(inner, 65534, -1)
    os.chown(path, 0, -1)
    os.link(path, inner / "n.toml")
    with pytest.raises(ConfigError, match="a parent directory owned by uid 65534"):
        read_config_file(inner / "n.toml")


def test_relative_paths_in_a_file_are_relative_to_it(tmp_path: Path) -> None:
    path = write(tmp_path / "n.toml", 'key_file = "keys/n1.key_secret"\ndata_dir = "/abs"\n'
                 "[extra]\npath = 'x'\n")
    values = read_config_file(path, SCHEMA)
    assert values["key_file"] == str(tmp_path / "keys/n1.key_secret")
    assert values["data_dir"] == "/abs" and values["extra.path"] == str(tmp_path / "x")


def test_ephemeral_and_data_dir_the_higher_layer_wins() -> None:
    def settled(file: dict[str, object], flags: dict[str, object]) -> tuple[object, object]:
        effective = settle_data_dir(layer(NODE_SCHEMA, {"name": "n1", **file}, flags), "f")
        return effective["ephemeral"], effective["data_dir"]

    assert settled({}, {}) == (False, "/var/lib/kvmesh/n1")
    assert settled({"data_dir": "/d"}, {"ephemeral": True}) == (True, "")
    assert settled({"ephemeral": True}, {"data_dir": "/d"}) == (False, "/d")
    with pytest.raises(ConfigError, match="f: ephemeral and data_dir exclude each other"):
        settled({"ephemeral": True, "data_dir": "/d"}, {})
    with pytest.raises(ConfigError, match="--ephemeral and --data-dir exclude each other"):
        settled({}, {"ephemeral": True, "data_dir": "/d"})


def test_live_settings_are_declared_on_the_fields() -> None:
    live = {f.name for f in dataclasses.fields(NodeConfig) if f.metadata == LIVE}
    assert live == {"peers", "ttl_decrement_ms", "ttl_threshold_ms", "max_clock_skew_ms",
                    "sync_timeout_ms", "peer_timeout_ms", "sync_buckets_per_request", "max_peers"}
    assert NODE_SCHEMA.is_live("peers.anyone") and NODE_SCHEMA.is_live("log_level")
    assert not NODE_SCHEMA.is_live("name") and not NODE_SCHEMA.is_live("key_file")


def test_a_reload_applies_live_changes_and_keeps_restart_only_values() -> None:
    running = layer(NODE_SCHEMA, {"name": "n1", "peers.a": "tcp://1.1.1.1:1",
                                  "peers.b": "tcp://2.2.2.2:1"}, {})
    new = layer(NODE_SCHEMA, {"name": "n2", "peers.b": "tcp://2.2.2.2:1",
                              "peers.c": "tcp://3.3.3.3:1", "max_peers": 9,
                              "zmq_hwm": 128}, {})
    plan = plan_reload(NODE_SCHEMA, running, new)
    assert dict(plan.live) == {"peers.a": ("tcp://1.1.1.1:1", None),
                               "peers.c": (None, "tcp://3.3.3.3:1"), "max_peers": (512, 9)}
    assert dict(plan.restart) == {"name": ("n1", "n2"), "zmq_hwm": (65536, 128)}
    after = plan.running
    assert after["name"] == "n1" and after["zmq_hwm"] == 65536 and after["max_peers"] == 9
    assert after.section("peers") == {"b": "tcp://2.2.2.2:1", "c": "tcp://3.3.3.3:1"}
    assert after.sources["max_peers"] == "file" and after.sources["zmq_hwm"] == "default"
    assert node_config(after).peers.keys() == {"b", "c"}


def test_the_knobs_table_says_which_are_live() -> None:
    """docs/kvstore.md's "Tuning knobs" table: every knob, and its SIGHUP column is the
    declaration's."""
    doc = (Path(__file__).parents[2] / "docs" / "kvstore.md").read_text()
    table = doc.split("#### Tuning knobs", 1)[1].split("\n\n")[2]
    documented: dict[str, str] = {}
    for row in table.splitlines()[2:]:
        keys, _default, applies = row.split(" | ")[:3]
        for key in keys.strip("| ").split(", "):
            documented[key.strip("`")] = applies
    knobs = {f.name for f in dataclasses.fields(NodeConfig)} - {
        "name", "cmd_url", "pub_url", "peers", "leaf", "key_prefix_filters",
        "key_originator_filters", "data_dir", "discard_corrupt_state", "durability"}
    assert knobs <= set(documented), knobs - set(documented)
    for key, applies in documented.items():
        assert applies == ("live" if NODE_SCHEMA.is_live(key) else "restart"), key
