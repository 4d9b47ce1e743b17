"""Health policy: rules over snapshots -> verdicts (OK / SUSPECT / BAD / UNKNOWN) with reasons.

The same verdicts feed ``krea-ops gpus`` / ``nodes list``, the dashboard and the
node-health controller, so a rule is written once. Each rule is a pure function of a
snapshot and a ``HealthPolicy`` (thresholds from the settings file) and yields ``Reason``s
with the numbers in the sentence. What the rules mean:

* **UNKNOWN** - we cannot see: no telemetry for a GPU node, its exporter down, its samples
  older than ``telemetry_stale_s``, the kubelet not reporting. Never shown as healthy.
* **BAD** - the node hurts a run now: a GPU lost or fallen off the bus (XID 79), a GPU
  above ``health_hot_c`` for the whole window, hardware/thermal/power-brake clock
  slowdown, uncorrectable memory errors (XID 48/95, ECC, failed row remap), NVLink errors
  (XID 74, recovery/CRC counts at or above ``health_nvlink_errors_bad``), an InfiniBand
  link that went down or a port not ACTIVE, IB error counts at or above
  ``health_ib_symbol_errors_bad``, node NotReady.
* **SUSPECT** - worth a look before it is BAD: hot but not sustained, above
  ``health_warm_c``, slowdown margin under ``health_slowdown_margin_c``, a few NVLink or IB
  errors, a saturated error counter (its rate reads 0), a pending row remap, application
  XIDs (13/31/43: usually the job, not the node), fabric congestion.

Thresholds are inclusive ("at or above"). XID classes follow NVIDIA's XID catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from krea_ops import units
from krea_ops.model import (
    NVLINK_FAULT_COUNTERS,
    FleetTelemetry,
    GpuSample,
    IbPortSample,
    NodeInfo,
    NodeTelemetry,
    NodeView,
    NvLinkSample,
    Reason,
    Severity,
    Verdict,
)
from krea_ops.settings import Settings

BAD, SUSPECT, UNKNOWN = Severity.BAD, Severity.SUSPECT, Severity.UNKNOWN

# clock-event reasons that mean the GPU is running slower than it should
SLOWDOWN_EVENTS = {
    "hw_thermal": "hardware thermal slowdown",
    "sw_thermal": "software thermal slowdown",
    "hw_power_brake": "power-brake slowdown (external power signal)",
    "hw_slowdown": "hardware slowdown",
}

# XID code -> (class, severity, what it means)
XID_CLASSES: dict[int, tuple[str, Severity, str]] = {
    79: ("bus", BAD, "GPU has fallen off the bus"),
    48: ("memory", BAD, "double-bit ECC error"),
    95: ("memory", BAD, "uncontained ECC error"),
    94: ("memory", SUSPECT, "contained ECC error (the process was killed, the GPU lives)"),
    63: ("memory", SUSPECT, "ECC page retirement or row remap recorded"),
    64: ("memory", BAD, "ECC page retirement or row remap failed"),
    74: ("nvlink", BAD, "NVLink error"),
    13: ("application", SUSPECT, "graphics engine exception (usually the job, not the node)"),
    31: ("application", SUSPECT, "GPU memory page fault (usually the job, not the node)"),
    43: ("application", SUSPECT, "GPU stopped processing (usually the job, not the node)"),
}

# IB counters that are errors (not traffic): the ones that count physical or link trouble
IB_ERROR_COUNTERS = (
    "symbol_error",
    "port_rcv_errors",
    "link_error_recovery",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
# IB PortXmitWait counts ticks in which the port had data to send and sent none; NVIDIA's
# hardware ticks once per 8 bytes the port could have sent, whatever its width ("Lost
# bytes per port = Counter*(tick+1)", tick 7: ibdiagnet manual, "Congestion Assessment
# on InfiniBand Links"; also NVIDIA/ib-traffic-monitor#3)
XMIT_WAIT_BYTES_PER_TICK = 8.0


@dataclass(frozen=True)
class HealthPolicy:
    hot_c: float = 78.0
    warm_c: float = 75.0
    slowdown_margin_c: float = 5.0
    nvlink_errors_bad: float = 100.0
    ib_errors_bad: float = 100.0
    xmit_wait_ratio_suspect: float = 0.2
    window_s: float = 300.0
    busy_not_work_gap: float = 0.3

    @staticmethod
    def from_settings(settings: Settings) -> HealthPolicy:
        return HealthPolicy(
            hot_c=settings.health_hot_c,
            warm_c=settings.health_warm_c,
            slowdown_margin_c=settings.health_slowdown_margin_c,
            nvlink_errors_bad=settings.health_nvlink_errors_bad,
            ib_errors_bad=settings.health_ib_symbol_errors_bad,
            xmit_wait_ratio_suspect=settings.health_xmit_wait_ratio_suspect,
            window_s=settings.telemetry_window_s,
            busy_not_work_gap=settings.health_busy_not_work_gap,
        )

    @property
    def window_text(self) -> str:
        w = self.window_s
        return f"{w / 60:g} min" if w >= 120 else f"{w:g} s"


def _n(value: float) -> str:
    """A count over the window. Prometheus' increase() extrapolates to the window's
    edges, so 1.07 means "about one": print whole numbers, and "<1" below one."""
    if 0 < abs(value) < 1:
        return "<1"
    return f"{value:,.0f}"


# --- GPUs ------------------------------------------------------------------------------


def busy_idle_gap(util_ratio: float | None, tensor_active_ratio: float | None) -> float | None:
    """Busy time minus tensor-core activity (0-1): how much of the time the GPU reads as
    "100 % utilized" its tensor cores do nothing. The honest "wasted GPU" signal: an idle
    GPU has no gap, an input-bound one a large gap."""
    if util_ratio is None or tensor_active_ratio is None:
        return None
    return util_ratio - tensor_active_ratio


def busy_not_work(
    util_ratio: float | None, tensor_active_ratio: float | None, p: HealthPolicy
) -> bool:
    """Busy but not doing math: the gap at or above ``busy_not_work_gap``. An efficiency
    signal the screens mark, not a health finding (no verdict changes)."""
    gap = busy_idle_gap(util_ratio, tensor_active_ratio)
    return gap is not None and gap >= p.busy_not_work_gap


def gpu_reasons(g: GpuSample, p: HealthPolicy) -> list[Reason]:
    i = g.index
    out: list[Reason] = []
    if g.up is False:
        why = (g.down_reason or "unreachable").replace("_", " ")
        out.append(Reason(BAD, "gpu_lost", f"GPU {i} is not answering NVML ({why})", gpu=i))
        return out
    t, t_min = g.temperature_c, g.temperature_min_window_c
    if t is not None and t >= p.hot_c:
        if t_min is not None and t_min >= p.hot_c:
            out.append(
                Reason(
                    BAD,
                    "gpu_hot",
                    f"GPU {i} at {t:.0f} °C, at or above {p.hot_c:g} °C for the last "
                    f"{p.window_text}",
                    gpu=i,
                )
            )
        else:
            out.append(
                Reason(
                    SUSPECT,
                    "gpu_hot_transient",
                    f"GPU {i} at {t:.0f} °C, above {p.hot_c:g} °C (not sustained over "
                    f"{p.window_text})",
                    gpu=i,
                )
            )
    elif t is not None and t >= p.warm_c:
        out.append(
            Reason(SUSPECT, "gpu_warm", f"GPU {i} at {t:.0f} °C (warm: {p.warm_c:g} °C)", gpu=i)
        )
    m = g.slowdown_margin_c
    if m is not None and m <= 0:
        out.append(
            Reason(BAD, "gpu_no_margin", f"GPU {i} has reached its slowdown temperature", gpu=i)
        )
    elif m is not None and m < p.slowdown_margin_c:
        out.append(
            Reason(
                SUSPECT,
                "gpu_low_margin",
                f"GPU {i} is {m:.0f} °C from thermal slowdown (< {p.slowdown_margin_c:g} °C)",
                gpu=i,
            )
        )
    for event in sorted((g.clock_events or frozenset()) & SLOWDOWN_EVENTS.keys()):
        out.append(
            Reason(
                BAD, f"gpu_{event}", f"GPU {i} clocks held down: {SLOWDOWN_EVENTS[event]}", gpu=i
            )
        )
    out.extend(_xid_reasons(g))
    if g.ecc_uncorrected_increase:
        out.append(
            Reason(
                BAD,
                "gpu_ecc_uncorrected",
                f"GPU {i}: {_n(g.ecc_uncorrected_increase)} uncorrectable ECC errors in the "
                f"last {p.window_text}",
                gpu=i,
            )
        )
    if g.row_remap_failed:
        out.append(Reason(BAD, "gpu_row_remap_failed", f"GPU {i}: row remapping failed", gpu=i))
    elif g.row_remap_pending:
        out.append(
            Reason(
                SUSPECT,
                "gpu_row_remap_pending",
                f"GPU {i}: a row remap is pending (takes effect at the next GPU reset)",
                gpu=i,
            )
        )
    faults = g.nvlink_fault_increase or 0.0
    if faults > 0:
        sev = BAD if faults >= p.nvlink_errors_bad else SUSPECT
        out.append(
            Reason(
                sev,
                "nvlink_errors",
                f"GPU {i}: {_n(faults)} NVLink recovery/CRC errors in the last {p.window_text}",
                gpu=i,
            )
        )
    return out


def _xid_reasons(g: GpuSample) -> list[Reason]:
    i = g.index
    seen: dict[int, float | None] = {}
    for code, increase in (g.xid_increase or {}).items():
        if increase and increase > 0:
            seen[int(code)] = increase
    if g.xid_last is not None and g.xid_last not in seen:
        seen[g.xid_last] = None  # the exporter's recent-XID gauge, without a count
    out = []
    for code in sorted(seen):
        cls, sev, meaning = XID_CLASSES.get(code, ("other", SUSPECT, "see NVIDIA's XID catalog"))
        count = seen[code]
        times = f" ({_n(count)}x)" if count else ""
        out.append(Reason(sev, f"xid_{cls}", f"GPU {i}: XID {code}{times}: {meaning}", gpu=i))
    return out


def gpu_verdict(g: GpuSample, p: HealthPolicy) -> Verdict:
    return Verdict.of(gpu_reasons(g, p))


# --- fabric ----------------------------------------------------------------------------


def ib_port_reasons(port: IbPortSample, p: HealthPolicy) -> list[Reason]:
    name = port.name
    out: list[Reason] = []
    if port.state is not None and port.state.upper() not in ("ACTIVE", "ACTIVE_DEFER"):
        phys = f", physical {port.phys_state}" if port.phys_state else ""
        out.append(Reason(BAD, "ib_port_down", f"IB {name} is {port.state}{phys}", port=name))
    downed = port.error_increase.get("link_downed", 0.0)
    if downed > 0:
        out.append(
            Reason(
                BAD,
                "ib_link_downed",
                f"IB {name} link went down {_n(downed)}x in the last {p.window_text}",
                port=name,
            )
        )
    errors = {c: port.error_increase.get(c, 0.0) for c in IB_ERROR_COUNTERS}
    total = sum(errors.values())
    if total > 0:
        worst = max(errors, key=lambda c: errors[c])
        sev = BAD if total >= p.ib_errors_bad else SUSPECT
        out.append(
            Reason(
                sev,
                f"ib_{worst}",
                f"IB {name}: {_n(total)} link errors in the last {p.window_text} (mostly {worst})",
                port=name,
            )
        )
    stuck = sorted(port.saturated & (set(IB_ERROR_COUNTERS) | {"link_downed", "port_xmit_wait"}))
    if stuck:
        out.append(
            Reason(
                SUSPECT,
                "ib_counter_saturated",
                f"IB {name}: {', '.join(stuck)} saturated, its rate reads 0 "
                "(clear with perfquery -x)",
                port=name,
            )
        )
    ratio = xmit_wait_ratio(port)
    if ratio is not None and ratio >= p.xmit_wait_ratio_suspect:
        out.append(
            Reason(
                SUSPECT,
                "ib_congestion",
                f"IB {name}: waiting for credit ~{ratio:.0%} of the time (congestion)",
                port=name,
            )
        )
    return out


def xmit_wait_bytes_per_s(port: IbPortSample) -> float | None:
    """The bandwidth the port could have sent in the ticks it waited (PortXmitWait x 8
    bytes per tick): NVIDIA's "lost bandwidth" of the port, in bytes/s."""
    if port.xmit_wait_per_s is None:
        return None
    return port.xmit_wait_per_s * XMIT_WAIT_BYTES_PER_TICK


