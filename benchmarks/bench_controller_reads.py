#!/usr/bin/env python3
"""Issue 28: what the controllers' reads cost the API server, watch caches against full
relisting, and against a descheduler's cycle, at fleet size on the upstream control plane.

1. starts ``krea-ops sim serve --control-plane upstream --nodes N --telemetry-nodes T``
   (the scale mode: N GPU nodes with their kubelets, trainings, inference and DaemonSets
   on the real kube-apiserver; devices, exporters and Prometheus for the first T) and
   waits for ``try:``;
2. for each read mode (``watch``: the watch caches ``controller run`` reads through;
   ``relist``: ``controller_watch`` false, every pass lists what it reads) and each
   controller alone, then the four in one process as ``controller run all`` runs them:
   the real ``Runner`` in ``--dry-run`` (no Lease, no write: the reads of a pass are the
   same, the plans are only logged) with ``LiveInputs`` (the ConfigMap's Prometheus), one
   pass every ``--interval`` s for ``--minutes``. Every request to the API server is
   counted on the client (requests, and bytes: each answer's JSON, each watch event's),
   the first pass apart (a cache's first list) from the steady state (per minute);
3. and kube-apiserver's own count over the same steady window: the growth of
   ``apiserver_request_total`` and ``apiserver_response_sizes_sum`` for LIST, less the same
   growth over a window as long with no controller running (the simulated kubelets' and
   the upstream controllers' own traffic);
4. the descheduler's cycle, modelled: each run of a descheduler (a CronJob, or its
   ``deschedulingInterval`` loop starting informers anew) lists every node and every pod;
   the same two paginated lists are made and counted, per cycle and per minute at
   ``--descheduler-interval`` (5 min, a common setting).

Prints markdown tables.

    .venv/bin/python benchmarks/bench_controller_reads.py --nodes 5000 --telemetry-nodes 64
    .venv/bin/python benchmarks/bench_controller_reads.py --nodes 256 --telemetry-nodes 8 \\
        --minutes 1 --interval 10                                      # quick
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from krea_ops.controllers.loop import JsonLog, LiveInputs, Runner, resolve  # noqa: E402
from krea_ops.kube.cluster import ApiAnswer, Cluster, connect  # noqa: E402
from krea_ops.kube.watch import Collection, WatchedCluster  # noqa: E402
from krea_ops.settings import Settings  # noqa: E402

CONTROLLERS = ("burst-taint", "migrate-back", "node-health", "quota-sync")


class Counted(Cluster):
    """``inner``, counting requests and the bytes of their answers (and of each watch
    event) by verb: list, watch, get, other."""

    def __init__(self, inner: Cluster) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s)
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.bytes: dict[str, int] = {}

    def add(self, verb: str, requests: int, size: int) -> None:
        with self.lock:
            self.requests[verb] = self.requests.get(verb, 0) + requests
            self.bytes[verb] = self.bytes.get(verb, 0) + size

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        with self.lock:
            return dict(self.requests), dict(self.bytes)

    def request(self, what: str, method: str, path: str, **kw: Any) -> ApiAnswer:
        answer = super().request(what, method, path, **kw)
        if method == "GET":
            verb = "list" if Collection.of(path) is not None else "get"
        else:
            verb = "other"
        size = len(answer.text or "") if answer.text else len(orjson.dumps(answer.body))
        self.add(verb, 1, size)
        return answer

    @contextlib.contextmanager
    def watch(self, what: str, path: str, *, query: dict[str, Any]) -> Iterator[Any]:
        outer = self
        self.add("watch", 1, 0)
        with super().watch(what, path, query=query) as events:

            class Counting:
                def __iter__(self) -> Iterator[dict[str, Any]]:
                    for event in events:
                        outer.add("watch", 0, len(orjson.dumps(event)))
                        yield event

                def close(self) -> None:
                    events.close()

            yield Counting()


def apiserver_lists(cluster: Cluster) -> tuple[float, float]:
    """kube-apiserver's LIST requests served and their response bytes, so far."""
    from prometheus_client.parser import text_string_to_metric_families

    answer = cluster.request("metrics", "GET", "/metrics", raw=True)
    if not answer.ok:
        return float("nan"), float("nan")
    requests = size = 0.0
    for family in text_string_to_metric_families(answer.text or ""):
        for s in family.samples:
            if s.labels.get("verb") != "LIST":
                continue
            if s.name == "apiserver_request_total":
                requests += s.value
            elif s.name == "apiserver_response_sizes_sum":
                size += s.value
    return requests, size


