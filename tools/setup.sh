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
command -v systemd-analyze >/dev/null || need_apt+=(systemd)  # `verify` of the systemd unit (tests)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# Byte-compile kvmesh as a regular install would: every process (node, agent, each CLI call)
# then loads bytecode instead of compiling its modules at start (faster, and less memory).
.venv/bin/python -m compileall -q -j 0 kvstore kvmesh scheduler southbound >/dev/null
