#!/usr/bin/env python3
"""Simulated world benchmark: simulated seconds per wall second and CPU at 64..4,096 nodes.

For each node count (and each ``--exporters`` variant) the script runs one child process
of itself, which

1. starts ``SimWorld(WorldConfig(nodes=N, speed=S, seed=1, prometheus=P, exporters=E),
   tmpdir)`` in-process and times it, module by module (cluster: API server bootstrap of
   nodes and DaemonSets; devices: GPU/IB models, sysfs trees and one exporter HTTP server
   per node; kueue; burst). Past ``--startup-timeout`` it reports how far it got and stops;
2. submits load: DiT trainings (``training.submit_training``) of ``min(N // 2, 32)``
   nodes each until ``--train-fraction`` of the nodes are asked for (at least one), on top
   of the inference Deployments the ``inference-autoscaler`` actor creates itself;
3. waits until no pod is Pending (the start-up transient: DaemonSet pods on every node,
   the trainings, inference), at most ``--settle-timeout`` wall seconds, then ``--warmup``;
4. measures for ``--seconds`` wall seconds:

   * process CPU (``time.process_time()``: every thread of the process) and that of its
     child processes (the sim's Prometheus, if any) from ``/proc/<pid>/stat``; CPU is
     reported as a fraction of one core; per thread group from
     ``/proc/self/task/<tid>/schedstat``, and ``ApiServer.handle``'s own CPU;
   * each actor's ticks over the window against the ideal ``window * speed / period_s``
     (its keep-up ratio), the wall time its ticks took (tick duty) and its thread's CPU;
   * API requests (``ApiServer.handle`` calls, counted by a wrapper) and writes (the
     store's resourceVersion delta) per wall second; RSS and threads at the end;
   * at the end, nodes Ready and pods by phase (read from the store).

"Effective simulated seconds per wall second" is defined here as
``speed * min over actors of min(1, keep-up ratio)``: the simulated clock always runs at
``speed``, but the world is only as fast as its slowest loop. An actor sleeps its full
period *after* each tick (``Actor._run``), so even an actor that keeps up shows a ratio
of ``period / (period + tick time)``, a little below 1.

With ``--fallback-speeds``, a node count whose worst keep-up is below ``--keep-up`` is run
again at each lower speed in turn until one keeps up.

Stops by itself; loopback only; the temporary state directories are removed at the end.

    .venv/bin/python benchmarks/bench_world.py --nodes 64,512,4096 --speed 60 --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
RESULT_PREFIX = "BENCH_WORLD_RESULT "
PROGRESS = ".bench-progress"  # in the state dir: JSON lines, the child's start-up steps
T_PROCESS = time.perf_counter()


def _log(msg: str) -> None:
    print(f"  [{time.perf_counter() - T_PROCESS:6.1f} s] {msg}", file=sys.stderr, flush=True)


# -- /proc helpers ----------------------------------------------------------------------


def _stat_cpu(path: str) -> float:
    """utime + stime in seconds from a /proc .../stat file (0 if it is gone)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _task_cpu(tid: int) -> float:
    """A thread's CPU seconds from /proc/self/task/<tid>/schedstat (ns precision; the
    10 ms ticks of .../stat round away the many small exporter threads)."""
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _children() -> list[int]:
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (task / "children").read_text().split())
    return sorted(pids)


def _children_cpu() -> dict[int, float]:
    return {pid: _stat_cpu(f"/proc/{pid}/stat") for pid in _children()}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def _children_rss_mib() -> float:
    total = 0.0
    for pid in _children():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    return total


# -- one world (child process) ----------------------------------------------------------


class TickTimer:
    """Wraps an actor's ``tick`` (``Actor._run`` looks it up every iteration) and keeps
    the wall time spent in ticks, counting a tick still running up to the moment asked."""

    def __init__(self, actor: Any) -> None:
        self.fn = actor.tick
        self.done = 0.0
        self.count = 0
        self.longest = 0.0
        self.started: float | None = None
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            t0 = self.started = time.perf_counter()
        try:
            self.fn()
        finally:
            with self.lock:
                dt = time.perf_counter() - t0
                self.started = None
                self.done += dt
                self.count += 1
                self.longest = max(self.longest, dt)

    def snapshot(self) -> dict[str, float]:
        """Busy seconds so far (the running tick included), completed ticks and their
        seconds, the longest tick since the last snapshot, the running tick's age."""
        with self.lock:
            now = time.perf_counter()
            running = now - self.started if self.started is not None else 0.0
            out = {
                "busy": self.done + running,
                "done": self.done,
                "count": self.count,
                "longest": max(self.longest, running),
                "running": running,
            }
            self.longest = 0.0
            return out


