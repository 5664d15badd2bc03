"""The KvStore node's process loads only what a node uses (issue 21, "Lighter processes").

`kvmesh node run --agent --http ...` is run through the program's entry point up to the point
where the node would start (`kvstore.run_node` is replaced by a probe that reports the modules
loaded): the agent's options were checked (REST TLS/token) and its supervisor loaded, but the
node must not carry the agent's libraries — they belong in the agent's own process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvmesh.agent.supervisor import AgentSupervisor
from kvmesh.entry import needs_no_openssl

# What the node never uses: the agent's REST server (and asyncio's TLS half of it), the
# configuration models, the scheduler, metrics, YAML, and pyzmq's asyncio ZAP thread.
NOT_IN_A_NODE = ("kvmesh.agent.http_server", "kvmesh.agent.agent", "pydantic", "networkx",
                 "prometheus_client", "yaml", "scheduler", "southbound", "zmq.auth.thread",
                 "zmq.asyncio", "http.server", "pyroute2", "vpp_papi",
                 # ... nor OpenSSL: the mesh is CurveZMQ's (kvmesh/entry.py)
                 "ssl", "_hashlib",
                 # ... nor tempfile (shutil, bz2, lzma): a node replaces no file
                 "tempfile")

PROBE = """
import sys
import kvstore
from kvmesh.entry import run

def report(config, security, on_ready=None, **hooks):
    heavy = sys.argv[1].split(",")
    print(" ".join(sorted(m for m in heavy if m in sys.modules)) or "-")
    return 0

kvstore.run_node = report
sys.argv = ["kvmesh", *sys.argv[2:]]
run()
"""


NODE_RUN = ["node", "run", "--name", "n1", "--ephemeral", "--insecure", "--agent",
            "--cmd-url", "tcp://127.0.0.1:1", "--pub-url", "tcp://127.0.0.1:2"]


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, ",".join(NOT_IN_A_NODE), *args],
                          capture_output=True, text=True, timeout=60)


def test_node_run_with_agent_loads_none_of_the_agents_libraries() -> None:
    done = probe(*NODE_RUN, "--http", "127.0.0.1:0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "-", f"the node process loaded {done.stdout.strip()}"


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    crt, key = tmp_path / "agent.crt", tmp_path / "agent.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    return crt, key


def test_an_agents_tls_certificate_is_checked_without_ssl_in_the_node(
        cert: tuple[Path, Path], tmp_path: Path) -> None:
    crt, key = cert
    tls = ["--http", "127.0.0.1:0", "--http-cert", str(crt), "--http-key", str(key)]
    done = probe(*NODE_RUN, *tls)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "-", f"the node process loaded {done.stdout.strip()}"
    # Still refused before anything starts, in one line: a key that is not the certificate's.
    other = tmp_path / "other.key"
    subprocess.run(["openssl", "genrsa", "-out", str(other), "2048"], check=True,
                   capture_output=True)
    tls[-1] = str(other)
    refused = probe(*NODE_RUN, *tls)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "cannot load the TLS certificate" in refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr


def test_openssl_is_left_out_only_of_a_node_run() -> None:
    assert needs_no_openssl(["node", "run", "--name", "n1", "--agent", "--http", "x:1"])
    assert needs_no_openssl(["node", "run", "--agent", "--http-cert", "c.pem"])
    assert needs_no_openssl(["--url", "tcp://127.0.0.1:1", "--json", "node", "run"])
    assert not needs_no_openssl(["--url", "node", "run"])  # "node" is the URL here
    # An agent keeps OpenSSL: pyroute2 imports ssl. As the node's supervisor starts it:
    supervised = AgentSupervisor("n1", "tcp://127.0.0.1:1", ["--http", "127.0.0.1:2"])
    assert not needs_no_openssl(supervised.command()[3:])  # past `python -m kvmesh`
    assert not needs_no_openssl(["status", "n1"])  # may speak HTTPS to an agent
    assert not needs_no_openssl(["key", "set", "node", "run"])
