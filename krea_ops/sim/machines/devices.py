"""Devices of the simulated cluster: GPUs, HCAs, their exporters and a Prometheus.

Every GPU node (``gpu-node-000`` ... per ``WorldConfig.nodes``, plus any GPU node that
later appears in the API) has

* a ``FakeNvml`` of ``gpus_per_node`` H200s (``krea_ops.exporters.fakenvml``) driven by
  the model in ``krea_ops.sim.machines.thermal`` (load -> activity, power, clocks, a
  first-order thermal model with per-GPU cooling quality, thermal slowdown);
* a sysfs InfiniBand tree of ``hcas_per_node`` HCAs under
  ``<state>/sysfs/<node>/class/infiniband`` (``krea_ops.sim.machines.fabric``), HCA ``h``
  carrying the traffic of GPU ``h`` (rail-optimised): data counters grow with traffic,
  ``port_xmit_wait`` with the congestion of the node's spine;
* the node exporter, unchanged (``Exporter`` with a ``GpuCollector`` over the FakeNvml and
  an ``InfinibandCollector`` over the tree), served on ``127.0.0.1`` at a free port.

The devices of the configured nodes exist from the moment ``actors(world)`` returns (the
hardware is there before its kubelet registers), so ``sim serve`` can print the exporter
addresses at once. ``world.services["devices"]`` is the ``DeviceService``:
``exporter_urls()``, ``prometheus_url``, ``gpu(node, index)``, ``ib_port(node, hca)``,
``assignment(node)``, ``gang_pace(pods, now)``, ``slow_burners()``, ``close()``.

Published in ConfigMap ``krea-ops-config`` (namespace ``krea-ops``):

``exporters``
  JSON object, node name -> scrape URL, e.g.
  ``{"gpu-node-000": "http://127.0.0.1:40123/metrics", ...}`` (``json.loads`` it).
``prometheusURL``
  ``http://127.0.0.1:PORT`` of the Prometheus the sim runs (only when
  ``WorldConfig.prometheus`` is set, a ``prometheus`` binary is on PATH, and it is ready).
  It scrapes every exporter (file-based service discovery, one target per node with label
  ``node``, ``honor_labels``) every ``extra["scrape_interval_s"]`` wall seconds (default
  15, Prometheus' own default: at 64 nodes a 5 s interval costs ~12 % of a core in
  scrapes), keeps its data under ``<state>/prometheus``, listens on loopback only, and stops
  with the world.

Actors (periods in simulated seconds):

``devices`` every ``max(5, speed)`` s (about once a wall second): one node list and one
  pod list (``status.phase=Running``); GPUs are given to pods in order of start (a pod
  keeps its GPUs), the load of each pod comes from its ``krea.ai/workload`` label
  (``training`` | ``inference``; any other GPU pod counts as inference) and its
  ``nvidia.com/gpu`` limits; then every GPU and HCA port advances by the elapsed time.
  A training job (pods sharing ``krea.ai/training``, ``jobset.sigs.k8s.io/jobset-name``,
  ``job-name`` or ``app``) is one gang: its GPUs all run at the gang's pace
  (``GangPace``, ``gang_pace(pods, now)``), the one the simulated trainers step at
  (``training.py``), so the devices and the steps always agree:

  * input-bound phases (about 12 % of 15-minute windows, decided per job; annotation
    ``sim.krea.ai/input-bound: "true"`` on any pod of the job forces one, ``"false"``
    rules them out): every GPU reads ~100 % busy but ~0.05 tensor activity, and the
    steps run at ``INPUT_BOUND_PACE`` (a tenth, ``thermal.py``);
  * a straggler fault on one of its GPUs (slowdown F): the steps run at 1/F; the slow
    GPU computes all the time at 1/F of its clock, the others wait in NCCL for it
    (tensor activity ~1/F of normal), and every HCA of the gang moves 1/F of its data;
  * a hang fault: pace 0 from the stall on; every GPU spins in NCCL (busy, tensor 0, SM
    ~0.08, idle + ~80 W) and the gang's HCAs fall to ~50 kB/s. The stall ends when any
    pod of the stalled attempt stops running, and the fault is then resolved.
``faults`` every ``max(2, speed / 4)`` s: applies fault ConfigMaps (see ``faults.py``).
``failures`` every ``max(60, speed)`` s: random failures at the published rate.

Slow burners (seeded, unless ``extra["slow_burners"]`` is false): one or two GPUs whose
cooling degrades over hours until they run past 78 °C under load, one HCA port whose
symbol errors climb ever faster, and one lemon node that fails ``LEMON_FACTOR`` times as
often. They are listed in ConfigMap ``sim-hardware`` (namespace ``krea-sim``, key
``slow-burners``) as the ground truth for demos and tests.

Wall-clock knobs in ``WorldConfig.extra`` (tests shorten them): ``devices_period_s``
(simulated seconds between device ticks), ``ib_flush_s`` (IB files are rewritten at most
this often, default 5 wall seconds), ``gpm_interval_s`` (the exporters' GPM sampling,
default 2 wall seconds), ``scrape_interval_s`` and ``slow_burners``.

Cost, measured at 64 nodes x 8 GPUs, speed 60, every GPU busy: the device models, the 64
exporters' background threads and HTTP servers take ~7 % of one core; scrapes by the
sim's Prometheus every 15 s add ~7 % (every 5 s: ~19 %); Prometheus itself ~1-4 %.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krea_ops.exporters.fakenvml import FakeGpu, FakeNvml, fake_h200_node
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.machines.fabric import NDR_BYTES_PER_S, IbPort, IbTree
from krea_ops.sim.machines.faults import (
    FAILED_ANNOTATION,
    FAULT_NAMESPACE,
    MERGE_PATCH,
    Fault,
    ensure_namespace,
    repair_time,
)
from krea_ops.sim.machines.thermal import (
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    IDLE,
    INPUT_BOUND_PACE,
    GpuModel,
    Load,
)

__all__ = ["BusyHold", "DeviceActor", "DeviceService", "GangPace", "NodeDevices", "Stall"]

OPS_NAMESPACE = "krea-ops"
OPS_CONFIGMAP = "krea-ops-config"
HARDWARE_CONFIGMAP = "sim-hardware"
WORKLOAD_LABEL = "krea.ai/workload"
INPUT_BOUND_ANNOTATION = "sim.krea.ai/input-bound"
JOB_LABELS = ("krea.ai/training", "jobset.sigs.k8s.io/jobset-name", "job-name", "app")
GPU_RESOURCE = "nvidia.com/gpu"
_GPU_NODE_RE = re.compile(r"^gpu-node-\d+$")
_XID = {"gpu-hbm": 48, "gpu-sram": 95, "gpu-gsp": 119, "nvlink": 74}
_INPUT_BOUND_WINDOW_S = 900.0
_INPUT_BOUND_SHARE = 0.12
_HOT_DEFAULT_C = 84.0
_FLAP_DEFAULT_S = 180.0
STRAGGLER_DEFAULT_SLOWDOWN = 1.5
STRAGGLER_REASONS = {
    "power-brake": HW_POWER_BRAKE | HW_SLOWDOWN,
    "hw-slowdown": HW_SLOWDOWN,
}
# IB bytes a second a rank of a hung gang still moves (NCCL's proxy thread polling, no
# payload): almost nothing next to the ~21 GB/s of a training step.
_HUNG_IB_BYTES_PER_S = 5e4


@dataclass(frozen=True)
class GangPace:
    """How fast a training gang's steps go now, as its devices decide it.

    ``factor``: 1 normal, ``INPUT_BOUND_PACE`` in an input-bound phase, 1/F while one of
    its GPUs is a straggler with slowdown F (the lower of the two), 0 while the gang is
    hung. ``why``: None, ``input-bound``, ``straggler`` or ``hang``. ``stalled_since``:
    the simulated time its collective stalled (a hang), else None. ``input_bound``: the
    phase decision (its GPUs read low tensor activity together)."""

    factor: float = 1.0
    why: str | None = None
    stalled_since: float | None = None
    input_bound: bool = False


FULL_PACE = GangPace()


@dataclass
class Stall:
    """A ``hang`` fault: the NCCL collective of gang ``pods`` (pod uids, ``job``) stalled
    at simulated time ``since``; ``ended`` once that attempt is over."""

    fault: str
    job: str
    pods: frozenset[str]
    since: float
    ended: bool = False


def _h(*parts: object) -> float:
    """A stable hash of ``parts`` as a float in [0, 1)."""
    key = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64


def _core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the simulator dies, even by SIGKILL (Linux), so a
    killed simulator never leaves its Prometheus running."""
    try:
        import ctypes
        import signal as _signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, _signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class BusyHold:
    """Keeps one GPU's busy time at or above the SM activity any GPM reading can still
    report, so tensor <= SM <= busy holds in every scrape.

    NVML's busy time covers the driver's last sample period (1/6 s), GPM activity the
    pair of samples the exporter took last (seconds apart, older still at a scrape): on
    a real GPU whose load drops in between, one scrape reads more SM activity than busy
    time (the product flags such readings). Here a GPU stays busy for the tail of any
    work its current GPM window still covers, the way a job's kernels end after its math
    does: busy time is raised to the highest SM activity in force since the window's
    start (``FakeNvml.gpm_reported_since``), to the next whole percent above it. Tensor
    activity is at most SM activity at every instant (thermal.py), so it is covered too;
    a rise reaches busy time and GPM together, and a GPM window is never shorter than
    the busy sample period, so a rise cannot read out of order either.
    """

    __slots__ = ("log", "next_sm")

    def __init__(self) -> None:
        # (since, SM activity in force from then): the GPU's rates, oldest first; bounded
        # in case no GPM reading ever moves the window on
        self.log: deque[tuple[float, float]] = deque(maxlen=1024)
        self.next_sm = 0.0

    def apply(self, fields: dict[str, Any], since: float | None) -> None:
        """Raise ``fields``' busy time before they are set; ``since`` is where the GPM
        window the exporter can still report begins (None: no sample yet)."""
        log = self.log
        start = math.inf if since is None else since
        while len(log) > 1 and log[1][0] <= start:  # ended before the window began
            log.popleft()
        self.next_sm = sm = float(fields["sm_active"])
        peak = max(sm, max((v for _, v in log), default=0.0))
        # a whole percent above the peak: GPM's average of a constant rate can come out a
        # rounding error above it (0.9200000000000004), NVML's busy time is whole percent
        floor = min(100.0, math.floor(round(100.0 * peak, 6)) + 1.0) if peak > 0 else 0.0
        if float(fields["util_percent"]) < floor:
            fields["util_percent"] = floor

    def took_force(self, at: float) -> None:
        """The fields are set: their SM activity is in force from ``at``, read after the
        set, so the rate before counts for at least as long as the GPU had it."""
        if self.log and self.log[-1][0] >= at:
            self.log.pop()
        self.log.append((at, self.next_sm))


