#!/usr/bin/env python3
"""Simulated API server benchmark: writes/s, LIST of N nodes and 8N pods, kubectl, watch fan-out.

Starts ``krea-ops sim serve --api-only`` as a separate process (so the benchmark client
does not share the server's GIL) on 127.0.0.1 with its state in a temporary directory,
and then:

1. populates it with N realistic GPU nodes and N x P pods (P per node, bound, Running)
   from a pool of keep-alive HTTPS connections, one per client thread, and times each
   create (writes/s, p50/p99 per write, server CPU per write);
2. times strategic-merge PATCHes of pod labels and of pod status the same way;
3. times LIST of all nodes and all pods through the official Python client with
   ``_preload_content=False`` (server + transfer, no model deserialization), plus one
   deserialized run of each;
4. times the same lists through ``kubectl get ... -o json`` (kubectl's default
   ``--chunk-size=500`` and ``--chunk-size=0``), and ``kubectl get pods -A`` (table);
5. times a paginated list of all pods (``limit`` + ``continue``);
6. opens W watches on all pods (from the list's resourceVersion, in a separate process)
   while one writer PATCHes K pods, and reports the time from the last write's
   acknowledgement until every watcher has seen every event, and the delivery latency
   of each event (receipt at the watcher minus the write's acknowledgement);
7. reports the server's RSS (/proc/<pid>/status VmRSS) and its SQLite file sizes.

Prints a markdown table per section and the exact command. Stops by itself, uses only
loopback sockets and removes its temporary directory at the end.

    .venv/bin/python benchmarks/bench_apiserver.py
    .venv/bin/python benchmarks/bench_apiserver.py --nodes 256   # a quick run
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import multiprocessing
import os
import platform
import queue
import re
import resource
import shlex
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
NAMESPACES = ("llm-pretrain", "llm-finetune", "diffusion", "eval")
POOLS = ("h200-a", "h200-b")
NODES_PER_RACK = 16
NODES_PER_JOB = 64
STARTED_AT = "2026-01-01T00:00:00Z"
WATCH_LABEL = "krea.ai/bench-watch-seq"
PATCH_CT = "application/strategic-merge-patch+json"


# ---------------------------------------------------------------------------------------
# Small helpers


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """utime+stime of the whole process (all threads), in 1/CLK_TCK steps."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right_from: int = 1) -> str:
    align = ["---" if i < right_from else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The server process and raw HTTPS connections to it


@dataclass
class Target:
    host: str
    port: int
    token: str
    ca_file: str
    kubeconfig: str

    def connect(self, timeout: float = 120.0) -> http.client.HTTPSConnection:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ctx)
        conn.connect()
        return conn

    def headers(self, content_type: str | None = None) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if content_type:
            out["Content-Type"] = content_type
        return out


