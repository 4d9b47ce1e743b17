"""Health policy: rules over snapshots -> verdicts (OK / SUSPECT / BAD / UNKNOWN) with reasons.

The same verdicts feed ``krea-ops gpus`` / ``nodes list``, the dashboard and the
node-health controller, so a rule is written once. Each rule is a pure function of a
snapshot and a ``HealthPolicy`` (thresholds from the settings file) and yields ``Reason``s
with the numbers in the sentence, one reason per finding (a hot GPU is one reason, its
margin and clock events details of it), worst first. What the rules mean:

* **UNKNOWN** - we cannot see: no telemetry for a GPU node, its exporter down, its samples
  older than ``telemetry_stale_s``, a kubelet that never reported Ready. Never shown as
  healthy.
* **BAD** - the node hurts a run now: NotReady (Ready False, or Unknown because the kubelet
  stopped posting status), with how long; a GPU lost or fallen off the bus (XID 79), a GPU
  above ``health_hot_c`` for the whole window, hardware/thermal/power-brake clock
  slowdown, uncorrectable memory errors (XID 48/95, ECC, failed row remap), NVLink errors
  (XID 74, recovery/CRC counts at or above ``health_nvlink_errors_bad``), an InfiniBand
  link that went down or a port not ACTIVE, IB error counts at or above
  ``health_ib_symbol_errors_bad``.
* **SUSPECT** - worth a look before it is BAD: hot but not sustained, above
  ``health_warm_c``, slowdown margin under ``health_slowdown_margin_c``, a few NVLink or IB
  errors, a saturated error counter (its rate reads 0), a pending row remap, application
  XIDs (13/31/43: usually the job, not the node), fabric congestion.

Apart from the verdict, ``activity_doubt`` says when a GPU's activity readings contradict
each other (tensor above SM, or either above busy time beyond
``health_activity_skew_ratio``): those values are shown marked, not as fact.

Thresholds are inclusive ("at or above"). XID classes follow NVIDIA's XID catalog.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from krea_ops import units
from krea_ops.model import (
    NVLINK_FAULT_COUNTERS,
    Doubt,
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
THERMAL_EVENTS = ("hw_thermal", "sw_thermal")  # hardware first: it names the code

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
    activity_skew_ratio: float = 0.1

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
            activity_skew_ratio=settings.health_activity_skew_ratio,
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


def _for(seconds: float) -> str:
    """How long a state has lasted, in the unit an operator says it in."""
    s = max(seconds, 0.0)
    if s < 120:
        return f"{s:.0f} s"
    if s < 120 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


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


# --- GPUs ------------------------------------------------------------------------------
#
# One reason per finding. A finding is one thing wrong with the GPU that an operator acts
# on once: a GPU running hot is one finding however many rules see it (the temperature,
# the margin to slowdown and the thermal clock events are three views of one cooling
# problem), and so is a memory error (its XID, the ECC count and the row remap it
# leaves). Each finding's reason has the severity of its worst part and that part's code;
# the other parts are details in the same sentence.

# A finding's parts: (severity, code, words). Where parts tie on severity, the first
# listed gives the code.
_Part = tuple[Severity, str, str]


def _finding(gpu: int, head: str, parts: list[_Part], port: str | None = None) -> Reason:
    worst = max(parts, key=lambda part: part[0])  # max() keeps the first of a tie
    return Reason(worst[0], worst[1], head + ", ".join(w for _, _, w in parts), gpu=gpu, port=port)


def _xids(g: GpuSample) -> dict[int, float | None]:
    """XID code -> events in the window (None: only the exporter's last-XID gauge)."""
    seen: dict[int, float | None] = {}
    for code, increase in (g.xid_increase or {}).items():
        if increase and increase > 0:
            seen[int(code)] = increase
    if g.xid_last is not None and g.xid_last not in seen:
        seen[g.xid_last] = None
    return dict(sorted(seen.items()))


def _xid_part(code: int, count: float | None) -> _Part:
    cls, sev, meaning = XID_CLASSES.get(code, ("other", SUSPECT, "see NVIDIA's XID catalog"))
    times = f" ({_n(count)}x)" if count else ""
    return (sev, f"xid_{cls}", f"XID {code}{times}: {meaning}")


def _thermal(g: GpuSample, p: HealthPolicy, events: frozenset[str]) -> Reason | None:
    """Temperature, margin to slowdown and thermal clock events: one cooling finding.
    Its code is the clock event where clocks are held down (what a run feels), else the
    worst temperature rule's."""
    t, t_min, m = g.temperature_c, g.temperature_min_window_c, g.slowdown_margin_c
    parts: list[_Part] = []
    if t is not None and t >= p.hot_c:
        if t_min is not None and t_min >= p.hot_c:
            parts.append(
                (BAD, "gpu_hot", f"at or above {p.hot_c:g} °C for the last {p.window_text}")
            )
        else:
            parts.append(
                (
                    SUSPECT,
                    "gpu_hot_transient",
                    f"above {p.hot_c:g} °C (not sustained over {p.window_text})",
                )
            )
    elif t is not None and t >= p.warm_c:
        parts.append((SUSPECT, "gpu_warm", f"warm (at or above {p.warm_c:g} °C)"))
    if m is not None and m <= 0:
        parts.append((BAD, "gpu_no_margin", "at its slowdown temperature"))
    elif m is not None and m < p.slowdown_margin_c:
        parts.append(
            (
                SUSPECT,
                "gpu_low_margin",
                f"{m:.0f} °C from thermal slowdown (< {p.slowdown_margin_c:g} °C)",
            )
        )
    held = [e for e in THERMAL_EVENTS if e in events]
    if held:
        what = "hardware and software" if len(held) == 2 else held[0].split("_")[0]
        what = {"hw": "hardware", "sw": "software"}.get(what, what)
        parts.insert(0, (BAD, f"gpu_{held[0]}", f"clocks held down by {what} thermal slowdown"))
    if not parts:
        return None
    if t is None:
        return _finding(g.index, f"GPU {g.index}: ", parts)
    # the temperature first, then the margin, then the clocks it costs
    words = [*parts[1:], parts[0]] if held else parts
    worst = max(parts, key=lambda part: part[0])
    text = ", ".join(w for _, _, w in words)
    return Reason(worst[0], worst[1], f"GPU {g.index} at {t:.0f} °C, {text}", gpu=g.index)


def gpu_reasons(g: GpuSample, p: HealthPolicy) -> list[Reason]:
    i = g.index
    xids = _xids(g)
    if g.up is False:
        why = (g.down_reason or "unreachable").replace("_", " ")
        after = f", after XID {', '.join(str(c) for c in xids)}" if xids else ""
        return [Reason(BAD, "gpu_lost", f"GPU {i} is not answering NVML ({why}{after})", gpu=i)]
    out: list[Reason] = []
    events = g.clock_events or frozenset()
    thermal = _thermal(g, p, events)
    if thermal is not None:
        out.append(thermal)
    # hardware slowdown is the engaged clock cut itself: with a thermal event it is the
    # thermal finding, with the power brake the brake's, otherwise a finding of its own
    if "hw_power_brake" in events:
        out.append(
            Reason(
                BAD,
                "gpu_hw_power_brake",
                f"GPU {i} clocks held down by {SLOWDOWN_EVENTS['hw_power_brake']}",
                gpu=i,
            )
        )
    elif "hw_slowdown" in events and not any(e in events for e in THERMAL_EVENTS):
        out.append(
            Reason(
                BAD,
                "gpu_hw_slowdown",
                f"GPU {i} clocks held down by {SLOWDOWN_EVENTS['hw_slowdown']}",
                gpu=i,
            )
        )
    memory: list[_Part] = []
    if g.ecc_uncorrected_increase:
        memory.append(
            (
                BAD,
                "gpu_ecc_uncorrected",
                f"{_n(g.ecc_uncorrected_increase)} uncorrectable ECC errors in the last "
                f"{p.window_text}",
            )
        )
    if g.row_remap_failed:
        memory.append((BAD, "gpu_row_remap_failed", "row remapping failed"))
    memory.extend(_xid_part(c, n) for c, n in xids.items() if _xid_class(c) == "memory")
    if g.row_remap_failed is not True and g.row_remap_pending:
        memory.append(
            (
                SUSPECT,
                "gpu_row_remap_pending",
                "a row remap is pending (takes effect at the next GPU reset)",
            )
        )
    if memory:
        out.append(_finding(i, f"GPU {i}: ", memory))
    nvlink: list[_Part] = []
    faults = g.nvlink_fault_increase or 0.0
    if faults > 0:
        nvlink.append(
            (
                BAD if faults >= p.nvlink_errors_bad else SUSPECT,
                "nvlink_errors",
                f"{_n(faults)} NVLink recovery/CRC errors in the last {p.window_text}",
            )
        )
    nvlink.extend(_xid_part(c, n) for c, n in xids.items() if _xid_class(c) == "nvlink")
    if nvlink:
        out.append(_finding(i, f"GPU {i}: ", nvlink))
    # the other XIDs: one finding per class (the bus, the job's, the rest)
    for cls in ("bus", "application", "other"):
        parts = [_xid_part(c, n) for c, n in xids.items() if _xid_class(c) == cls]
        if parts:
            out.append(_finding(i, f"GPU {i}: ", parts))
    return out


def _xid_class(code: int) -> str:
    return XID_CLASSES.get(code, ("other", SUSPECT, ""))[0]


def gpu_verdict(g: GpuSample, p: HealthPolicy) -> Verdict:
    return Verdict.of(gpu_reasons(g, p))


# Two GPM ratios of one window (tensor-pipe activity is a part of SM activity) agree to
# the exporter's rounding; busy time is NVML's own sample period (1/6-1 s) and GPM the
# exporter's interval, so those two may differ by what changed in between
# (``HealthPolicy.activity_skew_ratio``).
SAME_WINDOW_TOLERANCE = 0.01


def activity_doubt(g: GpuSample, p: HealthPolicy) -> Doubt | None:
    """Whether the GPU's activity readings contradict each other: tensor-core activity
    above SM activity, or either above busy time (NVML utilization) by more than
    ``p.activity_skew_ratio``. Unknown readings are not compared."""
    busy, sm, tensor = g.util_ratio, g.sm_active_ratio, g.tensor_active_ratio
    # (the common case first, without allocating: 32,768 GPUs a fleet read)
    top = sm if sm is not None else tensor
    if (busy is None or top is None or top <= busy + p.activity_skew_ratio) and (
        tensor is None or sm is None or tensor <= sm + SAME_WINDOW_TOLERANCE
    ):
        return None
    fields: set[str] = set()
    said: list[str] = []
    if tensor is not None and sm is not None and tensor > sm + SAME_WINDOW_TOLERANCE:
        fields |= {"tensor_active_ratio", "sm_active_ratio"}
        said.append(f"tensor {tensor:.0%} above SM {sm:.0%} (one GPM window)")
    if busy is not None:
        for name, key, value in (
            ("SM", "sm_active_ratio", sm),
            ("tensor", "tensor_active_ratio", tensor),
        ):
            if value is not None and value > busy + p.activity_skew_ratio:
                fields |= {key, "util_ratio"}
                said.append(f"{name} {value:.0%} above busy {busy:.0%}")
                break  # tensor above busy is SM above busy again, where SM is read
    if not said:
        return None
    skew = f"{p.activity_skew_ratio * 100:g} points"
    return Doubt(
        frozenset(fields),
        f"GPU {g.index}: activity readings disagree ({'; '.join(said)}; sampling skew "
        f"allows {skew})",
    )


# --- fabric ----------------------------------------------------------------------------


# the counters whose saturation is a finding (a saturated counter's rate reads 0)
_SATURABLE = frozenset({*IB_ERROR_COUNTERS, "link_downed", "port_xmit_wait"})


def ib_port_reasons(port: IbPortSample, p: HealthPolicy) -> list[Reason]:
    """A port's link trouble is one finding (a port down, the link going down in the
    window, the symbol and receive errors around it); saturated counters and congestion
    are findings of their own."""
    name = port.name
    out: list[Reason] = []
    link: list[tuple[Severity, str, str]] = []
    if port.state is not None and port.state.upper() not in ("ACTIVE", "ACTIVE_DEFER"):
        phys = f", physical {port.phys_state}" if port.phys_state else ""
        link.append((BAD, "ib_port_down", f"is {port.state}{phys}"))
    downed = port.error_increase.get("link_downed", 0.0)
    if downed > 0:
        link.append(
            (BAD, "ib_link_downed", f"link went down {_n(downed)}x in the last {p.window_text}")
        )
    errors = {c: port.error_increase.get(c, 0.0) for c in IB_ERROR_COUNTERS}
    total = sum(errors.values())
    if total > 0:
        worst = max(errors, key=lambda c: errors[c])
        link.append(
            (
                BAD if total >= p.ib_errors_bad else SUSPECT,
                f"ib_{worst}",
                f"{_n(total)} link errors in the last {p.window_text} (mostly {worst})",
            )
        )
    if link:
        sev, code, _ = max(link, key=lambda part: part[0])
        words = ", ".join(w for _, _, w in link)
        # "IB x is DOWN, ..." / "IB x link went down 1x, ..." / "IB x: 12 link errors ..."
        state = link[0][1] in ("ib_port_down", "ib_link_downed")
        joint = " " if state else ": "
        out.append(Reason(sev, code, f"IB {name}{joint}{words}", port=name))
    stuck = sorted(port.saturated & _SATURABLE)
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


def _ready_reasons(info: NodeInfo, now: float) -> list[Reason]:
    """Ready False or Unknown (the kubelet stopped posting status: the node lifecycle
    controller's mark) is a node that cannot run work: BAD, for how long and why, as
    kubectl shows both as NotReady. No Ready condition at all is a kubelet we have not
    heard from: UNKNOWN."""
    if info.ready is True:
        return []
    if info.ready is None and info.ready_status is None and info.ready_reason is None:
        if info.virtual:  # a virtual kubelet need not report conditions
            return []
        return [Reason(UNKNOWN, "node_ready_unknown", "kubelet has not reported Ready yet")]
    message = (info.ready_message or "").strip().rstrip(".")
    if message and len(message) <= 100:  # a sentence; some messages are a page of logs
        capital = message[0].isupper() and message[1:2].islower()
        why = message[0].lower() + message[1:] if capital else message
    elif info.ready_reason:
        why = info.ready_reason
    else:
        why = "no reason given" if info.ready is False else "kubelet stopped posting node status"
    lasted = None if info.ready_since is None else now - info.ready_since
    # a transition after now: the two clocks disagree, so how long is not known
    since = "" if lasted is None or lasted < 0 else f" for {_for(lasted)}"
    return [Reason(BAD, "node_not_ready", f"NotReady{since} ({why})")]


def node_reasons(
    info: NodeInfo | None,
    tel: NodeTelemetry | None,
    p: HealthPolicy,
    *,
    telemetry_error: str | None = None,
    now: float | None = None,
) -> list[Reason]:
    """Every finding on the node. ``now`` (Unix s, default the wall clock) dates how
    long a node has been NotReady."""
    out: list[Reason] = []
    if info is not None:
        out.extend(_ready_reasons(info, time.time() if now is None else now))
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
    silent = [g.index for g in tel.gpus if not has_readings(g)]
    if silent:
        out.append(_silent_gpus(silent, len(tel.gpus), tel.age_s))
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
    down: dict[int, list[NvLinkSample]] = {}
    for link in tel.nvlinks:
        if nvlink_reasons(link, up.get(link.gpu, False)):
            down.setdefault(link.gpu, []).append(link)
    for gpu, links in sorted(down.items()):
        out.append(_links_down(gpu, links))
    for port in tel.ib_ports:
        out.extend(ib_port_reasons(port, p))
    return out


def has_readings(g: GpuSample) -> bool:
    """Whether the GPU has any current reading: a GPU whose series all went stale at
    once (Prometheus dropped its exporter's target) is listed by its identity alone
    until the node's samples are ``telemetry_stale_s`` old."""
    return not (
        g.up is None
        and g.temperature_c is None
        and g.power_w is None
        and g.util_ratio is None
        and g.memory_used_bytes is None
    )


def _silent_gpus(indices: list[int], total: int, age_s: float | None) -> Reason:
    which = "its GPUs" if len(indices) == total else "GPU " + _and([str(i) for i in indices])
    when = f" (last sample {age_s:,.0f} s ago)" if age_s is not None else ""
    return Reason(UNKNOWN, "gpu_no_readings", f"no current readings from {which}{when}")


def _links_down(gpu: int, links: list[NvLinkSample]) -> Reason:
    """A GPU's links that are down while its others are up: one finding per GPU."""
    if len(links) == 1:
        return nvlink_reasons(links[0], True)[0]
    names = _and([f"link{x.link}" for x in sorted(links, key=lambda x: x.link)])
    return Reason(
        BAD,
        "nvlink_down",
        f"NVLink gpu{gpu}/{names} are down while the GPU's other links are up",
        gpu=gpu,
        port=links[0].name,
    )


def node_verdict(
    info: NodeInfo | None,
    tel: NodeTelemetry | None,
    p: HealthPolicy,
    *,
    telemetry_error: str | None = None,
    now: float | None = None,
) -> Verdict:
    return Verdict.of(node_reasons(info, tel, p, telemetry_error=telemetry_error, now=now))


def fleet_views(
    nodes: Sequence[NodeInfo],
    fleet: FleetTelemetry | None,
    p: HealthPolicy,
    *,
    telemetry_error: str | None = None,
    now: float | None = None,
) -> list[NodeView]:
    """One view per node, nodes that need attention first (BAD, UNKNOWN, SUSPECT, OK;
    then by name). ``fleet`` None means telemetry failed (``telemetry_error`` says why):
    GPU nodes are then UNKNOWN, never OK."""
    tel = fleet.nodes if fleet is not None else {}
    at = time.time() if now is None else now
    views = [
        NodeView(
            info=n,
            telemetry=tel.get(n.name),
            verdict=node_verdict(n, tel.get(n.name), p, telemetry_error=telemetry_error, now=at),
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
