#!/usr/bin/env bash
# Sets up a fresh Debian machine for kvmesh: system packages, then a virtualenv in .venv with
# kvmesh installed (editable) and its test tools. Safe to re-run; each step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ip >/dev/null || need_apt+=(iproute2)
command -v thrift >/dev/null || need_apt+=(thrift-compiler)
command -v dot >/dev/null || need_apt+=(graphviz)
command -v ping >/dev/null || need_apt+=(iputils-ping)  # traffic during warm restarts (tests)
command -v nft >/dev/null || need_apt+=(nftables)  # the nftables model (libnftables JSON), chaos faults
command -v nsenter >/dev/null || need_apt+=(util-linux)  # nft run in the plugin's namespace
command -v openssl >/dev/null || need_apt+=(openssl)  # test certificates for the REST API
# The console's browser tests (tests/browser): Debian's chromium, driven by Playwright (whose
# own browser download cannot work here).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v systemd-analyze >/dev/null || need_apt+=(systemd)  # `verify` of the systemd unit (tests)
# The interpreter: Debian's own python3 (3.11 on Debian 12), built with profile-guided and
# link-time optimisation: the suite's processes used ~15% less CPU on it than on a plain source
# build such as pyenv's (docs/testing.md). PYTHON=... chooses another (3.11 or later).
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# promtool checks packaging/'s alerting rules and a live agent's /metrics (tests/test_packaging.py).
# Debian ships it only in the server's package: ~19 MB, ~30 s to install (measured); without its
# recommends (node-exporter, another daemon). Where systemd runs, the package starts a Prometheus
# server on :9090 (`systemctl disable --now prometheus` if unwanted); containers and CI have none.
need_promtool=false
command -v promtool >/dev/null || need_promtool=true
if [ ${#need_apt[@]} -gt 0 ] || $need_promtool; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if [ ${#need_apt[@]} -gt 0 ]; then
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
  if $need_promtool; then
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# Byte-compile kvmesh as a regular install would: every process (node, agent, each CLI call)
# then loads bytecode instead of compiling its modules at start (faster, and less memory).
.venv/bin/python -m compileall -q -j 0 kvstore kvmesh scheduler southbound >/dev/null
# The test modules as pytest rewrites them (their asserts), kept in __pycache__: each test
# process (one per xdist worker) then loads them instead of rewriting ~250 modules (about 5 s of
# CPU each; tests/conftest.py).
PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q --collect-only -p no:cacheprovider >/dev/null \
  || echo "setup.sh: collecting the tests failed (pytest --collect-only): see its output" >&2
# mypy's cache (.mypy_cache), as a working tree has it after its first check: tests/test_lint.py
# then checks incrementally (~1 s) instead of from cold (~20 s of CPU on a 2-core machine, in
# one test worker). Type errors are the test's to report, not setup's.
.venv/bin/mypy >/dev/null 2>&1 || true  # setup.cfg's [mypy] files