class ServerProcess:
    """``krea-ops sim serve --api-only`` in the background (on the embedded or the upstream
    control plane); its output is drained on threads."""

    def __init__(
        self,
        cli: str,
        state: Path,
        kubeconfig: Path,
        ca_file: Path,
        control_plane: str = "embedded",
        nodes: int | None = None,
    ) -> None:
        """``nodes``: how many nodes the benchmark registers and keeps alive
        (``NodeHeartbeats``), which sizes the upstream node lifecycle controller's grace."""
        self.argv = [
            cli,
            *("sim", "serve", "--api-only", "--state", str(state)),
            *("--kubeconfig-out", str(kubeconfig)),
            *("--control-plane", control_plane),
            *(("--nodes", str(nodes)) if nodes is not None else ()),
        ]
        self.stderr_tail: list[str] = []
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.pid = self.proc.pid
        url: str | None = None
        kc: str | None = None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stdout, lines), daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.monotonic() + 120
        while kc is None:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                line = None
            if line is None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.stderr_tail[-20:])
                raise RuntimeError(f"the API server did not start:\n{tail}")
            if line.startswith("API server: "):
                url = line.split(": ", 1)[1].strip()
            elif line.startswith("kubeconfig: "):
                kc = line.split(": ", 1)[1].strip()
        assert url is not None
        match = re.fullmatch(r"https://([^:/]+):(\d+)", url)
        if not match:
            raise RuntimeError(f"unexpected server URL {url!r}")
        import yaml

        config = yaml.safe_load(Path(kc).read_text())
        ca_file.write_bytes(
            base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
        )
        self.url = url
        self.target = Target(
            match.group(1),
            int(match.group(2)),
            config["users"][0]["user"]["token"],
            str(ca_file),
            kc,
        )

    @staticmethod
    def _pump(stream: Any, out: queue.Queue[str | None]) -> None:
        for raw in stream:
            out.put(raw.decode(errors="replace").rstrip("\n"))
        out.put(None)

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr_tail.append(raw.decode(errors="replace").rstrip("\n"))
            del self.stderr_tail[:-200]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def compile_project() -> None:
    """Write the bytecode of the project's own packages, as ``pip install`` of a wheel
    does at install time. An editable install compiles them at their first import only
    where bytecode may be written: with ``PYTHONDONTWRITEBYTECODE`` set (as on some
    machines), every timed run of ``krea-ops`` would compile ~30 modules from source
    (~70 ms) that a user's installation never compiles again, while the peer tools'
    modules (kubectl; the client floor's site-packages) are compiled already."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "krea_ops", "commands", "screens"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )


NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class NodeHeartbeats:
    """Keeps the benchmark's nodes Ready on the upstream control plane, as their kubelets
    would: each node's Lease in ``kube-node-lease`` is created, then renewed every
    ``renew_s`` (spread evenly over the nodes, on one connection in a thread). Without it
    the controller-manager's node lifecycle controller takes every node NotReady
    ("Kubelet stopped posting node status.") once its grace period has passed, and taints
    it unreachable, half-way through the benchmark. The cadence is the simulated
    kubelets' (``Kubelet.renew_for``: 10 s, or nodes / 32 s past 320 nodes), which
    ``sim serve --api-only --nodes N`` sizes the grace period to."""

    def __init__(self, server: ServerProcess, names: Sequence[str]) -> None:
        from krea_ops.kube.times import micro_time
        from krea_ops.sim.common.actor import WorldConfig
        from krea_ops.sim.machines.kubelet import Kubelet

        config = WorldConfig(nodes=len(names))
        self.renew_s = Kubelet.renew_for(config)
        self.duration_s = Kubelet.lease_duration_for(config)
        self.stamp = lambda: micro_time(time.time())  # a Lease's renewTime, now
        self.names = list(names)
        self.target = server.target
        self.renewals = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        made = run_writes(
            "create node Leases", server, self.names, self._create, min(8, len(self.names))
        )
        if made.errors:
            raise RuntimeError(f"{made.errors} node Leases not created: {made.first_error}")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _create(self, name: str) -> tuple[str, str, bytes, str]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": self.duration_s,
                "renewTime": self.stamp(),
            },
        }
        return "POST", NODE_LEASES, json.dumps(body).encode(), "application/json"

    def _run(self) -> None:
        conn = self.target.connect()
        gap = self.renew_s / len(self.names)
        due = time.monotonic()
        while not self._stop.is_set():
            for name in self.names:
                due += gap
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                path = f"{NODE_LEASES}/{name}"
                body = json.dumps({"spec": {"renewTime": self.stamp()}}).encode()
                try:
                    status, data = request(
                        conn,
                        "PATCH",
                        path,
                        self.target.headers("application/merge-patch+json"),
                        body,
                    )
                except (OSError, http.client.HTTPException) as exc:
                    self.errors.append(f"{name}: {exc!r}")
                    conn.close()
                    conn = self.target.connect()
                    continue
                if status == 200:
                    self.renewals += 1
                else:
                    self.errors.append(f"{name}: {status} {data[:200]!r}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def request(
    conn: http.client.HTTPSConnection,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None = None,
) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


# ---------------------------------------------------------------------------------------
# Objects


def node_name(i: int) -> str:
    return f"gpu-{i // NODES_PER_RACK:03d}-{i % NODES_PER_RACK:02d}"


def make_node(i: int) -> dict[str, Any]:
    name = node_name(i)
    rack = i // NODES_PER_RACK
    pool = POOLS[rack % len(POOLS)]
    ip = f"10.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    resources = {
        "cpu": "224",
        "memory": "2113331364Ki",
        "ephemeral-storage": "28113663056Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "nvidia.com/gpu": "8",
        "rdma/ib": "8",
        "pods": "110",
    }
    allocatable = {**resources, "cpu": "220", "memory": "2092359844Ki"}
    conditions = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "gpu-h200x8",
                "topology.kubernetes.io/region": "us-central",
                "topology.kubernetes.io/zone": f"us-central-{'abcd'[rack % 4]}",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H200",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": "143771",
                "nvidia.com/cuda.driver.major": "570",
                "krea.ai/pool": pool,
                "krea.ai/rack": f"rack-{rack:03d}",
                "krea.ai/ib-block": f"block-{rack // 8:02d}",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"10.{128 + i // 256}.{i % 256}.0/24",
            "podCIDRs": [f"10.{128 + i // 256}.{i % 256}.0/24"],
            "providerID": f"krea://us-central/{name}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": resources,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": f"kubelet {r}",
                    "lastHeartbeatTime": STARTED_AT,
                    "lastTransitionTime": STARTED_AT,
                }
                for t, s, r in conditions
            ],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": f"0b6e3c2a-{i:04x}-4d1e-9c1f-7a2b3c4d5e6f",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kernelVersion": "6.8.0-51-generic",
                "kubeProxyVersion": "v1.32.0",
                "kubeletVersion": "v1.32.0",
                "machineID": f"{i:032x}",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": f"4c4c4544-{i:04x}-4b10-8052-c4c04f4e3332",
            },
        },
    }


def pod_ref(node: int, rank: int, per_node: int) -> tuple[str, str]:
    """(namespace, name) of the rank-th pod on a node."""
    job = node // NODES_PER_JOB
    index = (node % NODES_PER_JOB) * per_node + rank
    return NAMESPACES[job % len(NAMESPACES)], f"job-{job:03d}-worker-{index:04d}"


def make_pod(node: int, rank: int, per_node: int) -> dict[str, Any]:
    ns, name = pod_ref(node, rank, per_node)
    job = node // NODES_PER_JOB
    rack = node // NODES_PER_RACK
    index = (node % NODES_PER_JOB) * per_node + rank
    image = "registry.example.com/krea/trainer:2026.01.3"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                "app.kubernetes.io/name": "trainer",
                "batch.kubernetes.io/job-name": f"job-{job:03d}",
                "batch.kubernetes.io/job-completion-index": str(index),
                "jobset.sigs.k8s.io/jobset-name": f"job-{job:03d}",
                "kueue.x-k8s.io/queue-name": f"{ns}-queue",
                "krea.ai/pool": POOLS[rack % len(POOLS)],
            },
            "annotations": {"kueue.x-k8s.io/workload": f"jobset-job-{job:03d}"},
        },
        "spec": {
            "nodeName": node_name(node),
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "command": ["torchrun", "--nproc-per-node=1", "/app/train.py"],
                    "env": [
                        {"name": "JOB_COMPLETION_INDEX", "value": str(index)},
                        {"name": "NCCL_IB_HCA", "value": "mlx5"},
                    ],
                    "resources": {
                        "requests": {"cpu": "26", "memory": "240Gi", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": "26", "memory": "240Gi", "nvidia.com/gpu": "1"},
                    },
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": f"10.{64 + node // 65536}.{(node // 256) % 256}.{node % 256}",
            "podIP": f"10.{128 + node // 256}.{node % 256}.{10 + rank}",
            "startTime": STARTED_AT,
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": STARTED_AT,
                }
                for t in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "image": image,
                    "imageID": "registry.example.com/krea/trainer@sha256:" + "ab" * 32,
                    "containerID": f"containerd://{node:032x}{rank:032x}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": STARTED_AT}},
                }
            ],
        },
    }


# ---------------------------------------------------------------------------------------
# Writes from a pool of keep-alive connections


@dataclass
class WriteResult:
    name: str
    count: int
    wall_s: float
    latencies_ms: list[float]
    server_cpu_s: float
    errors: int = 0
    first_error: str = ""

    def row(self) -> list[Any]:
        lat = self.latencies_ms
        return [
            self.name,
            self.count,
            self.errors,
            f"{self.wall_s:.2f}",
            f"{self.count / self.wall_s:.0f}",
            f"{pct(lat, 50):.2f}",
            f"{pct(lat, 99):.2f}",
            f"{max(lat):.2f}",
            f"{self.server_cpu_s / max(self.count, 1) * 1000:.2f}",
        ]


WRITE_HEADERS = [
    "writes",
    "count",
    "errors",
    "wall s",
    "writes/s",
    "p50 ms",
    "p99 ms",
    "max ms",
    "server CPU ms/write",
]


def run_writes(
    name: str,
    server: ServerProcess,
    items: Sequence[Any],
    make: Callable[[Any], tuple[str, str, bytes, str]],
    concurrency: int,
    ok: tuple[int, ...] = (200, 201),
) -> WriteResult:
    """Send every item as one request (method, path, body, content type) from `concurrency`
    threads, each with its own keep-alive connection; items are dealt round-robin."""
    target = server.target
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[str] = []
    start_gate = threading.Barrier(concurrency + 1)

    def worker(w: int) -> None:
        conn = target.connect()
        prepared = [make(item) for item in items[w::concurrency]]
        mine = latencies[w]
        start_gate.wait()
        try:
            for method, path, body, ctype in prepared:
                t0 = time.perf_counter()
                try:
                    status, data = request(conn, method, path, target.headers(ctype), body)
                except (OSError, http.client.HTTPException) as exc:
                    errors.append(f"{method} {path}: {exc!r}")
                    conn.close()
                    conn = target.connect()
                    continue
                mine.append((time.perf_counter() - t0) * 1000)
                if status not in ok:
                    errors.append(f"{method} {path}: HTTP {status} {data[:300]!r}")
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads:
        t.start()
    start_gate.wait()
    cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(server.pid) - cpu0
    flat = [x for lat in latencies for x in lat]
    return WriteResult(name, len(items), wall, flat, cpu, len(errors), errors[0] if errors else "")


def create_request(kind: str, per_node: int) -> Callable[[Any], tuple[str, str, bytes, str]]:
    def make(item: Any) -> tuple[str, str, bytes, str]:
        if kind == "node":
            return "POST", "/api/v1/nodes", json.dumps(make_node(item)).encode(), "application/json"
        node, rank = item
        ns, _ = pod_ref(node, rank, per_node)
        body = json.dumps(make_pod(node, rank, per_node)).encode()
        return "POST", f"/api/v1/namespaces/{ns}/pods", body, "application/json"

    return make


# ---------------------------------------------------------------------------------------
# LIST through the official Python client


@dataclass
class Timed:
    name: str
    walls: list[float]
    nbytes: int
    server_cpu: list[float]
    items: int | None = None
    client_cpu: list[float] = field(default_factory=list)


def net_of_idle(t: Timed, idle_cpu_per_s: float) -> float:
    """Median server CPU less what the idle server would have used over the median wall."""
    median_cpu = statistics.median(t.server_cpu)
    return max(median_cpu - idle_cpu_per_s * statistics.median(t.walls), 0.0)


def time_python_list(
    server: ServerProcess, name: str, call: Callable[[], Any], repeats: int
) -> Timed:
    walls, cpus = [], []
    nbytes = 0
    data = b""
    _ = call().data  # warm the connection pool and the server
    for _ in range(repeats):
        cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
        resp = call()
        data = resp.data
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu_seconds(server.pid) - cpu0)
        nbytes = len(data)
    items = len(json.loads(data)["items"])
    return Timed(name, walls, nbytes, cpus, items)


def time_python_deserialized(server: ServerProcess, name: str, call: Callable[[], Any]) -> Timed:
    cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
    result = call()
    wall = time.perf_counter() - t0
    return Timed(name, [wall], 0, [cpu_seconds(server.pid) - cpu0], len(result.items))


# ---------------------------------------------------------------------------------------
# kubectl


def time_kubectl(
    server: ServerProcess,
    kubectl: str,
    args: list[str],
    env: dict[str, str],
    out_dir: Path,
    repeats: int,
) -> Timed:
    walls, scpu, ccpu = [], [], []
    nbytes = 0
    out_path = out_dir / "kubectl.out"
    for _ in range(repeats):
        with open(out_path, "wb") as out, tempfile.TemporaryFile() as err:
            c0, s0, t0 = children_cpu(), cpu_seconds(server.pid), time.perf_counter()
            rc = subprocess.call([kubectl, *args], stdout=out, stderr=err, env=env)
            walls.append(time.perf_counter() - t0)
            scpu.append(cpu_seconds(server.pid) - s0)
            ccpu.append(children_cpu() - c0)
            if rc != 0:
                err.seek(0)
                raise RuntimeError(f"kubectl {shlex.join(args)}: rc={rc}: {err.read()[-500:]!r}")
        nbytes = out_path.stat().st_size
    out_path.unlink()
    return Timed("kubectl " + shlex.join(args), walls, nbytes, scpu, None, ccpu)


# ---------------------------------------------------------------------------------------
# Paginated list


def paginated_list(server: ServerProcess, limit: int) -> dict[str, Any]:
    """All pods with limit/continue on one keep-alive connection; the continue token is
    read from the list's metadata (which this server writes before the items)."""
    target = server.target
    conn = target.connect()
    token_re = re.compile(rb'"continue":"([^"]*)"')
    page_walls: list[float] = []
    total_bytes = 0
    token = ""
    cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
    try:
        while True:
            path = f"/api/v1/pods?limit={limit}"
            if token:
                path += f"&continue={token}"
            p0 = time.perf_counter()
            status, data = request(conn, "GET", path, target.headers())
            page_walls.append(time.perf_counter() - p0)
            if status != 200:
                raise RuntimeError(f"GET {path}: HTTP {status} {data[:300]!r}")
            total_bytes += len(data)
            head = data[: data.find(b'"items":[')]
            match = token_re.search(head)
            token = match.group(1).decode() if match else ""
            if not token:
                break
    finally:
        conn.close()
    return {
        "pages": len(page_walls),
        "wall": time.perf_counter() - t0,
        "server_cpu": cpu_seconds(server.pid) - cpu0,
        "bytes": total_bytes,
        "page_p50": pct(page_walls, 50),
        "page_max": max(page_walls),
        "first": page_walls[0],
        "last": page_walls[-1],
    }