@dataclass(frozen=True)
class PodLoad:
    key: str
    node: str
    gpus: int
    kind: str
    job: str
    input_bound: bool | None
    start: str


def input_bound_phase(seed: int, job: str, forced: bool | None, now: float) -> bool:
    """Whether training ``job`` is in an input-bound phase at simulated ``now``: forced by
    the pods' annotation, else about ``_INPUT_BOUND_SHARE`` of its 15-minute windows."""
    if forced is not None:
        return forced
    window = math.floor(now / _INPUT_BOUND_WINDOW_S)
    return _h(seed, job, window, "input") < _INPUT_BOUND_SHARE


def parse_pods(items: list[dict[str, Any]], nodes: set[str]) -> dict[str, list[PodLoad]]:
    """Running GPU pods per node, in order of start (then name)."""
    out: dict[str, list[PodLoad]] = {}
    for pod in items:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if node not in nodes:
            continue
        gpus = 0
        for c in spec.get("containers") or []:
            res = c.get("resources") or {}
            lim = (res.get("limits") or {}).get(GPU_RESOURCE)
            if lim is None:
                lim = (res.get("requests") or {}).get(GPU_RESOURCE)
            if lim is not None and str(lim).isdigit():
                gpus += int(lim)
        if gpus <= 0:
            continue
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        ann = meta.get("annotations") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        job = next((labels[k] for k in JOB_LABELS if labels.get(k)), name)
        forced = ann.get(INPUT_BOUND_ANNOTATION)
        status = pod.get("status") or {}
        out.setdefault(node, []).append(
            PodLoad(
                key=meta.get("uid") or f"{ns}/{name}",
                node=node,
                gpus=gpus,
                kind=labels.get(WORKLOAD_LABEL) or "inference",
                job=f"{ns}/{job}",
                input_bound=None if forced is None else forced.lower() == "true",
                start=str(status.get("startTime") or meta.get("creationTimestamp") or ""),
            )
        )
    for pods in out.values():
        pods.sort(key=lambda p: (p.start, p.key))
    return out


