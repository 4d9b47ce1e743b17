#!/usr/bin/env python3
"""Issue 16, Speed: the bundled controllers, measured through the real ``Runner``.

``throughput``: how many GPU nodes per second node-health quarantines when a wave of
findings arrives at once. For each ``--concurrency`` a fresh API server (``krea-ops sim
serve --api-only``, a subprocess, as benchmarks/bench_apiserver.py starts it) gets
``--nodes`` Ready GPU nodes (8 ``nvidia.com/gpu`` allocatable each, the labels, taints
and status a real H200 node carries) and ``--pods`` Running ReplicaSet pods on each hot
node; a telemetry source of recorded readings (the one thing faked: the hardware)
reports every GPU of ``--hot`` nodes at 84 °C for the whole window and the rest at
40 °C. node-health runs with its blast cap raised (cap_share 1.0) and its veto off
(veto_nodes and veto_share at their maximum): a real deployment would stop at its cap
and veto such a wave, here it is allowed through on purpose. One pass of the real
``Runner`` (leader election on, every step and write fenced, audit log, JSON log,
metrics) is timed from its start; a watch on the nodes (its own connection) notes when
each node is seen cordoned. nodes/s = hot nodes / (last cordon seen - pass start).
NVSentinel's published figure, processed sequentially at 1,500 nodes, is the reference.

``cost``: one steady-state pass of each controller at ``--nodes`` nodes with nothing to
do: one training pod per node holding its 8 GPUs (DiT trainings run one pod per node),
a virtual node with ``--offsite`` inference pods on it, Kueue's ResourceFlavor and two
ClusterQueues; every GPU cool. Each controller first makes passes until one plans
nothing (quota-sync lowers the quotas to the GPUs there are), then ``--passes`` passes
are timed: wall, CPU of this process (``time.process_time``: the controller, its Lease
renew thread, the client) and CPU of the API server process (``/proc``), median.

``reaction``: the simulated world (``SimWorld``: nodes, GPUs with their thermal model,
per-node exporters, a real Prometheus scraping every ``--scrape`` s) and node-health as
shipped, run by the ``Runner`` loop every ``--interval`` s on a ``PrometheusSource``
with ``telemetry_window_s`` = ``--window``. Once Prometheus holds a full window, a
``hot-gpu`` fault is injected (the ConfigMap ``krea-ops sim inject hot-gpu`` makes);
the node's exporter and the node are read every 0.1 s: wall time (and simulated time)
from the first exporter reading >= 78 °C (and from Prometheus' first such sample) to the
node cordoned, against the bound of two scrape intervals plus the window.

    .venv/bin/python benchmarks/bench_controllers.py throughput --nodes 1500 --hot 200 \
        --concurrency 1,16,32 --repeat 3
    .venv/bin/python benchmarks/bench_controllers.py cost --nodes 4096 --passes 5
    .venv/bin/python benchmarks/bench_controllers.py reaction
    .venv/bin/python benchmarks/bench_controllers.py reaction --control-plane upstream \
        --nodes 5000 --telemetry-nodes 64 --speed 10 --scrape 15 --window 60 --interval 30

``reaction`` reads through the watch caches, as ``controller run`` does (``--relist``: a
list every pass), and with ``--control-plane upstream --telemetry-nodes T`` runs on the
scale mode's world: the real API server with every node, readings for the first T.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_apiserver import (  # noqa: E402
    ServerProcess,
    Target,
    cpu_seconds,
    make_node,
    node_name,
    run_writes,
    table,
)

from krea_ops.controllers.base import NAMESPACE, Controller, Decision, Inputs  # noqa: E402
from krea_ops.controllers.loop import PLAN_CONCURRENCY, JsonLog, Runner  # noqa: E402
from krea_ops.health import HealthPolicy  # noqa: E402
from krea_ops.kube.cluster import Cluster, connect  # noqa: E402
from krea_ops.kube.watch import WatchedCluster  # noqa: E402
from krea_ops.model import FleetTelemetry, GpuSample, NodeTelemetry  # noqa: E402
from krea_ops.runbook.audit import AuditLog  # noqa: E402

GPUS = 8
USER_OF = "system:serviceaccount:krea-ops:{}"
NVSENTINEL = (
    "NVSentinel (tests/scale-tests/results/FQM_Latency_and_Queue_Depth_Results.md, 1,500 "
    'nodes, breaker off): "events processed sequentially at ~2.5 nodes/s; 150/375/750 '
    'nodes took 62/155/304 s; per-event handling p50 0.37 s, p99 0.50 s" '
    "(/work/shared/research/write-half.md)"
)


# -- the hardware stand-in ------------------------------------------------------------------


def readings(
    nodes: Sequence[str],
    hot: Collection[str] | Collection[tuple[str, int]],
    at: float,
) -> FleetTelemetry:
    """Every GPU of ``nodes``: 84 °C over the whole window on ``hot`` ones (the policy's
    ``gpu_hot``: at or above 78 °C for the last 5 min), 40 °C elsewhere. ``hot`` names
    nodes (every GPU hot) or (node, GPU index) pairs."""

    def gpu(node: str, i: int) -> GpuSample:
        t = 84.0 if node in hot or (node, i) in hot else 40.0
        return GpuSample(
            node=node,
            index=i,
            up=True,
            temperature_c=t,
            temperature_min_window_c=t - 1,
            slowdown_margin_c=90.0 - t,
            util_ratio=0.9,
            tensor_active_ratio=0.5,
            sm_active_ratio=0.8,
            sampled_at=at,
        )

    tel = {
        n: NodeTelemetry(
            node=n,
            exporter_up=True,
            last_sample_at=at,
            age_s=0.0,
            gpus=tuple(gpu(n, i) for i in range(GPUS)),
        )
        for n in nodes
    }
    return FleetTelemetry(source="recorded", collected_at=at, window_s=300.0, nodes=tel)


class Recorded:
    """A ``TelemetrySource`` serving recorded readings (the protocol; no Prometheus)."""

    def __init__(self, telemetry: FleetTelemetry) -> None:
        self.telemetry = telemetry

    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        return self.telemetry

    def describe(self) -> str:
        return "recorded readings"

    def close(self) -> None:
        pass

    def __enter__(self) -> Recorded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- objects --------------------------------------------------------------------------------


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


def create_nodes(server: ServerProcess, count: int) -> float:
    made = run_writes(
        "nodes",
        server,
        list(range(count)),
        lambda i: ("POST", "/api/v1/nodes", json.dumps(make_node(i)).encode(), "application/json"),
        8,
    )
    if made.errors:
        raise RuntimeError(f"creating nodes: {made.first_error}")
    return made.wall_s


def pod_body(name: str, node: str, labels: dict[str, str], gpus: int) -> dict[str, Any]:
    """A Running pod of a ReplicaSet (status given at create, as the simulator keeps it)."""
    resources = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": labels.get("app", "web"),
                    "uid": f"uid-replicaset-{labels.get('app', 'web')}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example.com/krea/app:1",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
            "tolerations": [{"operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def create_pods(server: ServerProcess, pods: list[tuple[str, dict[str, Any]]]) -> None:
    made = run_writes(
        "pods",
        server,
        pods,
        lambda p: (
            "POST",
            f"/api/v1/namespaces/{p[0]}/pods",
            json.dumps(p[1]).encode(),
            "application/json",
        ),
        8,
    )
    if made.errors:
        raise RuntimeError(f"creating pods: {made.first_error}")


class Timed:
    """``inner`` with the wall time of each ``read`` and ``decide`` noted (the runner
    sees the same name, read and decide)."""

    def __init__(self, inner: Controller[Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self.read_s: list[float] = []
        self.decide_s: list[float] = []
        self.decisions: list[Decision] = []

    def read(self, inputs: Inputs, now: float) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.read(inputs, now)
        finally:
            self.read_s.append(time.perf_counter() - t0)

    def decide(self, snapshot: Any, now: float, state: Any) -> Decision:
        t0 = time.perf_counter()
        decision = self.inner.decide(snapshot, now, state)
        self.decide_s.append(time.perf_counter() - t0)
        self.decisions.append(decision)
        return decision


class Leading:
    """A ``Runner`` over one controller, leading (its Lease held by a renew thread)
    until ``close``."""

    def __init__(
        self,
        cluster: Cluster,
        controller: Timed,
        source: Recorded,
        tmp: Path,
        *,
        concurrency: int = PLAN_CONCURRENCY,
    ) -> None:
        self.controller = controller
        self.log = io.StringIO()
        user = USER_OF.format(controller.name)
        self.runner = Runner(
            cluster,
            [controller],
            lambda name: Inputs(cluster, source, HealthPolicy(), user),
            identity=f"bench-{os.getpid()}",
            audit=AuditLog(tmp / f"audit-{controller.name}-{concurrency}.jsonl"),
            log=JsonLog(self.log),
            concurrency=concurrency,
        )
        self.stop = threading.Event()
        self.threads = self.runner.start_election(self.stop)
        missing = self.runner.wait_to_lead(self.stop, 60)
        if missing:
            raise RuntimeError(f"{missing} did not get its Lease")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)
        for elector in self.runner.electors.values():
            elector.close()


class CordonWatch(threading.Thread):
    """A watch on the nodes from ``rv`` (its own connection): when each of ``wanted`` is
    first seen unschedulable (``time.perf_counter``)."""

    def __init__(self, target: Target, rv: str, wanted: Collection[str]) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.rv = rv
        self.wanted = set(wanted)
        self.seen: dict[str, float] = {}
        self.ready = threading.Event()
        self.done = threading.Event()
        self.error = ""

    def run(self) -> None:
        try:
            conn = self.target.connect(timeout=600)
            path = f"/api/v1/nodes?watch=1&resourceVersion={self.rv}&timeoutSeconds=600"
            conn.request("GET", path, headers=self.target.headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch: HTTP {resp.status}")
            self.ready.set()
            while len(self.seen) < len(self.wanted):
                line = resp.readline()
                if not line:
                    break
                at = time.perf_counter()
                obj = json.loads(line).get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if (
                    name in self.wanted
                    and name not in self.seen
                    and (obj.get("spec") or {}).get("unschedulable")
                ):
                    self.seen[name] = at
            conn.close()
        except Exception as exc:  # reported by the caller
            self.error = repr(exc)
        finally:
            self.ready.set()
            self.done.set()


def list_rv(cluster: Cluster, path: str) -> str:
    body = cluster.get("list", path, limit=1)
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- throughput -------------------------------------------------------------------------------


def throughput_once(
    cli: str, tmp: Path, nodes: int, hot_count: int, pods: int, concurrency: int
) -> dict[str, Any]:
    from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
    from krea_ops.runbook.nodes import TAINT_KEY

    run_dir = Path(tempfile.mkdtemp(prefix=f"c{concurrency}-", dir=tmp))
    server = ServerProcess(cli, run_dir / "state", run_dir / "kubeconfig", run_dir / "ca.pem")
    leading: Leading | None = None
    try:
        cluster = connect(server.target.kubeconfig, None, timeout_s=60)
        for ns in (NAMESPACE, "web"):
            ok(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        create_wall = create_nodes(server, nodes)
        names = [node_name(i) for i in range(nodes)]
        # the hot nodes spread over the fleet, as a wave of findings lands
        step = max(1, nodes // hot_count)
        hot = [names[i * step] for i in range(hot_count)]
        create_pods(
            server,
            [
                ("web", pod_body(f"{node}-web-{k}", node, {"app": "web"}, 0))
                for node in hot
                for k in range(pods)
            ],
        )
        source = Recorded(readings(names, set(hot), time.time()))
        config = NodeHealthConfig(cap_share=1.0, veto_nodes=10**9, veto_share=1.0)
        controller = Timed(NodeHealth(config))
        leading = Leading(cluster, controller, source, run_dir, concurrency=concurrency)
        watch = CordonWatch(server.target, list_rv(cluster, "/api/v1/nodes"), hot)
        watch.start()
        watch.ready.wait(30)
        cpu0, server0 = time.process_time(), cpu_seconds(server.pid)
        t0 = time.perf_counter()
        result = leading.runner.pass_once(controller)  # type: ignore[arg-type]
        pass_s = time.perf_counter() - t0
        cpu, server_cpu = time.process_time() - cpu0, cpu_seconds(server.pid) - server0
        watch.done.wait(60)
        if watch.error or len(watch.seen) != len(hot):
            raise RuntimeError(f"saw {len(watch.seen)} of {len(hot)} cordons {watch.error}".strip())
        # what a user would check: every hot node quarantined, no other node touched
        quarantined = set()
        for obj in cluster.get("nodes", "/api/v1/nodes").get("items") or ():
            spec = obj.get("spec") or {}
            if spec.get("unschedulable") or any(
                t.get("key") == TAINT_KEY for t in spec.get("taints") or ()
            ):
                quarantined.add(obj["metadata"]["name"])
        if quarantined != set(hot):
            raise RuntimeError(
                f"quarantined {len(quarantined)} nodes, {len(quarantined & set(hot))} of "
                f"them hot; expected the {len(hot)} hot ones"
            )
        statuses = [r.status for r in result.runs]
        if result.outcome != "ok" or statuses != ["done"] * len(hot):
            raise RuntimeError(f"pass {result.outcome}: {statuses[:5]} {result.detail}")
        left = cluster.get("pods", "/api/v1/namespaces/web/pods").get("items") or ()
        cordons = sorted(t - t0 for t in watch.seen.values())
        return {
            "concurrency": concurrency,
            "create_s": create_wall,
            "read_s": controller.read_s[0],
            "decide_s": controller.decide_s[0],
            "first_cordon_s": cordons[0],
            "last_cordon_s": cordons[-1],
            "pass_s": pass_s,
            "cpu_s": cpu,
            "server_cpu_s": server_cpu,
            "nodes_per_s": len(hot) / cordons[-1],
            "pods_left": len(left),
        }
    finally:
        if leading is not None:
            leading.close()
        server.stop()


def throughput(args: argparse.Namespace, cli: str) -> None:
    print(
        f"node-health quarantining {args.hot} of {args.nodes} GPU nodes at once, "
        f"{args.pods} pods on each; blast cap raised (cap_share 1.0) and veto off "
        "(veto_nodes 10^9, veto_share 1.0) for this run only\n",
        flush=True,
    )
    rows = []
    rates: dict[int, list[float]] = {c: [] for c in args.concurrency}
    runs = [c for _ in range(args.repeat) for c in args.concurrency]  # alternating
    with tempfile.TemporaryDirectory(prefix="bench-controllers-") as tmp:
        for concurrency in runs:
            r = throughput_once(cli, Path(tmp), args.nodes, args.hot, args.pods, concurrency)
            print(
                f"- concurrency {concurrency}: {args.nodes} nodes created in "
                f"{r['create_s']:.1f} s; pass {r['pass_s']:.2f} s; pods left {r['pods_left']}",
                flush=True,
            )
            rows.append(
                [
                    f"Runner, concurrency {concurrency}"
                    + (" (sequential)" if concurrency == 1 else ""),
                    f"{r['read_s']:.2f}",
                    f"{r['decide_s']:.2f}",
                    f"{r['first_cordon_s']:.2f}",
                    f"{r['last_cordon_s']:.2f}",
                    f"{r['pass_s']:.2f}",
                    f"{r['cpu_s']:.1f}",
                    f"{r['server_cpu_s']:.1f}",
                    f"**{r['nodes_per_s']:.1f}**",
                ]
            )
            rates[concurrency].append(r["nodes_per_s"])
    rows.append(["NVSentinel, published (sequential)", "", "", "", "", "", "", "", "~2.5"])
    print()
    print(
        table(
            [
                "run",
                "read s",
                "decide s",
                "first cordon s",
                "last cordon s",
                "pass s",
                "CPU s (us)",
                "CPU s (API server)",
                "nodes/s",
            ],
            rows,
        )
    )
    print(
        f"\nnodes/s = {args.hot} / (last cordon seen by a watch - pass start); the pass "
        "ends when every plan has ended (pods evicted and gone, Events recorded, audit "
        "records fsync'd). No kubelet: the API server deletes an evicted pod at once (no "
        "node Lease), so pods' grace periods are not in the figure.\n"
        f"Reference: {NVSENTINEL}",
        flush=True,
    )
    if args.repeat > 1:
        print()
        print(
            table(
                ["plans at once", "runs", "median nodes/s", "min", "max"],
                [
                    [
                        str(c),
                        str(len(v)),
                        f"**{median(v):.1f}**",
                        f"{min(v):.1f}",
                        f"{max(v):.1f}",
                    ]
                    for c, v in rates.items()
                ],
            ),
            flush=True,
        )


# -- reconcile cost ---------------------------------------------------------------------------

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def cost_fleet(cluster: Cluster, server: ServerProcess, nodes: int, offsite: int) -> None:
    """Nodes, one training pod per node holding its 8 GPUs, a virtual node with
    ``offsite`` inference pods, Kueue's flavor and two ClusterQueues."""
    for ns in (NAMESPACE, "training", "inference"):
        ok(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    create_nodes(server, nodes)
    labels = {"app": "trainer", "jobset.sigs.k8s.io/jobset-name": "dit"}
    training = [
        ("training", pod_body(f"dit-worker-{i:05d}", node_name(i), labels, GPUS))
        for i in range(nodes)
    ]
    ok(
        cluster,
        "POST",
        "/api/v1/nodes",
        {
            "metadata": {"name": "vk-0", "labels": {"type": "virtual-kubelet"}},
            "spec": {
                "taints": [
                    {
                        "key": "virtual-kubelet.io/provider",
                        "value": "acme",
                        "effect": "NoSchedule",
                    }
                ]
            },
            "status": {
                "capacity": {"nvidia.com/gpu": "512"},
                "allocatable": {"nvidia.com/gpu": "512"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    inference = [
        (
            "inference",
            pod_body(
                f"serve-{i:03d}", "vk-0", {"app": "serve", "krea.ai/workload": "inference"}, 1
            ),
        )
        for i in range(offsite)
    ]
    create_pods(server, training + inference)
    gpus = GPUS * nodes
    ok(
        cluster,
        "POST",
        f"{KUEUE}/resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "h200"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
    )
    for cq in ("training", "inference"):
        ok(
            cluster,
            "POST",
            f"{KUEUE}/clusterqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "cohortName": "gpu",
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "h200",
                                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                                }
                            ],
                        }
                    ],
                },
            },
        )