def start_world(
    cli: str, args: argparse.Namespace, tmp: Path
) -> tuple[subprocess.Popen[str], Path]:
    kubeconfig = tmp / "kubeconfig"
    argv = [
        cli, "sim", "serve", "--control-plane", args.control_plane, "--nodes", str(args.nodes),
        "--telemetry-nodes", str(args.telemetry_nodes), "--speed", "1", "--state",
        str(tmp / "state"), "--kubeconfig-out", str(kubeconfig),
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True).start()
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("try:"):
            break
    else:
        raise RuntimeError("the world did not start:\n" + "".join(err[-20:]))
    print(f"world up in {time.monotonic() - t0:.0f} s: {' '.join(argv[1:])}\n", flush=True)
    threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
    return proc, kubeconfig


def measure(
    kubeconfig: Path, which: str, watch: bool, args: argparse.Namespace
) -> dict[str, float]:
    settings = Settings(kubeconfig=str(kubeconfig), controller_watch=watch)
    base = connect(str(kubeconfig), None, timeout_s=120)
    counted = Counted(base)
    cluster: Cluster = WatchedCluster(counted) if watch else counted
    inputs = LiveInputs(settings, cluster)
    runner = Runner(
        cluster,
        resolve(which, settings),
        inputs,
        identity=f"bench-{os.getpid()}",
        dry_run=True,
        log=JsonLog(io.StringIO()),
    )
    out: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        for c in runner.controllers:
            result = runner.pass_once(c)
            if result.outcome != "ok":
                print(f"  {c.name}: first pass {result.outcome}: {result.detail}", flush=True)
        out["first_pass_s"] = time.monotonic() - t0
        req0, bytes0 = counted.snapshot()
        out["first_requests"] = sum(req0.values())
        out["first_mb"] = sum(bytes0.values()) / 1e6
        api0 = apiserver_lists(base)
        start = time.monotonic()
        end = start + 60 * args.minutes
        passes = 0
        while time.monotonic() < end:
            began = time.monotonic()
            for c in runner.controllers:
                runner.pass_once(c)
            passes += 1
            time.sleep(max(0.0, args.interval - (time.monotonic() - began)))
        minutes = (time.monotonic() - start) / 60
        api1 = apiserver_lists(base)
        req1, bytes1 = counted.snapshot()
        for verb in ("list", "watch", "get", "other"):
            out[f"{verb}_per_min"] = (req1.get(verb, 0) - req0.get(verb, 0)) / minutes
            out[f"{verb}_mb_per_min"] = (bytes1.get(verb, 0) - bytes0.get(verb, 0)) / 1e6 / minutes
        out["passes"] = passes
        out["api_lists_per_min"] = (api1[0] - api0[0]) / minutes
        out["api_list_mb_per_min"] = (api1[1] - api0[1]) / 1e6 / minutes
        out["minutes"] = minutes
    finally:
        inputs.close()
        cluster.close()
        base.close()
    return out


def background(kubeconfig: Path, minutes: float) -> tuple[float, float]:
    """kube-apiserver's LIST growth per minute with no controller running."""
    base = connect(str(kubeconfig), None, timeout_s=120)
    try:
        a = apiserver_lists(base)
        time.sleep(60 * minutes)
        b = apiserver_lists(base)
    finally:
        base.close()
    return (b[0] - a[0]) / minutes, (b[1] - a[1]) / 1e6 / minutes


