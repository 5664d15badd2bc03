#!/usr/bin/env bash
# Builds a wheelhouse: kvmesh's wheel and one for each of its dependencies, so that an install
# needs no package index (air-gapped hosts, container builds whose pip cannot reach one):
#   tools/wheelhouse.sh DIR          then, anywhere:   pip install --no-index --find-links DIR kvmesh
# kvmesh's wheel is built offline (this checkout's .venv provides setuptools and wheel), from a
# copy of the checkout's files (nothing lands in the checkout). Dependencies come from a local
# cache of wheels (KVMESH_WHEEL_CACHE, default ~/.cache/kvmesh/wheels) when it holds them all,
# else from the package index, into that cache: after one run with an index, runs are offline.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: tools/wheelhouse.sh DIR}"
python="${PYTHON:-$repo/.venv/bin/python}"
cache="${KVMESH_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvmesh/wheels}"
mkdir -p "$out" "$cache"
out="$(cd "$out" && pwd)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # The files of the checkout (committed or not), never its build products or .venv.
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
     | xargs -0 cp -P --parents -t "$work/src" 2>/dev/null || true)
else
  cp -a "$repo"/{setup.cfg,pyproject.toml,README.md,kvstore,scheduler,southbound,kvmesh} "$work/src"
fi
rm -f "$out"/kvmesh-*.whl
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$work/src" 2>"$work/log" \
  || { cat "$work/log" >&2; exit 1; }
wheel="$(ls "$out"/kvmesh-*.whl)"

# Dependencies: the cache alone (offline) when it has them; else fill it from the index. One
# writer at a time (parallel tests share the cache).
exec 9>"$cache/.lock"
flock 9
if ! "$python" -m pip wheel -q --no-index --find-links "$cache" -w "$out" "$wheel" 2>/dev/null; then
  "$python" -m pip wheel -q -w "$cache" "$wheel"
  rm -f "$cache"/kvmesh-*.whl
  "$python" -m pip wheel -q --no-index --find-links "$cache" -w "$out" "$wheel"
fi
echo "$wheel"
