#!/usr/bin/env python3
"""Micro-benchmark: what managedFields bookkeeping costs per write in the simulated API
server (``krea_ops.sim.apiserver.apply.record_update``), on the writes the simulated world
does most:
a kubelet's pod status update and a node Lease renewal. For scale it also times one deep
copy of the pod, which every update already does.

    .venv/bin/python benchmarks/bench_managed_fields.py [--writes 20000]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

from krea_ops.sim.apiserver import apply as ssa


def _pod() -> dict[str, Any]:
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "dit-trainer-0-0",
            "namespace": "training",
            "uid": "u",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "dit", "krea.ai/workload": "training"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                 "uid": "u2", "controller": True}],
        },
        "spec": {
            "nodeName": "gpu-001",
            "containers": [
                {
                    "name": "trainer",
                    "image": "krea/dit:latest",
                    "env": [{"name": f"E{i}", "value": str(i)} for i in range(12)],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "ports": [{"containerPort": 29500}],
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0,
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}],
            "podIP": "10.0.0.1",
        },
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=20_000)
    n = parser.parse_args().writes
    pod = _pod()
    node = ssa.root_node("", "Pod", None)
    common: dict[str, Any] = {"api_version": "v1", "node": node, "has_status": True}
    pod["metadata"]["managedFields"] = ssa.record_update(
        None, pod, manager="kube-controller-manager", subresource="", now="t0", **common
    )
    status = dict(pod["status"], podIP="10.0.0.2")
    pod["metadata"]["managedFields"] = ssa.record_update(
        pod, {**pod, "status": status}, manager="kubelet", subresource="status", now="t0",
        **common,
    )  # fmt: skip
    size = len(json.dumps(pod["metadata"]["managedFields"]))
    print(f"pod: {len(json.dumps(pod))} bytes of JSON, {size} of them managedFields")

    t = time.perf_counter()
    for i in range(n):
        cs = [dict(pod["status"]["containerStatuses"][0], restartCount=i)]
        new = {**pod, "status": {**pod["status"], "containerStatuses": cs}}
        ssa.record_update(pod, new, manager="kubelet", subresource="status", now="t", **common)
    print(f"pod status write: {(time.perf_counter() - t) / n * 1e6:.1f} us")

    lease: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gpu-001", "namespace": "kube-node-lease", "uid": "x"},
        "spec": {"holderIdentity": "gpu-001", "leaseDurationSeconds": 40, "renewTime": "a"},
    }
    lnode = ssa.root_node("coordination.k8s.io", "Lease", None)
    lease["metadata"]["managedFields"] = ssa.record_update(
        None, lease, manager="kubelet", subresource="", api_version="coordination.k8s.io/v1",
        now="t", node=lnode, has_status=False,
    )  # fmt: skip
    t = time.perf_counter()
    for i in range(n):
        new = {**lease, "spec": {**lease["spec"], "renewTime": str(i)}}
        ssa.record_update(
            lease, new, manager="kubelet", subresource="", api_version="coordination.k8s.io/v1",
            now="t", node=lnode, has_status=False,
        )  # fmt: skip
    print(f"lease renewal: {(time.perf_counter() - t) / n * 1e6:.1f} us")

    t = time.perf_counter()
    for _ in range(n // 10):
        copy.deepcopy(pod)
    print(f"(one deep copy of the pod: {(time.perf_counter() - t) / (n // 10) * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
