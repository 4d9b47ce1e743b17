#!/usr/bin/env python3
"""How long decoding a fleet-sized Prometheus answer keeps other threads waiting (issue 28).

A C call holds the GIL for as long as it runs: one ``orjson.loads`` of a whole answer, or
one regular-expression ``findall`` over it, keeps the dashboard's UI thread from drawing
or taking a key while its worker reads the fleet. ``krea_ops.telemetry.prometheus`` parses
and matches a large answer a slice of rows at a time (``SLICE_CHARS``); this measures
both ways on answers shaped as Prometheus writes them at ``--nodes`` nodes x 8 GPUs:

* ``gpu_info``: one row per GPU with its identity labels (uuid, model, PCI bus), parsed
  by orjson (``decode_rows``);
* ``temperature``: one row per GPU with node and gpu only, matched by the regular
  expression (``decode_values``).

Each decode runs on a worker thread while the main thread sleeps 1 ms at a time and
records how late it wakes (as the dashboard's stall probe does): the longest wait is what
a keypress can meet. Also the decode's own time, whole and sliced. The cyclic garbage
collector is paused, as it is around the dashboard's and the commands' fleet reads.

    .venv/bin/python benchmarks/bench_decode.py [--nodes 5000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from krea_ops.telemetry import prometheus
from krea_ops.telemetry.prometheus import decode_rows, decode_values


def answer(rows: list[tuple[dict[str, str], str]]) -> str:
    result = [{"metric": dict(sorted(m.items())), "value": [1796000000.123, v]} for m, v in rows]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body, separators=(",", ":"))


def gpu_info(nodes: int) -> bytes:
    rows = [
        (
            {
                "node": f"gpu-node-{n:04d}",
                "gpu": str(g),
                "uuid": f"GPU-{n:08x}-{g:04x}-4a1b-9c2d-{n * 8 + g:012x}",
                "model": "NVIDIA H200",
                "pci_bus_id": f"00000000:{0x18 + g * 0x10:02X}:00.0",
            },
            "1",
        )
        for n in range(nodes)
        for g in range(8)
    ]
    return answer(rows).encode()


def temperature(nodes: int) -> str:
    rows = [
        ({"node": f"gpu-node-{n:04d}", "gpu": str(g)}, f"{40 + (n * 8 + g) % 45}")
        for n in range(nodes)
        for g in range(8)
    ]
    return answer(rows)


def stalled(work: Callable[[], object]) -> tuple[float, float]:
    """(the decode's wall seconds, the longest the main thread waited past a 1 ms sleep)."""
    done = threading.Event()
    took: list[float] = []

    def run() -> None:
        start = time.perf_counter()
        work()
        took.append(time.perf_counter() - start)
        done.set()

    worker = threading.Thread(target=run)
    worst = 0.0
    last = time.perf_counter()  # (before the start: the worker may take the GIL at once)
    worker.start()
    while not done.is_set():
        time.sleep(0.001)
        # (from one wake to the next: the thread may lose the GIL anywhere in its loop,
        # not only in the sleep)
        now = time.perf_counter()
        worst = max(worst, now - last - 0.001)
        last = now
    worker.join()
    return took[0], worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    info, temps = gpu_info(args.nodes), temperature(args.nodes)
    labels = ("gpu", "node")
    sliced = prometheus.SLICE_CHARS
    print(f"# decoding in slices: {args.nodes} nodes x 8 GPUs\n")
    print(f"    .venv/bin/python benchmarks/bench_decode.py --nodes {args.nodes}"
          f" --repeat {args.repeat}\n")  # fmt: skip
    print(
        f"gpu_info answer {len(info) / 1e6:.1f} MB, temperature answer "
        f"{len(temps) / 1e6:.1f} MB, {args.nodes * 8:,} rows each; slices of "
        f"{sliced:,} characters; {args.repeat} runs each, interleaved.\n"
    )
    ways: dict[str, Callable[[], object]] = {
        "gpu_info, orjson whole": lambda: orjson.loads(info)["data"]["result"],
        "gpu_info, decode_rows (sliced)": lambda: decode_rows(info),
        "temperature, regex whole": lambda: _whole_values(temps, labels),
        "temperature, decode_values (sliced)": lambda: decode_values(temps, labels),
    }
    assert decode_rows(info) == orjson.loads(info)["data"]["result"]
    assert decode_values(temps, labels) == _whole_values(temps, labels)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    # the collector paused, as around every fleet read of the dashboard and the commands
    # (screens/gcpolicy.py, commands/common.gc_paused)
    gc.collect()
    gc.disable()
    for _ in range(args.repeat):
        for name, work in ways.items():
            results[name].append(stalled(work))
    print_stalls("decode", results)
    return 0


def print_stalls(what: str, results: dict[str, list[tuple[float, float]]]) -> None:
    """The table of ``stalled`` runs: each way's own time, and how long it kept another
    thread waiting (median, worst)."""
    head = "its time, median ms | longest wait of another thread, median ms | worst ms"
    print(f"| {what} | {head} |")
    print("|---|---:|---:|---:|")
    for name, runs in results.items():
        took = statistics.median(t for t, _ in runs) * 1000
        waits = [w * 1000 for _, w in runs]
        print(f"| {name} | {took:.1f} | {statistics.median(waits):.1f} | {max(waits):.1f} |")


def _whole_values(body: str, labels: tuple[str, ...]) -> list[tuple[str, ...]] | None:
    """``decode_values`` as before the slices: one ``findall`` over the whole answer."""
    saved = prometheus.SLICE_CHARS
    prometheus.SLICE_CHARS = len(body) + 1
    try:
        return decode_values(body, labels)
    finally:
        prometheus.SLICE_CHARS = saved


if __name__ == "__main__":
    sys.exit(main())