def xmit_wait_ratio(port: IbPortSample) -> float | None:
    """The share of the time (0-1) the port had data to send and sent nothing for want
    of credit: the waited ticks' bandwidth over the link speed, a tick being the time
    the port takes to send 8 bytes. At most 1 (a link that retrained to a lower speed
    inside the window can read more)."""
    lost = xmit_wait_bytes_per_s(port)
    if lost is None or not port.rate_bytes_per_s:
        return None
    return min(lost / port.rate_bytes_per_s, 1.0)


def nvlink_reasons(
    link: NvLinkSample, siblings_up: bool, p: HealthPolicy | None = None
) -> list[Reason]:
    """A link down while its GPU's other links are up is BAD. With a policy, the link's
    own recovery/CRC errors are judged too (per-link view; the node verdict judges them
    per GPU instead, summed over links, so they are not counted twice)."""
    out: list[Reason] = []
    if link.up is False and siblings_up:
        out.append(
            Reason(
                BAD,
                "nvlink_down",
                f"NVLink {link.name} is down while the GPU's other links are up",
                gpu=link.gpu,
                port=link.name,
            )
        )
    if p is not None:
        rate = sum(link.error_rate_per_s.get(c, 0.0) for c in NVLINK_FAULT_COUNTERS)
        in_window = rate * p.window_s
        if in_window > 0:
            out.append(
                Reason(
                    BAD if in_window >= p.nvlink_errors_bad else SUSPECT,
                    "nvlink_errors",
                    f"NVLink {link.name}: ~{_n(in_window)} recovery/CRC errors in the last "
                    f"{p.window_text}",
                    gpu=link.gpu,
                    port=link.name,
                )
            )
    return out