class NodeDevices:
    """The GPUs, HCAs and exporter of one node."""

    def __init__(self, service: DeviceService, name: str, gpus: int) -> None:
        world = service.world
        cfg = world.config
        self.name = name
        self.seed = cfg.seed
        self.service = service
        digest = hashlib.blake2b(f"{cfg.seed}:{name}".encode(), digest_size=8).digest()
        self.nvml: FakeNvml = fake_h200_node(
            gpus, seed=int.from_bytes(digest, "big"), clock=world.clock.time
        )
        self.nvml.nvmlInit()
        self.gpus: list[FakeGpu] = self.nvml.gpus
        inlet = 24.0 + 5.0 * _h(cfg.seed, name, "inlet")
        self.models: list[GpuModel] = []
        for i, gpu in enumerate(self.gpus):
            hot = _h(cfg.seed, name, i, "runs-hot") < 0.04
            q = (
                0.82 + 0.06 * _h(cfg.seed, name, i, "q")
                if hot
                else 0.92 + 0.16 * _h(cfg.seed, name, i, "q")
            )
            idle_w = 70.0 + 10.0 * _h(cfg.seed, name, i, "idle")
            model = GpuModel(inlet, q, idle_w, inlet + 4.0)
            model.gpu_max_c = float(gpu.gpu_max_temp_c)
            model.slowdown_c = float(gpu.slowdown_temp_c)
            model.limit_w = float(gpu.power_limit_w)
            self.models.append(model)
            fields = model.step(IDLE, 0.0, world.clock.time(), 0.0)
            fields["memory_used_bytes"] = gpu.memory_reserved_bytes
            gpu.update(**fields)
        self.ib = IbTree(
            world.state_dir / "sysfs" / name,
            name,
            cfg.hcas_per_node,
            cfg.seed,
            keep_fds=service.keep_write_fds,
        )
        self.last_fields: list[dict[str, Any]] = [{} for _ in range(gpus)]
        self.busy_holds = [BusyHold() for _ in range(gpus)]
        self.pending: list[list[float]] = [[0.0, 0.0] for _ in range(cfg.hcas_per_node)]
        self.pending_dt = 0.0
        self.owners: list[str | None] = [None] * gpus
        self.assigned: dict[str, list[int]] = {}
        self.spine = f"spine-{self._index() // 16}"
        self.failed: str | None = None  # the node's sim.krea.ai/failed annotation
        self.in_api = False
        self.host_down = 0
        self.ports_down: dict[int, int] = {}
        self.lost_holds: dict[int, int] = {}
        self.nvlink_faults: dict[str, tuple[int, int]] = {}
        self.bad_port: tuple[int, float] | None = None
        self.exporter: Any = None
        self.endpoint: Any = None
        self.port = 0
        if cfg.exporters:
            self._start_exporter()

    def _index(self) -> int:
        digits = "".join(ch for ch in self.name if ch.isdigit())
        return int(digits) if digits else 0

    # -- exporter -------------------------------------------------------------------

    def _start_exporter(self) -> None:
        from krea_ops.exporters.infiniband import InfinibandCollector
        from krea_ops.exporters.nvml import GpuCollector
        from krea_ops.exporters.server import Exporter, nvml_available_metrics

        svc = self.service
        gpu = GpuCollector(
            self.nvml,
            self.name,
            gpm_interval_s=svc.gpm_interval_s,
            xid_window_s=max(30.0, 600.0 / svc.world.config.speed),
            event_wait_ms=1000,
        )
        gpu.start()
        ib = InfinibandCollector(self.ib.root, self.name, max_open_files=svc.read_fds_per_node)
        self.exporter = Exporter(
            node=self.name, collectors=[gpu, ib], notes=nvml_available_metrics(self.name)
        )
        self._listen()

    def _listen(self) -> None:
        from krea_ops.errors import BadInput
        from krea_ops.exporters.server import HttpEndpoint

        endpoint = None
        if self.port:
            with contextlib.suppress(BadInput):
                endpoint = HttpEndpoint(self.exporter, f"127.0.0.1:{self.port}")
        if endpoint is None:
            endpoint = HttpEndpoint(self.exporter, "127.0.0.1:0")
        self.endpoint = endpoint
        self.port = endpoint.port

    @property
    def url(self) -> str | None:
        """Where its exporter is scraped. A host that is down keeps its address: as a pod
        on a NotReady node stays in Prometheus' discovery (``kubernetes_sd``'s pod and
        endpoints roles list it until the pod is deleted), its target stays and reads
        down ("connection refused"), rather than vanishing from the targets."""
        if self.endpoint is not None:
            return str(self.endpoint.url)
        return f"http://127.0.0.1:{self.port}/metrics" if self.port and self.host_down else None

    def host_failed(self, down: bool) -> None:
        """The host went down (its exporter stops answering) or came back."""
        self.host_down = max(0, self.host_down + (1 if down else -1))
        if self.exporter is None:
            return
        if self.host_down and self.endpoint is not None:
            self.endpoint.stop()
            self.endpoint = None
        elif not self.host_down and self.endpoint is None:
            self._listen()
        self.service.endpoints_changed = True

    # -- faults -----------------------------------------------------------------------

    def port_hold(self, hca: int, down: bool) -> None:
        n = self.ports_down.get(hca, 0) + (1 if down else -1)
        self.ports_down[hca] = max(n, 0)
        port = self.ib.ports[hca]
        with self.ib.lock:
            if down and not port.up:
                return
            if down:
                port.add("link_downed", 1)
                port.add("link_error_recovery", 1)
                port.add("symbol_error", 3 + 10 * _h(self.name, hca, port.value("link_downed")))
                port.flush()
                port.set_link(False)
            elif n <= 0:
                port.set_link(True)

    def gpu_lost(self, index: int, lost: bool) -> None:
        n = self.lost_holds.get(index, 0) + (1 if lost else -1)
        self.lost_holds[index] = max(n, 0)
        self.gpus[index].lost = n > 0

    # -- simulation -----------------------------------------------------------------

    def assign(self, pods: list[PodLoad]) -> None:
        """Give GPUs to pods: a pod keeps its GPUs; new pods take the lowest free ones."""
        current = {p.key for p in pods}
        for key in [k for k in self.assigned if k not in current]:
            for i in self.assigned.pop(key):
                self.owners[i] = None
        for p in pods:
            if p.key in self.assigned:
                continue
            free = [
                i for i, owner in enumerate(self.owners) if owner is None and not self.gpus[i].lost
            ]
            take = free[: p.gpus]
            for i in take:
                self.owners[i] = p.key
            self.assigned[p.key] = take

    def load_of(self, pod: PodLoad, now: float, pace: GangPace | None = None) -> Load:
        """The load of ``pod``; a training pod's at its gang's ``pace`` (default: the
        pod's own input-bound decision, no straggler, no hang)."""
        seed = self.seed
        if pod.kind == "training":
            if pace is None:
                bound = input_bound_phase(seed, pod.job, pod.input_bound, now)
                pace = GangPace(INPUT_BOUND_PACE, "input-bound", None, True) if bound else None
            return Load(
                kind="training",
                input_bound=pace is not None and pace.input_bound,
                pace=pace.factor if pace is not None else 1.0,
                intensity=0.94 + 0.12 * _h(seed, pod.job, "intensity"),
                tensor=0.5 + 0.2 * _h(seed, pod.job, "tensor"),
                memory_gib=118.0 + 16.0 * _h(seed, pod.job, "memory"),
            )
        minute = math.floor(now / 60.0)
        busy = 0.3 + 0.45 * _h(seed, pod.job, minute, "busy")
        if pod.kind != "inference":
            busy *= 0.3
        return Load(
            kind="inference",
            busy=busy,
            intensity=0.9 + 0.2 * _h(seed, pod.job, "intensity"),
            memory_gib=60.0 + 40.0 * _h(seed, pod.job, "memory"),
        )

    def advance(
        self,
        now: float,
        dt: float,
        pods: list[PodLoad],
        noise: Callable[[], float],
        congestion: float,
        flush: bool,
        paces: dict[str, GangPace] | None = None,
    ) -> None:
        """Advance every GPU and HCA port by ``dt``; write the IB files if ``flush``.
        ``paces``: training job -> its gang's pace (``DeviceService.gang_pace``)."""
        self.assign(pods)
        paces = paces or {}
        loads: dict[str, Load] = {p.key: self.load_of(p, now, paces.get(p.job)) for p in pods}
        gpu_loads: list[Load] = []
        for i, gpu in enumerate(self.gpus):
            owner = self.owners[i]
            load = loads.get(owner, IDLE) if owner is not None else IDLE
            if self.host_down or gpu.lost:
                load = IDLE
            gpu_loads.append(load)
            fields = self.models[i].step(load, dt, now, noise())
            if load is IDLE:
                fields["memory_used_bytes"] = gpu.memory_reserved_bytes
            if gpu.lost:
                continue
            hold = self.busy_holds[i]
            hold.apply(fields, self.nvml.gpm_reported_since(i))
            # Only what changed: FakeGpu.update integrates GPM rates on every set.
            last = self.last_fields[i]
            changed = {k: v for k, v in fields.items() if last.get(k) != v}
            if changed:
                gpu.update(**changed)
                last.update(changed)
                hold.took_force(gpu.clock())
        self._nvlink_faults(dt, noise)
        self._fabric(dt, gpu_loads, noise, congestion)
        if flush:
            self.flush_fabric(now, noise)

    def _nvlink_faults(self, dt: float, noise: Callable[[], float]) -> None:
        for g, link in self.nvlink_faults.values():
            nl = self.gpus[g].nvlinks[link]
            r = 0.5 + 0.5 * noise()
            nl.replay += int(0.5 * dt * (0.5 + r))
            nl.recovery += int(0.02 * dt * (0.5 + r) + r)
            nl.crc_flit += int(0.3 * dt * (0.5 + r))
            nl.crc_data += int(0.1 * dt * (0.5 + r))

    def _fabric(
        self, dt: float, gpu_loads: list[Load], noise: Callable[[], float], congestion: float
    ) -> None:
        """Accumulate each port's traffic and congestion of this tick (written at flush)."""
        n_gpus = len(self.gpus)
        self.pending_dt += dt
        if self.host_down or not n_gpus:
            return
        pending = self.pending
        # Traffic counters advance on wall time, so that rates (per wall second, as
        # Prometheus computes them) read as real link speeds at any --speed; error events
        # (symbol errors, flaps) stay on simulated time, like the failures.
        wall = dt / max(self.service.world.config.speed, 1e-9)
        for h, port in enumerate(self.ib.ports):
            if not port.up:
                continue
            load = gpu_loads[h % n_gpus]
            if load.kind == "training":
                # the whole gang moves data at its pace: 1/F behind a straggler, ~0 hung
                pace = 1.0 if load.input_bound else load.pace
                rate = (1.2e9 if load.input_bound else 21e9) * load.intensity * pace
                rate *= self.models[h % n_gpus].throttle
                rate = max(rate, _HUNG_IB_BYTES_PER_S)
            elif load.kind == "inference":
                rate = 0.25e9 * load.busy
            else:
                rate = 2e3
            data = rate * (1.0 + 0.05 * noise()) * wall
            acc = pending[h]
            acc[0] += data
            acc[1] += congestion * (rate / NDR_BYTES_PER_S) * 4e6 * wall

    def flush_fabric(self, now: float, noise: Callable[[], float]) -> None:
        """Turn the accumulated traffic into counters and write the changed files."""
        dt, self.pending_dt = self.pending_dt, 0.0
        with self.ib.lock:
            for h, port in enumerate(self.ib.ports):
                data, wait = self.pending[h]
                self.pending[h] = [0.0, 0.0]
                if self.bad_port is not None and self.bad_port[0] == h:
                    self._bad_port(port, now, dt)
                if data > 0:
                    port.add("port_xmit_data", data / 4)
                    port.add("port_rcv_data", data * (1.0 + 0.01 * noise()) / 4)
                    packets = data / 4096.0
                    port.add("port_xmit_packets", packets)
                    port.add("port_rcv_packets", packets)
                    port.add("unicast_xmit_packets", packets)
                    port.add("unicast_rcv_packets", packets)
                    port.add("hw:rx_write_requests", packets * 0.6)
                    port.add("hw:rx_read_requests", packets * 0.1)
                port.add("port_xmit_wait", wait)
            self.ib.flush()

    def _bad_port(self, port: IbPort, now: float, dt: float) -> None:
        """Symbol errors that climb ever faster (a cable or transceiver going bad)."""
        assert self.bad_port is not None
        for counter, amount in bad_port_errors(now - self.bad_port[1], dt).items():
            port.add(counter, amount)

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()
            self.endpoint = None
        if self.exporter is not None:
            self.exporter.close()
        self.ib.close()


