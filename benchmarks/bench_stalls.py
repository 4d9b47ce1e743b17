#!/usr/bin/env python3
"""Hung and straggling trainings on the simulated machines: how long from the fault to
node-health's judgement, and to its action, against NCCL's watchdog.

One world per run (4 GPU nodes, the exporters scraped directly, no Prometheus) on the
chosen control plane, at ``--speed`` (20): a two-node DiT gang; node-health as its pod
runs it (the runner, its Lease, its state, the executor and audit log), one pass every
``--interval`` seconds at 1x (30, the shipped default) divided by the speed. The trainers
log their steps on the wall clock, compressed by the speed, so every wall-clock threshold
of ``StallConfig`` (the shipped defaults) is divided by the speed too, as is NCCL's
10-minute watchdog: the figures below are multiplied back, "seconds at 1x", what the
shipped settings give a real run. The gang's step time at 1x is one second
(``training_steps_per_s``).

Per run, in order:

* **hang**: ``sim inject hang`` on a gang node (no finding anywhere): the time to the
  first pass that judges the run HUNG, and to the JobSet's restart count going up (the
  restart node-health plans: rank 0's pod through the JobSet's failure policy);
* **straggler**: ``sim inject straggler --slowdown 2`` on a GPU of the new attempt's gang,
  once it is judged RUNNING again: the time to STRAGGLER (naming that GPU), and to the
  node being evicted by the planned swap (checkpoint requested, written, answered).

    .venv/bin/python benchmarks/bench_stalls.py                       # 3 runs, embedded
    .venv/bin/python benchmarks/bench_stalls.py --control-plane upstream --runs 3
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client

from krea_ops.controllers.base import Inputs
from krea_ops.controllers.loop import JsonLog, Runner, read_state
from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import connect
from krea_ops.runbook.audit import AuditLog
from krea_ops.settings import Settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from krea_ops.telemetry.scrape import ScrapeSource
from krea_ops.training.stalls import StallConfig

USER = "system:serviceaccount:krea-ops:node-health"
WATCHDOG_S = 600.0  # torch's default NCCL timeout, at 1x
SCALED = ("grace_s", "hang_floor_s", "hang_restart_after_s", "recent_s", "window_s")


def scaled(speed: float) -> StallConfig:
    base = StallConfig()
    return replace(base, **{k: getattr(base, k) / speed for k in SCALED})


class NodeHealthPod:
    def __init__(self, world: SimWorld, state: Path, speed: float) -> None:
        self.cluster = connect(str(world.kubeconfig), None)
        self.source = ScrapeSource(self.cluster.ops_config().exporters, Settings())
        config = NodeHealthConfig(
            cap_min_nodes=3, swap_after_s=0.0, restore_after_s=None, stalls=scaled(speed)
        )
        self.controller = NodeHealth(config)
        self.runner = Runner(
            self.cluster,
            [self.controller],
            lambda _: Inputs(self.cluster, self.source, HealthPolicy(), USER),
            identity="node-health-0",
            audit=AuditLog(state / "audit.jsonl"),
            log=JsonLog(io.StringIO(), time.time),
        )

    def pass_once(self) -> dict[str, Any]:
        self.runner.electors["node-health"].try_acquire_or_renew(time.monotonic())
        self.runner.pass_once(self.controller)
        state = read_state(self.cluster).data.get("node-health") or {}
        return dict((state.get("stalls") or {}).get("training/dit") or {})

    def close(self) -> None:
        self.source.close()
        self.cluster.close()


def _restarts(w: SimWorld) -> int:
    js: Any = client.CustomObjectsApi(w.client).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "training", "jobsets", "dit"
    )
    return int((js.get("status") or {}).get("restarts") or 0)


def _gang(w: SimWorld, attempt: int) -> list[dict[str, Any]] | None:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        "training",
        label_selector=f"krea.ai/training=dit,jobset.sigs.k8s.io/restart-attempt={attempt}",
        _preload_content=False,
    )
    pods = [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]
    if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
        for p in pods:  # out of random input-bound phases
            client.CoreV1Api(w.client).patch_namespaced_pod(
                p["metadata"]["name"],
                "training",
                {"metadata": {"annotations": {"sim.krea.ai/input-bound": "false"}}},
            )
        return sorted(pods, key=lambda p: p["spec"]["nodeName"])
    return None


def _cordoned(core: Any, node: str) -> bool:
    spec = core.read_node(node).spec
    return bool(spec is not None and spec.unschedulable)


def _until(what: str, check: Any, nh: NodeHealthPod, every: float, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = time.monotonic()
        got = check(nh.pass_once())
        if got:
            return got
        time.sleep(max(every - (time.monotonic() - started), 0.0))
    raise SystemExit(f"bench_stalls: {what} not reached in {timeout:.0f} s")


def one_run(args: argparse.Namespace, seed: int) -> dict[str, float]:
    speed = args.speed
    every = args.interval / speed
    with tempfile.TemporaryDirectory(prefix="bench-stalls-") as tmp:
        config = WorldConfig(
            control_plane=args.control_plane,
            nodes=4,
            speed=speed,
            seed=seed,
            checkpoint_interval_s=1800.0,
            exporters=True,
            prometheus=False,
            failures_per_1000_node_days=0.0,
            extra={
                "slow_burners": False,
                "checkpoint_write_s": 30.0,
                "training_quota_fraction": 1.0,
                "gpm_interval_s": 0.3,
            },
        )
        with SimWorld(config, Path(tmp) / "world", parts=("cluster", "kueue", "devices")) as w:
            nh = NodeHealthPod(w, Path(tmp), speed)
            try:
                submit_training(w.client, "dit", 2)
                limit = 600.0 / speed * 6
                gang = _until("a running gang", lambda _: _gang(w, 0), nh, every, limit)
                _until("RUNNING", lambda e: e.get("state") == "RUNNING", nh, every, limit)
                t0 = time.monotonic()
                inject_fault(w.client, "hang", gang[1]["spec"]["nodeName"])
                _until("HUNG", lambda e: e.get("state") == "HUNG", nh, every, limit)
                hung = time.monotonic() - t0
                _until("the restart", lambda _: _restarts(w) >= 1, nh, every, limit)
                restarted = time.monotonic() - t0
                gang = _until("the new gang", lambda _: _gang(w, 1), nh, every, limit)
                _until("RUNNING again", lambda e: e.get("state") == "RUNNING", nh, every, limit)
                node = gang[1]["spec"]["nodeName"]
                t0 = time.monotonic()
                inject_fault(w.client, "straggler", node, gpu=3, slowdown=2.0)
                named = _until(
                    "STRAGGLER", lambda e: e.get("state") == "STRAGGLER" and e, nh, every, limit
                )
                judged = time.monotonic() - t0
                if (named.get("node"), named.get("gpu")) != (node, 3):
                    raise SystemExit(f"bench_stalls: the straggler named is {named}")
                core = client.CoreV1Api(w.client)
                _until(
                    "the swap",
                    lambda _: _cordoned(core, node),
                    nh,
                    every,
                    limit,
                )
                swapped = time.monotonic() - t0
            finally:
                nh.close()
    return {
        "hang_judged_s": hung * speed,
        "hang_restarted_s": restarted * speed,
        "straggler_judged_s": judged * speed,
        "straggler_swapped_s": swapped * speed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--control-plane", choices=("embedded", "upstream"), default="embedded")
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=30.0, help="node-health's pass, s at 1x")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.speed <= 0 or args.interval <= 0 or args.runs < 1:
        print("bench_stalls: --speed, --interval and --runs must be positive", file=sys.stderr)
        return 2
    runs = [one_run(args, seed) for seed in range(args.runs)]
    summary = {k: [r[k] for r in runs] for k in runs[0]}
    out = {
        "control_plane": args.control_plane,
        "speed": args.speed,
        "interval_s": args.interval,
        "watchdog_s": WATCHDOG_S,
        "runs": runs,
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"{args.control_plane}, {args.runs} runs at {args.speed:g}x, node-health every "
        f"{args.interval:g} s, NCCL watchdog {WATCHDOG_S:g} s (seconds at 1x):"
    )
    names = {
        "hang_judged_s": "hang: judged HUNG",
        "hang_restarted_s": "hang: gang restarted",
        "straggler_judged_s": "straggler: judged STRAGGLER",
        "straggler_swapped_s": "straggler: node swapped out",
    }
    for key, values in summary.items():
        print(
            f"  {names[key]:<30} median {statistics.median(values):6.0f} s  "
            f"(min {min(values):.0f}, max {max(values):.0f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