# --- nodes -----------------------------------------------------------------------------


def gpus_with_links_up(tel: NodeTelemetry) -> dict[int, bool]:
    """GPU -> whether any of its NVLinks is up: from the links read, or from the GPU's
    own count of links up (a fleet-wide read has the per-link rows of the links that
    are down only, so the links' own states cannot say that the others are up)."""
    up: dict[int, bool] = {}
    for g in tel.gpus:
        if g.nvlinks_up is not None:
            up[g.index] = g.nvlinks_up > 0
    for link in tel.nvlinks:
        up[link.gpu] = up.get(link.gpu, False) or bool(link.up)
    return up


def node_reasons(
    info: NodeInfo | None,
    tel: NodeTelemetry | None,
    p: HealthPolicy,
    *,
    telemetry_error: str | None = None,
) -> list[Reason]:
    out: list[Reason] = []
    if info is not None:
        if info.ready is False:
            out.append(
                Reason(BAD, "node_not_ready", f"node NotReady ({info.ready_reason or 'no reason'})")
            )
        elif info.ready is None and not info.virtual:
            out.append(
                Reason(UNKNOWN, "node_ready_unknown", "kubelet is not reporting (Ready unknown)")
            )
    expects_telemetry = info is None or (not info.virtual and (info.gpu_capacity or 0) > 0)
    if tel is None:
        if expects_telemetry:
            why = telemetry_error or "no exporter data for this node"
            out.append(Reason(UNKNOWN, "no_telemetry", f"no telemetry: {why}"))
        return out
    if tel.exporter_up is False:
        out.append(Reason(UNKNOWN, "exporter_down", f"exporter down: {tel.error or 'no answer'}"))
        return out
    if tel.stale:
        age = f"{units.age(tel.age_s)} ago" if tel.age_s is not None else "too long ago"
        out.append(Reason(UNKNOWN, "telemetry_stale", f"last sample {age}"))
        return out
    for g in tel.gpus:
        out.extend(gpu_reasons(g, p))
    reported = tel.gpus_reported
    if info is not None and info.gpu_capacity and reported and reported < info.gpu_capacity:
        out.append(
            Reason(
                SUSPECT,
                "gpu_missing",
                f"only {reported} of {info.gpu_capacity} GPUs report to the exporter",
            )
        )
    up = gpus_with_links_up(tel)
    for link in tel.nvlinks:
        out.extend(nvlink_reasons(link, up.get(link.gpu, False)))
    for port in tel.ib_ports:
        out.extend(ib_port_reasons(port, p))
    return out