class RequestCounter:
    """Wraps ``ApiServer.handle``: requests by method and the CPU the handling takes (on
    the connection threads, many of which end inside the window)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.count = 0
        self.cpu = 0.0
        self.by_method: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, req: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self.handle(req)
        finally:
            dt = time.thread_time() - t0
            m = getattr(req, "method", "?")
            with self.lock:
                self.count += 1
                self.cpu += dt
                self.by_method[m] = self.by_method.get(m, 0) + 1


def _thread_group(name: str) -> str:
    if name.endswith("(process_request_thread)"):
        return "HTTP connection threads"
    if name.startswith("close-"):
        return "close"
    return name.rstrip("0123456789-") or name


def _threads_cpu() -> dict[int, tuple[str, float]]:
    """Native thread id -> (group, CPU seconds) for every live Python thread."""
    out = {}
    for t in threading.enumerate():
        tid = getattr(t, "native_id", None)
        if tid:
            out[tid] = (_thread_group(t.name), _task_cpu(tid))
    return out


def _group_delta(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU per thread group over the window (threads that ended inside it are missed)."""
    out: dict[str, float] = {}
    for tid, (group, cpu) in after.items():
        prev = before.get(tid)
        out[group] = out.get(group, 0.0) + cpu - (prev[1] if prev else 0.0)
    return out