# ---------------------------------------------------------------------------------------
# Watch fan-out: the watchers run in their own process (spawned), the writer here


def watch_process(
    target: Target,
    rv: str,
    watchers: int,
    expected: int,
    ready: Any,
    results: Any,
    timeout_s: float,
) -> None:
    """Open `watchers` watches on all pods from `rv`; each records, per event carrying
    WATCH_LABEL, (seq, receipt time on CLOCK_MONOTONIC); puts one list per watcher."""

    def one(w: int) -> None:
        seen: list[tuple[int, float]] = []
        other = 0
        error = ""
        try:
            conn = target.connect(timeout=timeout_s)
            path = f"/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds={int(timeout_s)}"
            conn.request("GET", path, headers=target.headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch: HTTP {resp.status} {resp.read()[:300]!r}")
            ready.release()
            while len(seen) < expected:
                line = resp.readline()
                if not line:
                    break
                t = time.monotonic()
                event = json.loads(line)
                labels = event["object"].get("metadata", {}).get("labels") or {}
                seq = labels.get(WATCH_LABEL)
                if event.get("type") == "MODIFIED" and seq is not None:
                    seen.append((int(seq), t))
                else:
                    other += 1
            conn.close()
        except Exception as exc:
            error = repr(exc)
            ready.release()
        results.put((w, seen, other, error))

    threads = [threading.Thread(target=one, args=(w,), daemon=True) for w in range(watchers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)


def sequential_patches(
    target: Target,
    conn: http.client.HTTPSConnection,
    pods: Sequence[tuple[str, str]],
    count: int,
    label: str,
) -> tuple[list[float], list[float], int]:
    """`count` PATCHes, one at a time, each setting `label` to its sequence number on a
    different pod; returns send and acknowledgement times (CLOCK_MONOTONIC) and errors."""
    sent: list[float] = []
    acked: list[float] = []
    errors = 0
    for seq in range(count):
        ns, name = pods[(seq * 7919) % len(pods)]
        body = json.dumps({"metadata": {"labels": {label: str(seq)}}}).encode()
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        t_send = time.monotonic()
        status, _ = request(conn, "PATCH", path, target.headers(PATCH_CT), body)
        acked.append(time.monotonic())
        sent.append(t_send)
        errors += status != 200
    return sent, acked, errors


def watch_fanout(
    server: ServerProcess,
    pods: Sequence[tuple[str, str]],
    watchers: int,
    updates: int,
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    target = server.target
    conn = target.connect()
    # The same writer with nobody watching, for comparison.
    c0 = cpu_seconds(server.pid)
    b_sent, b_acked, _ = sequential_patches(target, conn, pods, updates, "krea.ai/bench-alone-seq")
    alone_cpu = cpu_seconds(server.pid) - c0
    alone_lat = [(a - s) * 1000 for s, a in zip(b_sent, b_acked, strict=True)]
    _, data = request(conn, "GET", "/api/v1/pods?limit=1", target.headers())
    rv = json.loads(data)["metadata"]["resourceVersion"]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    results = ctx.Queue()
    proc = ctx.Process(
        target=watch_process,
        args=(target, rv, watchers, updates, ready, results, timeout_s),
        daemon=True,
    )
    proc.start()
    for _ in range(watchers):
        if not ready.acquire(timeout=60):
            raise RuntimeError("watchers did not connect within 60 s")
    time.sleep(0.5)  # let every server-side watch reach its first wait
    cpu0 = cpu_seconds(server.pid)
    sent, acked, write_errors = sequential_patches(target, conn, pods, updates, WATCH_LABEL)
    conn.close()
    per_watcher = []
    for _ in range(watchers):
        try:
            per_watcher.append(results.get(timeout=timeout_s + 10))
        except queue.Empty:
            break
    server_cpu = cpu_seconds(server.pid) - cpu0
    proc.join(timeout=10)
    if proc.is_alive():
        proc.terminate()
    from_ack: list[float] = []
    from_send: list[float] = []
    complete = 0
    last_receipt = 0.0
    errors = [e for _, _, _, e in per_watcher if e]
    for _, seen, _, _ in per_watcher:
        seqs = {s for s, _ in seen}
        complete += len(seqs) == updates
        for seq, t in seen:
            from_ack.append((t - acked[seq]) * 1000)
            from_send.append((t - sent[seq]) * 1000)
            last_receipt = max(last_receipt, t)
    write_lat = [(a - s) * 1000 for s, a in zip(sent, acked, strict=True)]
    return {
        "watchers": watchers,
        "connected": len(per_watcher),
        "complete": complete,
        "updates": updates,
        "events": len(from_ack),
        "write_wall": acked[-1] - sent[0],
        "write_p50": pct(write_lat, 50),
        "write_p99": pct(write_lat, 99),
        "write_errors": write_errors,
        "drain_after_last_ack": (last_receipt - acked[-1]) * 1000 if from_ack else float("nan"),
        "ack_p50": pct(from_ack, 50),
        "ack_p99": pct(from_ack, 99),
        "ack_max": max(from_ack) if from_ack else float("nan"),
        "send_p50": pct(from_send, 50),
        "send_p99": pct(from_send, 99),
        "server_cpu": server_cpu,
        "errors": errors,
        "alone_wall": b_acked[-1] - b_sent[0],
        "alone_p50": pct(alone_lat, 50),
        "alone_p99": pct(alone_lat, 99),
        "alone_cpu": alone_cpu,
    }


# ---------------------------------------------------------------------------------------


def machine_rows(kubectl: str) -> list[list[str]]:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    os_name = platform.platform()
    with contextlib.suppress(OSError), open("/etc/os-release") as f:
        for line in f:
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    try:
        kv = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True)
        kubectl_version = kv.stdout.splitlines()[0].split(": ", 1)[-1]
    except (OSError, IndexError):
        kubectl_version = "?"
    import kubernetes

    return [
        ["CPUs", f"{os.cpu_count()} ({cpu})"],
        ["OS", os_name],
        ["Python", platform.python_version()],
        ["kubernetes (Python client)", kubernetes.__version__],
        ["kubectl", kubectl_version],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4096, help="nodes to create")
    parser.add_argument("--pods-per-node", type=int, default=8, help="pods per node")
    parser.add_argument("--watchers", type=int, default=20, help="concurrent pod watchers")
    parser.add_argument(
        "--updates", type=int, default=1000, help="pod PATCHes made while the watchers watch"
    )
    parser.add_argument(
        "--write-updates",
        type=int,
        default=4096,
        help="concurrent PATCHes of each kind (labels, status) for the writes table",
    )
    parser.add_argument("--concurrency", type=int, default=8, help="client threads for writes")
    parser.add_argument("--repeats", type=int, default=5, help="timed Python-client LISTs")
    parser.add_argument("--kubectl-repeats", type=int, default=3, help="timed kubectl runs")
    parser.add_argument("--page-size", type=int, default=500, help="limit for the paginated list")
    parser.add_argument("--kubectl", default=shutil.which("kubectl") or "/usr/bin/kubectl")
    parser.add_argument(
        "--skip-deserialized",
        action="store_true",
        help="skip the (slow) deserialized Python-client LISTs",
    )
    args = parser.parse_args(argv)
    if min(args.nodes, args.pods_per_node, args.watchers, args.updates) < 1:
        parser.error("--nodes, --pods-per-node, --watchers and --updates must be at least 1")
    if args.concurrency < 1 or args.repeats < 1 or args.kubectl_repeats < 1:
        parser.error("--concurrency, --repeats and --kubectl-repeats must be at least 1")
    cli = ROOT / ".venv" / "bin" / "krea-ops"
    cli_path = str(cli) if cli.exists() else shutil.which("krea-ops")
    if cli_path is None:
        print("no krea-ops executable (.venv/bin/krea-ops or on PATH)", file=sys.stderr)
        return 2
    have_kubectl = Path(args.kubectl).exists()

    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    command = "python benchmarks/bench_apiserver.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    print(f"# Simulated API server benchmark\n\n    {command.strip()}\n")
    print(table(["", ""], machine_rows(args.kubectl)) + "\n")
    n_pods = args.nodes * args.pods_per_node
    started = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="bench-apiserver-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "home").mkdir()
        t0 = time.perf_counter()
        server = ServerProcess(cli_path, tmp / "state", tmp / "kubeconfig", tmp / "ca.pem")
        startup = time.perf_counter() - t0
        target = server.target
        try:
            rss_empty = rss_mib(server.pid)
            print(
                f"Server: {server.url} (pid {server.pid}), started in {startup:.1f} s, "
                f"RSS {rss_empty:.0f} MiB empty.\n",
                flush=True,
            )

            # -- population --------------------------------------------------------
            conn = target.connect()
            for ns in NAMESPACES:
                body = json.dumps(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                )
                status, data = request(
                    conn,
                    "POST",
                    "/api/v1/namespaces",
                    target.headers("application/json"),
                    body.encode(),
                )
                if status not in (200, 201, 409):
                    raise RuntimeError(f"create namespace {ns}: HTTP {status} {data[:300]!r}")
            conn.close()
            writes = []
            node_items = list(range(args.nodes))
            writes.append(
                run_writes(
                    f"create nodes (POST, {args.concurrency} clients)",
                    server,
                    node_items,
                    create_request("node", args.pods_per_node),
                    args.concurrency,
                )
            )
            print(f"  created {args.nodes} nodes in {writes[-1].wall_s:.1f} s", flush=True)
            pod_items = [(n, r) for n in range(args.nodes) for r in range(args.pods_per_node)]
            writes.append(
                run_writes(
                    f"create pods (POST, {args.concurrency} clients)",
                    server,
                    pod_items,
                    create_request("pod", args.pods_per_node),
                    args.concurrency,
                )
            )
            print(f"  created {n_pods} pods in {writes[-1].wall_s:.1f} s", flush=True)
            time.sleep(2)  # let the controller manager drain its queue
            rss_populated = rss_mib(server.pid)
            db = tmp / "state" / "objects.db"
            db_size = db.stat().st_size
            wal = Path(str(db) + "-wal")
            wal_size = wal.stat().st_size if wal.exists() else 0

            # idle CPU of the populated server (the controller manager's pod sweep)
            time.sleep(1)
            c0 = cpu_seconds(server.pid)
            time.sleep(5)
            idle_cpu = (cpu_seconds(server.pid) - c0) / 5

            # -- updates -----------------------------------------------------------
            refs = [pod_ref(n, r, args.pods_per_node) for n, r in pod_items]
            k = min(args.write_updates, len(refs))
            step = max(len(refs) // k, 1)
            targets = [refs[(i * step) % len(refs)] for i in range(k)]

            def label_patch(item: tuple[int, tuple[str, str]]) -> tuple[str, str, bytes, str]:
                seq, (ns, name) = item
                body = {"metadata": {"labels": {"krea.ai/bench-seq": str(seq)}}}
                return (
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    json.dumps(body).encode(),
                    PATCH_CT,
                )

            def status_patch(item: tuple[int, tuple[str, str]]) -> tuple[str, str, bytes, str]:
                seq, (ns, name) = item
                stamp = f"2026-01-02T{seq // 3600 % 24:02d}:{seq // 60 % 60:02d}:{seq % 60:02d}Z"
                body = {
                    "status": {
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "lastProbeTime": None,
                                "lastTransitionTime": stamp,
                            }
                        ]
                    }
                }
                return (
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/pods/{name}/status",
                    json.dumps(body).encode(),
                    PATCH_CT,
                )

            writes.append(
                run_writes(
                    f"patch pod labels (strategic merge, {args.concurrency} clients)",
                    server,
                    list(enumerate(targets)),
                    label_patch,
                    args.concurrency,
                    ok=(200,),
                )
            )
            writes.append(
                run_writes(
                    f"patch pod status (strategic merge, {args.concurrency} clients)",
                    server,
                    list(enumerate(targets)),
                    status_patch,
                    args.concurrency,
                    ok=(200,),
                )
            )
            print("  patches done", flush=True)

            # -- LIST through the official client ----------------------------------
            api_client = k8s_config.new_client_from_config(config_file=target.kubeconfig)
            core = k8s_client.CoreV1Api(api_client)
            lists = [
                time_python_list(
                    server,
                    "GET /api/v1/nodes",
                    lambda: core.list_node(_preload_content=False),
                    args.repeats,
                ),
                time_python_list(
                    server,
                    "GET /api/v1/pods",
                    lambda: core.list_pod_for_all_namespaces(_preload_content=False),
                    args.repeats,
                ),
            ]
            print("  Python-client lists done", flush=True)
            deserialized: list[Timed] = []
            if not args.skip_deserialized:
                deserialized.append(
                    time_python_deserialized(server, "list_node() -> V1NodeList", core.list_node)
                )
                deserialized.append(
                    time_python_deserialized(
                        server,
                        "list_pod_for_all_namespaces() -> V1PodList",
                        core.list_pod_for_all_namespaces,
                    )
                )
                print("  deserialized lists done", flush=True)
            api_client.close()

            # -- kubectl -----------------------------------------------------------
            kubectl_rows: list[Timed] = []
            if have_kubectl:
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": str(tmp / "home"),
                    "KUBECONFIG": target.kubeconfig,
                }
                # fill kubectl's discovery cache first (HOME is new)
                subprocess.run(
                    [args.kubectl, "api-resources"], env=env, capture_output=True, check=True
                )
                for kargs in (
                    ["get", "nodes", "-o", "json"],
                    ["get", "nodes", "-o", "json", "--chunk-size=0"],
                    ["get", "pods", "-A", "-o", "json"],
                    ["get", "pods", "-A", "-o", "json", "--chunk-size=0"],
                    ["get", "nodes"],
                    ["get", "pods", "-A"],
                ):
                    kubectl_rows.append(
                        time_kubectl(server, args.kubectl, kargs, env, tmp, args.kubectl_repeats)
                    )
                    print(f"  {kubectl_rows[-1].name} done", flush=True)

            # -- paginated ---------------------------------------------------------
            paged = paginated_list(server, args.page_size)
            print("  paginated list done", flush=True)

            # -- watch fan-out -----------------------------------------------------
            fan = watch_fanout(server, refs, args.watchers, args.updates)
            print("  watch fan-out done\n", flush=True)
            rss_end = rss_mib(server.pid)
        finally:
            server.stop()

    total = time.perf_counter() - started

    # -- report ----------------------------------------------------------------------
    print(f"## Writes ({args.nodes} nodes, {n_pods} pods)\n")
    print(table(WRITE_HEADERS, [w.row() for w in writes]))
    for w in writes:
        if w.errors:
            print(f"\n{w.name}: {w.errors} errors, first: {w.first_error}")
    print()

    print("## LIST through the official Python client (`_preload_content=False`)\n")
    rows = [
        [
            t.name,
            t.items,
            len(t.walls),
            f"{statistics.median(t.walls):.3f}",
            f"{max(t.walls):.3f}",
            mib(t.nbytes),
            f"{statistics.median(t.server_cpu):.2f}",
        ]
        for t in lists
    ]
    headers = ["request", "items", "runs", "median s", "max s", "MiB", "server CPU s (median)"]
    print(table(headers, rows) + "\n")
    if deserialized:
        print("Deserialized into the client's models (one run each):\n")
        rows = [
            [t.name, t.items, f"{t.walls[0]:.2f}", f"{t.server_cpu[0]:.2f}"] for t in deserialized
        ]
        print(table(["call", "items", "wall s", "server CPU s"], rows) + "\n")

    if kubectl_rows:
        print(f"## kubectl ({args.kubectl_repeats} runs each, output to a file)\n")
        rows = [
            [
                f"`{t.name}`",
                f"{statistics.median(t.walls):.2f}",
                f"{max(t.walls):.2f}",
                f"{statistics.median(t.client_cpu):.2f}",
                f"{statistics.median(t.server_cpu):.2f}",
                f"{net_of_idle(t, idle_cpu):.2f}",
                mib(t.nbytes),
            ]
            for t in kubectl_rows
        ]
        headers = [
            "command",
            "median s",
            "max s",
            "kubectl CPU s",
            "server CPU s",
            "server CPU s less idle",
            "output MiB",
        ]
        print(table(headers, rows) + "\n")
        print(
            "kubectl CPU: user+sys of the kubectl process. Server CPU: the server process "
            "over the run; 'less idle' subtracts the populated server's idle CPU rate "
            f"({idle_cpu * 1000:.0f} ms/s) times the wall time.\n"
        )

    print(f"## Paginated list of all pods (limit={args.page_size})\n")
    print(
        table(
            [
                "pages",
                "total s",
                "page p50 ms",
                "page max ms",
                "first page ms",
                "last page ms",
                "MiB",
                "server CPU s",
            ],
            [
                [
                    paged["pages"],
                    f"{paged['wall']:.2f}",
                    f"{paged['page_p50'] * 1000:.1f}",
                    f"{paged['page_max'] * 1000:.1f}",
                    f"{paged['first'] * 1000:.1f}",
                    f"{paged['last'] * 1000:.1f}",
                    mib(paged["bytes"]),
                    f"{paged['server_cpu']:.2f}",
                ]
            ],
            right_from=0,
        )
        + "\n"
    )

    print(f"## Watch fan-out ({fan['watchers']} watchers on all pods, {fan['updates']} PATCHes)\n")
    print(
        table(
            ["", "value"],
            [
                [
                    "same writer, nobody watching: PATCHes/s, p50 / p99 ms, server CPU ms/write",
                    f"{fan['updates'] / fan['alone_wall']:.0f}, "
                    f"{fan['alone_p50']:.2f} / {fan['alone_p99']:.2f}, "
                    f"{fan['alone_cpu'] / fan['updates'] * 1000:.2f}",
                ],
                ["watchers connected / saw every event", f"{fan['connected']} / {fan['complete']}"],
                ["events received (all watchers)", fan["events"]],
                ["writer: wall s for all PATCHes", f"{fan['write_wall']:.2f}"],
                ["writer: PATCHes/s", f"{fan['updates'] / fan['write_wall']:.0f}"],
                ["writer: PATCH p50 / p99 ms", f"{fan['write_p50']:.2f} / {fan['write_p99']:.2f}"],
                [
                    "last ack -> every watcher has every event, ms",
                    f"{fan['drain_after_last_ack']:.1f}",
                ],
                [
                    "delivery after ack p50 / p99 / max ms",
                    f"{fan['ack_p50']:.2f} / {fan['ack_p99']:.2f} / {fan['ack_max']:.2f}",
                ],
                [
                    "delivery after send p50 / p99 ms",
                    f"{fan['send_p50']:.2f} / {fan['send_p99']:.2f}",
                ],
                [
                    "server CPU ms/write (write + fan-out)",
                    f"{fan['server_cpu'] / fan['updates'] * 1000:.2f}",
                ],
            ],
        )
        + "\n"
    )
    if fan["errors"] or fan["write_errors"]:
        print(f"watch errors: {fan['errors'][:3]}; write errors: {fan['write_errors']}\n")

    print("## Server process\n")
    print(
        table(
            ["", "value"],
            [
                ["RSS empty (bundled CRDs loaded), MiB", f"{rss_empty:.0f}"],
                [f"RSS after {args.nodes} nodes + {n_pods} pods, MiB", f"{rss_populated:.0f}"],
                ["RSS at the end, MiB", f"{rss_end:.0f}"],
                ["objects.db, MiB", mib(db_size)],
                ["objects.db-wal, MiB", mib(wal_size)],
                ["idle CPU when populated, ms/s", f"{idle_cpu * 1000:.0f}"],
            ],
        )
        + "\n"
    )
    if server.stderr_tail:
        errs = [ln for ln in server.stderr_tail if ln.strip() and "simulator stopped" not in ln]
        if errs:
            print("Server stderr (last lines):\n")
            print("\n".join("    " + ln for ln in errs[-10:]) + "\n")
    print(f"Total benchmark time: {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
