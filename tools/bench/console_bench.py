#!/usr/bin/env python3
"""Console benchmark: first paint of the cluster view (`/ui/`) on a big isolated cluster.

Metric (target from issue 27; 2-core machine):
  first_paint_ms_p50   `first-contentful-paint` of the cluster view in Chromium, from the start
                       of the navigation (a logged-in browser opening `/ui/` of n1's agent,
                       which renders every node, its devices and values, and the Graphviz map
                       of the mesh on the server), median of --runs                   <= 1000
  first_paint_ms_max   the slowest run
Also: server_response_ms_p50 (request sent to the last byte of the page, Navigation Timing: the
agent's dumps of the mesh, the HTML and `dot`), baseline_login_page_paint_ms_p50 (the same
browser and agent painting the login form, which holds no data: what the machine's load alone
costs a paint), rows_listed (nodes in the page's table: every
node of the cluster), cluster_up_s, and the load average before and after.

The cluster is `kvmesh cluster up --isolated --nodes N [--core C]` (root: a namespace per node,
TLS); the page waits until n1's mesh holds every node's agent and peers record, so the map is
whole. Chromium is Debian's (/usr/bin/chromium), driven by Playwright, in a namespace of its own
on the cluster's bridge.

With --values N (no browser, no root): the server's side at scale. One loopback node and agent;
N statuses (`status/m<i>/...`, 64 nodes, one in 500 FAILED) written into its store; then the
time to answer, from request to last byte:
  cluster_first_ms          the first `/ui/` (waits for the console's status index to read
                            every status once)
  cluster_ms_p50            `/ui/` afterwards (from the index), median of --runs
  change_shown_within_ms_p50 / _max   from a status changed in the store to a `/ui/` that
                            shows it (3 changes, one after the other)
  cluster_after_change_ms   the render that showed it, median
  node_failed_ms_p50        `/ui/node?name=m3&state=FAILED` (one node's 1/64 of the values,
                            filtered and paged on the server)
  keys_page_ms_p50          `/ui/keys?prefix=status/m3/` (one page of 100 of that prefix)

Usage: console_bench.py [--json] [--nodes 64] [--core 8] [--runs 5] [--values N]
The cluster (or node) runs from a temporary directory and is always torn down.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from kvmesh import cluster, netlab
from kvmesh.agent.keys import agent_key, peers_key

CHROMIUM = "/usr/bin/chromium"


def wait_whole(state: cluster.ClusterState, names: list[str], timeout: float) -> None:
    """Until n1 holds every node's agent and peers record (the view and map are complete)."""
    deadline = time.monotonic() + timeout
    wanted = {agent_key(n) for n in names} | {peers_key(n) for n in names}
    while time.monotonic() < deadline:
        with state.client("n1") as client:
            if wanted <= set(client.hash_dump("node/")):
                return
        time.sleep(0.5)
    raise SystemExit(f"n1 did not see every node's records within {timeout:g} s")


def measure(state: cluster.ClusterState, runs: int, directory: Path,
            screenshot: str | None = None) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    # Chromium in a namespace of its own on the cluster's bridge: on the host it would abort
    # requests (ERR_NETWORK_CHANGED) whenever another lab's links come and go.
    lab = state.isolated_lab()
    assert lab is not None
    namespace = netlab.attach_namespace(lab, "browser")
    state.lab = lab.to_json()  # removed with the cluster
    state.save()
    chromium = netlab.in_namespace(namespace, CHROMIUM, directory)

    ticket = cluster.agent_rest(state, "n1").json("POST", "/ui/ticket")
    base = f"https://{state.nodes['n1'].http}"
    paints, responses, baseline, rows = [], [], [], 0
    paint_js = ("() => new Promise(done => { const find = () => { const p = performance"
                ".getEntriesByName('first-contentful-paint')[0]; if (p) done(p.startTime);"
                " else setTimeout(find, 20); }; find(); })")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium))
        context = browser.new_context(ignore_https_errors=True)
        page = context.new_page()
        page.goto(base + ticket["path"])  # the login: a session cookie, then /ui/
        for _ in range(runs):
            # Baseline: the same browser and agent, a page with no data (the login form).
            page.goto(f"{base}/ui/login", wait_until="load")
            baseline.append(float(page.evaluate(paint_js)))
            page.goto(f"{base}/ui/", wait_until="load")
            paint = page.evaluate(paint_js)
            timing = page.evaluate(
                "() => { const n = performance.getEntriesByType('navigation')[0];"
                " return n.responseEnd - n.requestStart; }")
            rows = page.locator("table").first.locator("tbody tr").count()
            paints.append(float(paint))
            responses.append(float(timing))
        if screenshot:
            page.screenshot(path=screenshot, full_page=True)
        browser.close()
    return {"first_paint_ms_p50": round(statistics.median(paints), 1),
            "first_paint_ms_max": round(max(paints), 1),
            "server_response_ms_p50": round(statistics.median(responses), 1),
            "baseline_login_page_paint_ms_p50": round(statistics.median(baseline), 1),
            "rows_listed": rows, "runs": runs}


