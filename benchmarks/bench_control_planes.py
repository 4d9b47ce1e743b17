#!/usr/bin/env python3
"""The embedded and the upstream control plane side by side: start-up time and CPU of
``krea-ops sim serve --nodes N`` (the demo story's world) on each, in the same run.

For each control plane, ``--repeat`` times (alternating which goes first):

1. starts ``krea-ops sim serve --control-plane X --nodes N --speed S`` in a fresh state
   directory, as its own process group;
2. times until it prints ``try:`` (every component up, the nodes registered, the world's
   actors started) and until Prometheus has scraped every exporter once (the demo's
   "first readings");
3. then samples the CPU seconds of the whole process tree (``/proc/<pid>/stat`` of every
   descendant: the simulator, etcd, kube-apiserver, controller-manager, scheduler, Kueue,
   JobSet, Prometheus, the exporters) over ``--steady`` seconds of the running story, and
   its resident memory at the end;
4. stops it (SIGTERM), checks every process of the tree is gone, and prints a markdown table.

    .venv/bin/python benchmarks/bench_control_planes.py --nodes 64 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree(root: int) -> list[int]:
    """``root`` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_and_rss(pids: list[int]) -> tuple[float, float]:
    """(CPU seconds, user + system, and resident MiB) of these processes now."""
    cpu = rss = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / TICK
        rss += int(fields[21]) * PAGE / 2**20
    return cpu, rss


def one_run(cli: str, plane: str, nodes: int, speed: float, steady: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"bench-cp-{plane}-") as tmp:
        argv = [cli, "sim", "serve", "--control-plane", plane, "--nodes", str(nodes),
                "--speed", str(speed), "--state", tmp]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        started: dict[str, float] = {}
        err_lines: list[str] = []

        def read_err() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                err_lines.append(line)
                if "every exporter scraped once" in line and "readings" not in started:
                    started["readings"] = time.monotonic() - t0

        threading.Thread(target=read_err, daemon=True).start()
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("try:"):
                started["up"] = time.monotonic() - t0
                break
        if "up" not in started:
            raise RuntimeError(f"{plane}: did not start:\n{''.join(err_lines[-20:])}")
        deadline = time.monotonic() + 120
        while "readings" not in started and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu_start, _ = cpu_and_rss(tree(proc.pid))
        start_cpu = cpu_start
        time.sleep(steady)
        pids = tree(proc.pid)
        cpu_end, rss = cpu_and_rss(pids)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        time.sleep(1)
        left = [p for p in pids if Path(f"/proc/{p}").exists()]
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
            raise RuntimeError(f"{plane}: processes left after stop: {left}")
        return {
            "up_s": started["up"],
            "readings_s": started.get("readings", float("nan")),
            "start_cpu_s": start_cpu,
            "steady_cpu_pct": 100 * (cpu_end - cpu_start) / steady,
            "rss_mib": rss,
            "processes": len(pids),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--speed", type=float, default=60.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of CPU sampling")
    args = parser.parse_args(argv)
    cli = str(Path(sys.executable).with_name("krea-ops"))
    command = "python benchmarks/bench_control_planes.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# control planes side by side\n\n    {command.strip()}\n", flush=True)
    results: dict[str, list[dict[str, float]]] = {"embedded": [], "upstream": []}
    for i in range(args.repeat):
        order = ("embedded", "upstream") if i % 2 == 0 else ("upstream", "embedded")
        for plane in order:
            run = one_run(cli, plane, args.nodes, args.speed, args.steady)
            results[plane].append(run)
            print(f"- {plane} run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in run.items()),
                  flush=True)
    print()
    print("| control plane | runs | up s (median) | first readings s | CPU s to start "
          "| steady CPU % | RSS MiB | processes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for plane, runs in results.items():
        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        print(f"| {plane} | {len(runs)} | {med('up_s'):.1f} | {med('readings_s'):.1f} | "
              f"{med('start_cpu_s'):.1f} | {med('steady_cpu_pct'):.0f} | {med('rss_mib'):.0f} | "
              f"{med('processes'):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
