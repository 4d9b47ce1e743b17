"""What the controllers' tests share: a simulated API server per test (no world: the
tests make the nodes and pods a controller meets), the controllers' namespace, GPU and
virtual nodes, a telemetry source serving a recorded fleet, and a clock the tests move."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from krea_ops.controllers.base import NAMESPACE
from krea_ops.kube.cluster import Cluster
from krea_ops.model import FleetTelemetry, GpuSample, NodeTelemetry
from tests.conftest import sim_on_control_plane
from tests.kube.conftest import cluster, create, registered, set_status

__all__ = ["cluster", "sim"]

sim = sim_on_control_plane  # an API server per test, on each control plane

T0 = 1_800_000_000.0  # the simulated wall clock's start (Unix seconds)
PROVIDER_TAINT = {"key": "virtual-kubelet.io/provider", "value": "acme", "effect": "NoSchedule"}


class Clock:
    """Simulated time: ``mono`` for Leases, ``wall`` for read/decide; moved by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return T0 + self.t


@pytest.fixture
def ops(cluster: Cluster) -> Cluster:
    """The cluster with the controllers' namespace in it."""
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    return cluster


def gpu_node(cluster: Cluster, name: str, gpus: int = 8, *, ready: bool = True) -> None:
    create(cluster, "/api/v1/nodes", {"metadata": {"name": name}})
    set_status(
        cluster,
        f"/api/v1/nodes/{name}",
        {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    )
    if ready:
        registered(cluster, name)


def virtual_node(cluster: Cluster, name: str, taints: list[dict[str, str]] | None = None) -> None:
    create(
        cluster,
        "/api/v1/nodes",
        {
            "metadata": {"name": name, "labels": {"type": "virtual-kubelet"}},
            "spec": {"taints": taints if taints is not None else [PROVIDER_TAINT]},
        },
    )
    set_status(
        cluster,
        f"/api/v1/nodes/{name}",
        {
            "capacity": {"nvidia.com/gpu": "64"},
            "allocatable": {"nvidia.com/gpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    )
    registered(cluster, name)


def gpu_pod(cluster: Cluster, node: str, name: str, gpus: int) -> None:
    """A Running pod on ``node`` holding ``gpus`` GPUs."""
    path = "/api/v1/namespaces/default/pods"
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}}
    create(
        cluster,
        path,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "img:1", "resources": resources}],
            },
        },
    )
    set_status(cluster, f"{path}/{name}", {"phase": "Running"})


def taints_of(cluster: Cluster, name: str) -> list[tuple[str, str | None, str]]:
    obj = cluster.get("node", f"/api/v1/nodes/{name}")
    return sorted(
        (t["key"], t.get("value"), t["effect"]) for t in (obj.get("spec") or {}).get("taints") or ()
    )


def healthy_telemetry(nodes: Collection[str], at: float, gpus: int = 8) -> FleetTelemetry:
    """Fresh, cool readings of every GPU of ``nodes``, taken at ``at``."""
    tel = {
        n: NodeTelemetry(
            node=n,
            exporter_up=True,
            last_sample_at=at,
            age_s=0.0,
            gpus=tuple(
                GpuSample(
                    node=n,
                    index=i,
                    up=True,
                    temperature_c=40.0,
                    temperature_min_window_c=39.0,
                    slowdown_margin_c=40.0,
                    util_ratio=0.0,
                    tensor_active_ratio=0.0,
                    sm_active_ratio=0.0,
                    sampled_at=at,
                )
                for i in range(gpus)
            ),
        )
        for n in nodes
    }
    return FleetTelemetry(source="recorded", collected_at=at, window_s=300.0, nodes=tel)


class RecordedSource:
    """A telemetry source serving a recorded fleet (the protocol, no Prometheus);
    ``down`` makes it fail as a Prometheus that does not answer does."""

    def __init__(self, telemetry: FleetTelemetry) -> None:
        self.telemetry = telemetry
        self.down = False

    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        from krea_ops.errors import Unavailable

        if self.down:
            raise Unavailable("cannot reach Prometheus at http://prometheus:9090: refused")
        return self.telemetry

    def describe(self) -> str:
        return "recorded fleet"

    def close(self) -> None:
        pass

    def __enter__(self) -> RecordedSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PausableProxy:
    """A TCP proxy to ``target`` on a loopback port; ``pause()`` stops it forwarding
    (connections stay open, bytes wait): an API server partitioned away."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.running = threading.Event()
        self.running.set()
        self.closed = False
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while not self.closed:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.running.wait()
            if self.closed:
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self.closed = True
        self.running.set()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def proxy(sim: Any) -> Iterator[PausableProxy]:
    from urllib.parse import urlsplit

    url = urlsplit(sim.url)
    p = PausableProxy(url.hostname or "127.0.0.1", url.port or 443)
    try:
        yield p
    finally:
        p.close()