def bench_values(values: int, runs: int) -> dict[str, float]:
    """The server's side at scale (see the module doc, --values)."""
    import http.client
    import subprocess
    import sys

    import msgpack

    from kvmesh import launch
    from kvstore import KvStoreClient, free_tcp_port, make_value

    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        token = Path(tmp) / "token"
        token.write_text("console-bench-token-0123456789\n")
        token.chmod(0o600)
        address = f"127.0.0.1:{free_tcp_port()}"
        spec = launch.NodeSpec("s1", f"tcp://127.0.0.1:{free_tcp_port()}",
                               f"tcp://127.0.0.1:{free_tcp_port()}", ephemeral=True,
                               agent=launch.AgentOptions(http=address, http_token_file=token,
                                                         assume_current=True))
        node = launch.start(spec, Path(tmp) / "node.log")
        try:
            with KvStoreClient(spec.cmd_url) as client:
                per_node = values // 64
                for n in range(64):
                    client.set({
                        f"status/m{n}/linux/interface/if{i}": make_value(msgpack.packb({
                            "state": "FAILED" if i % 500 == 0 else "CONFIGURED",
                            "error": "bench" if i % 500 == 0 else "", "last_op": "CREATE",
                            "details": [], "origin": "FROM_NB", "seq": 1, "time": 1e9 + i}),
                            version=1, originator_id=f"m{n}", ttl_ms=3_600_000)
                        for i in range(per_node)})
            env = {**os.environ, "KVMESH_URL": spec.cmd_url, "KVMESH_HTTP_TOKEN_FILE": str(token)}
            deadline = time.monotonic() + 60
            while True:
                out = subprocess.run([sys.executable, "-m", "kvmesh", "ui"], env=env,
                                     capture_output=True, text=True)
                if out.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            link = out.stdout.strip()
            host, port = address.split(":")

            def get(path: str, cookie: str = "") -> tuple[float, bytes, str]:
                conn = http.client.HTTPConnection(host, int(port), timeout=120)
                started = time.perf_counter()
                conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
                resp = conn.getresponse()
                body = resp.read()
                elapsed = (time.perf_counter() - started) * 1000
                conn.close()
                return elapsed, body, resp.getheader("Set-Cookie") or ""

            _ms, _body, set_cookie = get(link[link.index("/ui/"):])
            cookie = set_cookie.split(";", 1)[0]
            first, _body, _ = get("/ui/", cookie)
            cluster = [get("/ui/", cookie)[0] for _ in range(runs)]
            shown, after_ms = [], []
            for attempt in range(3):
                marker = f"changed-{attempt}"
                with KvStoreClient(spec.cmd_url) as client:
                    client.set({"status/m3/linux/interface/if1": make_value(msgpack.packb(
                        {"state": "FAILED", "error": marker, "time": 1.0}),
                        version=2 + attempt, originator_id="m3", ttl_ms=3_600_000)})
                set_at = time.perf_counter()
                while True:
                    after, body, _ = get("/ui/", cookie)
                    if marker.encode() in body or time.perf_counter() - set_at > 10:
                        break
                shown.append((time.perf_counter() - set_at) * 1000)
                after_ms.append(after)
            node_view = [get("/ui/node?name=m3&state=FAILED", cookie)[0] for _ in range(runs)]
            keys = [get("/ui/keys?prefix=status/m3/", cookie)[0] for _ in range(runs)]
        finally:
            node.stop()
    return {"values": per_node * 64, "cluster_first_ms": round(first, 1),
            "cluster_ms_p50": round(statistics.median(cluster), 1),
            "cluster_after_change_ms": round(statistics.median(after_ms), 1),
            "change_shown_within_ms_max": round(max(shown), 1),
            "change_shown_within_ms_p50": round(statistics.median(shown), 1),
            "node_failed_ms_p50": round(statistics.median(node_view), 1),
            "keys_page_ms_p50": round(statistics.median(keys), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--core", type=int, default=8,
                        help="full nodes; the others are leaves (0: all full)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--screenshot", default=None, metavar="PNG",
                        help="save the cluster view of the last run (to look at it)")
    parser.add_argument("--values", type=int, default=0,
                        help="the server's side with N statuses on one loopback node")
    args = parser.parse_args()
    if args.values:
        result = bench_values(args.values, args.runs)
        print(json.dumps(result, sort_keys=True) if args.json else result)
        return
    if os.geteuid() != 0 or not os.path.exists(CHROMIUM):
        raise SystemExit("needs root (an isolated cluster) and /usr/bin/chromium")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        started = time.monotonic()
        try:
            state = cluster.up(args.nodes, "random", run_dir=run_dir, isolated=True,
                               timeout=600, core=args.core or None)
            up_s = time.monotonic() - started
            names = list(state.nodes)
            wait_whole(state, names, timeout=300)
            result = measure(state, args.runs, Path(tmp), args.screenshot)
        finally:
            cluster.down(run_dir)
    result.update({"nodes": args.nodes, "core": args.core, "cluster_up_s": round(up_s, 1),
                   "load_before": round(load_before, 1),
                   "load_after": round(os.getloadavg()[0], 1)})
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for name, value in sorted(result.items()):
            print(f"{name:<24} {value}")


if __name__ == "__main__":
    main()
