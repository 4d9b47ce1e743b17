#!/usr/bin/env python3
"""Issue 13: the cost of spelling a fleet's numbers (``krea_ops.units``) and of the fabric's
one derivation per quantity, at fleet size, in CPU seconds of this process.

1. the ``gpus`` table's formatted cells of a synthetic fleet (``--nodes`` x 8 GPUs), each
   column through ``commands.gpus.FORMATS``;
2. ``fleet.fabric_entries`` (every IB port and NVLink link ranked) and the ``fabric``
   table's formatted cells through ``commands.fabric.FORMATS``;

Best of ``--repeat`` runs, ``time.process_time()`` (CPU, not wall: the machines these
run on are shared).

    .venv/bin/python benchmarks/bench_units.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from commands.fabric import FORMATS as FABRIC_FORMATS
from commands.fabric import fabric_row
from commands.gpus import FORMATS as GPU_FORMATS
from commands.gpus import gpu_rows
from krea_ops.fleet import fabric_entries
from krea_ops.sim.fixtures import synthetic_fleet


def best(repeat: int, run: Callable[[], Any]) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        run()
        out = min(out, time.process_time() - t0)
    return out


def cells(rows: list[dict[str, Any]], formats: dict[str, Any]) -> int:
    n = 0
    for row in rows:
        for key, f in formats.items():
            value = row.get(key)
            if value is not None and key != "reasons":
                f(value)
                n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    snap = synthetic_fleet(args.nodes)
    rows = gpu_rows(snap)
    n = cells(rows, GPU_FORMATS)
    print(f"gpus cells: {len(rows):,} rows, {n:,} cells: "
          f"{best(args.repeat, lambda: cells(rows, GPU_FORMATS)):.3f} s")  # fmt: skip
    entries = fabric_entries(snap)
    print(f"fabric_entries: {len(entries):,} ports and links: "
          f"{best(args.repeat, lambda: fabric_entries(snap)):.3f} s")  # fmt: skip
    frows = [fabric_row(e) for e in entries]
    print(f"fabric cells: {cells(frows, FABRIC_FORMATS):,} cells: "
          f"{best(args.repeat, lambda: cells(frows, FABRIC_FORMATS)):.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
