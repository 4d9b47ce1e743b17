#!/usr/bin/env python3
"""Benchmark: PrometheusSource.collect() over a synthetic fleet in a real Prometheus.

One node's exposition is taken from our exporter (8 simulated H200s, procfs's InfiniBand
fixture with its ``mlx5_0`` port copied to ``--ports`` ports) and replicated ``--nodes``
times with the node label changed. ``--targets`` loopback HTTP servers each serve an equal
share of the nodes (like a federation endpoint: the ``node`` label is in the series), and
a real Prometheus scrapes them every ``--interval`` seconds. After enough scrapes for
rates over ``--window``, ``collect()`` is timed ``--repeat`` times (fleet, then one node).

Also times the assembler alone on rows shaped like Prometheus's answer for
``--assemble-nodes`` nodes (default 4,096), to show the client-side cost at full size.

    .venv/bin/python -m tests.telemetry.bench_collect --nodes 256 --targets 8
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

from krea_ops.settings import Settings
from krea_ops.telemetry import PrometheusSource
from krea_ops.telemetry.assemble import Assembler
from krea_ops.telemetry.dialects import FAMILIES, SRC
from tests.conftest import PROCFS_TREE
from tests.telemetry.conftest import Prometheus, Target, TextServer, start_krea_node


def node_template(ports: int) -> list[tuple[list[str], list[str]]]:
    """(header lines, sample lines) per family of one node, node label = NODE."""
    exporter = start_krea_node("NODE", PROCFS_TREE)
    try:
        time.sleep(0.5)  # one GPM interval, so the tensor ratios exist
        text = exporter.exporter.scrape().decode()
    finally:
        exporter.stop()
    blocks: list[tuple[list[str], list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# HELP"):
            blocks.append(([line], []))
        elif line.startswith("#"):
            blocks[-1][0].append(line)
        elif line:
            if 'device="mlx5_0"' in line:
                blocks[-1][1].extend(
                    line.replace('device="mlx5_0"', f'device="mlx5_{i}"') for i in range(ports)
                )
            elif 'device="' not in line:
                blocks[-1][1].append(line)
    return blocks


def body(blocks: list[tuple[list[str], list[str]]], nodes: list[str]) -> bytes:
    out: list[str] = []
    for header, samples in blocks:
        out.extend(header)
        for node in nodes:
            out.extend(s.replace('node="NODE"', f'node="{node}"') for s in samples)
    return ("\n".join(out) + "\n").encode()


def bench_prometheus(args: argparse.Namespace) -> None:
    blocks = node_template(args.ports)
    per_node = sum(len(s) for _, s in blocks)
    names = [f"gpu-{i:05d}" for i in range(args.nodes)]
    share = [names[i :: args.targets] for i in range(args.targets)]
    bodies = [body(blocks, nodes) for nodes in share]
    print(
        f"fleet: {args.nodes} nodes x 8 GPUs, {args.ports} IB ports/node, {per_node} series/node,"
        f" {per_node * args.nodes:,} series; {args.targets} targets of"
        f" {len(bodies[0]) / 1e6:.1f} MB each"
    )
    texts = [b.decode() for b in bodies]
    servers = [TextServer(functools.partial(str, t)) for t in texts]
    prom = Prometheus([Target(s.address, "fleet") for s in servers], interval_s=args.interval)
    try:
        start = time.time()
        prom.wait_scrapes("fleet", 3, timeout=args.interval * 10 + 60)
        print(f"Prometheus has 3 scrapes of every target after {time.time() - start:.0f} s")
        settings = Settings(
            telemetry_window_s=args.window,
            telemetry_stale_s=max(120.0, 3 * args.interval),
            telemetry_timeout_s=60.0,
        )
        source = PrometheusSource(prom.url, settings)
        try:
            for label, nodes in (("fleet", None), ("one node", {names[0]})):
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    fleet = source.collect(nodes)
                    times.append(time.perf_counter() - t0)
                gpus = sum(len(n.gpus) for n in fleet.nodes.values())
                ports = sum(len(n.ib_ports) for n in fleet.nodes.values())
                print(
                    f"collect({label}): median {statistics.median(times):.2f} s,"
                    f" min {min(times):.2f} s over {args.repeat};"
                    f" {len(fleet.nodes)} nodes, {gpus} GPUs, {ports} ports,"
                    f" errors {list(fleet.errors)}"
                )
                slow = sorted(source.last_timings.items(), key=lambda kv: -kv[1])[:5]
                print("  slowest queries:", ", ".join(f"{k} {v:.2f} s" for k, v in slow))
        finally:
            source.close()
    finally:
        prom.stop()
        for s in servers:
            s.stop()


def bench_assembler(nodes: int) -> None:
    """Rows as Prometheus returns them for a fleet of healthy 8-GPU nodes, 9 ports each."""
    rows: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in FAMILIES:
        if family.keep is not None or family.per_link:
            # sparse, or per-link (second round, only for nodes that need it): a healthy
            # fleet returns (almost) nothing
            rows[family.key] = []
            continue
        mask = float((1 << len(family.spellings)) - 1)
        s = family.spellings[0]
        out = []
        for n in range(nodes):
            base = {"node": f"gpu-{n:05d}", "instance": f"10.0.{n // 256}.{n % 256}:9400"}
            if family.key == "fresh":
                out.append(({**base, "job": "krea", SRC: s.name}, time.time()))
            elif family.by[0] == "gpu":
                extra = [{"counter": c} for c in ("replay", "recovery", "crc_flit", "crc_data")]
                for g in range(8):
                    for e in extra if "counter" in family.by else [{}]:
                        labels = {**base, "gpu": str(g), **e, SRC: s.name}
                        if family.key == "gpu_info":
                            labels.update(uuid=f"GPU-{n}-{g}", model="NVIDIA H200")
                        present = family.kind in ("present", "present_rate")
                        out.append((labels, mask if present else 50.0))
            else:
                for p in range(9):
                    labels = {**base, "device": f"mlx5_{p}", "port": "1", SRC: s.name}
                    out.append((labels, mask if family.kind == "present" else 4.0))
        rows[family.key] = out
    total = sum(len(r) for r in rows.values())
    t0 = time.perf_counter()
    asm = Assembler(window_s=300, collected_at=time.time(), stale_s=120)
    for family in FAMILIES:
        asm.add(family, rows[family.key])
    fleet = asm.build("bench")
    dt = time.perf_counter() - t0
    gpus = sum(len(n.gpus) for n in fleet.nodes.values())
    print(f"assembler alone: {nodes} nodes, {gpus} GPUs, {total:,} rows -> {dt:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--ports", type=int, default=9)
    parser.add_argument("--interval", type=float, default=5.0, help="scrape interval, s")
    parser.add_argument("--window", type=float, default=30.0, help="telemetry window, s")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--assemble-nodes", type=int, default=4096)
    parser.add_argument("--skip-prometheus", action="store_true")
    args = parser.parse_args()
    if not args.skip_prometheus:
        bench_prometheus(args)
    bench_assembler(args.assemble_nodes)


if __name__ == "__main__":
    main()
