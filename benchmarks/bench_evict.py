#!/usr/bin/env python3
"""Issue 15: ``krea-ops nodes evict`` next to ``kubectl drain``, on one simulated cluster.

1. starts the bundled API server (``krea-ops sim serve --api-only``, as
   benchmarks/bench_apiserver.py does) and creates the nodes each run needs, each with a
   fresh Lease in ``kube-node-lease`` (so the API server deletes its pods gracefully,
   as it does for a node whose kubelet is alive) and ``--pods`` Running pods owned by a
   ReplicaSet, with ``terminationGracePeriodSeconds: --grace``;
2. runs a stand-in kubelet on a thread: a pod being deleted is finished (DELETE with
   grace 0) once its grace period has passed, as the kubelet finishes it;
3. times, as subprocesses (start-up included), ``krea-ops nodes evict NODE --reason bench
   --yes`` and ``kubectl drain NODE --ignore-daemonsets --delete-emptydir-data`` on
   identical fresh nodes, ``--repeat`` times each, alternating; then evicting ``--many``
   nodes at once: one ``krea-ops nodes evict N1 ... Nk --max-share 100%`` against a
   shell loop of ``kubectl drain`` over the same number of identical nodes;
4. prints a markdown table (median / min / max seconds) and the exact command.

    .venv/bin/python benchmarks/bench_evict.py --repeat 3 --many 32
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_apiserver import ServerProcess, compile_project, table  # noqa: E402

from krea_ops.kube.cluster import Cluster, connect  # noqa: E402
from krea_ops.kube.times import micro_time, parse_time  # noqa: E402

NS = "bench"


def ok(cluster: Cluster, method: str, path: str, body: Any, merge: bool = False) -> Any:
    answer = cluster.request(
        f"{method} {path}",
        method,
        path,
        body=body,
        content_type="application/merge-patch+json" if merge else "application/json",
    )
    if not answer.ok:
        raise RuntimeError(f"{method} {path}: HTTP {answer.status} {answer.message}")
    return answer.body


def make_node(cluster: Cluster, name: str, pods: int, grace: int) -> None:
    """A Ready GPU node with a fresh Lease and ``pods`` Running pods of one ReplicaSet."""
    gpu = {"cpu": "224", "memory": "2Ti", "nvidia.com/gpu": "8", "pods": "110"}
    ok(
        cluster,
        "POST",
        "/api/v1/nodes",
        {"metadata": {"name": name, "labels": {"krea.ai/pool": "bench"}}, "spec": {}},
    )
    ok(
        cluster,
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": gpu,
                "allocatable": gpu,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            }
        },
        merge=True,
    )
    ok(
        cluster,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        {
            "metadata": {"name": name},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": 3600,
                "renewTime": micro_time(time.time()),
            },
        },
    )
    for i in range(pods):
        pod = f"{name}-web-{i}"
        ok(
            cluster,
            "POST",
            f"/api/v1/namespaces/{NS}/pods",
            {
                "metadata": {"name": pod, "labels": {"app": "web", "node": name}},
                "spec": {
                    "nodeName": name,
                    "terminationGracePeriodSeconds": grace,
                    "containers": [{"name": "c", "image": "img:1"}],
                },
            },
        )
        ok(
            cluster,
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/{pod}/status",
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            merge=True,
        )
    # Their ReplicaSet, made after them: on the upstream control plane its controller adopts
    # them as its replicas (and replaces what is evicted, elsewhere, as on a real cluster);
    # the owner reference is written here too, as adoption writes it, for the embedded
    # server, where no controller runs.
    rs = ok(
        cluster,
        "POST",
        f"/apis/apps/v1/namespaces/{NS}/replicasets",
        {
            "metadata": {"name": f"{name}-web"},
            "spec": {
                "replicas": pods,
                "selector": {"matchLabels": {"app": "web", "node": name}},
                "template": {
                    "metadata": {"labels": {"app": "web", "node": name}},
                    "spec": {"containers": [{"name": "c", "image": "img:1"}]},
                },
            },
        },
    )
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": f"{name}-web",
        "uid": rs["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for i in range(pods):
        ok(
            cluster,
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/{name}-web-{i}",
            {"metadata": {"ownerReferences": [owner]}},
            merge=True,
        )


class Kubelet(threading.Thread):
    """Finishes the graceful deletion of every pod in the namespace once its grace period
    has passed (polls every 0.1 s, as fast as a kubelet's pod workers react)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            body = self.cluster.get("pods", f"/api/v1/namespaces/{NS}/pods")
            now = time.time()
            for pod in body.get("items") or ():
                meta = pod["metadata"]
                since = parse_time(meta.get("deletionTimestamp"))
                if since is None:
                    continue
                # deletionTimestamp is when the grace period ends
                if now >= since:
                    self.cluster.request(
                        "finish",
                        "DELETE",
                        f"/api/v1/namespaces/{NS}/pods/{meta['name']}",
                        body={"gracePeriodSeconds": 0},
                    )


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv[:6])}...: exit {result.returncode}\n{result.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--grace", type=int, default=1)
    parser.add_argument("--many", type=int, default=32)
    parser.add_argument(
        "--control-plane",
        choices=("embedded", "upstream"),
        default="embedded",
        help="the API server to run against: ours, or the upstream kube-apiserver with its "
        "controller-manager, scheduler, Kueue and JobSet (krea-ops sim upstream build)",
    )
    args = parser.parse_args()
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("kubectl is not on PATH")
    cli = str(Path(sys.executable).with_name("krea-ops"))
    compile_project()
    command = f".venv/bin/python benchmarks/bench_evict.py {shlex.join(sys.argv[1:])}"
    print(f"# nodes evict vs kubectl drain (issue 15)\n\n    {command.strip()}\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-evict-") as tmp:
        tmpdir = Path(tmp)
        server = ServerProcess(
            cli, tmpdir / "state", tmpdir / "kubeconfig", tmpdir / "ca.crt", args.control_plane
        )
        try:
            kc = server.target.kubeconfig
            env = {
                **os.environ,
                "KREA_OPS_CONFIG": str(tmpdir / "none.yaml"),
                "KREA_OPS_AUDIT_LOG": str(tmpdir / "audit.jsonl"),
                "HOME": str(tmpdir),
            }
            cluster = connect(kc, None, timeout_s=60)
            ok(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
            for i in range(10):  # the rest of the fleet (the share counts it)
                make_node(cluster, f"idle-{i:02d}", 0, args.grace)
            kubelet = Kubelet(cluster)
            kubelet.start()
            ko = [cli, "--kubeconfig", kc]
            kd = [kubectl, "--kubeconfig", kc]
            drain = ["--ignore-daemonsets", "--delete-emptydir-data"]
            times: dict[str, list[float]] = {"krea": [], "kubectl": []}
            for r in range(args.repeat):
                for tool in ("krea", "kubectl") if r % 2 == 0 else ("kubectl", "krea"):
                    node = f"{tool}-{r:02d}"
                    make_node(cluster, node, args.pods, args.grace)
                    if tool == "krea":
                        argv = [*ko, "nodes", "evict", node, "--reason", "bench", "--yes"]
                    else:
                        argv = [*kd, "drain", node, *drain]
                    times[tool].append(timed(argv, env))
            many_krea = [f"krea-many-{i:03d}" for i in range(args.many)]
            many_kubectl = [f"kubectl-many-{i:03d}" for i in range(args.many)]
            for node in (*many_krea, *many_kubectl):
                make_node(cluster, node, args.pods, args.grace)
            krea_many = timed(
                [
                    *ko,
                    *("nodes", "evict", *many_krea, "--reason", "bench", "--yes"),
                    *("--max-share", "100%"),
                ],
                env,
            )
            loop = " ".join(
                f"{shlex.join([*kd, 'drain', node, *drain])} >/dev/null &&" for node in many_kubectl
            )
            kubectl_many = timed(["bash", "-c", f"{loop} true"], env)
            kubelet.stopped.set()
        finally:
            server.stop()

    def row(label: str, values: list[float]) -> list[str]:
        return [
            label,
            str(len(values)),
            f"{statistics.median(values):.2f}",
            f"{min(values):.2f}",
            f"{max(values):.2f}",
        ]

    print(
        table(
            ["command", "runs", "median s", "min s", "max s"],
            [
                row(
                    f"krea-ops nodes evict NODE --reason bench --yes ({args.pods} pods)",
                    times["krea"],
                ),
                row(
                    f"kubectl drain NODE --ignore-daemonsets --delete-emptydir-data "
                    f"({args.pods} pods)",
                    times["kubectl"],
                ),
                row(f"krea-ops nodes evict {args.many} nodes at once", [krea_many]),
                row(f"kubectl drain loop over {args.many} nodes", [kubectl_many]),
            ],
        )
    )
    print(
        f"\npods: {args.pods} per node, terminationGracePeriodSeconds {args.grace}; "
        "a stand-in kubelet finishes each deletion when its grace period ends (0.1 s poll)",
        flush=True,
    )


if __name__ == "__main__":
    main()
