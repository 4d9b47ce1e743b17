"""Deterministic fleet snapshots: the same bytes for the same seed, size and clock.

The live simulator is the right thing to test behaviour against, but its numbers move
with thread timing. SVG snapshot tests and the dashboard benchmark need a fleet that is
exactly reproducible, so ``synthetic_fleet`` builds one from a seed through the same
core path the live data takes (``FleetTelemetry`` -> ``health.fleet_views``), with a few
planted problems (a hot GPU, a lost GPU, an exporter down, an IB flap, an input-bound
node whose GPUs are busy but idle in their tensor cores). ``FixedConsole`` serves it to
the dashboard in place of ``krea_ops.console.Console``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from krea_ops.console import EVERYTHING, ConsoleInfo, FleetScope, NodeDetail, QueueReading
from krea_ops.errors import BadInput, Unavailable
from krea_ops.fleet import FleetSnapshot
from krea_ops.health import HealthPolicy, fleet_views
from krea_ops.history import GpuHistory
from krea_ops.model import (
    FleetTelemetry,
    GpuSample,
    IbPortSample,
    NodeInfo,
    NodeTelemetry,
    NvLinkSample,
    PodInfo,
)

if TYPE_CHECKING:
    from krea_ops.burst.status import BurstStatus
    from krea_ops.queue import WhyReport
    from krea_ops.training.runs import TrainingRun

EPOCH = 1_795_000_000.0
NVLINK_COUNTERS = (
    "replay",
    "recovery",
    "crc_flit",
    "crc_data",
)  # a fixed "now" (2026-11-18) for reproducible ages


def node_name(i: int) -> str:
    return f"gpu-node-{i:03d}" if i < 1000 else f"gpu-node-{i:04d}"


def synthetic_fleet(
    nodes: int = 16, *, gpus: int = 8, hcas: int = 8, seed: int = 7, now: float = EPOCH
) -> FleetSnapshot:
    rng = random.Random(seed)
    infos: list[NodeInfo] = []
    tel: dict[str, NodeTelemetry] = {}
    for i in range(nodes):
        name = node_name(i)
        infos.append(
            NodeInfo(
                name=name,
                labels={
                    "krea.ai/pool": "h200",
                    "krea.ai/rack": f"rack-{i // 8:02d}",
                    "nvidia.com/gpu.product": "NVIDIA-H200",
                },
                ready=True,
                gpu_capacity=gpus,
                gpu_allocatable=gpus,
                unschedulable=(i == 5),
                created_at=now - 86400,
            )
        )
        if i == 3:  # planted: exporter down
            tel[name] = NodeTelemetry(node=name, exporter_up=False, error="connection refused")
            continue
        busy = rng.random() < 0.8 or i == 6
        input_bound = i == 6
        samples = []
        for g in range(gpus):
            t = 38.0 + (30.0 if busy else 0.0) + rng.uniform(-4, 5)
            if i == 2 and g == 5:  # planted: hot, sustained
                t = 84.0
            tensor = (0.04 if input_bound else rng.uniform(0.35, 0.7)) if busy else 0.0
            up = not (i == 9 and g == 1)  # planted: lost GPU
            samples.append(
                GpuSample(
                    node=name,
                    index=g,
                    uuid=f"GPU-{seed:02d}{i:04d}{g:02d}-0000-0000-0000-000000000000",
                    model="NVIDIA H200",
                    up=up,
                    down_reason=None if up else "gpu_is_lost",
                    temperature_c=round(t, 1) if up else None,
                    temperature_min_window_c=round(t - 1.5, 1) if up else None,
                    slowdown_margin_c=round(89.0 - t, 1) if up else None,
                    power_w=round((610 if busy else 95) + rng.uniform(-20, 20), 1) if up else None,
                    power_limit_w=700.0 if up else None,
                    util_ratio=(1.0 if busy else 0.0) if up else None,
                    tensor_active_ratio=round(tensor, 3) if up else None,
                    sm_active_ratio=round(min(1.0, tensor * 1.4 + 0.1), 3) if up and busy else None,
                    memory_used_bytes=(120e9 if busy else 0.6e9) if up else None,
                    memory_total_bytes=143771e6 if up else None,
                    clock_events=frozenset({"sw_thermal"} if t >= 84 else ()) if up else None,
                    xid_increase={79: 1.0} if not up else {},
                    nvlink_error_increase=(
                        {**dict.fromkeys(NVLINK_COUNTERS, 0.0), "crc_flit": 60.0}
                        if i == 7 and g == 0
                        else dict.fromkeys(NVLINK_COUNTERS, 0.0)
                    ),
                    sampled_at=now - 2.0,
                    nvlinks_total=18,
                    nvlinks_up=18,
                )
            )
        ports = []
        clean = {"symbol_error": 0.0, "link_downed": 0.0}
        flapped = {"symbol_error": 12.0, "link_downed": 1.0}
        flap_rate = {"symbol_error": 0.04, "link_downed": 0.003}
        for h in range(hcas):
            flap = i == 4 and h == 2  # planted: IB link flapped
            ports.append(
                IbPortSample(
                    node=name,
                    device=f"mlx5_{h}",
                    port="1",
                    state="ACTIVE",
                    phys_state="LinkUp",
                    rate_bytes_per_s=5e10,
                    rx_bytes_per_s=round(rng.uniform(5e9, 2e10)) if busy else 0.0,
                    tx_bytes_per_s=round(rng.uniform(5e9, 2e10)) if busy else 0.0,
                    xmit_wait_per_s=round(rng.uniform(1e5, 2e7)) if busy else 0.0,
                    errors_total=flapped if flap else clean,
                    error_rate_per_s=flap_rate if flap else clean,
                    error_increase=flapped if flap else clean,
                )
            )
        links = (
            (NvLinkSample(node=name, gpu=0, link=7, up=True, error_rate_per_s={"crc_flit": 0.2}),)
            if i == 7
            else ()
        )
        tel[name] = NodeTelemetry(
            node=name,
            exporter_up=True,
            last_sample_at=now - 2.0,
            age_s=2.0,
            gpus=tuple(samples),
            nvlinks=links,
            ib_ports=tuple(ports),
        )
    fleet = FleetTelemetry(
        source="prometheus http://prometheus.example:9090",
        collected_at=now,
        window_s=300.0,
        nodes=tel,
        dialects=frozenset({"krea"}),
    )
    policy = HealthPolicy()
    return FleetSnapshot(
        views=tuple(fleet_views(infos, fleet, policy)),
        telemetry=fleet,
        telemetry_error=None,
        source=fleet.source,
        collected_at=now,
        policy=policy,
    )


def synthetic_pods(node: str, now: float = EPOCH) -> list[PodInfo]:
    return [
        PodInfo(
            namespace="kube-system",
            name=f"krea-exporter-{node[-3:]}",
            node=node,
            phase="Running",
            labels={"krea.ai/workload": "system"},
            owner="DaemonSet/krea-exporter",
            started_at=now - 86000,
        ),
        PodInfo(
            namespace="training",
            name="dit-xl-pretrain-trainer-0-2-abcde",
            node=node,
            phase="Running",
            gpus=8,
            labels={"krea.ai/workload": "training"},
            owner="Job/dit-xl-pretrain-trainer-0",
            started_at=now - 3600,
        ),
    ]


@dataclass
class FixedConsole:
    """The dashboard's console over fixed data (snapshot tests, the render benchmark):
    implements ``krea_ops.console.ConsoleReads``. ``calls`` counts the reads by kind;
    a kind in ``fail`` raises the way an unreachable source does."""

    fleet_snapshot: FleetSnapshot
    queue_data: QueueReading | None = None
    burst_data: BurstStatus | None = None
    training_data: tuple[TrainingRun, ...] | None = None
    pods: dict[str, list[PodInfo]] = field(default_factory=dict)
    why_fn: Callable[[str, str | None], WhyReport] | None = None  # e.g. queue.why on a server
    host: str = "https://sim.example:6443"
    fail: set[str] = field(default_factory=set)
    calls: dict[str, int] = field(default_factory=dict)
    scopes: list[FleetScope] = field(default_factory=list)  # every fleet read's scope

    def _call(self, kind: str, data: object = True) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        if data is None:
            raise Unavailable(f"no {kind} data in this fixture")
        if kind in self.fail:
            raise Unavailable(f"{kind} read failed: source is down")

    def info(self) -> ConsoleInfo:
        return ConsoleInfo(self.host, "sim", self.fleet_snapshot.source or "none")

    def fleet(self, scope: FleetScope = EVERYTHING) -> FleetSnapshot:
        self._call("fleet")
        self.scopes.append(scope)
        return self.fleet_snapshot

    def node(self, name: str) -> NodeDetail:
        self._call("node")
        snap = self.fleet_snapshot
        view = snap.view(name)
        if view is None:
            raise BadInput(f"node {name} not found (krea-ops nodes list shows the nodes)")
        pods = self.pods.get(name) or synthetic_pods(name, snap.collected_at)
        return NodeDetail(dataclasses.replace(snap, views=(view,)), view, tuple(pods))

    def queue(self) -> QueueReading:
        self._call("queue", self.queue_data)
        assert self.queue_data is not None
        return self.queue_data

    def why(self, name: str, namespace: str | None = None) -> WhyReport:
        self._call("why", self.why_fn)
        assert self.why_fn is not None
        return self.why_fn(name, namespace)

    def burst(self) -> BurstStatus:
        self._call("burst", self.burst_data)
        assert self.burst_data is not None
        return self.burst_data

    def training(self) -> tuple[TrainingRun, ...]:
        self._call("training")
        return self.training_data or ()

    def history(self, node: str) -> GpuHistory | None:
        view = next((v for v in self.fleet_snapshot.views if v.info.name == node), None)
        if view is None or view.telemetry is None:
            return None
        times = tuple(self.fleet_snapshot.collected_at - 10.0 * (29 - k) for k in range(30))
        temps, tensor = {}, {}
        for g in view.telemetry.gpus:
            base_t = g.temperature_c if g.temperature_c is not None else math.nan
            base_a = g.tensor_active_ratio if g.tensor_active_ratio is not None else math.nan
            temps[g.index] = tuple(base_t - 3 + 3 * math.sin(k / 4 + g.index) for k in range(30))
            tensor[g.index] = tuple(
                max(0.0, base_a * (0.8 + 0.2 * math.cos(k / 3 + g.index))) for k in range(30)
            )
        return GpuHistory(times, temps, tensor)

    def close(self) -> None:
        pass