def descheduler_cycle(kubeconfig: Path) -> dict[str, float]:
    base = connect(str(kubeconfig), None, timeout_s=120)
    counted = Counted(base)
    try:
        t0 = time.monotonic()
        nodes = counted.list_all("list nodes", "/api/v1/nodes")
        pods = counted.list_all("list pods", "/api/v1/pods")
        took = time.monotonic() - t0
        req, size = counted.snapshot()
    finally:
        base.close()
    return {
        "requests": req.get("list", 0),
        "mb": size.get("list", 0) / 1e6,
        "s": took,
        "nodes": len(nodes),
        "pods": len(pods),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--telemetry-nodes", type=int, default=64)
    parser.add_argument("--control-plane", default="upstream", choices=("upstream", "embedded"))
    parser.add_argument("--minutes", type=float, default=2.0, help="steady window per run")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between passes")
    parser.add_argument("--descheduler-interval", type=float, default=300.0)
    parser.add_argument("--only", default="", help="comma-separated controllers (default: all)")
    parser.add_argument("--cli", default=str(ROOT / ".venv" / "bin" / "krea-ops"))
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="measure against a world already running (its sim serve --kubeconfig-out) "
        "instead of starting one; --nodes is then only what the tables say",
    )
    args = parser.parse_args(argv)
    wanted = [c for c in (args.only.split(",") if args.only else CONTROLLERS) if c]
    with tempfile.TemporaryDirectory(prefix="bench-controller-reads-") as tmp_name:
        if args.kubeconfig:
            proc, kubeconfig = None, Path(args.kubeconfig)
        else:
            proc, kubeconfig = start_world(args.cli, args, Path(tmp_name))
        try:
            quiet = background(kubeconfig, min(args.minutes, 1.0))
            print(
                f"background (no controller): kube-apiserver served {quiet[0]:.1f} LISTs, "
                f"{quiet[1]:.2f} MB a minute\n",
                flush=True,
            )
            rows = []
            for which in [*wanted, "all"]:
                for mode in ("relist", "watch"):
                    print(f"measuring {which} ({mode}) ...", flush=True)
                    got = measure(kubeconfig, which, mode == "watch", args)
                    rows.append((which, mode, got))
            cycle = descheduler_cycle(kubeconfig)
        finally:
            if proc is not None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
    print(
        f"\n{args.nodes} nodes ({args.control_plane}), a pass every {args.interval:g} s, "
        f"{args.minutes:g} min steady per run; client-side counts (JSON bytes of answers and "
        "watch events); apiserver: kube-apiserver's own LIST count and response bytes over "
        "the same window, less the background\n"
    )
    print(
        "| controller | reads | first pass s | first pass requests | first pass MB "
        "| lists/min | list MB/min | watch requests/min | watch MB/min | gets/min "
        "| apiserver LISTs/min | apiserver LIST MB/min |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for which, mode, r in rows:
        print(
            f"| {which} | {mode} | {r['first_pass_s']:.1f} | {r['first_requests']:.0f} "
            f"| {r['first_mb']:.1f} | {r['list_per_min']:.1f} | {r['list_mb_per_min']:.2f} "
            f"| {r['watch_per_min']:.2f} | {r['watch_mb_per_min']:.3f} | {r['get_per_min']:.1f} "
            f"| {r['api_lists_per_min'] - quiet[0]:.1f} "
            f"| {r['api_list_mb_per_min'] - quiet[1]:.2f} |"
        )
    per_min = 60.0 / args.descheduler_interval
    print(
        f"\ndescheduler cycle (modelled: every node and every pod listed, paginated): "
        f"{cycle['requests']:.0f} requests, {cycle['mb']:.1f} MB, {cycle['s']:.1f} s per cycle "
        f"({cycle['nodes']:.0f} nodes, {cycle['pods']:.0f} pods); at one cycle every "
        f"{args.descheduler_interval:g} s: {cycle['requests'] * per_min:.1f} requests, "
        f"{cycle['mb'] * per_min:.2f} MB a minute"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