def node_verdict(
    info: NodeInfo | None,
    tel: NodeTelemetry | None,
    p: HealthPolicy,
    *,
    telemetry_error: str | None = None,
) -> Verdict:
    return Verdict.of(node_reasons(info, tel, p, telemetry_error=telemetry_error))


def fleet_views(
    nodes: Sequence[NodeInfo],
    fleet: FleetTelemetry | None,
    p: HealthPolicy,
    *,
    telemetry_error: str | None = None,
) -> list[NodeView]:
    """One view per node, nodes that need attention first (BAD, UNKNOWN, SUSPECT, OK;
    then by name). ``fleet`` None means telemetry failed (``telemetry_error`` says why):
    GPU nodes are then UNKNOWN, never OK."""
    tel = fleet.nodes if fleet is not None else {}
    views = [
        NodeView(
            info=n,
            telemetry=tel.get(n.name),
            verdict=node_verdict(n, tel.get(n.name), p, telemetry_error=telemetry_error),
        )
        for n in nodes
    ]
    views.sort(key=lambda v: (-v.verdict.severity, v.info.name))
    return views


def severities(views: Iterable[NodeView]) -> dict[str, Severity]:
    return {v.info.name: v.verdict.severity for v in views}


def count_by_severity(views: Iterable[NodeView]) -> Mapping[Severity, int]:
    counts = dict.fromkeys(Severity, 0)
    for v in views:
        counts[v.verdict.severity] += 1
    return counts
