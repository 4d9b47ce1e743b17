#!/usr/bin/env python3
"""The read commands against the official client's floor, interleaved (issue 28).

``bench_read.py`` times each command's runs back to back, one command after another: on
a shared machine the load drifts between commands by more than the 0.15 s margin being
judged. This runs one round at a time, the floor first and then every command (and, with
``--baseline``, the same command of another installation, in alternating order), so
that each command and the floor see the same machine, and reports each median against
the floor's.

The floor is ``bench_read.FLOOR_LEAN``: a fresh ``python`` that imports
``kubernetes.client``, loads the kubeconfig and lists the nodes through ``ApiClient``.
The same floor frozen at exit (``gc.freeze()`` as its last line, as krea-ops ends: the
interpreter's last full collection then walks nothing) is shown beside it, so that what
that alone is worth is in the table too.
Run it against a fleet ``bench_read.py --hold`` keeps up (it prints the kubeconfig and
the Prometheus URL):

    .venv/bin/python benchmarks/bench_read.py --nodes 64 --repeat 1 \\
        --control-plane upstream --hold 1800
    .venv/bin/python benchmarks/bench_floor.py --kubeconfig K --prometheus URL [--repeat 15] \\
        [--baseline /path/to/other/.venv/bin/krea-ops]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_apiserver import compile_project  # noqa: E402
from bench_read import FLOOR_LEAN  # noqa: E402

FROZEN_AT_EXIT = "import gc; gc.freeze()\n"
COMMANDS = (
    ("gpus",),
    ("nodes", "list"),
    ("fabric",),
    ("nodes", "show", "gpu-000-00"),
    ("queue", "list"),
    ("queue", "workloads"),
    ("burst", "status"),
)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, the child's user + system CPU s, exit code) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", help="another installation's krea-ops, timed alongside")
    parser.add_argument("--node", default="gpu-000-00", help="the node `nodes show` reads")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    compile_project()
    env = {**os.environ, "KUBECONFIG": args.kubeconfig}
    env.pop("KREA_OPS_CONFIG", None)
    builds = {"krea-ops": str(ROOT / ".venv" / "bin" / "krea-ops")}
    if args.baseline:
        builds["baseline"] = args.baseline
    floor = [sys.executable, "-c", FLOOR_LEAN, args.kubeconfig]
    # the floor as krea-ops ends (commands.main.run): its objects frozen, so that the
    # interpreter's last full collection does not walk them; shown, not judged against
    frozen = [sys.executable, "-c", FLOOR_LEAN + FROZEN_AT_EXIT, args.kubeconfig]
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    failed: set[tuple[str, str]] = set()
    for i in range(args.repeat):
        for build, argv in (("floor", floor), ("floor, frozen at exit", frozen)):
            wall, cpu, _ = timed(argv, env)
            runs.setdefault((build, ""), []).append((wall, cpu))
        for command in COMMANDS:
            argv = [a if a != "gpu-000-00" else args.node for a in command]
            order = list(builds.items())
            if i % 2:
                order.reverse()
            for build, binary in order:
                call = [binary, *argv, "--prometheus", args.prometheus, "-o", "json"]
                wall, cpu, rc = timed(call, env)
                key = (build, " ".join(argv))
                runs.setdefault(key, []).append((wall, cpu))
                if rc not in (0, 1):  # 1: the read found a node that is not OK
                    failed.add(key)
    base = statistics.median(w for w, _ in runs[("floor", "")])
    print(f"# {' '.join(sys.argv)}")
    print(f"# {args.repeat} rounds, load average at the end {os.getloadavg()[0]:.1f}\n")
    print("| command | build | median s | over the floor | own CPU s |")
    print("|---|---|---:|---:|---:|")
    for (build, text), values in runs.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        over = "" if build == "floor" else f"{wall - base:+.3f}"
        name = f"the {build}" if build.startswith("floor") else f"`krea-ops {text} -o json`"
        note = " (failed)" if (build, text) in failed else ""
        print(f"| {name}{note} | {build} | {wall:.3f} | {over} | {cpu:.3f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
