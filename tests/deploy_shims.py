"""Stand-ins for `systemctl` and `scp` while tests/test_deploy_guide.py runs docs/deploy.md.

Each guide host is a network namespace with its own /etc/kvmesh, /var/lib/kvmesh, /run/kvmesh and
/root (bind mounts in a private mount namespace). These shims run inside a host:

    deploy_shims.py systemctl (start|stop|restart|enable --now|disable --now) kvmesh@NAME
    deploy_shims.py scp SRC... DST          # HOST:/path names another host's file

`systemctl start` does what systemd does for the unit file the project ships
(packaging/systemd/kvmesh@.service): it runs ExecStart with the instance name filled in and
NOTIFY_SOCKET set, and returns once the service sends READY=1 (Type=notify), failing with the
service's log when it exits or stays silent. The service keeps running after the shim returns
(it holds the host's namespaces); its pid is kept in /run/kvmesh/NAME.pid. `stop` sends SIGTERM
and waits for the exit (then SIGKILL, as systemd does after its timeout).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

UNIT = Path(__file__).resolve().parents[1] / "packaging" / "systemd" / "kvmesh@.service"
RUN = Path("/run/kvmesh")
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# Where each host's bind-mounted directories really are: {host: {"/etc/kvmesh": dir, ...}}.
ROOTS_ENV = "DEPLOY_GUIDE_ROOTS"


def exec_start(instance: str) -> list[str]:
    """The unit's ExecStart, `%i` filled in, its program found on PATH (the test's venv)."""
    for line in UNIT.read_text().splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line.split("=", 1)[1].replace("%i", instance))
            program = shutil.which(Path(words[0]).name)
            if program is None:
                raise SystemExit(f"systemctl: {words[0]} not found")
            return [program, *words[1:]]
    raise SystemExit(f"systemctl: no ExecStart in {UNIT}")


def pid_file(instance: str) -> Path:
    return RUN / f"{instance}.pid"


def start(instance: str) -> None:
    if running(instance):
        return
    RUN.mkdir(mode=0o755, exist_ok=True)
    notify_path = RUN / f"{instance}.notify"
    notify_path.unlink(missing_ok=True)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    log = open(RUN / f"{instance}.log", "ab")  # noqa: SIM115 (the service's stdout for life)
    env = {**os.environ, "NOTIFY_SOCKET": str(notify_path)}
    proc = subprocess.Popen(exec_start(instance), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    pid_file(instance).write_text(str(proc.pid))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(instance, f"exited with status {proc.returncode} before READY=1")
        notify.settimeout(0.5)
        try:
            message = notify.recv(4096).decode()
        except TimeoutError:
            continue
        if "READY=1" in message.split("\n"):
            return
    proc.kill()
    fail(instance, f"no READY=1 within {READY_TIMEOUT_S:.0f} s")


def fail(instance: str, why: str) -> None:
    tail = (RUN / f"{instance}.log").read_text(errors="replace")[-3000:]
    raise SystemExit(f"systemctl: kvmesh@{instance} {why}\n{tail}")


def running(instance: str) -> int | None:
    try:
        pid = int(pid_file(instance).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def stop(instance: str) -> None:
    pid = running(instance)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    pid_file(instance).unlink(missing_ok=True)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def systemctl(args: list[str]) -> None:
    words = [a for a in args if a != "--now"]
    now = "--now" in args
    if len(words) != 2 or not words[1].startswith("kvmesh@"):
        raise SystemExit(f"systemctl: only start/stop/restart/enable --now/disable --now "
                         f"kvmesh@NAME here, not {' '.join(args)}")
    verb, instance = words[0], words[1].removeprefix("kvmesh@").removesuffix(".service")
    if verb in ("start",) or (verb == "enable" and now):
        start(instance)
    elif verb in ("stop",) or (verb == "disable" and now):
        stop(instance)
    elif verb == "restart":
        stop(instance)
        start(instance)
    elif verb not in ("enable", "disable"):
        raise SystemExit(f"systemctl: {verb}?")


def local_path(spec: str) -> Path:
    """`HOST:/etc/kvmesh/x` -> where that host's file really is; a plain path stays."""
    host, sep, path = spec.partition(":")
    if not sep:
        return Path(spec)
    roots = json.loads(os.environ[ROOTS_ENV])[host]
    for mount, real in roots.items():
        if path == mount or path.startswith(mount + "/"):
            return Path(real) / path[len(mount):].lstrip("/")
    raise SystemExit(f"scp: {spec}: not under {', '.join(roots)}")


def scp(args: list[str]) -> None:
    if len(args) < 2:
        raise SystemExit("scp: SRC... DST")
    *sources, target = args
    dest = local_path(target)
    for source in sources:
        src = local_path(source)
        to = dest / src.name if dest.is_dir() else dest
        shutil.copyfile(src, to)


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    {"systemctl": systemctl, "scp": scp}[command](args)


if __name__ == "__main__":
    main()