def disable_burst(cluster: Cluster) -> None:
    """What burst-taint does when GPUs are free at home: the virtual node tainted, so
    migrate-back reads its offsite pods (and, none being movable, does nothing)."""
    from krea_ops.burst import DISABLED_TAINT_EFFECT, DISABLED_TAINT_KEY, DISABLED_TAINT_VALUE

    node = cluster.get("node", "/api/v1/nodes/vk-0")
    taints = [
        *((node.get("spec") or {}).get("taints") or ()),
        {"key": DISABLED_TAINT_KEY, "value": DISABLED_TAINT_VALUE, "effect": DISABLED_TAINT_EFFECT},
    ]
    ok(cluster, "PATCH", "/api/v1/nodes/vk-0", {"spec": {"taints": taints}}, merge=True)


def cost(args: argparse.Namespace, cli: str) -> None:
    from krea_ops.controllers.burst_taint import BurstTaint
    from krea_ops.controllers.migrate_back import MigrateBack
    from krea_ops.controllers.node_health import NodeHealth
    from krea_ops.controllers.quota_sync import QuotaSync

    print(
        f"{args.nodes} GPU nodes, one training pod on each (8 GPUs), {args.offsite} "
        "inference pods on a virtual node, a ResourceFlavor and two ClusterQueues; every "
        f"GPU cool; per controller: passes until one plans nothing, then {args.passes} "
        "timed passes\n",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-controllers-") as tmp_name:
        tmp = Path(tmp_name)
        server = ServerProcess(cli, tmp / "state", tmp / "kubeconfig", tmp / "ca.pem")
        try:
            cluster = connect(server.target.kubeconfig, None, timeout_s=120)
            t0 = time.perf_counter()
            cost_fleet(cluster, server, args.nodes, args.offsite)
            print(f"- fleet made in {time.perf_counter() - t0:.0f} s", flush=True)
            names = [node_name(i) for i in range(args.nodes)]
            source = Recorded(readings(names, (), time.time() + 3600))
            for made in (NodeHealth(), BurstTaint(), QuotaSync(), MigrateBack()):
                if made.name == "migrate-back":
                    disable_burst(cluster)
                controller = Timed(made)
                leading = Leading(cluster, controller, source, tmp)
                try:
                    warm = 0
                    while True:
                        result = leading.runner.pass_once(controller)  # type: ignore[arg-type]
                        warm += 1
                        if result.outcome != "ok":
                            raise RuntimeError(f"{made.name}: {result.outcome} {result.detail}")
                        if not result.decision or not result.decision.acts:
                            break
                        if warm >= 5:
                            raise RuntimeError(f"{made.name} still acts after {warm} passes")
                    controller.read_s.clear()
                    controller.decide_s.clear()
                    walls, cpus, servers = [], [], []
                    for _ in range(args.passes):
                        c0, s0 = time.process_time(), cpu_seconds(server.pid)
                        w0 = time.perf_counter()
                        result = leading.runner.pass_once(controller)  # type: ignore[arg-type]
                        walls.append(time.perf_counter() - w0)
                        cpus.append(time.process_time() - c0)
                        servers.append(cpu_seconds(server.pid) - s0)
                        if result.outcome != "ok" or (result.decision and result.decision.acts):
                            raise RuntimeError(f"{made.name}: the steady pass acted")
                    skips = sorted({s.why for s in controller.decisions[-1].skipped})
                finally:
                    leading.close()
                rows.append(
                    [
                        made.name,
                        ", ".join(skips) or "-",
                        str(warm),
                        f"{median(walls):.2f}",
                        f"{median(controller.read_s):.2f}",
                        f"{median(controller.decide_s):.3f}",
                        f"{median(cpus):.2f}",
                        f"{median(servers):.2f}",
                    ]
                )
                print(f"- {made.name}: {rows[-1][3]} s wall per pass", flush=True)
        finally:
            server.stop()
    print()
    print(
        table(
            [
                "controller",
                "skips (nothing to do)",
                "passes to steady",
                "wall s/pass",
                "read s",
                "decide s",
                "CPU s/pass (us)",
                "CPU s/pass (API server)",
            ],
            rows,
            right_from=2,
        )
    )
    print(
        f"\nmedian of {args.passes} passes; CPU (us): time.process_time() of this process "
        "(the controller, its Lease renew thread, the client); the API server is a separate "
        "process (/proc/PID/stat). Telemetry comes from recorded readings: a Prometheus "
        "query's cost is not in these figures (benchmarks/bench_read.py measures it).",
        flush=True,
    )


# -- reaction -----------------------------------------------------------------------------------


def exporter_temperature(url: str, gpu: int) -> float | None:
    """``krea_gpu_temperature_celsius`` of GPU ``gpu`` from one scrape of the exporter."""
    import re
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    pattern = re.compile(
        r'^krea_gpu_temperature_celsius\{[^}]*gpu="' + str(gpu) + r'"[^}]*\} (\S+)$', re.M
    )
    match = pattern.search(text)
    return float(match.group(1)) if match else None


def prometheus_samples(url: str, node: str, gpu: int, span_s: float) -> list[tuple[float, float]]:
    """(time, value) of the GPU's temperature samples Prometheus holds, newest span."""
    import urllib.parse
    import urllib.request

    query = f'krea_gpu_temperature_celsius{{node="{node}",gpu="{gpu}"}}[{int(span_s)}s]'
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=10
    ) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return [(float(t), float(v)) for t, v in (result[0]["values"] if result else [])]


