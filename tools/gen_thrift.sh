#!/usr/bin/env bash
# Regenerates kvstore/gen/ from if/KvStore.thrift. The generated code is committed; a test checks
# it is current (run this after every IDL change).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-kvstore/gen}"
rm -rf "$out/kvstore_thrift"
mkdir -p "$out"
thrift --gen py:slots -out "$out" if/KvStore.thrift
