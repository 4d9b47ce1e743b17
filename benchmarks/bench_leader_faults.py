#!/usr/bin/env python3
"""Leader election under faults, a longer soak of ``tests/faults/test_leader_faults.py``.

Runs N seeded runs (the six fault kinds in turn: the leader killed, partitioned, its
Lease writes refused, its Lease calls stalled, the whole API server stalled, a wall clock
jumping 30 s), three replicas each, against a simulated API server started in this
process (API only, loopback), in simulated time. Prints, per fault kind, the runs, the
ticks at which two replicas believed they led, the items written twice, the items done,
the Lease transitions, and the longest time without an item written from the fault on
(median and max). Stops by itself; its state lives in a temporary directory.

    .venv/bin/python benchmarks/bench_leader_faults.py            # 300 runs
    .venv/bin/python benchmarks/bench_leader_faults.py --runs 60 --seed 2
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from krea_ops.controllers.base import NAMESPACE  # noqa: E402
from krea_ops.kube.cluster import Cluster  # noqa: E402
from krea_ops.sim.apiserver.local import LocalApiServer  # noqa: E402
from tests.faults.test_leader_faults import run_scenarios, summary  # noqa: E402
from tests.kube.conftest import create  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.runs < 1:
        print("--runs must be 1 or more", file=sys.stderr)
        return 2
    # a leader stepping aside logs a warning each time: the table counts what matters
    logging.getLogger("krea_ops.controllers.leader").setLevel(logging.ERROR)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalApiServer(Path(tmp) / "state")
        try:
            with server.api_client() as api:
                cluster = Cluster(api, timeout_s=30)
                create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
                outcomes = run_scenarios(cluster, server, args.runs, seed=args.seed)
        finally:
            server.close()
    took = time.monotonic() - started
    print(f"{args.runs} runs, seed {args.seed}, {took:.0f} s\n")
    print("| fault | runs | ticks with two leaders | items written twice | items done "
          "| Lease transitions | longest time without work, median / max |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for kind, row in summary(outcomes).items():
        print(
            f"| {kind} | {row['runs']} | {row['both_leading']} | {row['duplicates']} "
            f"| {row['items']} | {row['handovers']} "
            f"| {row['recover_median_s']:.1f} s / {row['recover_max_s']:.1f} s |"
        )
    print(f"\n.venv/bin/python benchmarks/bench_leader_faults.py --runs {args.runs} "
          f"--seed {args.seed}")  # fmt: skip
    bad = any(r["both_leading"] or r["duplicates"] for r in summary(outcomes).values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
