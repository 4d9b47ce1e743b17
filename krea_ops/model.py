"""Frozen snapshot dataclasses shared by the core, the CLI and the dashboard.

Rules every producer follows:

* A value the source did not report, or that is too old to trust, is ``None`` (never 0).
* Units are in the field names (``_c``, ``_w``, ``_bytes``, ``_ratio`` 0-1, ``_per_s``).
* Timestamps are Unix seconds (float); ages are seconds before ``collected_at``.
* Counter rates are per second over the telemetry window; ``_increase`` fields are the
  increase over that window (``None`` when fewer than two samples fell in it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any

EMPTY: Mapping[str, Any] = MappingProxyType({})


class Severity(enum.IntEnum):
    """Ordered so that ``max()`` gives the worst. UNKNOWN ranks above SUSPECT: a node we
    cannot see needs a look before one that is merely suspicious, but it is not BAD."""

    OK = 0
    SUSPECT = 1
    UNKNOWN = 2
    BAD = 3

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Reason:
    """One rule that fired: ``code`` is stable (``gpu_hot``, ``ib_symbol_errors``...),
    ``message`` is one human sentence with the numbers in it."""

    severity: Severity
    code: str
    message: str
    gpu: int | None = None  # the GPU it is about, if any
    port: str | None = None  # "mlx5_0/1" or "gpu3/link7", if any


@dataclass(frozen=True)
class Verdict:
    severity: Severity
    reasons: tuple[Reason, ...] = ()

    @staticmethod
    def of(reasons: tuple[Reason, ...] | list[Reason]) -> Verdict:
        """The worst first: by severity, then what it is about (the node itself, its
        GPUs in index order, their NVLinks, its InfiniBand ports); reasons that tie keep
        the order the rules gave them (the sort is stable)."""
        if not reasons:
            return OK_VERDICT  # (most GPUs and nodes of a fleet: no sort, no new object)
        rs = tuple(sorted(reasons, key=_reason_order))
        return Verdict(rs[0].severity, rs)

    @property
    def summary(self) -> str:
        return "; ".join(r.message for r in self.reasons)


OK_VERDICT = Verdict(Severity.OK, ())


# what a reason is about, in the order a node's reasons list them: (gpu set, port set) ->
# the node itself, an InfiniBand port, a GPU, one of its NVLinks
_SCOPE = {(False, False): 0, (True, False): 1, (True, True): 2, (False, True): 3}


def _reason_order(r: Reason) -> tuple[int, int, int, str]:
    scope = _SCOPE[(r.gpu is not None, r.port is not None)]
    return (-r.severity, scope, -1 if r.gpu is None else r.gpu, r.port or "")


@dataclass(frozen=True)
class Doubt:
    """Readings of one GPU that contradict each other (tensor-core activity above SM
    activity, or either above busy time by more than sampling explains). The values are
    shown marked, never as fact; the verdict does not change (no health rule reads
    them). ``fields`` are the ``GpuSample`` fields that disagree."""

    fields: frozenset[str]
    message: str


# --- telemetry -------------------------------------------------------------------------


# the per-GPU NVLink error sums our exporter serves (``krea_gpu_nvlink_errors_total``)
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
# NVLink error counters that mean a fault (replay alone is the link layer's routine retry)
NVLINK_FAULT_COUNTERS = ("recovery", "crc_flit", "crc_data")

# Per-node folds of a node's own readings that our exporter publishes with every scrape
# (krea_ops/exporters/folds.py), so that a verdicts-only read over thousands of nodes
# (``nodes list``, node-health) reads one series per node and reading instead of one per
# GPU, port and counter, from the same scrape as the readings themselves
# (krea_ops/telemetry/summary.py): summary key -> series name. ``_total`` ones are
# counters (sums of the per-GPU or per-port counters), the others gauges; the uniform ones
# exist only where every GPU of the node reports the same value.
NODE_FOLDS: dict[str, str] = {
    "gpus": "krea_node_gpus",
    "gpus_up_min": "krea_node_gpus_up_min",
    "temperature_max": "krea_node_gpu_temperature_max_celsius",
    "margin_min": "krea_node_gpu_slowdown_margin_min_celsius",
    "clock_masks": "krea_node_gpu_clock_event_masks",
    "slowdown_gpus": "krea_node_gpus_slowed_down",
    "xid_last_max": "krea_node_gpu_xid_last_max",
    "xids": "krea_node_gpu_xid_errors_total",
    "ecc_uncorrected": "krea_node_gpu_ecc_uncorrected_errors_total",
    "row_remap_max": "krea_node_gpu_row_remap_max",
    "nvlink_faults": "krea_node_nvlink_fault_errors_total",
    "nvlink_fault_gpus": "krea_node_nvlink_fault_gpus",
    "nvlink_gpus": "krea_node_nvlink_gpus",
    "nvlinks_down": "krea_node_nvlinks_down",
    "ib_ports_not_active": "krea_node_ib_ports_not_active",
    "ib_errors": "krea_node_ib_errors_total",
    "ib_counted": "krea_node_ib_error_counters_total",
    "ib_error_series": "krea_node_ib_error_series",
    "ib_ports": "krea_node_ib_ports",
    "ib_saturated_max": "krea_node_ib_counters_saturated_max",
    "ib_saturated_any": "krea_node_ib_counters_saturated_any",
    "nvlink_counted": "krea_node_nvlink_errors_total",
    "nvlink_error_series": "krea_node_nvlink_error_series",
    "memory_total_uniform": "krea_node_gpu_memory_total_bytes",
    "power_limit_uniform": "krea_node_gpu_power_limit_watts",
    "xid_monitored_uniform": "krea_node_gpu_xid_monitored",
    "nvlink_links_uniform": "krea_node_gpu_nvlink_links",
    "nvlink_links_up_uniform": "krea_node_gpu_nvlink_links_up",
    "ib_phys_state_uniform": "krea_node_ib_physical_state_id",
    "ib_rate_uniform": "krea_node_ib_rate_bytes_per_second",
}


def window_increase(rate_per_s: float, total: float | None, window_s: float) -> float:
    """A counter's increase over the window, from its rate over the window, and at most
    its value now (``total``, where it was read).

    Prometheus' rate() and increase() extrapolate the samples in the window to the
    window's edges, so a counter that did all its counting inside the window (a new
    one, or one cleared since) reads more "in the window" than it holds at all: 10
    errors counted, 10.18 in the last 5 min. It cannot have gained more in the window
    than it holds now: IB PMA counters saturate rather than wrap, and where one was
    cleared inside the window what it counted before the clear is gone from its value
    too, so the count is then the count since the clear."""
    increase = rate_per_s * window_s
    return total if total is not None and increase > total else increase


@dataclass(frozen=True)
class GpuSample:
    node: str
    index: int
    uuid: str | None = None
    model: str | None = None
    pci_bus_id: str | None = None
    up: bool | None = None  # False: fell off the bus / reset required
    down_reason: str | None = None
    temperature_c: float | None = None
    # lowest temperature over the window: above the hot threshold means *sustained*
    temperature_min_window_c: float | None = None
    memory_temperature_c: float | None = None
    slowdown_margin_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_hz: float | None = None
    sm_clock_max_hz: float | None = None  # its maximum (NVML max clock info)
    util_ratio: float | None = None  # NVML "GPU utilization": busy time, not efficiency
    tensor_active_ratio: float | None = None
    sm_active_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    # clock-event reasons active now (``sw_thermal``, ``hw_power_brake`` ...); None unknown
    clock_events: frozenset[str] | None = None
    xid_last: int | None = None
    # XID code -> events in the window
    xid_increase: Mapping[int, float] | None = None
    ecc_uncorrected_increase: float | None = None
    row_remap_pending: bool | None = None
    row_remap_failed: bool | None = None
    # summed over the GPU's links, per counter (replay, recovery, crc_flit, crc_data)
    nvlink_errors_total: float | None = None
    nvlink_error_increase: Mapping[str, float] | None = None
    # NVLINK_FAULT_COUNTERS summed over links and counters: errors in the window (read
    # as one rate per GPU, or, when not given, summed from nvlink_error_increase)
    nvlink_fault_increase: float | None = None
    sampled_at: float | None = None
    # NVLinks the GPU reports, and how many of them are up (krea_nvlink_state)
    nvlinks_total: int | None = None
    nvlinks_up: int | None = None

    def __post_init__(self) -> None:
        inc = self.nvlink_error_increase
        if self.nvlink_fault_increase is None and inc is not None:
            faults = sum(inc.get(c, 0.0) for c in NVLINK_FAULT_COUNTERS)
            object.__setattr__(self, "nvlink_fault_increase", faults)


_GPU_DEFAULTS = {f.name: f.default for f in fields(GpuSample)}


def gpu_sample(values: Mapping[str, Any]) -> GpuSample:
    """``GpuSample(**values)``, for the assembler at fleet scale: a frozen dataclass'
    ``__init__`` sets each of the 31 fields through ``object.__setattr__`` (~5 us a
    sample, 0.17 s for 32,768 GPUs); this fills the instance at once (~0.5 us). Same
    fields, defaults and ``__post_init__``; an unknown or missing field is a TypeError."""
    if values.keys() == _GPU_DEFAULTS.keys():  # every field given: no defaults to fill
        d = values
    else:
        d = dict(_GPU_DEFAULTS)
        d.update(values)
        if len(d) != len(_GPU_DEFAULTS):
            raise TypeError(f"not GpuSample fields: {sorted(set(values) - set(_GPU_DEFAULTS))}")
        if d["node"] is MISSING or d["index"] is MISSING:
            raise TypeError("a GpuSample needs its node and index")
    obj = object.__new__(GpuSample)
    obj.__dict__.update(d)
    obj.__post_init__()
    return obj


@dataclass(frozen=True)
class NvLinkSample:
    node: str
    gpu: int
    link: int
    up: bool | None = None
    # counter (replay, recovery, crc_flit, crc_data) -> value
    errors_total: Mapping[str, float] = field(default_factory=dict)
    error_rate_per_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"gpu{self.gpu}/link{self.link}"


@dataclass(frozen=True)
class IbPortSample:
    node: str
    device: str
    port: str
    state: str | None = None  # "ACTIVE", "DOWN" ...
    phys_state: str | None = None  # "LinkUp", "Polling" ...
    rate_bytes_per_s: float | None = None  # link speed
    rx_bytes_per_s: float | None = None
    tx_bytes_per_s: float | None = None
    xmit_wait_per_s: float | None = None  # ticks per second the port had data but no credit
    # counter (symbol_error, link_downed, link_error_recovery, port_rcv_errors,
    # port_rcv_remote_physical_errors, port_xmit_discards, local_link_integrity_errors,
    # excessive_buffer_overrun_errors) -> value since the counter was last cleared
    errors_total: Mapping[str, float] = field(default_factory=dict)
    error_rate_per_s: Mapping[str, float] = field(default_factory=dict)
    error_increase: Mapping[str, float] = field(default_factory=dict)
    saturated: frozenset[str] = frozenset()  # counters stuck at all-ones

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(frozen=True)
class NodeTelemetry:
    node: str
    # None: no data at all for this node; False: its exporter is down (scrape failed)
    exporter_up: bool | None = None
    last_sample_at: float | None = None  # newest sample time for this node
    age_s: float | None = None  # collected_at - last_sample_at
    stale: bool = False  # older than the staleness limit: readings were dropped
    error: str | None = None  # why there is no data (scrape error text)
    gpus: tuple[GpuSample, ...] = ()
    nvlinks: tuple[NvLinkSample, ...] = ()
    ib_ports: tuple[IbPortSample, ...] = ()
    # GPUs the exporter reports, where they were counted instead of read one by one (a
    # verdicts-only read of a node its summary shows clean: ``gpus`` is then empty)
    gpu_count: int | None = None
    # why this node's GPUs and ports were read one by one in a summarized read (None:
    # not summarized, or clean); counted under ``nodes list``'s table
    detail_reason: str | None = None

    @property
    def gpus_reported(self) -> int:
        """GPUs the exporter reports: counted, or the samples read."""
        return self.gpu_count if self.gpu_count is not None else len(self.gpus)


@dataclass(frozen=True)
class FleetTelemetry:
    source: str  # "prometheus http://..." or "scrape (N exporters)" or "none"
    collected_at: float
    window_s: float
    nodes: Mapping[str, NodeTelemetry] = field(default_factory=dict)
    # source-level problems (Prometheus down, a query failed): one line each
    errors: tuple[str, ...] = ()
    # metric dialects found: "krea", "dcgm", "node_exporter"
    dialects: frozenset[str] = frozenset()
    # reading -> the nodes it was not asked of: their node summaries prove it 0 there
    # (Prometheus with krea-ops' recording rules; docs/metrics.md, "Node summaries")
    skipped: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


# --- cluster ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True)
class NodeInfo:
    """A Kubernetes node as the console needs it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool | None = None  # None: condition missing or Unknown
    ready_reason: str | None = None
    # the Ready condition as the API has it: status "True" | "False" | "Unknown" (None:
    # no condition), its message, and when it last changed (lastTransitionTime, Unix s)
    ready_status: str | None = None
    ready_message: str | None = None
    ready_since: float | None = None
    gpu_capacity: int | None = None
    gpu_allocatable: int | None = None
    virtual: bool = False  # a virtual-kubelet node
    created_at: float | None = None

    @property
    def schedulable(self) -> bool:
        return (
            not self.unschedulable
            and self.ready is True
            and not any(t.effect in ("NoSchedule", "NoExecute") for t in self.taints)
        )


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    node: str | None
    phase: str | None
    gpus: int = 0  # nvidia.com/gpu requested (limits, else requests), all containers
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner: str | None = None  # "Kind/name" of the controller
    created_at: float | None = None
    started_at: float | None = None


@dataclass(frozen=True)
class NodeView:
    """What ``nodes list`` / ``nodes show`` and the dashboard's fleet rows show."""

    info: NodeInfo
    telemetry: NodeTelemetry | None
    verdict: Verdict
    pods: tuple[PodInfo, ...] | None = None  # only filled for ``nodes show``