SLOW_BURNERS_RNG = "devices:slow-burners"


@dataclass(frozen=True)
class SlowBurners:
    """The seeded slow burners of a world: ``creeping`` (node, GPU) whose cooling
    degrades, ``bad_ports`` (node, HCA) whose errors climb, and the ``lemon`` node."""

    creeping: tuple[tuple[str, int], ...]
    bad_ports: tuple[tuple[str, int], ...]
    lemon: str


def plan_slow_burners(config: Any, rng: Any) -> SlowBurners:
    """The slow burners of a world of ``config`` (``WorldConfig``: nodes, GPUs and HCAs
    per node), drawn from ``rng`` (the world's ``rng(SLOW_BURNERS_RNG)``): one or two
    creeping GPUs, one bad port, one lemon. Pure: the goodput benchmark draws the same."""
    names = [f"gpu-node-{i:03d}" for i in range(config.nodes)]
    creeping = tuple(
        (rng.choice(names), rng.randrange(config.gpus_per_node))
        for _ in range(1 if config.nodes < 8 else 2)
    )
    bad_ports: tuple[tuple[str, int], ...] = ()
    if config.hcas_per_node:
        bad_ports = ((rng.choice(names), rng.randrange(config.hcas_per_node)),)
    return SlowBurners(creeping, bad_ports, rng.choice(names))