def _thread_cpu(actor: Any) -> float:
    t = actor._thread
    tid = getattr(t, "native_id", None) if t is not None else None
    return _task_cpu(tid) if tid else 0.0


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    from krea_ops.sim.apiserver.local import LocalApiServer
    from krea_ops.sim.common.actor import WorldConfig
    from krea_ops.sim.machines.training import submit_training
    from krea_ops.sim.world import SimWorld

    nodes, speed = args.one_nodes, args.speed
    state = Path(args.state_dir)
    out: dict[str, Any] = {
        "nodes": nodes,
        "speed": speed,
        "prometheus": args.prometheus,
        "exporters": args.exporters == "on",
    }

    # Time each part's actor builder (cluster bootstrap, device models, ...).
    from krea_ops.sim.world import PARTS

    startup: dict[str, float] = {}
    out["startup_by_module_s"] = startup
    for name, build in list(PARTS.items()):

        def timed(world: Any, _fn: Any = build, _short: str = name) -> Any:
            t = time.perf_counter()
            try:
                return _fn(world)
            finally:
                startup[_short] = time.perf_counter() - t
                _log(f"{_short} actors created in {startup[_short]:.1f} s")
                with (state / PROGRESS).open("a") as f:
                    f.write(json.dumps({"module": _short, "s": startup[_short]}) + "\n")

        PARTS[name] = timed

    config = WorldConfig(
        nodes=nodes,
        speed=speed,
        seed=1,
        prometheus=args.prometheus,
        exporters=args.exporters == "on",
    )
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    w = SimWorld(config, state)
    out["startup_s"] = time.perf_counter() - t0
    out["startup_cpu_s"] = time.process_time() - cpu0
    with (state / PROGRESS).open("a") as f:
        f.write(json.dumps({"started": out["startup_s"]}) + "\n")
    if args.gc_tuning:
        # As ``krea-ops sim serve`` does once the world is up.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 1000)
    _log(f"started in {out['startup_s']:.1f} s")
    try:
        assert isinstance(w.sim, LocalApiServer)  # counts the embedded server's requests
        api = w.sim.api
        counter = RequestCounter(api.handle)
        api.handle = counter  # type: ignore[method-assign]
        timers = {}
        for actor in w.actors:
            timers[actor.name] = TickTimer(actor)
            actor.tick = timers[actor.name]  # type: ignore[method-assign]

        gang = max(1, min(nodes // 2, 32))
        n_train = max(1, math.ceil(nodes * args.train_fraction / gang))
        t_sub = time.perf_counter()
        for i in range(n_train):
            submit_training(w.client, f"dit-bench-{i:02d}", nodes=gang)
        out["trainings"] = f"{n_train} x {gang} nodes"
        out["submit_s"] = time.perf_counter() - t_sub

        _log(f"submitted {out['trainings']}")

        def pending() -> int:
            return sum(
                1
                for e in api.store.list("/pods")[0]
                if (e.obj.get("status") or {}).get("phase", "Pending") == "Pending"
            )

        # Let the start-up transient pass (DaemonSet pods on every node, the trainings'
        # and inference pods): until no pod is Pending, at most --settle-timeout.
        t_settle = time.perf_counter()
        left = pending()
        while left and time.perf_counter() - t_settle < args.settle_timeout:
            time.sleep(1.0)
            left = pending()
        out["settle_s"] = time.perf_counter() - t_settle
        out["pending_after_settle"] = left
        _log(f"settled in {out['settle_s']:.1f} s, {left} pods Pending")
        time.sleep(args.warmup)

        def sample() -> dict[str, Any]:
            # The cheap counters first, together; the per-thread reads (thousands of
            # threads with exporters on) last, with their own CPU and wall stamps.
            snap = {
                "ticks": {a.name: a.ticks for a in w.actors},
                "timers": {n: t.snapshot() for n, t in timers.items()},
                "wall": time.perf_counter(),
                "cpu": time.process_time(),
                "sim": w.clock.elapsed(),
                "rv": api.store.rv,
                "requests": counter.count,
                "handle_cpu": counter.cpu,
                "by_method": dict(counter.by_method),
                "errors": {a.name: a.errors for a in w.actors},
                "children": _children_cpu(),
                "tcpu": {a.name: _thread_cpu(a) for a in w.actors},
                "g_wall": time.perf_counter(),
                "g_cpu": time.process_time(),
            }
            snap["groups"] = _threads_cpu()
            return snap

        s0 = sample()
        time.sleep(args.seconds)
        s1 = sample()
        _log("measured")

        window = s1["wall"] - s0["wall"]
        out["window_s"] = window
        out["sim_s"] = s1["sim"] - s0["sim"]
        out["cpu_s"] = s1["cpu"] - s0["cpu"]
        child_cpu = sum(v - s0["children"].get(pid, 0.0) for pid, v in s1["children"].items())
        out["children_cpu_s"] = child_cpu
        out["cpu_core"] = out["cpu_s"] / window
        out["children_cpu_core"] = child_cpu / window
        out["writes_per_s"] = (s1["rv"] - s0["rv"]) / window
        out["requests_per_s"] = (s1["requests"] - s0["requests"]) / window
        out["api_handle_cpu_core"] = (s1["handle_cpu"] - s0["handle_cpu"]) / window
        out["requests_by_method_per_s"] = {
            m: (n - s0["by_method"].get(m, 0)) / window for m, n in s1["by_method"].items()
        }
        actors = []
        for a in w.actors:
            ticks = s1["ticks"][a.name] - s0["ticks"][a.name]
            ideal = window * speed / a.period_s
            t0_, t1_ = s0["timers"][a.name], s1["timers"][a.name]
            busy = t1_["busy"] - t0_["busy"]
            done = t1_["count"] - t0_["count"]
            actors.append(
                {
                    "name": a.name,
                    "period_sim_s": a.period_s,
                    "period_wall_s": a.period_s / speed,
                    "ticks": ticks,
                    "ideal": ideal,
                    "keep_up": ticks / ideal if ideal else 1.0,
                    "duty": busy / window,
                    "mean_tick_s": (t1_["done"] - t0_["done"]) / done if done else float("nan"),
                    "longest_tick_s": t1_["longest"],
                    "running_tick_s": t1_["running"],
                    # No call through the wrapper at all: the tick that began during
                    # start-up, before the wrapper was installed, is still running.
                    "first_tick_running": t1_["count"] == 0 and t1_["running"] == 0,
                    "thread_cpu_core": (s1["tcpu"][a.name] - s0["tcpu"][a.name]) / window,
                    "errors": s1["errors"][a.name] - s0["errors"][a.name],
                }
            )
        out["actors"] = actors
        groups = _group_delta(s0["groups"], s1["groups"])
        g_window = s1["g_wall"] - s0["g_wall"]
        out["thread_groups_core"] = {
            g: c / g_window for g, c in sorted(groups.items(), key=lambda kv: -kv[1])
        }
        out["threads_unaccounted_core"] = (
            s1["g_cpu"] - s0["g_cpu"] - sum(groups.values())
        ) / g_window
        worst = min(actors, key=lambda r: r["keep_up"])
        out["worst_actor"] = worst["name"]
        out["worst_keep_up"] = worst["keep_up"]
        out["effective_sim_per_wall"] = speed * min(1.0, worst["keep_up"])
        out["rss_mib"] = _rss_mib()
        out["children_rss_mib"] = _children_rss_mib()
        out["threads"] = threading.active_count()

        # Straight from the store: no HTTP, no client-side deserialisation.
        nodes_e = api.store.list("/nodes")[0]
        ready = sum(
            1
            for e in nodes_e
            for c in (e.obj.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready" and c.get("status") == "True"
        )
        out["nodes_ready"] = f"{ready}/{len(nodes_e)}"
        phases: dict[str, int] = {}
        for e in api.store.list("/pods")[0]:
            ph = (e.obj.get("status") or {}).get("phase") or "?"
            phases[ph] = phases.get(ph, 0) + 1
        out["pods"] = phases
    finally:
        t_close = time.perf_counter()
        w.close()
        out["close_s"] = time.perf_counter() - t_close
        _log(f"closed in {out['close_s']:.1f} s")
    return out


# -- the driver -------------------------------------------------------------------------


def _progress(state: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"modules": {}}
    with contextlib.suppress(OSError):
        for line in (state / PROGRESS).read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if "module" in rec:
                    out["modules"][rec["module"]] = rec["s"]
                elif "started" in rec:
                    out["started"] = rec["started"]
    return out


def _starved(
    pid: int, state: Path, nodes: int, progress: dict[str, Any], elapsed: float
) -> dict[str, Any]:
    """How far a child that did not start in time got, read from outside."""
    made = len(list((state / "sysfs").glob("*")))
    mods = progress["modules"]
    rss = threads = 0.0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return {
        "error": f"not started after {elapsed:.0f} s: "
        + ", ".join(f"{k} done in {v:.1f} s" for k, v in mods.items())
        + (", " if mods else "")
        + f"devices of {made:,} of {nodes:,} nodes made",
        "starved": {
            "elapsed_s": elapsed,
            "modules": mods,
            "devices_made": made,
            "rss_mib": rss,
            "threads": threads,
            "cpu_s": _stat_cpu(f"/proc/{pid}/stat"),
        },
    }


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child and then its own children (the sim's Prometheus), by pid."""
    grandchildren: list[int] = []
    for task in Path(f"/proc/{proc.pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            grandchildren += [int(p) for p in (task / "children").read_text().split()]
    proc.kill()
    proc.wait()
    for pid in grandchildren:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _child(
    args: argparse.Namespace, nodes: int, speed: float, exporters: str, base: Path
) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix=f"world-{nodes}-", dir=base))
    cmd = [
        sys.executable,
        __file__,
        "--one-nodes",
        str(nodes),
        "--speed",
        str(speed),
        "--seconds",
        str(args.seconds),
        "--warmup",
        str(args.warmup),
        "--settle-timeout",
        str(args.settle_timeout),
        "--train-fraction",
        str(args.train_fraction),
        "--state-dir",
        str(state),
        "--prometheus" if args.prometheus else "--no-prometheus",
        "--exporters",
        exporters,
        "--gc-tuning" if args.gc_tuning else "--no-gc-tuning",
    ]
    limit = args.seconds + args.warmup + args.startup_timeout + args.settle_timeout + 180
    t0 = time.perf_counter()
    out_file = base / f"result-{nodes}-{speed:g}-{exporters}.txt"
    error = None
    with out_file.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, text=True)
        # Watched from here: in a starved child (thousands of threads on one GIL) not even
        # a watchdog thread gets to run.
        while proc.poll() is None:
            time.sleep(1.0)
            progress = _progress(state)
            elapsed = time.perf_counter() - t0
            if "started" not in progress and elapsed > args.startup_timeout:
                error = _starved(proc.pid, state, nodes, progress, elapsed)
            elif elapsed > limit:
                error = {"error": f"no result within {limit:.0f} s"}
            if error:
                _kill_tree(proc)
                break
    stdout = out_file.read_text()
    t_rm = time.perf_counter()
    shutil.rmtree(state, ignore_errors=True)
    rm_s = time.perf_counter() - t_rm
    if error:
        return {
            "nodes": nodes,
            "speed": speed,
            "exporters": exporters == "on",
            "rmtree_s": rm_s,
            **error,
        }
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            res: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            res["total_wall_s"] = time.perf_counter() - t0
            res["rmtree_s"] = rm_s
            return res
    return {
        "nodes": nodes,
        "speed": speed,
        "exporters": exporters == "on",
        "error": f"exit {proc.returncode}, no result",
    }


def _fmt_table(results: list[dict[str, Any]]) -> str:
    head = (
        "| nodes | exporters | speed | start-up s | settle s | CPU % of one core "
        "| effective sim-s / wall-s | worst actor keep-up | writes/s | requests/s | RSS MiB "
        "| nodes Ready |"
    )
    rows = [head, "|" + "---|" * 12]
    for r in results:
        if "error" in r:
            exp = "on" if r.get("exporters") else "off"
            st = r.get("starved") or {}
            extra = f" (child: {st['cpu_s']:.0f} s CPU, {st['threads']:.0f} threads)" if st else ""
            rss = f"{st['rss_mib']:.0f}" if st else ""
            rows.append(
                f"| {r['nodes']:,} | {exp} | {r['speed']:g} | {r['error']}{extra} |"
                + " |" * 6
                + f" {rss} | |"
            )
            continue
        settle = f"{r['settle_s']:.0f}"
        if r["pending_after_settle"]:
            settle += f" ({r['pending_after_settle']} still Pending)"
        cpu = f"{100 * r['cpu_core']:.0f}"
        if r.get("children_cpu_core"):
            cpu += f" (+{100 * r['children_cpu_core']:.0f} Prometheus)"
        rows.append(
            f"| {r['nodes']:,} | {'on' if r['exporters'] else 'off'} | {r['speed']:g} "
            f"| {r['startup_s']:.1f} | {settle} | {cpu} "
            f"| {r['effective_sim_per_wall']:.1f} | {r['worst_keep_up']:.2f} ({r['worst_actor']}) "
            f"| {r['writes_per_s']:.0f} | {r['requests_per_s']:.0f} | {r['rss_mib']:.0f} "
            f"| {r['nodes_ready']} |"
        )
    return "\n".join(rows)


def _fmt_actors(r: dict[str, Any]) -> str:
    rows = [
        f"{r['nodes']:,} nodes, exporters {'on' if r['exporters'] else 'off'}, "
        f"speed {r['speed']:g} ({r['window_s']:.0f} s window, "
        f"trainings {r['trainings']}, pods {r['pods']}):",
        "| actor | period (sim s / wall s) | ticks / ideal | keep-up | tick duty "
        "| mean / longest tick s | thread CPU % |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in r["actors"]:
        longest = f"{a['longest_tick_s']:.3f}"
        if a.get("first_tick_running"):
            longest = "- (its first tick, begun during start-up, still running)"
        elif a.get("running_tick_s", 0) >= 0.5:
            longest += f" (one running for {a['running_tick_s']:.1f} s at the end)"
        rows.append(
            f"| {a['name']} | {a['period_sim_s']:g} / {a['period_wall_s']:.2f} "
            f"| {a['ticks']} / {a['ideal']:.0f} | {a['keep_up']:.2f} | {100 * a['duty']:.0f} % "
            f"| {a['mean_tick_s']:.3f} / {longest} "
            f"| {100 * a['thread_cpu_core']:.0f} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="64,512,4096", help="comma-separated node counts")
    ap.add_argument("--speed", type=float, default=60.0, help="simulated seconds per wall s")
    ap.add_argument(
        "--fallback-speeds",
        default="",
        help="comma-separated lower speeds to try, in order, for node counts whose worst "
        "actor keep-up at --speed is below --keep-up (e.g. 30,10)",
    )
    ap.add_argument(
        "--keep-up", type=float, default=0.8, help="worst keep-up ratio that counts as keeping up"
    )
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall seconds")
    ap.add_argument(
        "--settle-timeout",
        type=float,
        default=120.0,
        help="after submitting, wait until no pod is Pending, at most this many wall seconds",
    )
    ap.add_argument(
        "--warmup", type=float, default=5.0, help="wall seconds after settling, before measuring"
    )
    ap.add_argument(
        "--tmpdir", help="where the state directories go (default: the system temp dir)"
    )
    ap.add_argument("--train-fraction", type=float, default=0.5)
    ap.add_argument("--startup-timeout", type=float, default=180.0)
    ap.add_argument("--prometheus", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument(
        "--exporters",
        choices=("on", "off", "both"),
        default="on",
        help="the per-node exporter HTTP servers and their threads (WorldConfig.exporters); "
        "both: run every node count with and without",
    )
    ap.add_argument(
        "--gc-tuning",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after start-up, gc.freeze() and gc.set_threshold(50000, 50, 1000) as "
        "`krea-ops sim serve` does",
    )
    ap.add_argument("--json", help="also write all results to this file")
    ap.add_argument("--one-nodes", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--state-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one_nodes is not None:
        print(RESULT_PREFIX + json.dumps(run_one(args)), flush=True)
        return 0

    print(f"command: {shlex.join([Path(sys.executable).name, *sys.argv])}")
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    print(
        f"machine: {platform.platform()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} x {model}, load {os.getloadavg()[0]:.2f}"
    )
    results = []
    fallbacks = [float(s) for s in args.fallback_speeds.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="bench-world-", dir=args.tmpdir) as base:
        variants = ("on", "off") if args.exporters == "both" else (args.exporters,)
        for n in [int(s) for s in args.nodes.split(",") if s]:
            for exporters in variants:
                for speed in [args.speed, *fallbacks]:
                    print(
                        f"running {n} nodes at speed {speed:g}, exporters {exporters} ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    r = _child(args, n, speed, exporters, Path(base))
                    results.append(r)
                    if "error" in r:
                        print(f"  {r['error']}", file=sys.stderr)
                        break
                    print(
                        f"  cpu {100 * r['cpu_core']:.0f} %, worst keep-up "
                        f"{r['worst_keep_up']:.2f} ({r['worst_actor']}), "
                        f"effective {r['effective_sim_per_wall']:.1f}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if r["worst_keep_up"] >= args.keep_up:
                        break
    print()
    print(_fmt_table(results))
    for r in results:
        if "error" not in r:
            print()
            print(_fmt_actors(r))
            mods = ", ".join(f"{k} {v:.1f}" for k, v in r["startup_by_module_s"].items())
            groups = ", ".join(
                f"{g} {100 * c:.1f}" for g, c in r["thread_groups_core"].items() if c >= 0.002
            )
            req = ", ".join(f"{m} {v:.1f}" for m, v in r["requests_by_method_per_s"].items())
            print(
                f"\nstart-up {r['startup_s']:.1f} s ({mods}), start-up CPU "
                f"{r['startup_cpu_s']:.1f} s, submit {r['submit_s']:.2f} s, "
                f"close {r['close_s']:.1f} s, threads {r['threads']}, "
                f"RSS {r['rss_mib']:.0f} MiB (+{r['children_rss_mib']:.0f} MiB children)\n"
                f"CPU % of one core by thread group: {groups}, "
                f"not in a live thread {100 * r['threads_unaccounted_core']:.1f} "
                "(mostly HTTP connection threads that ended: API server requests, scrapes); "
                f"of all threads, "
                f"ApiServer.handle {100 * r['api_handle_cpu_core']:.1f}\n"
                f"requests/s by method: {req}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
