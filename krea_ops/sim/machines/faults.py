"""Faults of the simulated cluster: API objects, injected on demand or at published rates.

A fault is a ConfigMap in namespace ``krea-sim`` labelled ``sim.krea.ai/fault=true``
(also ``sim.krea.ai/kind`` and ``sim.krea.ai/node``) with data:

``kind``
  ``hot-gpu``: the GPU's cooling fails; within a simulated minute its temperature sensor
  reads ``value`` °C (default 84) and holds it while the fault lasts, idle or under load
  (past 87 °C that brings thermal slowdown).
  ``nvlink-errors``: replay/recovery/CRC counters climb on one NVLink of the GPU;
  ``value`` is the link (default: one picked by the seeded RNG).
  ``ib-flap``: an HCA port goes down (``1: DOWN``/``3: Disabled``, ``link_downed`` + 1)
  and comes back after ``duration_s`` (default 180 simulated seconds); ``value`` is the
  HCA index.
  ``gpu-lost``: the GPU falls off the bus (NVML ``GpuIsLost``, XID 79) and the node is
  annotated ``sim.krea.ai/failed: gpu-lost`` until repaired.
  ``crash``: the node is annotated ``sim.krea.ai/failed: <value>`` (the cause, default
  ``host``) until repaired. GPU causes leave their mark on a GPU (``faulty-gpu``: lost,
  XID 79, as ``gpu-lost``; ``gpu-hbm``: XID 48,
  an uncorrectable ECC error and a pending row remap; ``gpu-sram``: XID 95; ``gpu-gsp``:
  XID 119; ``nvlink``: XID 74, a link down and its error counters jump); ``ib-link``
  takes HCA ``hca`` down until the repair; ``host`` (and any other cause) takes the whole
  host down, so its exporter stops answering.
  ``hang``: an NCCL collective of the training gang that has a pod on the node stalls
  (an error if no training runs there; takes no ``gpu`` or ``value``). Its ranks go
  silent: no step lines, no checkpoint completes; every GPU of the gang reads ~100 %
  busy with no tensor activity (an NCCL kernel spinning, ``thermal.py``) and its IB
  traffic stops. After the NCCL timeout (torch.distributed's default 10 minutes,
  ``WorldConfig.extra["nccl_timeout_s"]``) from the stall, every rank's watchdog aborts
  its process and the pods fail (``training.py``). The hang ends, and is marked
  resolved, when the attempt that stalled ends: its pods gone or failed, whoever
  restarted the gang.
  ``straggler``: GPU ``gpu`` runs at 1/``slowdown`` of its SM clock when busy
  (``slowdown`` 1 < F <= 4, default 1.5) with the clock-event reasons ``value`` names:
  ``power-brake`` (default; hw_power_brake + hw_slowdown, 0x80|0x08) or ``hw-slowdown``
  (0x08). A training gang on it steps at 1/F of its pace and its other GPUs wait in
  NCCL for it (``devices.py``).
``node``, ``gpu`` (index, where it applies), ``value``; optional ``duration_s`` (how long
an ib-flap lasts, or after how long any fault ends by itself), ``repair_s`` (repair time
of a failure), ``hca`` (the HCA of an ib-link crash), ``slowdown`` (a straggler's factor)
and ``source`` (``inject`` or ``random``).

The device actor's fault loop applies each fault once and records it in annotations:
``sim.krea.ai/applied`` (RFC 3339, wall time like every API stamp), ``sim.krea.ai/target``
(what it hit, ``GPU 5, NVLink 7``, ``HCA 3`` or ``gang training/dit``, including what it
chose where the fault
left it open), ``sim.krea.ai/resolve-at`` (when it will end, if it ends by itself: its
simulated duration converted to wall time), ``sim.krea.ai/resolved`` once it has ended,
or ``sim.krea.ai/error`` if it could not be applied. ``hot-gpu``, ``nvlink-errors`` and
``straggler`` last until their ConfigMap is deleted (or ``duration_s`` passes); so does a
``hang`` until its attempt ends (deleting it earlier lets the collective complete). A failure is
repaired after its repair time by removing the node's ``sim.krea.ai/failed`` annotation
(or setting it to the cause of another failure still open on that node).

Random failures follow Kokolis et al. (HPCA 2025): 6.5 failures per 1,000 node-days by
default (``WorldConfig.failures_per_1000_node_days``), times
``WorldConfig.failure_multiplier``, with causes weighted by the unexpected interruptions of
the Llama 3 405B run (Llama 3 paper, Table 5); see CAUSES. A lemon node fails
LEMON_FACTOR times as often. Each random failure is created as a fault ConfigMap, exactly
as ``krea-ops sim inject`` would.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol

from krea_ops.errors import BadInput
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.common.objects import FAILED_ANNOTATION

__all__ = [
    "CAUSES",
    "FAULT_KINDS",
    "FAULT_NAMESPACE",
    "Cause",
    "FailureActor",
    "Fault",
    "FaultActor",
    "FaultTarget",
    "check_fault",
    "inject_fault",
]

FAULT_NAMESPACE = "krea-sim"
FAULT_KINDS = ("hot-gpu", "nvlink-errors", "ib-flap", "gpu-lost", "crash", "hang", "straggler")
STRAGGLER_VALUES = ("power-brake", "hw-slowdown")
MAX_SLOWDOWN = 4.0
FAULT_LABEL = "sim.krea.ai/fault"
APPLIED = "sim.krea.ai/applied"
TARGET = "sim.krea.ai/target"
RESOLVE_AT = "sim.krea.ai/resolve-at"
RESOLVED = "sim.krea.ai/resolved"
ERROR = "sim.krea.ai/error"
MERGE_PATCH = "application/merge-patch+json"
LEMON_FACTOR = 10.0
_CAUSE_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$")


@dataclass(frozen=True)
class Cause:
    """One cause of random failures: its Llama 3 weight and how it shows."""

    name: str
    weight: float
    kind: str  # fault kind it is created as
    xid: int | None
    repair_s: float  # mean simulated repair time
    table_rows: str  # which Llama 3 Table 5 rows it stands for


# Llama 3 (arXiv 2407.21783) Table 5, unexpected interruptions over 54 days on 16,384 H100s.
# Hardware rows only (software bugs and dependencies are not node failures). The table
# has no NVLink row; the paper says NVLink failures surface as stalled collectives without
# a clear error code, so NVLink takes the weight of the NCCL watchdog-timeout row.
CAUSES: tuple[Cause, ...] = (
    Cause("faulty-gpu", 148, "gpu-lost", 79, 4 * 3600, "Faulty GPU 148"),
    Cause("gpu-hbm", 72, "crash", 48, 2 * 3600, "GPU HBM3 memory 72"),
    Cause("gpu-sram", 19, "crash", 95, 3600, "GPU SRAM memory 19"),
    Cause("gpu-gsp", 17, "crash", 119, 3600, "GPU system processor 17"),
    Cause("nvlink", 7, "crash", 74, 2 * 3600, "NCCL watchdog timeouts 7 (NVLink)"),
    Cause("ib-link", 42, "crash", None, 3600, "Network switch/cable 35 + NIC 7"),
    Cause(
        "host",
        46,
        "crash",
        None,
        3 * 3600,
        "Unplanned host maintenance 32 + PSU 3 + SSD 3 + chassis, IO board, CPU, "
        "system memory 2 each",
    ),
)
CAUSE_BY_NAME = {c.name: c for c in CAUSES}
GPU_CAUSES = frozenset({"faulty-gpu", "gpu-lost", "gpu-hbm", "gpu-sram", "gpu-gsp", "nvlink"})
DEFAULT_REPAIR_S = 3 * 3600.0


def repair_time(cause: str) -> float:
    c = CAUSE_BY_NAME.get(cause)
    if cause == "gpu-lost":
        c = CAUSE_BY_NAME["faulty-gpu"]
    return c.repair_s if c is not None else DEFAULT_REPAIR_S


@dataclass
class Fault:
    """A fault ConfigMap, parsed."""

    name: str
    kind: str
    node: str
    gpu: int | None = None
    value: str | None = None
    hca: int | None = None
    duration_s: float | None = None
    repair_s: float | None = None
    slowdown: float | None = None
    source: str = "inject"
    applied: bool = False
    resolve_at: float | None = None
    resolved: bool = False
    error: str | None = None
    # "GPU"/"NVLink"/"HCA" -> index, "gang" -> the training's namespace/name
    targets: dict[str, int | str] = field(default_factory=dict)

    @property
    def cause(self) -> str | None:
        """The node-failure cause this fault sets, or None if it does not fail the node."""
        if self.kind == "gpu-lost":
            return "gpu-lost"
        if self.kind == "crash":
            return self.value or "host"
        return None

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Fault:
        meta = obj.get("metadata") or {}
        data = obj.get("data") or {}
        ann = meta.get("annotations") or {}

        def num(key: str, conv: Any) -> Any:
            text = data.get(key)
            if text in (None, ""):
                return None
            try:
                return conv(text)
            except (TypeError, ValueError):
                return None

        resolve_at = None
        if ann.get(RESOLVE_AT):
            resolve_at = parse_time(ann[RESOLVE_AT])
        return cls(
            name=str(meta.get("name", "")),
            kind=str(data.get("kind", "")),
            node=str(data.get("node", "")),
            gpu=num("gpu", int),
            value=data.get("value") or None,
            hca=num("hca", int),
            duration_s=num("duration_s", float),
            repair_s=num("repair_s", float),
            slowdown=num("slowdown", float),
            source=str(data.get("source") or "inject"),
            applied=bool(ann.get(APPLIED)),
            resolve_at=resolve_at,
            resolved=bool(ann.get(RESOLVED)),
            error=ann.get(ERROR) or None,
        )


def _core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def ensure_namespace(core: Any, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def check_fault(
    kind: str, gpu: int | None = None, value: Any = None, slowdown: float | None = None
) -> str | None:
    """Raise BadInput with a one-line reason if the parameters do not fit this kind of
    fault; returns the value, normalised (None if none). Needs no cluster."""
    if kind not in FAULT_KINDS:
        raise BadInput(f"unknown fault {kind!r}: choose one of {', '.join(FAULT_KINDS)}")
    return _validate(kind, gpu, value, slowdown)


def _validate(kind: str, gpu: int | None, value: Any, slowdown: float | None = None) -> str | None:
    """One-line reason the parameters are wrong for this kind, or None; normalises value."""
    if gpu is not None and (not isinstance(gpu, int) or gpu < 0):
        raise BadInput(f"--gpu must be a GPU index >= 0, got {gpu!r}")
    if slowdown is not None:
        if kind != "straggler":
            raise BadInput(f"--slowdown is for straggler only, not {kind}")
        if not isinstance(slowdown, (int, float)) or not 1.0 < slowdown <= MAX_SLOWDOWN:
            raise BadInput(
                f"straggler --slowdown must be greater than 1 and at most {MAX_SLOWDOWN:g} "
                f"(the GPU runs at 1/F of its clock), got {slowdown!r}"
            )
    if kind == "hang" and gpu is not None:
        raise BadInput("hang takes no --gpu: it stalls the whole gang training on the node")
    text = None if value is None else str(value).strip()
    if text == "":
        text = None
    if text is None:
        return None
    if kind == "hot-gpu":
        try:
            target = float(text)
        except ValueError:
            raise BadInput(f"hot-gpu --value is a temperature in °C, got {text!r}") from None
        if not 30.0 <= target <= 91.0:
            raise BadInput(f"hot-gpu --value must be within 30-91 °C, got {text}")
    elif kind in ("ib-flap", "nvlink-errors"):
        what = "HCA" if kind == "ib-flap" else "NVLink"
        if not text.isdigit():
            raise BadInput(f"{kind} --value is the {what} index (0, 1, ...), got {text!r}")
    elif kind == "crash":
        if not _CAUSE_RE.match(text):
            raise BadInput(
                f"crash --value is a cause like host, gpu-hbm or ib-link (lower-case, digits, "
                f"dashes), got {text!r}"
            )
    elif kind == "gpu-lost":
        raise BadInput("gpu-lost takes no --value (use --gpu to pick the GPU)")
    elif kind == "hang":
        raise BadInput("hang takes no --value: it stalls the whole gang training on the node")
    elif kind == "straggler" and text not in STRAGGLER_VALUES:
        raise BadInput(f"straggler --value is power-brake or hw-slowdown, got {text!r}")
    return text


def inject_fault(
    api_client: Any,
    kind: str,
    node: str,
    gpu: int | None = None,
    value: Any = None,
    *,
    duration_s: float | None = None,
    repair_s: float | None = None,
    hca: int | None = None,
    slowdown: float | None = None,
    source: str = "inject",
) -> str:
    """Create a fault ConfigMap in ``krea-sim`` and return its name.

    ``api_client`` is a ``kubernetes.client.ApiClient``. An unknown kind, a node that does
    not exist, a GPU index beyond the node's ``nvidia.com/gpu`` capacity or a value (or a
    ``slowdown``) that does not fit the kind raise BadInput with a one-line message.
    """
    from kubernetes.client.exceptions import ApiException

    text = check_fault(kind, gpu, value, slowdown)
    core = _core(api_client)
    try:
        node_obj = core.read_node(node, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            raise BadInput(f"no node {node!r} in the cluster") from None
        raise
    capacity = (json.loads(node_obj.data).get("status") or {}).get("capacity") or {}
    count = capacity.get("nvidia.com/gpu")
    if gpu is not None and count is not None and str(count).isdigit() and gpu >= int(count):
        raise BadInput(f"node {node} has {count} GPUs: --gpu must be 0-{int(count) - 1}")
    data: dict[str, str] = {"kind": kind, "node": node, "source": source}
    if gpu is not None:
        data["gpu"] = str(gpu)
    if text is not None:
        data["value"] = text
    extras = (
        ("duration_s", duration_s),
        ("repair_s", repair_s),
        ("hca", hca),
        ("slowdown", slowdown),
    )
    for key, extra in extras:
        if extra is not None:
            data[key] = str(extra)
    ensure_namespace(core, FAULT_NAMESPACE)
    base = f"{kind}-{node}"[:240].rstrip("-")
    for _ in range(5):
        name = f"{base}-{secrets.token_hex(3)}"
        body = {
            "metadata": {
                "name": name,
                "labels": {
                    FAULT_LABEL: "true",
                    "sim.krea.ai/kind": kind,
                    "sim.krea.ai/node": node[:63],
                },
            },
            "data": data,
        }
        try:
            core.create_namespaced_config_map(FAULT_NAMESPACE, body, _preload_content=False)
        except ApiException as exc:
            if exc.status == 409:
                continue
            raise
        return name
    raise BadInput(f"could not find a free name for fault {base}")  # pragma: no cover


class FaultTarget(Protocol):
    """What the fault and failure actors act on: the world's devices
    (``devices.DeviceService``), which import this module, not the other way round.
    ``apply_fault`` takes and answers simulated time (the devices' processes run on it)."""

    active_faults: dict[str, Fault]
    lemon: str | None

    def apply_fault(self, fault: Fault, now: float, restore: bool = False) -> float | None: ...

    def resolve_fault(self, name: str) -> None: ...

    def ended_faults(self) -> list[str]: ...

    def failure_candidates(self) -> list[str]: ...


class FaultActor(Actor):
    """Applies fault ConfigMaps to the devices and fails/repairs nodes (one list a tick)."""

    name = "faults"

    def __init__(self, world: World, service: FaultTarget) -> None:
        super().__init__(world)
        self.service = service
        # Injection should show within about a quarter of a wall second.
        self.period_s = max(2.0, 0.25 * world.config.speed)
        self.core = _core(world.client)
        self.open_failures: dict[str, dict[str, str]] = {}  # node -> fault name -> cause
        self.node_annotation: dict[str, str | None] = {}

    def setup(self) -> None:
        ensure_namespace(self.core, FAULT_NAMESPACE)

    def tick(self) -> None:
        resp = self.core.list_namespaced_config_map(
            FAULT_NAMESPACE, label_selector=f"{FAULT_LABEL}=true", _preload_content=False
        )
        items = json.loads(resp.data).get("items") or []
        now = self.clock.wall()  # the annotations' stamps are API stamps: wall time
        seen: set[str] = set()
        touched: set[str] = set()
        for obj in sorted(items, key=lambda o: (o.get("metadata") or {}).get("name", "")):
            fault = Fault.from_object(obj)
            seen.add(fault.name)
            if fault.error or fault.resolved:
                if fault.name in self.service.active_faults:
                    self.service.resolve_fault(fault.name)
                continue
            if not fault.applied:
                self._apply(fault, now, touched)
            else:
                if fault.name not in self.service.active_faults:
                    # The world restarted: restore what the fault did to the devices.
                    self.service.apply_fault(fault, self.clock.time(), restore=True)
                    self._track(fault, touched)
                if fault.resolve_at is not None and now >= fault.resolve_at:
                    self._resolve(fault.name, fault.node, now, touched)
        for name in [n for n in self.service.active_faults if n not in seen]:
            fault_obj = self.service.active_faults[name]
            self.service.resolve_fault(name)
            self._untrack(name, fault_obj.node, touched)
        for name in self.service.ended_faults():  # a hang whose attempt ended
            fault_obj = self.service.active_faults[name]
            self._resolve(name, fault_obj.node, now, touched)
        for node in touched:
            self._sync_node(node)

    def _apply(self, fault: Fault, now: float, touched: set[str]) -> None:
        sim_now = self.clock.time()
        try:
            ends = self.service.apply_fault(fault, sim_now)
        except ValueError as exc:
            self._annotate(fault.name, {ERROR: str(exc)})
            return
        ann = {APPLIED: rfc3339(now)}
        if fault.targets:
            ann[TARGET] = ", ".join(f"{what} {i}" for what, i in fault.targets.items())
        if ends is not None:
            # The devices say when it ends in simulated time (a repair of 2 simulated
            # hours is 2 wall minutes at speed 60); the annotation is a wall stamp.
            resolve_at = now + self.clock.to_wall(ends - sim_now)
            ann[RESOLVE_AT] = rfc3339(math.ceil(resolve_at))
        self._annotate(fault.name, ann)
        self._track(fault, touched)

    def _track(self, fault: Fault, touched: set[str]) -> None:
        cause = fault.cause
        if cause is not None:
            self.open_failures.setdefault(fault.node, {})[fault.name] = cause
            touched.add(fault.node)

    def _untrack(self, name: str, node: str, touched: set[str]) -> None:
        if self.open_failures.get(node, {}).pop(name, None) is not None:
            touched.add(node)

    def _resolve(self, name: str, node: str, now: float, touched: set[str]) -> None:
        self.service.resolve_fault(name)
        self._annotate(name, {RESOLVED: rfc3339(now)})
        self._untrack(name, node, touched)

    def _annotate(self, name: str, annotations: dict[str, str]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.patch_namespaced_config_map(
                name,
                FAULT_NAMESPACE,
                {"metadata": {"annotations": annotations}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _sync_node(self, node: str) -> None:
        """Set the node's failed annotation to its latest open failure, or remove it."""
        from kubernetes.client.exceptions import ApiException

        causes = list(self.open_failures.get(node, {}).values())
        want = causes[-1] if causes else None
        if node in self.node_annotation and self.node_annotation[node] == want:
            return
        try:
            self.core.patch_node(
                node,
                {"metadata": {"annotations": {FAILED_ANNOTATION: want}}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.node_annotation[node] = want


class FailureActor(Actor):
    """Random node failures at the published rate, created as fault ConfigMaps."""

    name = "failures"

    def __init__(self, world: World, service: FaultTarget) -> None:
        super().__init__(world)
        self.service = service
        self.period_s = max(60.0, float(world.config.speed))
        cfg = world.config
        per_node_day = cfg.failures_per_1000_node_days * cfg.failure_multiplier / 1000.0
        self.rate_per_s = max(per_node_day, 0.0) / 86400.0
        self.total_weight = sum(c.weight for c in CAUSES)
        self.last: float | None = None
        self.created: list[str] = []

    def pick_cause(self) -> Cause:
        x = self.rng.random() * self.total_weight
        for c in CAUSES:
            x -= c.weight
            if x < 0:
                return c
        return CAUSES[-1]

    def tick(self) -> None:
        now = self.clock.time()
        if self.last is None:
            self.last = now
            return
        elapsed, self.last = now - self.last, now
        if self.rate_per_s <= 0 or elapsed <= 0:
            return
        lemon = self.service.lemon
        gpus = self.world.config.gpus_per_node
        hcas = self.world.config.hcas_per_node
        for node in self.service.failure_candidates():
            rate = self.rate_per_s * (LEMON_FACTOR if node == lemon else 1.0)
            if self.rng.random() >= -math.expm1(-rate * elapsed):
                continue
            cause = self.pick_cause()
            repair = cause.repair_s * self.rng.uniform(0.5, 1.5)
            gpu = self.rng.randrange(gpus) if cause.name in GPU_CAUSES else None
            hca = self.rng.randrange(hcas) if cause.name == "ib-link" and hcas else None
            value = None if cause.kind == "gpu-lost" else cause.name
            name = inject_fault(
                self.world.client,
                cause.kind,
                node,
                gpu=gpu,
                value=value,
                repair_s=round(repair),
                hca=hca,
                source="random",
            )
            self.created.append(name)
