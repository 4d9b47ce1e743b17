#!/usr/bin/env python3
"""Issue 17, Load: the four controllers for many simulated hours at 512 nodes, no growth.

A fresh API server (``krea-ops sim serve --api-only``, a subprocess) gets the fleet
benchmarks/bench_controllers.py ``cost`` makes (``--nodes`` GPU nodes with one training
pod each holding 8 GPUs, a virtual node with ``--offsite`` inference pods, Kueue's
ResourceFlavor and two ClusterQueues). ``--offsite`` is 0 by default: the API-only server
has no ReplicaSet controller, so a pod migrate-back moves is never replaced and its move
waits ``move_timeout_s`` of real time (the runbook's waits are on the monotonic clock,
not the runner's), which would stall simulated time; for the same reason node-health's
``drain_timeout_s`` is ``--drain-timeout`` (10 s) instead of 300 s. Otherwise the
controllers run with their shipped settings. node-health, burst-taint, quota-sync and
migrate-back (blast cap, veto on) run through one real ``Runner`` (Leases,
fenced writes, the state ConfigMap, audit log, JSON log, metrics) on simulated time: the
runner's ``clock`` and ``wall`` are a counter this script advances ``--interval``
simulated seconds per step; each step renews every Lease once
(``try_acquire_or_renew``, what the renew thread does) and makes one pass of each
controller. Nothing sleeps, so 24 simulated hours take minutes of wall time.

Telemetry is recorded readings (the hardware is the one thing faked), rebuilt every step
at the simulated time: findings arrive and clear at random (seeded): each step, with
probability ``--arrival``, a random GPU of a random node runs hot (84 °C) for a random
10-120 simulated minutes, then cools.

Every simulated hour this process's RSS, threads and open file descriptors, the API
server's RSS, and the size of the state ConfigMap (bytes of its data) are sampled.
Growth is reported as the first sample (after the first hour, once every cache is warm)
against the last, and the least-squares slope per simulated hour.

    .venv/bin/python benchmarks/bench_controllers_soak.py [--nodes 512] [--hours 24] \
        [--interval 30] [--seed 1]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shlex
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_apiserver import ServerProcess, node_name, table  # noqa: E402
from bench_controllers import GPUS, USER_OF, Recorded, cost_fleet, readings  # noqa: E402

from krea_ops.controllers.base import NAMESPACE, Controller, Inputs  # noqa: E402
from krea_ops.controllers.loop import JsonLog, Runner  # noqa: E402
from krea_ops.health import HealthPolicy  # noqa: E402
from krea_ops.kube.cluster import connect  # noqa: E402
from krea_ops.kube.quantity import parse_quantity  # noqa: E402
from krea_ops.kube.times import _parse_text  # noqa: E402
from krea_ops.model import FleetTelemetry  # noqa: E402
from krea_ops.runbook.audit import AuditLog  # noqa: E402

EPOCH = 1_790_000_000.0  # simulated Unix time at the start


class SimTime:
    """The runner's clock and wall: both advance only when told."""

    def __init__(self) -> None:
        self.t = 0.0

    def clock(self) -> float:
        return self.t

    def wall(self) -> float:
        return EPOCH + self.t


def telemetry(names: list[str], hot: dict[tuple[str, int], float], at: float) -> FleetTelemetry:
    """Every GPU of ``names`` at 40 °C, the (node, GPU) pairs in ``hot`` at 84 °C."""
    return readings(names, set(hot), at)


def proc_status(pid: int | str, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def sample(server_pid: int, cluster: Any) -> dict[str, float]:
    state = cluster.get(
        "configmap", f"/api/v1/namespaces/{NAMESPACE}/configmaps/krea-ops-controller-state"
    )
    data = state.get("data") or {}
    return {
        "rss_mib": proc_status("self", "VmRSS") / 1024,
        # Python's own allocated blocks: growth here is Python objects kept, growth in RSS
        # alone is the allocator's or C memory
        "py_blocks": sys.getallocatedblocks(),
        "threads": proc_status("self", "Threads"),
        "py_threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")),
        "server_rss_mib": proc_status(server_pid, "VmRSS") / 1024,
        "state_bytes": len(json.dumps(data, separators=(",", ":"))),
        # the bounded parse caches (kube.times: 8,192 stamps; kube.quantity: 4,096)
        "time_cache": _parse_text.cache_info().currsize,
        "quantity_cache": parse_quantity.cache_info().currsize,
    }