def reaction(args: argparse.Namespace, cli: str) -> None:
    from krea_ops.controllers.node_health import NodeHealth
    from krea_ops.settings import Settings
    from krea_ops.sim.common.actor import WorldConfig
    from krea_ops.sim.machines.faults import inject_fault
    from krea_ops.sim.world import SimWorld
    from krea_ops.telemetry.prometheus import PrometheusSource

    bound = 2 * args.scrape + args.window
    print(
        f"simulated world on the {args.control_plane} control plane: {args.nodes} GPU "
        f"nodes at speed {args.speed:g} (simulated s per wall s), exporters on "
        f"{'every node' if args.telemetry_nodes is None else f'the first {args.telemetry_nodes}'}"
        f", reads {'listed every pass' if args.relist else 'through the watch caches'}, "
        f"Prometheus scraping every {args.scrape:g} s, policy "
        f"window (telemetry_window_s) {args.window:g} s; node-health as shipped (cap, veto "
        f"on) through the Runner every {args.interval:g} s; hot-gpu injected on "
        f"{args.node} GPU {args.gpu} once Prometheus holds a full window\n",
        flush=True,
    )
    config = WorldConfig(
        nodes=args.nodes,
        speed=args.speed,
        seed=1,
        prometheus=True,
        failure_multiplier=0.0,
        control_plane=args.control_plane,
        telemetry_nodes=args.telemetry_nodes,
        extra={
            "scrape_interval_s": args.scrape,
            "slow_burners": False,
        },
    )
    with tempfile.TemporaryDirectory(prefix="bench-controllers-") as tmp_name:
        tmp = Path(tmp_name)
        with SimWorld(config, tmp / "world", parts=("devices", "cluster")) as w:
            t_start = time.perf_counter()
            if not w.wait_for_readings(180):
                raise RuntimeError("Prometheus did not scrape every exporter within 180 s")
            devices = w.world.services["devices"]
            prom_url = devices.prometheus_url
            exporter = devices.exporter_urls()[args.node]
            settings = Settings(prometheus_url=prom_url, telemetry_window_s=args.window)
            policy = HealthPolicy.from_settings(settings)
            source = PrometheusSource(prom_url, settings, policy=policy)
            cluster = connect(str(w.kubeconfig), None, timeout_s=60)
            # as `controller run` reads: through the watch caches, unless --relist
            reads: Cluster = cluster if args.relist else WatchedCluster(cluster)
            controller = Timed(NodeHealth())
            user = USER_OF.format(controller.name)
            runner = Runner(
                reads,
                [controller],  # type: ignore[list-item]
                lambda name: Inputs(reads, source, policy, user),
                identity=f"bench-{os.getpid()}",
                audit=AuditLog(tmp / "audit.jsonl"),
                log=JsonLog(io.StringIO()),
            )
            stop = threading.Event()
            loop = threading.Thread(
                target=runner.run, args=(stop,), kwargs={"interval_s": args.interval}
            )
            loop.start()
            try:
                # a full window of history first, so "hot for the whole window" means it
                time.sleep(max(0.0, args.window + args.scrape - (time.perf_counter() - t_start)))
                if any(d.acts for d in controller.decisions):
                    raise RuntimeError("node-health acted before the fault")
                passes_before = len(controller.decisions)
                inject_fault(w.client, "hot-gpu", args.node, gpu=args.gpu)
                t_inject = time.perf_counter()
                crossed = cordoned = None
                sim_crossed = sim_cordoned = 0.0
                deadline = t_inject + bound + 4 * args.interval + 120
                while cordoned is None and time.perf_counter() < deadline:
                    if crossed is None:
                        temp = exporter_temperature(exporter, args.gpu)
                        if temp is not None and temp >= 78.0:
                            crossed, sim_crossed = time.perf_counter(), w.clock.time()
                    node = cluster.get("node", f"/api/v1/nodes/{args.node}")
                    if (node.get("spec") or {}).get("unschedulable"):
                        cordoned, sim_cordoned = time.perf_counter(), w.clock.time()
                    time.sleep(0.1)
                if crossed is None or cordoned is None:
                    raise RuntimeError(f"no cordon within {deadline - t_inject:.0f} s")
                samples = prometheus_samples(prom_url, args.node, args.gpu, 3 * args.window)
                wall_now, perf_now = time.time(), time.perf_counter()
                first_hot = next((t for t, v in samples if v >= 78.0), None)
                first_hot_perf = None if first_hot is None else perf_now - (wall_now - first_hot)
                passes = len(controller.decisions) - passes_before
            finally:
                stop.set()
                loop.join(timeout=30)
                source.close()
                if reads is not cluster:
                    reads.close()
    cordoned_nodes = [
        n
        for d in controller.decisions
        for p in d.plans
        if p.action == "nodes evict"
        for n in p.nodes
    ]
    reaction_s = cordoned - crossed
    rows = [
        ["fault injected -> exporter reads >= 78 °C", f"{crossed - t_inject:.1f}", ""],
        [
            "exporter reads >= 78 °C -> node cordoned (**reaction**)",
            f"**{reaction_s:.1f}**",
            f"{sim_cordoned - sim_crossed:,.0f}",
        ],
    ]
    if first_hot_perf is not None:
        rows.append(
            [
                "first Prometheus sample >= 78 °C -> node cordoned",
                f"{cordoned - first_hot_perf:.1f}",
                f"{(cordoned - first_hot_perf) * args.speed:,.0f}",
            ]
        )
    rows += [
        [
            f"bound: 2 scrape intervals + window (2 x {args.scrape:g} + {args.window:g})",
            f"{bound:g}",
            f"{bound * args.speed:,.0f}",
        ],
        [
            f"bound + one controller interval ({args.interval:g})",
            f"{bound + args.interval:g}",
            f"{(bound + args.interval) * args.speed:,.0f}",
        ],
    ]
    print(table(["interval", "wall s", "simulated s"], rows))
    print(
        f"\nnode-health passes from the fault to the cordon: {passes}; nodes evicted: "
        f"{sorted(set(cordoned_nodes))}; reaction "
        f"{'within' if reaction_s <= bound else 'OVER'} the bound"
        f"{'' if reaction_s <= bound else f' by {reaction_s - bound:.1f} s'}. Window, "
        "scrapes and passes run on wall time; the GPU heats on simulated time "
        f"(x{args.speed:g}).",
        flush=True,
    )


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    t = parts.add_parser("throughput", help="node-health quarantine rate (nodes/s)")
    t.add_argument("--nodes", type=int, default=1500)
    t.add_argument("--hot", type=int, default=200)
    t.add_argument("--pods", type=int, default=2, help="pods on each hot node")
    t.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, PLAN_CONCURRENCY],
        help="comma-separated plan concurrencies, one fresh run each",
    )
    t.add_argument("--repeat", type=int, default=1, help="runs of each, alternating")
    c = parts.add_parser("cost", help="one steady pass of each controller")
    c.add_argument("--nodes", type=int, default=4096)
    c.add_argument("--offsite", type=int, default=64)
    c.add_argument("--passes", type=int, default=5)
    r = parts.add_parser("reaction", help="hot GPU to cordon in the simulated world")
    r.add_argument("--nodes", type=int, default=4)
    r.add_argument("--speed", type=float, default=60.0)
    r.add_argument("--scrape", type=float, default=5.0, help="Prometheus scrape interval, s")
    r.add_argument("--window", type=float, default=60.0, help="the policy's window, s")
    r.add_argument("--interval", type=float, default=5.0, help="controller pass interval, s")
    r.add_argument("--control-plane", default="embedded", choices=("embedded", "upstream"))
    r.add_argument(
        "--telemetry-nodes",
        type=int,
        default=None,
        help="the scale mode: only the first N nodes have devices, exporters and readings",
    )
    r.add_argument("--relist", action="store_true", help="list every pass (no watch caches)")
    r.add_argument("--node", default="gpu-node-001")
    r.add_argument("--gpu", type=int, default=3)
    args = parser.parse_args(argv)
    cli = str(Path(sys.executable).with_name("krea-ops"))
    command = "benchmarks/bench_controllers.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# controllers: {args.part} (issue 16)\n\n    .venv/bin/python {command}\n", flush=True)
    {"throughput": throughput, "cost": cost, "reaction": reaction}[args.part](args, cli)
    return 0


if __name__ == "__main__":
    sys.exit(main())
