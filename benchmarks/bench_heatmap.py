#!/usr/bin/env python3
"""Fleet GPU heatmap benchmark: update and keypress cost of ``GpuHeatmap`` at fleet scale.

For each row count (one node per row, ``--gpus`` temperature cells each) the script runs
a headless Textual app (``App.run_test``) at ``--size`` holding one focused
``GpuHeatmap`` in its default "attention" sort, and measures wall time:

1. **first paint**: ``set_rows`` with every row, then the repaint;
2. **5% update**: ``set_rows`` with every row rebuilt (new objects, as a screen builds
   them from each snapshot) and ``--changed`` of them given new temperatures (a few of
   them a new verdict, so the order changes as it does on a live fleet), then the repaint;
   the median over ``--updates`` ticks, and the strips built per tick;
3. **keypress**: ``down`` sent through the driver ``--presses`` times, with a 5% update
   applied just before every ``--update-every``-th key; the latency of a key is from the
   moment it (and the update queued ahead of it) is sent until the screen is repainted, so
   the worst one includes a full data tick.

"Repainted" means every queued message was handled and the screen's compositor ran once
(``Screen._on_timer_update``, what the 60 fps update timer would call next); the pilot's
own ``pause``/``press`` sleep at least 20 ms each to detect idleness, which would swamp
what is measured here. Runs in one process, headless; stops by itself.

    .venv/bin/python benchmarks/bench_heatmap.py --rows 64,512,4096
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.strip import Strip

from krea_ops.model import Severity
from screens.widgets.heatmap import GpuHeatmap, HeatRow


class CountingHeatmap(GpuHeatmap):
    """Counts the strips built, to show that a tick renders only what it must."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.strips_built = 0

    def _build_row_strip(self, row: HeatRow, width: int, cursor: bool) -> Strip:
        self.strips_built += 1
        return super()._build_row_strip(row, width, cursor)


class BenchApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CountingHeatmap()

    def on_mount(self) -> None:
        self.query_one(GpuHeatmap).focus()


def make_rows(n: int, gpus: int, rng: random.Random) -> list[HeatRow]:
    return [
        HeatRow(
            key=f"gpu-node-{i:04d}",
            label=f"gpu-node-{i:04d}",
            severity=Severity.OK,
            values=tuple(rng.uniform(40.0, 80.0) for _ in range(gpus)),
        )
        for i in range(n)
    ]


def tick(rows: list[HeatRow], fraction: float, rng: random.Random) -> list[HeatRow]:
    """``rows`` rebuilt as a screen would from a fresh snapshot (new, equal objects), with
    ``fraction`` of them changed."""
    out = [HeatRow(r.key, r.label, r.severity, tuple(list(r.values)), r.note) for r in rows]
    for i in rng.sample(range(len(out)), max(1, round(len(out) * fraction))):
        row = out[i]
        severity = rng.choice([Severity.OK] * 8 + [Severity.SUSPECT, Severity.BAD])
        values = tuple(rng.uniform(40.0, 90.0) for _ in row.values)
        note = "GPU 3 at 88 °C, above 78 °C for the last 5m" if severity else ""
        out[i] = HeatRow(row.key, row.label, severity, values, note)
    return out


async def settle(pilot: Pilot[None]) -> None:
    """Handle every queued message (twice: a refresh posts an Update to the screen), then
    run the compositor once."""
    for _ in range(2):
        await pilot._wait_for_screen()
    pilot.app.screen._on_timer_update()


async def measure(n: int, args: argparse.Namespace) -> dict[str, float]:
    rng = random.Random(n)
    app = BenchApp()
    async with app.run_test(size=args.size) as pilot:
        heatmap = app.query_one(CountingHeatmap)
        await pilot.pause()
        rows = make_rows(n, args.gpus, rng)

        start = time.perf_counter()
        heatmap.set_rows(rows)
        await settle(pilot)
        first = time.perf_counter() - start
        assert heatmap.row_count == n and heatmap.strips_built > 0

        updates: list[float] = []
        built: list[int] = []
        for _ in range(args.updates):
            rows = tick(rows, args.changed, rng)
            before = heatmap.strips_built
            start = time.perf_counter()
            heatmap.set_rows(rows)
            await settle(pilot)
            updates.append(time.perf_counter() - start)
            built.append(heatmap.strips_built - before)

        assert app._driver is not None
        keys: list[float] = []
        for press in range(args.presses):
            start = time.perf_counter()
            if press % args.update_every == 0:
                rows = tick(rows, args.changed, rng)
                heatmap.set_rows(rows)
            app._driver.send_message(events.Key("down", None))
            await settle(pilot)
            keys.append(time.perf_counter() - start)
        assert heatmap.cursor_row is not None
    return {
        "first_ms": first * 1e3,
        "update_ms": statistics.median(updates) * 1e3,
        "update_max_ms": max(updates) * 1e3,
        "strips": statistics.median(built),
        "key_p50_ms": statistics.median(keys) * 1e3,
        "key_max_ms": max(keys) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="64,512,4096", help="row counts, comma-separated")
    parser.add_argument("--gpus", type=int, default=8, help="GPU cells per row")
    parser.add_argument("--size", default="160x50", help="terminal COLSxLINES")
    parser.add_argument("--changed", type=float, default=0.05, help="fraction changed a tick")
    parser.add_argument("--updates", type=int, default=20, help="update ticks to time")
    parser.add_argument("--presses", type=int, default=50, help="down keys to time")
    parser.add_argument("--update-every", type=int, default=5, help="a tick every N keys")
    args = parser.parse_args()
    cols, lines = (int(v) for v in args.size.lower().split("x"))
    args.size = (cols, lines)

    command = shlex.join([".venv/bin/python", "benchmarks/bench_heatmap.py", *sys.argv[1:]])
    print(f"### GpuHeatmap: `{command}`\n")
    print(
        f"{args.gpus} GPUs a row, terminal {cols}x{lines}, attention sort, "
        f"{args.changed:.0%} of rows changed a tick, a tick before every "
        f"{args.update_every}th of {args.presses} keys; wall ms\n"
    )
    print(
        "| rows | first set_rows + paint | tick + paint (median / max) | strips a tick "
        "| key p50 | key worst (with tick) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (int(v) for v in args.rows.split(",")):
        r = asyncio.run(measure(n, args))
        print(
            f"| {n:,} | {r['first_ms']:.1f} | {r['update_ms']:.1f} / {r['update_max_ms']:.1f} "
            f"| {r['strips']:.0f} | {r['key_p50_ms']:.1f} | {r['key_max_ms']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
