#!/usr/bin/env python3
"""Issue 17, Load: read commands and the dashboard on 4,096 nodes, API server at 200 ms.

A fresh API server (``krea-ops sim serve --api-only``, a subprocess, as
benchmarks/bench_apiserver.py starts it) gets ``--nodes`` Ready GPU nodes (the H200 node
objects of bench_apiserver's ``make_node``), then the fault switch is armed through its
ConfigMap (``krea-sim/api-faults``, key ``faults.yaml``; docs/operations.md "Injecting
API-server faults"): every verb on every resource answers ``--latency`` seconds late.

Timed, each ``--runs`` times, as a user runs them (subprocesses, their output read in
full and discarded):

* ``krea-ops nodes list`` and ``krea-ops gpus``, with ``--prometheus`` pointing at a
  closed loopback port: there is no Prometheus here, and the CLI has no recorded-fleet
  source, so ``gpus`` shows what it does when telemetry is unreachable (its exit status
  and first stderr line are printed);
* ``kubectl get nodes`` on the same kubeconfig, the baseline a user compares with.

Then the dashboard (``KreaOpsApp``, Textual's ``run_test`` headless, 160x50, on a
``Console`` with the same kubeconfig and unreachable Prometheus): time from app start
to the first fleet view (the heatmap holding every node, rendered), and for the
refreshes that follow, the worker's read (``Console.fleet``) and the UI thread's apply
(``FleetScreen.update_data``), medians.

    .venv/bin/python benchmarks/bench_load_latency.py [--nodes 4096] [--latency 0.2] \
        [--runs 3] [--refreshes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_apiserver import ServerProcess, table  # noqa: E402
from bench_controllers import create_nodes, ok  # noqa: E402

from krea_ops.kube.cluster import connect  # noqa: E402

NOWHERE = "http://127.0.0.1:9"  # nothing listens there: Prometheus unreachable


def arm_latency(cluster: Any, latency: float) -> None:
    rules = f"seed: 1\nrules:\n  - verbs: ['*']\n    resources: ['*']\n    latency: {latency}\n"
    ok(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": "krea-sim"}})
    ok(
        cluster,
        "POST",
        "/api/v1/namespaces/krea-sim/configmaps",
        {"metadata": {"name": "api-faults"}, "data": {"faults.yaml": rules}},
    )


def timed_run(argv: list[str], env: dict[str, str]) -> tuple[float, int, str, int]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    wall = time.perf_counter() - t0
    first_err = next((ln for ln in done.stderr.splitlines() if ln.strip()), "")
    return wall, done.returncode, first_err, len(done.stdout.splitlines())


async def dashboard(kubeconfig: str, nodes: int, refreshes: int, refresh_s: float) -> dict:
    from krea_ops.console import Console
    from krea_ops.history import HISTORY_POINTS
    from krea_ops.settings import load_settings
    from screens.app import KreaOpsApp
    from screens.fleet import FleetScreen
    from screens.widgets.heatmap import GpuHeatmap

    settings = load_settings({"kubeconfig": kubeconfig, "prometheus_url": NOWHERE}, env={})
    console = Console(settings, history_points=HISTORY_POINTS)
    reads: list[float] = []
    inner = console.fleet

    def fleet(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            reads.append(time.perf_counter() - t0)

    console.fleet = fleet  # type: ignore[method-assign]
    applies: list[float] = []
    original = FleetScreen.update_data

    def timed(self: FleetScreen, loaded: Any) -> None:
        t0 = time.perf_counter()
        original(self, loaded)
        applies.append(time.perf_counter() - t0)

    FleetScreen.update_data = timed  # type: ignore[method-assign]
    app = KreaOpsApp(console, refresh_s=refresh_s)
    shown = 0
    try:
        start = time.perf_counter()
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = start + 600
            while time.perf_counter() < deadline:
                heatmap = app.screen.query(GpuHeatmap)
                if heatmap and heatmap.first().total_count >= nodes:
                    shown = heatmap.first().total_count
                    break
                await asyncio.sleep(0.01)
            await pilot.pause()
            first_view = time.perf_counter() - start
            wanted = len(reads) + refreshes
            while len(reads) < wanted and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
    finally:
        FleetScreen.update_data = original  # type: ignore[method-assign]
    return {
        "first_view_s": first_view,
        "shown": shown,
        "reads": reads,
        "applies": applies,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--refreshes", type=int, default=3)
    parser.add_argument("--refresh-s", type=float, default=5.0, help="dashboard refresh")
    parser.add_argument("--no-dashboard", action="store_true")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.latency < 0 or args.runs < 1:
        print("bench_load_latency: --nodes and --runs must be >= 1", file=sys.stderr)
        return 2
    cli = str(Path(sys.executable).with_name("krea-ops"))
    command = "benchmarks/bench_load_latency.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# load: API server latency (issue 17)\n\n    .venv/bin/python {command}\n", flush=True)
    os.environ.setdefault("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp_name:
        tmp = Path(tmp_name)
        server = ServerProcess(cli, tmp / "state", tmp / "kubeconfig", tmp / "ca.pem")
        try:
            kc = server.target.kubeconfig
            cluster = connect(kc, None, timeout_s=120)
            made = create_nodes(server, args.nodes)
            if args.latency > 0:
                arm_latency(cluster, args.latency)
            print(
                f"- {args.nodes} nodes made in {made:.0f} s; every request now answers "
                f"{args.latency:g} s late\n",
                flush=True,
            )
            env = {**os.environ, "KUBECONFIG": kc, "KREA_OPS_CONFIG": "/nonexistent/x.yaml"}
            env.pop("KREA_OPS_PROMETHEUS_URL", None)
            commands = [
                ("krea-ops nodes list", [cli, "nodes", "list", "--prometheus", NOWHERE]),
                ("krea-ops gpus", [cli, "gpus", "--prometheus", NOWHERE]),
            ]
            kubectl = shutil.which("kubectl")
            if kubectl:
                commands.append(("kubectl get nodes", [kubectl, "get", "nodes"]))
            rows = []
            for label, argv_ in commands:
                walls, code, err, lines = [], 0, "", 0
                for _ in range(args.runs):
                    wall, code, err, lines = timed_run(argv_, env)
                    walls.append(wall)
                rows.append(
                    [
                        f"`{label}`",
                        f"{statistics.median(walls):.2f}",
                        f"{min(walls):.2f}",
                        f"{max(walls):.2f}",
                        str(code),
                        str(lines),
                        err[:90].replace("|", "/") or "-",
                    ]
                )
                print(f"- {label}: {rows[-1][1]} s median", flush=True)
            print()
            print(
                table(
                    ["command", "median s", "min s", "max s", "exit", "stdout lines", "stderr"],
                    rows,
                    right_from=1,
                )
            )
            if not args.no_dashboard:
                print(flush=True)
                got = asyncio.run(dashboard(kc, args.nodes, args.refreshes, args.refresh_s))
                reads, applies = got["reads"], got["applies"]
                later = reads[1:] or reads
                print(
                    table(
                        ["dashboard", "s"],
                        [
                            [
                                f"app start -> first fleet view ({got['shown']} nodes in "
                                "the heatmap)",
                                f"{got['first_view_s']:.2f}",
                            ],
                            ["first fleet read (worker)", f"{reads[0]:.2f}" if reads else "-"],
                            [
                                f"refresh read, median of {len(later)} (worker)",
                                f"{statistics.median(later):.2f}" if later else "-",
                            ],
                            [
                                f"refresh apply on the UI thread, median of {len(applies)}",
                                f"{statistics.median(applies):.3f}" if applies else "-",
                            ],
                        ],
                    )
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
