#!/usr/bin/env bash
# Builds the kvmesh:latest container image (Dockerfile; docker-compose.yml runs it):
#   tools/build-image.sh                       BASE=IMAGE tools/build-image.sh
# The base is $BASE (default the official Python image). Where it cannot be pulled (no registry
# reachable), the base is made from Debian's packages instead: `debootstrap --variant=minbase
# bookworm` with python3 and what kvmesh needs (iproute2, nftables, graphviz), `docker import`ed
# and kept under the local tag kvmesh-base:bookworm, so later builds reuse it. kvmesh and its
# Python dependencies come from a wheelhouse built here on the host (tools/wheelhouse.sh) and are
# installed in the image with `pip --no-index`: the build needs no package index.
# Environment: BASE, KVMESH_IMAGE (tag, default kvmesh:latest), DEBIAN_MIRROR (for debootstrap).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
base="${BASE:-python:3.11-slim-bookworm}"
image="${KVMESH_IMAGE:-kvmesh:latest}"
local_base="kvmesh-base:bookworm"
python="${PYTHON:-$repo/.venv/bin/python}"
say() { echo "build-image: $*" >&2; }

version="$(cd "$repo" && "$python" -c 'from kvstore.version import __version__; print(__version__)')"

if ! docker image inspect "$base" >/dev/null 2>&1 && ! docker pull -q "$base" >/dev/null 2>&1; then
  say "cannot pull $base: using a Debian bookworm base made from Debian's packages ($local_base)"
  if docker image inspect "$local_base" >/dev/null 2>&1; then
    say "$local_base is cached (docker rmi $local_base makes it again)"
  else
    command -v debootstrap >/dev/null || { say "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    say "making $local_base with debootstrap (a few minutes, once)"
    debootstrap --variant=minbase --include=python3,python3-venv,iproute2,nftables,graphviz \
      bookworm "$root" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >"$root.log" 2>&1 \
      || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
    rm -f "$root.log"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$local_base" >/dev/null
    rm -rf "$root"
    trap - EXIT
  fi
  base="$local_base"
fi

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
say "wheelhouse (kvmesh $version and its dependencies)"
"$repo/tools/wheelhouse.sh" "$context/wheels" >/dev/null
cp "$repo/Dockerfile" "$context/"
say "building $image from $base"
docker build -q --build-arg BASE="$base" --build-arg VERSION="$version" -t "$image" "$context" >/dev/null
# The image this one replaced (now untagged) goes, and nothing else.
docker image prune -f --filter "label=org.opencontainers.image.title=kvmesh" >/dev/null
say "built $image (kvmesh $version, $(docker image inspect -f '{{.Size}}' "$image") bytes)"
