#!/usr/bin/env python3
"""Container benchmark (issue 30): the image's build time and size, and `docker-compose up` time.

    python tools/bench/image_bench.py [--json] [--cold-base]

Metrics:
  base_s            making the Debian base with debootstrap + docker import (only with
                    --cold-base, which removes the cached kvmesh-base:bookworm first; else 0)
  build_s           tools/build-image.sh with the base cached: wheelhouse + docker build
  image_mb          kvmesh:latest's size (docker image inspect .Size, MB = 10^6 bytes)
  base_mb           the base's size
  up_healthy_s      `docker-compose up -d` of docker-compose.yml (new project, empty volumes)
                    until all three nodes are healthy (answering, their agent's device KNOWN)
  healthcheck_interval_s  the compose healthcheck's interval: up_healthy_s is a multiple of it
Needs a running Docker engine and docker-compose (tests/docker installs and starts them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kvstore.node_ports import free_tcp_port

REPO = Path(__file__).resolve().parents[2]
LOCAL_BASE = "kvmesh-base:bookworm"
IMAGE = "kvmesh:latest"


def run(*args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout


def size_mb(image: str) -> float:
    return round(int(run("docker", "image", "inspect", "-f", "{{.Size}}", image)) / 1e6, 1)


def timed_build(cold_base: bool) -> tuple[float, float]:
    """(base_s, build_s)."""
    base_s = 0.0
    if cold_base:
        subprocess.run(["docker", "rmi", "-f", LOCAL_BASE], capture_output=True)
        started = time.monotonic()
        run(str(REPO / "tools" / "build-image.sh"))
        base_s = time.monotonic() - started
    started = time.monotonic()
    run(str(REPO / "tools" / "build-image.sh"))
    build_s = time.monotonic() - started
    return round(max(0.0, base_s - build_s), 1), round(build_s, 1)


def up_until_healthy() -> float:
    project = f"kvmeshbench{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "KVMESH_N1_PORT": str(free_tcp_port())}
    compose = ["docker-compose", "-f", str(REPO / "docker-compose.yml"), "-p", project]
    started = time.monotonic()
    try:
        run(*compose, "up", "-d", env=env)
        while True:
            ids = run(*compose, "ps", "-q", "n1", "n2", "n3", env=env).split()
            states = [run("docker", "inspect", "-f", "{{.State.Health.Status}}", c).strip()
                      for c in ids]
            if len(states) == 3 and all(s == "healthy" for s in states):
                return round(time.monotonic() - started, 1)
            if time.monotonic() - started > 300:
                raise SystemExit(f"not healthy after 300 s: {states}")
            time.sleep(0.5)
    finally:
        subprocess.run([*compose, "down", "-v", "-t", "5"], capture_output=True, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cold-base", action="store_true",
                        help="remove the cached debootstrap base first and time making it")
    args = parser.parse_args()
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        sys.exit("image_bench: no Docker engine answers (start dockerd)")
    base_s, build_s = timed_build(args.cold_base)
    interval = yaml.safe_load((REPO / "docker-compose.yml").read_text())[
        "x-node"]["healthcheck"]["interval"]
    based_on_local = subprocess.run(["docker", "image", "inspect", LOCAL_BASE],
                                    capture_output=True).returncode == 0
    result = {
        "base_s": base_s, "build_s": build_s, "image_mb": size_mb(IMAGE),
        "base_mb": size_mb(LOCAL_BASE) if based_on_local else None,
        "up_healthy_s": up_until_healthy(),
        "healthcheck_interval_s": float(str(interval).rstrip("s")),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name:24} {value}")


if __name__ == "__main__":
    main()
