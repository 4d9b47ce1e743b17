#!/usr/bin/env python3
"""How long freeing a replaced fleet snapshot keeps other threads waiting (issue 28).

The dashboard frees a read replaced by a newer one on the next read's worker. Dropping the
last reference to a 5,000-node snapshot deallocates its million objects in one cascade of
C calls, with the GIL held throughout, so the UI thread waits for it whichever thread
drops it. ``screens.gcpolicy.release`` lets go of it a few objects at a time instead.
This frees a synthetic fleet (``krea_ops.sim.fixtures.synthetic_fleet``, as
``bench_dashboard.py`` builds) both ways on a worker thread while the main thread sleeps
1 ms at a time and records how late it wakes (``bench_decode.stalled``): the longest wait
is what a keypress can meet. The collector is paused, as around the dashboard's reads.

    .venv/bin/python benchmarks/bench_release.py [--nodes 5000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import print_stalls, stalled

from krea_ops.sim.fixtures import synthetic_fleet
from screens import gcpolicy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    print(f"# freeing a replaced snapshot: {args.nodes} nodes x 8 GPUs\n")
    print(f"    .venv/bin/python benchmarks/bench_release.py --nodes {args.nodes}"
          f" --repeat {args.repeat}\n")  # fmt: skip
    held: list[int] = []

    def plain(doomed: list[Any]) -> Callable[[], object]:
        return doomed.clear

    def sliced(doomed: list[Any]) -> Callable[[], object]:
        return lambda: held.append(gcpolicy.release(doomed))

    ways = {"one `del` (a cascade)": plain, "`gcpolicy.release`": sliced}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    gc.collect()
    gc.disable()
    for run in range(args.repeat):
        for name, way in ways.items():
            doomed = [synthetic_fleet(args.nodes, seed=1 + run % 2)]
            results[name].append(stalled(way(doomed)))
            assert doomed == []
    print(f"{args.repeat} runs each, interleaved; `release` held {statistics.median(held):,.0f}"
          " objects (median)\n")  # fmt: skip
    print_stalls("free", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
