"""tests/cli_run.py answers as `subprocess.run` of `python -m kvmesh` would."""

from __future__ import annotations

import os

import click
import pytest

import kvmesh.cli
from kvstore.version import __version__
from tests import cli_run
from tests.kvstore.conftest import free_port


def test_exit_status_and_streams_are_the_commands() -> None:
    done = cli_run.kvmesh(["--version"])
    assert (done.returncode, done.stderr) == (0, "")
    assert __version__ in done.stdout
    refused = cli_run.kvmesh(["--url", f"tcp://127.0.0.1:{free_port()}", "key", "get", "k"],
                             env={**os.environ, "KVMESH_TIMEOUT": "0.2"})
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("error: no reply from") and refused.stderr.count("\n") == 1


def test_the_environment_is_the_one_given_and_the_commands_exports_are_undone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVMESH_KEY_FILE", raising=False)
    monkeypatch.setenv("THE_TESTS_OWN", "1")
    seen: dict[str, str | None] = {}

    @click.command()
    def probe() -> None:
        seen.update(own=os.environ.get("THE_TESTS_OWN"), given=os.environ.get("GIVEN"))
        os.environ["KVMESH_KEY_FILE"] = "/exported/by/the/command"

    monkeypatch.setattr(kvmesh.cli, "main", probe)
    done = cli_run.kvmesh([], env={"GIVEN": "yes"})
    assert done.returncode == 0, done.stderr
    assert seen == {"own": None, "given": "yes"}  # only what was given
    assert "KVMESH_KEY_FILE" not in os.environ and os.environ.get("THE_TESTS_OWN") == "1"


def test_an_uncaught_exception_is_status_1_with_its_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    @click.command()
    def broken() -> None:
        raise RuntimeError("the command broke")

    monkeypatch.setattr(kvmesh.cli, "main", broken)
    done = cli_run.kvmesh([])
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: the command broke" in done.stderr