def grown(early: tracemalloc.Snapshot, late: tracemalloc.Snapshot, h0: float, h1: float) -> None:
    """The allocations still alive that grew most between two snapshots, by traceback."""
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = late.filter_traces(keep).compare_to(early.filter_traces(keep), "traceback")
    total = sum(d.size_diff for d in diff)
    print(f"\n## allocations alive, hour {h0:g} -> hour {h1:g}: {total / 1024:+,.0f} KiB in all\n")
    for d in diff[:12]:
        print(
            f"- {d.size_diff / 1024:+,.1f} KiB ({d.count_diff:+,} blocks), "
            f"now {d.size / 1024:,.1f} KiB"
        )
        for line in d.traceback.format()[-2 * min(len(d.traceback), 6) :]:
            print(f"      {line.strip()}")
    print(flush=True)


def slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument(
        "--offsite",
        type=int,
        default=0,
        help="inference pods on the virtual node (migrate-back would move them, and with no "
        "ReplicaSet controller on the API-only server wait move_timeout_s real seconds)",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=10.0, help="node-health drain_timeout_s"
    )
    parser.add_argument(
        "--lemon-window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="node-health lemon_window_s, how long remediations are remembered in the state "
        "ConfigMap (shipped: 28 days); shorter shows the state level off within the run",
    )
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours")
    parser.add_argument("--interval", type=float, default=30.0, help="simulated s per pass")
    parser.add_argument("--arrival", type=float, default=0.05, help="P(new finding)/step")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="FRAMES",
        help="trace allocations (FRAMES frames deep) and print what grew between the "
        "hour-2 sample and the end, by where it was allocated (slows the run about 3x)",
    )
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.hours <= 0 or args.interval <= 0:
        print("bench_controllers_soak: --nodes, --hours, --interval must be > 0", file=sys.stderr)
        return 2
    cli = str(Path(sys.executable).with_name("krea-ops"))
    command = "benchmarks/bench_controllers_soak.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# controllers soak (issue 17, Load)\n\n    .venv/bin/python {command}\n", flush=True)

    from krea_ops.controllers.burst_taint import BurstTaint
    from krea_ops.controllers.migrate_back import MigrateBack
    from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
    from krea_ops.controllers.quota_sync import QuotaSync

    rng = random.Random(args.seed)
    steps = int(args.hours * 3600 / args.interval)
    per_hour = max(1, int(3600 / args.interval))
    sim = SimTime()
    outcomes: dict[str, dict[str, int]] = {}
    acted: dict[str, int] = {}
    arrived = 0
    samples: list[tuple[float, dict[str, float]]] = []
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
    early: tracemalloc.Snapshot | None = None
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp_name:
        tmp = Path(tmp_name)
        server = ServerProcess(cli, tmp / "state", tmp / "kubeconfig", tmp / "ca.pem")
        try:
            cluster = connect(server.target.kubeconfig, None, timeout_s=120)
            t0 = time.perf_counter()
            cost_fleet(cluster, server, args.nodes, args.offsite)
            print(f"- fleet made in {time.perf_counter() - t0:.0f} s", flush=True)
            names = [node_name(i) for i in range(args.nodes)]
            source = Recorded(telemetry(names, {}, sim.wall()))
            controllers: list[Controller[Any]] = [
                NodeHealth(
                    NodeHealthConfig(drain_timeout_s=args.drain_timeout)
                    if args.lemon_window is None
                    else NodeHealthConfig(
                        drain_timeout_s=args.drain_timeout, lemon_window_s=args.lemon_window
                    )
                ),
                BurstTaint(),
                QuotaSync(),
                MigrateBack(),
            ]
            runner = Runner(
                cluster,
                controllers,
                lambda name: Inputs(cluster, source, HealthPolicy(), USER_OF.format(name)),
                identity=f"soak-{os.getpid()}",
                audit=AuditLog(tmp / "audit.jsonl"),
                log=JsonLog(io.StringIO(), wall=sim.wall),  # replaced below
                clock=sim.clock,
                wall=sim.wall,
            )
            log_stream = io.StringIO()
            runner.log.stream = log_stream
            hot: dict[tuple[str, int], float] = {}  # (node, gpu) -> simulated time it cools
            wall0 = time.perf_counter()
            for step in range(1, steps + 1):
                sim.t += args.interval
                now = sim.wall()
                for cooled in [k for k, until in hot.items() if until <= now]:
                    del hot[cooled]
                if rng.random() < args.arrival:
                    gpu = (rng.choice(names), rng.randrange(GPUS))
                    hot[gpu] = now + rng.uniform(600, 7200)
                    arrived += 1
                source.telemetry = telemetry(names, hot, now)
                for elector in runner.electors.values():
                    elector.try_acquire_or_renew()
                for c in controllers:
                    result = runner.pass_once(c)
                    by = outcomes.setdefault(c.name, {})
                    by[result.outcome] = by.get(result.outcome, 0) + 1
                    if result.decision and result.decision.acts:
                        acted[c.name] = acted.get(c.name, 0) + 1
                # the JSON log is an in-memory stream here: keep it from being the growth
                log_stream.seek(0)
                log_stream.truncate()
                if step % per_hour == 0:
                    hour = sim.t / 3600
                    s = sample(server.pid, cluster)
                    samples.append((hour, s))
                    print(
                        f"- {hour:5.1f} h simulated, {time.perf_counter() - wall0:6.0f} s wall: "
                        f"RSS {s['rss_mib']:.1f} MiB, blocks {s['py_blocks']:.0f}, "
                        f"threads {s['threads']:.0f}, fds "
                        f"{s['fds']:.0f}, server RSS {s['server_rss_mib']:.1f} MiB, state "
                        f"{s['state_bytes']:.0f} B, time cache {s['time_cache']:.0f}, "
                        f"hot GPUs {len(hot)}",
                        flush=True,
                    )
                    if args.tracemalloc and len(samples) == 2:
                        early = tracemalloc.take_snapshot()
            wall = time.perf_counter() - wall0
            if early is not None:
                grown(early, tracemalloc.take_snapshot(), samples[1][0], sim.t / 3600)
            for elector in runner.electors.values():
                elector.close()
        finally:
            server.stop()
    print()
    print(
        f"{steps} steps x 4 controllers ({steps} passes each) in {wall:.0f} s wall; findings "
        f"arrived: {arrived}; outcomes: "
        + "; ".join(
            f"{n}: " + ", ".join(f"{k} {v}" for k, v in sorted(o.items()))
            for n, o in outcomes.items()
        )
        + "; passes that acted: "
        + (", ".join(f"{n} {v}" for n, v in acted.items()) or "none")
        + "\n",
        flush=True,
    )
    if len(samples) < 2:
        print("fewer than two hourly samples: run for at least 2 simulated hours")
        return 0
    base = samples[1:] if len(samples) > 2 else samples  # from hour 2: caches warm
    xs = [h for h, _ in base]
    rows = []
    for key, label in (
        ("rss_mib", "RSS of this process (MiB)"),
        ("py_blocks", "Python objects' allocated blocks"),
        ("threads", "OS threads of this process"),
        ("py_threads", "Python threads"),
        ("fds", "open file descriptors"),
        ("server_rss_mib", "API server RSS (MiB)"),
        ("state_bytes", "state ConfigMap data (bytes)"),
        ("time_cache", "timestamps in kube.times' cache (at most 8,192)"),
        ("quantity_cache", "quantities in kube.quantity's cache (at most 4,096)"),
    ):
        ys = [s[key] for _, s in base]
        rows.append(
            [
                label,
                f"{samples[0][1][key]:,.1f}",
                f"{ys[0]:,.1f}",
                f"{ys[-1]:,.1f}",
                f"{slope(xs, ys):+,.3f}",
            ]
        )
    print(
        table(
            ["measure", "hour 1", f"hour {xs[0]:g}", f"hour {xs[-1]:g}", "slope per hour"],
            rows,
            right_from=1,
        )
    )
    print(
        "\nslope: least squares over the hourly samples from the second hour on (the first "
        "hour warms caches and the Lease/state objects).",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
