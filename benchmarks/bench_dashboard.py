"""Dashboard speed at 64, 512, 4,096 and 5,000 nodes x 8 GPUs (issues 6 and 28).

For each size, a headless ``KreaOpsApp`` (Textual's ``run_test``, 160x50) runs on a
``FixedConsole`` whose ``fleet()`` builds a fresh synthetic fleet on the worker thread every
time (``krea_ops.sim.fixtures.synthetic_fleet``: the same core path live telemetry takes,
health verdicts included, so a refresh costs the worker real CPU and holds the GIL the way
a Prometheus read and its assembly do). Measured:

* first paint: app start until the heatmap holds every node and the screen has rendered;
  and from the first data (the first fleet read returned on the worker) to that paint;
* refresh render: UI-thread time to apply one new snapshot (heat rows, the heatmap's rows,
  totals), from the screen getting it until the last of the turns the heatmap spreads it
  over (``GpuHeatmap.apply_rows``), wall and the UI thread's own CPU (the wall includes
  waiting for the GIL and the CPU, and the other work the event loop did between turns);
  and, after the first paint, the UI thread's CPU in its longest turn: what a key pressed
  meanwhile waits for;
* keypress latency: ``down`` delivered 40 times (as the terminal driver posts it) while
  refreshes run back to back (refresh interval 0.5 s); time until the cursor moved; and,
  as those land in a refresh's apply only by chance, ``down`` delivered just as each of
  the next 8 refreshes starts being applied, time until the heatmap handled it;
* stalls: the longest the UI's event loop was kept from running (a probe that sleeps
  5 ms and records how late it woke), over the keypresses and refreshes;
* memory: the process' resident set after the first paint and at the end (the app, two
  fleets in flight, Python and Textual), and its peak.

``--demo`` measures ``krea-ops demo`` itself instead, as a user meets it: the command in a
real terminal (tmux, 160x50) on a fresh state, the screen read every 0.1 s. Measured:
command -> first progress line, -> first paint (the fleet headline ``GPUs on``), -> first
real readings (the headline without ``no reading:``, every GPU read), and the quit (``q``
until the shell prints the exit status); the load average beside each run, since the
machine is shared.

    .venv/bin/python benchmarks/bench_dashboard.py [--sizes 64,512,4096,5000] [--presses 40]
    .venv/bin/python benchmarks/bench_dashboard.py --demo [--nodes 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual import events

from krea_ops.console import EVERYTHING, FleetScope
from krea_ops.fleet import FleetSnapshot
from krea_ops.sim.fixtures import EPOCH, FixedConsole, synthetic_fleet
from screens.app import KreaOpsApp
from screens.fleet import FleetScreen
from screens.messages import Loaded
from screens.widgets.heatmap import GpuHeatmap


class BuildingHub(FixedConsole):
    """Builds a new fleet per read (alternating seeds), like a live source would."""

    def __init__(self, nodes: int) -> None:
        super().__init__(synthetic_fleet(nodes, seed=1))
        self.nodes = nodes
        self.reads = 0
        self.read_s: list[float] = []
        self.first_data: float | None = None  # perf_counter when the first read returned

    def fleet(self, scope: FleetScope = EVERYTHING) -> FleetSnapshot:
        start = time.perf_counter()
        self.reads += 1
        self.fleet_snapshot = synthetic_fleet(self.nodes, seed=1 + self.reads % 2)
        done = time.perf_counter()
        self.read_s.append(done - start)
        if self.first_data is None:
            self.first_data = done
        return self.fleet_snapshot


def rss_mib() -> float:
    """This process' resident set now, MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class LagProbe:
    """How late the event loop wakes a task that sleeps 5 ms: the UI's stalls."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.running = True

    async def run(self) -> None:
        while self.running:
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            self.lags.append(time.perf_counter() - t0 - 0.005)


async def measure(nodes: int, presses: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    hub = BuildingHub(nodes)
    app = KreaOpsApp(hub, refresh_s=0.5, clock=lambda: EPOCH + 1.0)
    render_s: list[float] = []
    original = FleetScreen.update_data

    render_cpu_s: list[float] = []
    turn_cpu_s: list[float] = []  # the UI thread's CPU per turn of the event loop
    spread: dict[str, float] = {}  # the apply under way: its start and CPU so far
    # (getattr: the script also times trees from before the spread apply, side by side)
    original_step = getattr(GpuHeatmap, "_apply_step", None)

    # a key pressed just as a refresh starts being applied (``press_on_apply``): when it
    # was pressed, and how long until the heatmap handled it
    press_on_apply = False
    pressed_at: list[float] = []
    during_apply: list[float] = []
    original_down = GpuHeatmap.action_cursor_down

    def down(self: GpuHeatmap) -> None:
        if pressed_at:
            during_apply.append(time.perf_counter() - pressed_at.pop())
        original_down(self)

    def timed(self: FleetScreen, loaded: Loaded) -> None:
        if press_on_apply and not pressed_at:
            pressed_at.append(time.perf_counter())
            self.app.post_message(events.Key("down", None))
        start, cpu = time.perf_counter(), time.thread_time()
        original(self, loaded)
        used = time.thread_time() - cpu
        turn_cpu_s.append(used)
        if getattr(self.query_one(GpuHeatmap), "applying", False):
            spread.update(start=start, cpu=used)  # (a newer apply replaces one under way)
        else:
            render_s.append(time.perf_counter() - start)
            render_cpu_s.append(used)

    def timed_step(self: GpuHeatmap, steps: Any) -> None:
        cpu = time.thread_time()
        assert original_step is not None
        original_step(self, steps)
        used = time.thread_time() - cpu
        turn_cpu_s.append(used)
        if "start" in spread:
            spread["cpu"] += used
            if not self.applying:
                render_s.append(time.perf_counter() - spread.pop("start"))
                render_cpu_s.append(spread.pop("cpu"))

    FleetScreen.update_data = timed  # type: ignore[method-assign]
    GpuHeatmap.action_cursor_down = down  # type: ignore[method-assign]
    if original_step is not None:
        GpuHeatmap._apply_step = timed_step  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        async with app.run_test(size=(160, 50)) as pilot:
            while True:
                heatmap = app.screen.query(GpuHeatmap)
                if heatmap and heatmap.first().total_count == nodes:
                    break
                await asyncio.sleep(0.005)
            await pilot.pause()
            painted = time.perf_counter()
            first_paint = painted - start
            after_data = painted - (hub.first_data or start)
            rss_painted = rss_mib()
            turn_cpu_s.clear()  # (the first apply, before the first paint, has no key to keep)
            probe = LagProbe()
            probing = asyncio.create_task(probe.run())
            latencies = []
            reads_before = hub.reads
            widget = app.screen.query_one(GpuHeatmap)
            for _ in range(presses):
                before = widget.cursor_row
                t0 = time.perf_counter()
                # the key as the terminal driver delivers it; handled = the cursor moved
                app.post_message(events.Key("down", None))
                while widget.cursor_row == before:
                    await asyncio.sleep(0.0005)
                latencies.append(time.perf_counter() - t0)
                await asyncio.sleep(0.05)
            reads_during = hub.reads - reads_before
            # the loop above lands a key in an apply only by chance: now one on purpose,
            # pressed as each of the next refreshes starts being applied
            press_on_apply = True
            deadline = time.perf_counter() + 60
            while len(during_apply) < 8 and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
            press_on_apply = False
            # refreshes alone, no keys: a few more applied snapshots under the probe
            renders_before = len(render_s)
            deadline = time.perf_counter() + 30
            while len(render_s) < renders_before + 3 and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            probe.running = False
            await probing
            rss_end = rss_mib()
    finally:
        FleetScreen.update_data = original  # type: ignore[method-assign]
        GpuHeatmap.action_cursor_down = original_down  # type: ignore[method-assign]
        if original_step is not None:
            GpuHeatmap._apply_step = original_step  # type: ignore[method-assign]
    return {
        "nodes": nodes,
        "load": load,
        "first_paint_s": first_paint,
        "paint_after_data_s": after_data,
        "stall_ms_max": max(probe.lags) * 1000,
        "stall_ms_p99": sorted(probe.lags)[int(len(probe.lags) * 0.99)] * 1000,
        "rss_painted_mib": rss_painted,
        "rss_end_mib": rss_end,
        "rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "read_s": statistics.median(hub.read_s),
        "render_ms_median": statistics.median(render_s) * 1000,
        "render_ms_max": max(render_s) * 1000,
        "render_cpu_ms_median": statistics.median(render_cpu_s) * 1000,
        "render_cpu_ms_max": max(render_cpu_s) * 1000,
        "renders": len(render_s),
        "turn_cpu_ms_median": statistics.median(turn_cpu_s) * 1000,
        "turn_cpu_ms_max": max(turn_cpu_s) * 1000,
        "key_ms_median": statistics.median(latencies) * 1000,
        "key_ms_worst": max(latencies) * 1000,
        "reads_during_keys": reads_during,
        "key_in_apply_ms_median": statistics.median(during_apply) * 1000,
        "key_in_apply_ms_worst": max(during_apply) * 1000,
    }


ROOT = Path(__file__).resolve().parents[1]


def _tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", *args], capture_output=True, text=True, timeout=30, check=False
    ).stdout


def measure_demo(nodes: int, timeout_s: float = 180.0) -> dict[str, Any]:
    """One ``krea-ops demo`` from the command to its first real readings, then quit."""
    session = f"krea-bench-{uuid.uuid4().hex[:8]}"
    state = tempfile.mkdtemp(prefix="krea-bench-demo-")
    command = (
        f"cd {shlex.quote(str(ROOT))} && KREA_OPS_CONFIG=/nonexistent/krea-ops.yaml "
        f"{shlex.quote(sys.executable)} -m commands demo --nodes {nodes} "
        f'--state {shlex.quote(state + "/s")}; echo "demo exit status: $?"; sleep 60'
    )
    load = os.getloadavg()[0]
    marks: dict[str, float] = {}
    start = time.monotonic()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command],
        check=True,
        env={**os.environ, "TERM": "xterm-256color"},
    )
    try:
        while time.monotonic() - start < timeout_s and "readings" not in marks:
            text = _tmux("capture-pane", "-p", "-t", session)
            now = time.monotonic() - start
            if "progress" not in marks and "starting the simulator" in text:
                marks["progress"] = now
            if "GPUs on" in text:
                marks.setdefault("paint", now)
                if "no reading:" not in text:
                    marks["readings"] = now
            time.sleep(0.1)
        quit_at = time.monotonic()
        _tmux("send-keys", "-t", session, "q")
        while time.monotonic() - quit_at < 60:
            text = _tmux("capture-pane", "-p", "-t", session)
            if re.search(r"demo exit status: \d+", text):
                marks["quit"] = time.monotonic() - quit_at
                break
            time.sleep(0.1)
    finally:
        _tmux("kill-session", "-t", session)
        shutil.rmtree(state, ignore_errors=True)
    return {"nodes": nodes, "load": load, **marks}


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def demo_main(nodes: int, runs: int) -> None:
    rows = [measure_demo(nodes) for _ in range(runs)]
    print(f"`{' '.join(['.venv/bin/python', *sys.argv])}` (tmux 160x50)\n")
    print("| run | load avg (1 min) | progress line | first paint | real readings | quit |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rows, 1):
        print(
            f"| {i} | {r['load']:.1f} | {_s(r.get('progress'))} | {_s(r.get('paint'))} "
            f"| {_s(r.get('readings'))} | {_s(r.get('quit'))} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512,4096,5000")
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument("--demo", action="store_true", help="time `krea-ops demo` itself")
    parser.add_argument("--nodes", type=int, default=64, help="--demo: simulated nodes")
    parser.add_argument("--runs", type=int, default=3, help="--demo: runs")
    args = parser.parse_args()
    if args.demo:
        demo_main(args.nodes, args.runs)
        return
    rows = [asyncio.run(measure(int(n), args.presses)) for n in args.sizes.split(",")]
    print(f"`{' '.join(['.venv/bin/python', *sys.argv])}` (terminal 160x50, refresh 0.5 s)\n")
    print(
        "| nodes | first paint | after first data | fleet read (worker) "
        "| refresh render median / max | its UI-thread CPU median / max "
        "| longest UI turn median / max "
        "| keypress median / worst | reads during keys "
        "| key pressed as a refresh is applied median / worst "
        "| event-loop stall p99 / max | RSS painted / end / peak | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['nodes']:,} | {r['first_paint_s']:.2f} s | {r['paint_after_data_s']:.2f} s "
            f"| {r['read_s'] * 1000:.0f} ms "
            f"| {r['render_ms_median']:.1f} / {r['render_ms_max']:.1f} ms "
            f"| {r['render_cpu_ms_median']:.1f} / {r['render_cpu_ms_max']:.1f} ms "
            f"| {r['turn_cpu_ms_median']:.1f} / {r['turn_cpu_ms_max']:.1f} ms "
            f"| {r['key_ms_median']:.1f} / {r['key_ms_worst']:.1f} ms "
            f"| {r['reads_during_keys']} "
            f"| {r['key_in_apply_ms_median']:.1f} / {r['key_in_apply_ms_worst']:.1f} ms "
            f"| {r['stall_ms_p99']:.0f} / {r['stall_ms_max']:.0f} ms "
            f"| {r['rss_painted_mib']:.0f} / {r['rss_end_mib']:.0f} / {r['rss_peak_mib']:.0f} MiB "
            f"| {r['load']:.1f} |"
        )
    print(
        "\nRSS is the whole benchmark process (sizes run one after another in it, so a"
        " later size's peak may include an earlier one's); run one size per process for"
        " its own figures."
    )


if __name__ == "__main__":
    main()