def bad_port_errors(since_s: float, dt: float) -> dict[str, float]:
    """What a going-bad cable or transceiver adds to its port's error counters over
    ``dt`` simulated seconds, ``since_s`` after it began: symbol errors at a rate that
    grows with the square of the hours, the others in proportion."""
    hours = max(0.0, since_s) / 3600.0
    rate = 0.002 * (1.0 + hours) ** 2  # per simulated second
    return {
        "symbol_error": rate * dt,
        "port_rcv_errors": rate * dt / 8,
        "link_error_recovery": rate * dt / 60,
        "hw:local_ack_timeout_err": rate * dt / 20,
    }


class Prometheus:
    """A Prometheus server scraping the exporters, in its own process."""

    def __init__(
        self,
        binary: str,
        directory: Path,
        scrape_interval_s: float,
    ) -> None:
        self.binary = binary
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.targets_file = self.dir / "targets.json"
        self.interval = max(1.0, float(scrape_interval_s))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.ready = False
        self.restarts = 0
        self._targets: dict[str, str] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_targets(self, urls: dict[str, str]) -> None:
        if urls == self._targets and self.targets_file.exists():
            return
        groups = [
            {
                "targets": [url.removeprefix("http://").removesuffix("/metrics")],
                "labels": {"node": node},
            }
            for node, url in sorted(urls.items())
        ]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups, indent=1))
        os.replace(tmp, self.targets_file)  # Prometheus' file SD wants atomic replaces
        self._targets = dict(urls)

    def start(self, urls: dict[str, str]) -> None:
        self.write_targets(urls)
        interval = f"{round(self.interval * 1000)}ms"
        timeout = f"{round(max(self.interval * 0.8, 0.5) * 1000)}ms"
        config = (
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  scrape_timeout: {timeout}\n"
            f"  evaluation_interval: {interval}\n"
            "scrape_configs:\n"
            "  - job_name: krea-exporter\n"
            "    honor_labels: true\n"
            "    file_sd_configs:\n"
            f"      - files: [{json.dumps(str(self.targets_file))}]\n"
            "        refresh_interval: 5s\n"
        )
        (self.dir / "prometheus.yml").write_text(config)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    "--storage.tsdb.retention.time=2d",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        self.ready = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_ready(self) -> bool:
        if self.ready or not self.alive():
            return self.ready
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=0.5) as resp:
                self.ready = resp.status == 200
        except OSError:
            self.ready = False
        return self.ready

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        self.ready = False
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _fd_budget(nodes: int) -> tuple[int, bool]:
    """(descriptors each node's IB reader may cache, whether writers keep theirs open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    spare = max(0, soft - max(2048, soft // 4)) // max(nodes, 1)
    # 8 HCAs: ~72 hot counter files to write, ~400 files to read per node.
    keep_write = spare >= 160
    read = max(0, spare - (80 if keep_write else 0))
    return min(read, 512), keep_write


class DeviceService:
    """All device models of the world and what serves them (``world.services["devices"]``)."""

    def __init__(self, world: World) -> None:
        self.world = world
        cfg = world.config
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeDevices] = {}
        self.active_faults: dict[str, Fault] = {}
        self._undo: dict[str, Callable[[], None]] = {}
        self.stalls: dict[str, Stall] = {}  # hang fault name -> its stalled gang
        self._running: dict[str, PodLoad] = {}  # pod uid -> the Running GPU pod, last tick
        self.endpoints_changed = False
        self.gpm_interval_s = float(cfg.extra.get("gpm_interval_s", 2.0))
        # IB files are rewritten at most this often (wall seconds); scrapes are rarer.
        self.ib_flush_s = float(cfg.extra.get("ib_flush_s", 5.0))
        self._last_flush = 0.0
        self.read_fds_per_node, self.keep_write_fds = _fd_budget(max(cfg.nodes, 1))
        self.prometheus: Prometheus | None = None
        self._published: dict[str, str | None] | None = None
        self._closed = False
        self._core = _core(world.client)
        self._noise_rng = world.rng("devices:noise")
        self.lemon: str | None = None
        self._creeping: list[tuple[str, int]] = []
        self._bad_ports: list[tuple[str, int]] = []
        self._plan_slow_burners()

    # -- public API -------------------------------------------------------------------

    def exporter_urls(self) -> dict[str, str]:
        """Node name -> its exporter's ``http://127.0.0.1:PORT/metrics`` (nodes that serve)."""
        with self.lock:
            return {n: d.url for n, d in sorted(self.nodes.items()) if d.url is not None}

    @property
    def prometheus_url(self) -> str | None:
        p = self.prometheus
        return p.url if p is not None and p.alive() else None

    def node(self, name: str) -> NodeDevices:
        with self.lock:
            try:
                return self.nodes[name]
            except KeyError:
                raise KeyError(f"no simulated devices for node {name!r}") from None

    def gpu(self, node: str, index: int) -> FakeGpu:
        return self.node(node).gpus[index]

    def ib_port(self, node: str, hca: int) -> IbPort:
        return self.node(node).ib.ports[hca]

    def assignment(self, node: str) -> dict[str, list[int]]:
        """Pod key (uid) -> GPU indices, as the device actor last assigned them."""
        with self.lock:
            return {k: list(v) for k, v in self.node(node).assigned.items()}

    def slow_burners(self) -> dict[str, Any]:
        return {
            "creeping_gpus": [{"node": n, "gpu": g} for n, g in self._creeping],
            "bad_ib_ports": [
                {"node": n, "hca": h, "device": f"mlx5_{h}"} for n, h in self._bad_ports
            ],
            "lemon_node": self.lemon,
        }

    # -- setup ------------------------------------------------------------------------

    def _plan_slow_burners(self) -> None:
        cfg = self.world.config
        if not cfg.extra.get("slow_burners", True) or cfg.nodes < 1:
            return
        plan = plan_slow_burners(cfg, self.world.rng(SLOW_BURNERS_RNG))
        self._creeping.extend(plan.creeping)
        self._bad_ports.extend(plan.bad_ports)
        self.lemon = plan.lemon

    def _slow_burn(self, nd: NodeDevices) -> None:
        now = self.world.clock.time()
        for node, g in self._creeping:
            if node == nd.name and g < len(nd.models):
                m = nd.models[g]
                m.creep_start = now + 600.0 * _h(self.world.config.seed, node, g, "creep")
                m.creep_s = 6 * 3600.0
                m.creep_end_q = 0.66
        for node, h in self._bad_ports:
            if node == nd.name and h < len(nd.ib.ports):
                nd.bad_port = (h, now)

    def start(self) -> None:
        cfg = self.world.config
        for i in range(cfg.nodes):
            if cfg.has_telemetry(f"gpu-node-{i:03d}"):
                self.ensure_node(f"gpu-node-{i:03d}", cfg.gpus_per_node)
        binary = shutil.which("prometheus")
        if cfg.prometheus and cfg.exporters and binary:
            self.prometheus = Prometheus(
                binary,
                self.world.state_dir / "prometheus",
                float(cfg.extra.get("scrape_interval_s", 15.0)),
            )
            self.prometheus.start(self.exporter_urls())

    def ensure_node(self, name: str, gpus: int) -> NodeDevices:
        with self.lock:
            nd = self.nodes.get(name)
            if nd is None and not self._closed:
                nd = NodeDevices(self, name, gpus)
                self._slow_burn(nd)
                self.nodes[name] = nd
                self.endpoints_changed = True
            assert nd is not None
            return nd

    # -- the device tick ----------------------------------------------------------------

    def sync_nodes(self, items: list[dict[str, Any]]) -> None:
        seen = set()
        for obj in items:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name", ""))
            labels = meta.get("labels") or {}
            if labels.get("nvidia.com/gpu.present") != "true" and not _GPU_NODE_RE.match(name):
                continue
            if not self.world.config.has_telemetry(name) and name not in self.nodes:
                continue  # the scale mode: a node without simulated devices
            count = labels.get("nvidia.com/gpu.count") or (
                (obj.get("status") or {}).get("capacity") or {}
            ).get(GPU_RESOURCE)
            text = str(count or "")
            gpus = int(text) if text.isdigit() else self.world.config.gpus_per_node
            nd = self.ensure_node(name, gpus)
            nd.in_api = True
            nd.failed = (meta.get("annotations") or {}).get(FAILED_ANNOTATION) or None
            if labels.get("krea.ai/spine"):
                nd.spine = labels["krea.ai/spine"]
            seen.add(name)
        with self.lock:
            for name, nd in self.nodes.items():
                if name not in seen:
                    nd.in_api = False

    def congestion(self, spine: str, now: float) -> float:
        seed = self.world.config.seed
        base = 0.02 + 0.25 * _h(seed, spine, "congestion")
        burst = 0.6 if _h(seed, spine, math.floor(now / 600.0), "burst") < 0.15 else 0.0
        return base + burst

    def advance(self, now: float, dt: float, pods: dict[str, list[PodLoad]]) -> None:
        rng = self._noise_rng

        def noise() -> float:
            return rng.random() * 2.0 - 1.0

        mono = time.monotonic()
        flush = mono - self._last_flush >= self.ib_flush_s
        if flush:
            self._last_flush = mono
        with self.lock:
            self._running = {p.key: p for node_pods in pods.values() for p in node_pods}
            for stall in self.stalls.values():
                # the stalled attempt is over once any of its pods stops running
                if not stall.ended and not stall.pods <= self._running.keys():
                    stall.ended = True
            for name, nd in self.nodes.items():
                nd.assign(pods.get(name, []))
            gangs: dict[str, list[str]] = {}
            for p in self._running.values():
                if p.kind == "training":
                    gangs.setdefault(p.job, []).append(p.key)
            paces = {job: self._gang_pace(keys, now) for job, keys in gangs.items()}
            for name, nd in self.nodes.items():
                congestion = self.congestion(nd.spine, now)
                nd.advance(now, dt, pods.get(name, []), noise, congestion, flush, paces)

    def gang_pace(self, pods: Iterable[str], now: float) -> GangPace:
        """The pace of the training gang made of ``pods`` (pod uids) at simulated ``now``,
        as its GPUs show it: hung (a ``hang`` fault), behind a straggler (the slowest of
        its GPUs), in an input-bound phase, or full. The trainers step at this pace."""
        with self.lock:
            return self._gang_pace(pods, now)

    def _gang_pace(self, pods: Iterable[str], now: float) -> GangPace:
        keys = set(pods)
        for stall in self.stalls.values():
            if not stall.ended and stall.pods & keys:
                return GangPace(0.0, "hang", stall.since)
        known = [self._running[k] for k in sorted(keys) if k in self._running]
        if not known:
            return FULL_PACE
        forced = {p.input_bound for p in known if p.input_bound is not None}
        bound = input_bound_phase(
            self.world.config.seed, known[0].job, (True in forced) if forced else None, now
        )
        slowest = 1.0
        for p in known:
            nd = self.nodes.get(p.node)
            if nd is not None:
                for i in nd.assigned.get(p.key, ()):
                    slowest = max(slowest, nd.models[i].straggle_factor)
        if bound and 1.0 / slowest >= INPUT_BOUND_PACE:
            return GangPace(INPUT_BOUND_PACE, "input-bound", None, True)
        if slowest > 1.0:
            return GangPace(1.0 / slowest, "straggler", None, bound)
        return FULL_PACE

    def ended_faults(self) -> list[str]:
        """Active faults whose effect is over by itself: a hang whose attempt ended."""
        with self.lock:
            return [
                s.fault for s in self.stalls.values() if s.ended and s.fault in self.active_faults
            ]

    def failure_candidates(self) -> list[str]:
        with self.lock:
            return [n for n, nd in sorted(self.nodes.items()) if nd.in_api and not nd.failed]

    # -- faults ---------------------------------------------------------------------------

    def _pick(self, nd: NodeDevices, index: int | None, count: int, fault: Fault, what: str) -> int:
        """``index``, or one chosen from the fault's name; recorded in ``fault.targets``
        (the fault's annotation tells ``sim inject`` which GPU, link or HCA it hit)."""
        if count <= 0:
            raise ValueError(f"node {nd.name} has no {what}s")
        if index is None:
            index = int(_h(fault.name, what) * count)
        elif not 0 <= index < count:
            raise ValueError(f"node {nd.name} has {count} {what}s: no {what} {index}")
        fault.targets[what] = index
        return index

    def apply_fault(self, fault: Fault, now: float, restore: bool = False) -> float | None:
        """Make ``fault`` happen to the devices; returns when it ends by itself, if it does.

        ``restore`` re-applies the lasting effects of a fault applied before a restart
        without counting its events again. Raises ValueError if it cannot apply.
        """
        with self.lock:
            nd = self.nodes.get(fault.node)
            if nd is None:
                raise ValueError(f"no simulated devices for node {fault.node}")
            if fault.name in self.active_faults:
                return fault.resolve_at
            end = now + fault.duration_s if fault.duration_s else None
            undo = self._apply(nd, fault, now, restore)
            if fault.kind == "ib-flap" and end is None:
                end = now + _FLAP_DEFAULT_S
            if fault.kind in ("gpu-lost", "crash") and end is None:
                cause = fault.cause or "host"
                end = now + (fault.repair_s if fault.repair_s else repair_time(cause))
            self.active_faults[fault.name] = fault
            self._undo[fault.name] = undo
            return end

    def _apply(
        self, nd: NodeDevices, fault: Fault, now: float, restore: bool
    ) -> Callable[[], None]:
        kind, n_gpus, n_hcas = fault.kind, len(nd.gpus), len(nd.ib.ports)
        if kind == "hot-gpu":
            g = self._pick(nd, fault.gpu, n_gpus, fault, "GPU")
            model = nd.models[g]
            before = model.hot_target_c
            model.hot_target_c = float(fault.value) if fault.value else _HOT_DEFAULT_C

            def undo_hot() -> None:
                model.hot_target_c = before

            return undo_hot
        if kind == "straggler":
            g = self._pick(nd, fault.gpu, n_gpus, fault, "GPU")
            reasons = STRAGGLER_REASONS.get(fault.value or "power-brake")
            if reasons is None:
                raise ValueError(
                    f"straggler value must be power-brake or hw-slowdown, not {fault.value}"
                )
            model = nd.models[g]
            was = (model.straggle_factor, model.straggle_reasons)
            model.straggle_factor = fault.slowdown or STRAGGLER_DEFAULT_SLOWDOWN
            model.straggle_reasons = reasons

            def undo_straggler() -> None:
                model.straggle_factor, model.straggle_reasons = was

            return undo_straggler
        if kind == "hang":
            return self._stall(nd, fault, now, restore)
        if kind == "nvlink-errors":
            g = self._pick(nd, fault.gpu, n_gpus, fault, "GPU")
            links = len(nd.gpus[g].nvlinks)
            link_index = int(fault.value) if fault.value and fault.value.isdigit() else None
            link = self._pick(nd, link_index, links, fault, "NVLink")
            nd.nvlink_faults[fault.name] = (g, link)

            def undo_nvlink_errors() -> None:
                nd.nvlink_faults.pop(fault.name, None)

            return undo_nvlink_errors
        if kind == "ib-flap":
            hca_index = int(fault.value) if fault.value and fault.value.isdigit() else None
            h = self._pick(nd, hca_index, n_hcas, fault, "HCA")
            nd.port_hold(h, True)
            return lambda: nd.port_hold(h, False)
        if kind == "gpu-lost" or (kind == "crash" and fault.cause in ("gpu-lost", "faulty-gpu")):
            g = self._pick(nd, fault.gpu, n_gpus, fault, "GPU")
            nd.gpu_lost(g, True)
            if not restore:
                nd.nvml.inject_xid(g, 79)
            return lambda: self._reboot_gpu(nd, g, lost=True)
        if kind == "crash":
            cause = fault.cause or "host"
            if cause in _XID:
                g = self._pick(nd, fault.gpu, n_gpus, fault, "GPU")
                if not restore:
                    self._gpu_failure(nd, g, cause)
                if cause == "nvlink":
                    link = int(_h(fault.name, "link") * len(nd.gpus[g].nvlinks))
                    fault.targets["NVLink"] = link
                    nd.gpus[g].nvlinks[link].active = False

                    def undo_nvlink() -> None:
                        nd.gpus[g].nvlinks[link].active = True
                        self._reboot_gpu(nd, g, lost=False)

                    return undo_nvlink
                return lambda: self._reboot_gpu(nd, g, lost=False)
            if cause == "ib-link":
                h = self._pick(nd, fault.hca, n_hcas, fault, "HCA")
                nd.port_hold(h, True)
                return lambda: nd.port_hold(h, False)
            nd.host_failed(True)
            return lambda: self._host_back(nd)
        raise ValueError(f"unknown fault kind {kind!r}")

    def _stall(
        self, nd: NodeDevices, fault: Fault, now: float, restore: bool
    ) -> Callable[[], None]:
        """A hang: the collective of the training gang with a pod on ``nd`` stalls now.
        The attempt that stalled did not outlive a restart of the simulator (its trainers
        start again from their checkpoint): restored, the hang is over at once."""
        name = fault.name
        if restore:
            self.stalls[name] = Stall(name, "", frozenset(), now, ended=True)
        else:
            here = [p for p in self._running.values() if p.node == nd.name and p.kind == "training"]
            if not here:
                raise ValueError(f"no training runs on node {nd.name}")
            job = here[0].job
            gang = frozenset(
                k for k, p in self._running.items() if p.job == job and p.kind == "training"
            )
            self.stalls[name] = Stall(name, job, gang, now)
            fault.targets["gang"] = job

        def undo_hang() -> None:
            self.stalls.pop(name, None)

        return undo_hang

    def _gpu_failure(self, nd: NodeDevices, g: int, cause: str) -> None:
        gpu = nd.gpus[g]
        if cause == "gpu-hbm":
            gpu.add_ecc_errors(corrected=int(50 + 200 * _h(nd.name, g, "sbe")), uncorrected=1)
            corr, unc, _pending, failure = gpu.remapped_rows
            gpu.remapped_rows = (corr, unc, 1, failure)
        elif cause == "gpu-sram":
            gpu.add_ecc_errors(uncorrected=1)
        elif cause == "nvlink":
            for nl in gpu.nvlinks[:4]:
                nl.replay += 1500
                nl.recovery += 40
                nl.crc_flit += 300
        nd.nvml.inject_xid(g, _XID[cause])

    def _reboot_gpu(self, nd: NodeDevices, g: int, lost: bool) -> None:
        """What a repair (reset or reboot) does to a GPU."""
        gpu = nd.gpus[g]
        if lost:
            nd.gpu_lost(g, False)
        corr, unc, pending, failure = gpu.remapped_rows
        if pending:
            gpu.remapped_rows = (corr, unc + 1, 0, failure)
        gpu.update(ecc_corrected_volatile=0, ecc_uncorrected_volatile=0)

    def _host_back(self, nd: NodeDevices) -> None:
        nd.host_failed(False)
        if not nd.host_down:
            for g in range(len(nd.gpus)):
                self._reboot_gpu(nd, g, lost=False)

    def resolve_fault(self, name: str) -> None:
        with self.lock:
            self.active_faults.pop(name, None)
            undo = self._undo.pop(name, None)
            if undo is not None:
                undo()

    # -- publishing ------------------------------------------------------------------------

    def poll_prometheus(self) -> None:
        p = self.prometheus
        if p is None or self._closed:
            return
        if p.proc is not None and not p.alive() and p.restarts < 3:
            p.restarts += 1
            print("sim devices: prometheus exited; restarting it", file=sys.stderr)
            p.start(self.exporter_urls())
        if self.endpoints_changed:
            p.write_targets(self.exporter_urls())
        p.check_ready()

    def publish(self) -> None:
        """Write ``exporters`` and ``prometheusURL`` into ConfigMap krea-ops/krea-ops-config."""
        from kubernetes.client.exceptions import ApiException

        self.endpoints_changed = False
        p = self.prometheus
        data: dict[str, str | None] = {
            "exporters": json.dumps(self.exporter_urls(), indent=2, sort_keys=True),
            "prometheusURL": p.url if p is not None and p.ready and p.alive() else None,
        }
        if data == self._published:
            return
        core = self._core
        try:
            core.patch_namespaced_config_map(
                OPS_CONFIGMAP,
                OPS_NAMESPACE,
                {"data": data},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            ensure_namespace(core, OPS_NAMESPACE)
            body = {
                "metadata": {"name": OPS_CONFIGMAP},
                "data": {k: v for k, v in data.items() if v is not None},
            }
            try:
                core.create_namespaced_config_map(OPS_NAMESPACE, body, _preload_content=False)
            except ApiException as exc2:
                if exc2.status != 409:
                    raise
                self._published = None
                return
        self._published = data

    def publish_hardware(self) -> None:
        from kubernetes.client.exceptions import ApiException

        core = self._core
        data = {"slow-burners": json.dumps(self.slow_burners(), indent=2, sort_keys=True)}
        body = {"metadata": {"name": HARDWARE_CONFIGMAP}, "data": data}
        ensure_namespace(core, FAULT_NAMESPACE)
        try:
            core.create_namespaced_config_map(FAULT_NAMESPACE, body, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
            core.patch_namespaced_config_map(
                HARDWARE_CONFIGMAP,
                FAULT_NAMESPACE,
                {"data": data},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )

    def close(self) -> None:
        with self.lock:
            if self._closed:
                return
            self._closed = True
            nodes = list(self.nodes.values())
        if self.prometheus is not None:
            self.prometheus.stop()
        # In parallel: each exporter waits up to a second for its XID thread.
        threads = [
            threading.Thread(target=nd.close, name=f"close-{nd.name}", daemon=True) for nd in nodes
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=15)


class DeviceActor(Actor):
    """Advances every device from the pods running on each node (one pod list a tick)."""

    name = "devices"

    def __init__(self, world: World, service: DeviceService) -> None:
        super().__init__(world)
        self.service = service
        self.period_s = float(world.config.extra.get("devices_period_s", 0) or 0) or max(
            5.0, float(world.config.speed)
        )
        self.core = _core(world.client)
        self.last: float | None = None

    def setup(self) -> None:
        self.service.publish_hardware()

    def tick(self) -> None:
        svc = self.service
        now = self.clock.time()
        dt = self.period_s if self.last is None else max(0.0, now - self.last)
        self.last = now
        view = self.world.services.get("cluster-view") if self.world.config.scale_mode else None
        if view is not None:
            # the scale mode: the cluster as the machines' shared watch has it, no lists
            svc.sync_nodes(view.nodes())
            running = [p for p in view.pods() if (p.get("status") or {}).get("phase") == "Running"]
            pods = parse_pods(running, set(svc.nodes))
        else:
            nodes = json.loads(self.core.list_node(_preload_content=False).data)
            svc.sync_nodes(nodes.get("items") or [])
            resp = self.core.list_pod_for_all_namespaces(
                field_selector="status.phase=Running", _preload_content=False
            )
            pods = parse_pods(json.loads(resp.data).get("items") or [], set(svc.nodes))
        svc.advance(now, dt, pods)
        svc.poll_prometheus()
        svc.publish()
