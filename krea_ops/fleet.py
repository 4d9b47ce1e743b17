"""The fleet in one snapshot: nodes from the API, telemetry from Prometheus or the
exporters, verdicts from the health policy. ``krea-ops gpus``, ``fabric``, ``nodes`` and
the dashboard's fleet screen all read through ``load_fleet``.

Telemetry failing (Prometheus down) does not fail the snapshot: the nodes are still
listed, every GPU node is UNKNOWN with the reason, and ``telemetry_error`` carries the
one-line error for the caller to print (and exit 1 on).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from krea_ops.errors import Unavailable
from krea_ops.health import (
    IB_ERROR_COUNTERS,
    HealthPolicy,
    activity_doubt,
    busy_not_work,
    fleet_views,
    gpus_with_links_up,
    has_readings,
    ib_port_reasons,
    nvlink_reasons,
    xmit_wait_bytes_per_s,
    xmit_wait_ratio,
)
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
    window_increase,
)

if TYPE_CHECKING:
    from krea_ops.kube.cluster import Cluster
    from krea_ops.telemetry.source import TelemetrySource


@dataclass(frozen=True)
class FleetSnapshot:
    views: tuple[NodeView, ...]
    telemetry: FleetTelemetry | None
    telemetry_error: str | None
    source: str | None  # "prometheus http://..." / "scrape of N exporters"
    collected_at: float
    policy: HealthPolicy

    def view(self, node: str) -> NodeView | None:
        return next((v for v in self.views if v.info.name == node), None)


def judged_error(snapshot: FleetSnapshot) -> str | None:
    """Why ``snapshot``'s verdicts cannot be acted on, or None: no telemetry, or a read in
    which some queries failed. A failed query leaves its readings missing on every node
    (every GPU temperature, say), so a node would pass for OK on what was not read: for
    automation such a read is no read (the read commands show it with a warning)."""
    if snapshot.telemetry_error:
        return snapshot.telemetry_error
    if snapshot.telemetry is not None and snapshot.telemetry.errors:
        return "telemetry read incomplete: " + "; ".join(snapshot.telemetry.errors)
    return None


def select_nodes(
    cluster: Cluster, *, node: str | None = None, selector: str | None = None
) -> list[NodeInfo]:
    if node:
        return [cluster.node(node)]
    return list(cluster.nodes(selector))


def load_fleet(
    cluster: Cluster,
    source: TelemetrySource | None,
    policy: HealthPolicy,
    *,
    nodes: list[NodeInfo] | None = None,
    node: str | None = None,
    selector: str | None = None,
    source_error: str | None = None,
    families: Collection[str] | None = None,
    ahead: TelemetryAhead | None = None,
    only_nodes: bool = False,
) -> FleetSnapshot:
    """``source`` is a telemetry source (``krea_ops.telemetry``) or None when none could be
    opened (``source_error`` says why). ``nodes`` skips the node list (the caller has it).
    ``families``: only these groups of telemetry (see ``TelemetrySource.collect``).

    Without a selector the telemetry read does not need the node list, so it runs on a
    thread while the nodes are listed (two servers working at once); ``ahead`` is that
    read, already started by the caller (``collect_ahead``). ``only_nodes``: read the
    telemetry of ``nodes`` alone (a gang's), not of the whole fleet."""
    if ahead is None and nodes is None:
        ahead = collect_ahead(source, node=node, selector=selector, families=families)
    infos = nodes if nodes is not None else select_nodes(cluster, node=node, selector=selector)
    fleet: FleetTelemetry | None = None
    error = source_error
    wanted: Collection[str] | None = None
    if node or selector or (only_nodes and nodes is not None):
        wanted = {n.name for n in infos}
    if source is not None:
        try:
            if ahead is not None:
                fleet = ahead.result()
            else:
                fleet = source.collect(wanted, families=families)
        except Unavailable as exc:
            error = str(exc)
    views = fleet_views(infos, fleet, policy, telemetry_error=error)
    return FleetSnapshot(
        views=tuple(views),
        telemetry=fleet,
        telemetry_error=error,
        source=source.describe() if source is not None else None,
        collected_at=fleet.collected_at if fleet is not None else time.time(),
        policy=policy,
    )


def collect_ahead(
    source: TelemetrySource | None,
    *,
    node: str | None = None,
    selector: str | None = None,
    families: Collection[str] | None = None,
) -> TelemetryAhead | None:
    """The telemetry read of ``load_fleet``, started now on a thread, where it does not
    need the node list (no selector): a caller that knows its Prometheus before it has
    a cluster client can start it first."""
    if source is None or selector:
        return None
    return TelemetryAhead(source, {node} if node else None, families)


class TelemetryAhead:
    """``collect(nodes, families=...)`` on a daemon thread, started now: a caller that
    fails meanwhile (API server unreachable) exits without waiting for it."""

    def __init__(
        self,
        source: TelemetrySource,
        nodes: Collection[str] | None,
        families: Collection[str] | None,
    ) -> None:
        self._value: FleetTelemetry | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(source, nodes, families), name="telemetry", daemon=True
        )
        self._thread.start()

    def _run(
        self,
        source: TelemetrySource,
        nodes: Collection[str] | None,
        families: Collection[str] | None,
    ) -> None:
        try:
            self._value = source.collect(nodes, families=families)
        except BaseException as exc:  # handed to result()'s caller
            self._error = exc

    def result(self) -> FleetTelemetry:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


# --- fleet totals (the dashboard's headline) ------------------------------------------


@dataclass(frozen=True)
class FleetTotals:
    """The fleet in a few numbers. GPUs are counted from the nodes' capacity (what should
    be there), readings from the GPUs that report them; each mean says over how many GPUs
    it was taken."""

    nodes: int
    gpus: int  # GPU capacity of the real (not virtual) nodes
    by_severity: Mapping[Severity, int]  # nodes per verdict
    with_temperature: int  # GPUs with a temperature reading
    hot: int  # of those, at or above the policy's hot_c
    # GPUs with both busy time and tensor activity that do not contradict each other
    # (health.activity_doubt): the means are over these
    averaged: int
    tensor_active_ratio: float | None  # mean tensor-core activity of ``averaged``
    util_ratio: float | None  # mean busy time ("GPU utilization") of ``averaged``
    busy_not_work: bool  # the two means are ``busy_not_work_gap`` or more apart

    @property
    def without_reading(self) -> int:
        return max(0, self.gpus - self.with_temperature)


def fleet_totals(snap: FleetSnapshot) -> FleetTotals:
    gpus = hot = known = both = 0
    tensor_sum = util_sum = 0.0
    counts = dict.fromkeys(Severity, 0)
    hot_c = snap.policy.hot_c
    for view in snap.views:
        counts[view.verdict.severity] += 1
        if view.info.virtual:
            continue
        gpus += view.info.gpu_capacity or 0
        tel = view.telemetry
        if not usable(tel):
            continue
        for g in tel.gpus:
            if g.temperature_c is not None:
                known += 1
                if g.temperature_c >= hot_c:
                    hot += 1
            if (
                g.tensor_active_ratio is not None
                and g.util_ratio is not None
                and activity_doubt(g, snap.policy) is None  # contradicting: no fact to average
            ):
                both += 1
                tensor_sum += g.tensor_active_ratio
                util_sum += g.util_ratio
    tensor = tensor_sum / both if both else None
    util = util_sum / both if both else None
    return FleetTotals(
        nodes=len(snap.views),
        gpus=gpus,
        by_severity=counts,
        with_temperature=known,
        hot=hot,
        averaged=both,
        tensor_active_ratio=tensor,
        util_ratio=util,
        busy_not_work=busy_not_work(util, tensor, snap.policy),
    )


# --- per-GPU and per-port views (``gpus``, ``fabric``, the dashboard's tables) ---------

# node-level reasons a GPU without readings of its own is listed with: why it cannot be
# seen, and whether its node can run work. A GPU whose readings are fresh is judged by
# them alone: a NotReady node's healthy GPUs are not made BAD or UNKNOWN by it (the
# node's verdict says NotReady).
NODE_WIDE_CODES = frozenset(
    {
        "no_telemetry",
        "exporter_down",
        "telemetry_stale",
        "gpu_no_readings",
        "node_not_ready",
        "node_ready_unknown",
    }
)


@dataclass(frozen=True)
class GpuEntry:
    """One GPU as the console lists it. ``sample`` is None when the node has no usable
    telemetry (then the verdict carries the node's reasons, e.g. exporter down and
    NotReady). ``doubt`` says which of its readings contradict each other (shown
    marked, not as fact; ``health.activity_doubt``)."""

    view: NodeView
    index: int
    sample: GpuSample | None
    verdict: Verdict
    doubt: Doubt | None = None

    @property
    def node(self) -> str:
        return self.view.info.name

    @property
    def nvlink_errors(self) -> float | None:
        """NVLink recovery + CRC errors in the window, summed over the GPU's links."""
        return self.sample.nvlink_fault_increase if self.sample is not None else None


def usable(tel: NodeTelemetry | None) -> TypeGuard[NodeTelemetry]:
    """There is telemetry for the node and it can be believed: not stale, exporter up."""
    return tel is not None and not tel.stale and tel.exporter_up is not False


def nvlink_counts(tel: NodeTelemetry) -> tuple[int, int]:
    """(links, links up) of a node, counted the one way every screen and command counts
    them: each GPU's own count where it gives one (a fleet-wide read has per-link rows
    only for the links that are down), else that GPU's per-link rows."""
    rows: dict[int, list[bool]] = {}
    for link in tel.nvlinks:
        rows.setdefault(link.gpu, []).append(bool(link.up))
    total = up = 0
    for gpu in tel.gpus:
        if gpu.nvlinks_total is not None:
            total += gpu.nvlinks_total
            up += gpu.nvlinks_up or 0
        else:
            mine = rows.get(gpu.index, [])
            total += len(mine)
            up += sum(mine)
    return total, up


def gpu_entries(snapshot: FleetSnapshot) -> list[GpuEntry]:
    """Every GPU of every GPU node, in node order. A GPU with readings is judged by its
    own reasons; GPUs of nodes without usable telemetry are listed from the node's
    capacity with the node's reasons (UNKNOWN when it has none)."""
    out: list[GpuEntry] = []
    policy = snapshot.policy
    for view in snapshot.views:
        tel = view.telemetry
        samples = tel.gpus if usable(tel) else ()
        if samples:
            # the node's verdict holds every GPU's reasons (gpu set, no port: the GPU
            # rules' own), in the order gpu_verdict gives them: not evaluated twice
            own: dict[int, list[Reason]] = {}
            for r in view.verdict.reasons:
                if r.gpu is not None and r.port is None:
                    own.setdefault(r.gpu, []).append(r)
            node_wide = None
            for g in samples:
                if has_readings(g):
                    verdict = Verdict.of(own.get(g.index, ()))
                    out.append(GpuEntry(view, g.index, g, verdict, activity_doubt(g, policy)))
                    continue
                if node_wide is None:  # no readings of its own: the node's say
                    node_wide = [r for r in view.verdict.reasons if r.code in NODE_WIDE_CODES]
                out.append(GpuEntry(view, g.index, g, Verdict.of(node_wide)))
        elif not view.info.virtual and (view.info.gpu_capacity or 0) > 0:
            node_wide = [r for r in view.verdict.reasons if r.code in NODE_WIDE_CODES]
            verdict = Verdict.of(node_wide) if node_wide else Verdict(Severity.UNKNOWN, ())
            out.extend(GpuEntry(view, i, None, verdict) for i in range(view.info.gpu_capacity or 0))
    return out


IB_COUNTED = (*IB_ERROR_COUNTERS, "link_downed")


def _sum(values: Mapping[str, float], keys: tuple[str, ...]) -> float | None:
    present = [values[k] for k in keys if k in values]
    return sum(present) if present else None


@dataclass(frozen=True)
class FabricEntry:
    """One InfiniBand port or NVLink link. Each quantity has one derivation, and every
    table (``fabric``, ``nodes show``, the dashboard's fabric and node screens) prints it
    from here:

    * ``errors_total``: the error counters summed, as read (since they were cleared);
    * ``errors_in_window``: their increase over the telemetry window, never more than
      ``errors_total`` (``model.window_increase``); ``error_rate_per_s`` is the same
      number per second (count = rate x window);
    * ``xmit_wait_ratio`` (IB): the share of the time the port had data to send and
      sent nothing for want of credit (``health.xmit_wait_ratio``);
      ``xmit_wait_bytes_per_s`` is the same wait as the bandwidth the port could have
      sent meanwhile (its share of the link speed is the ratio).
    """

    node: str
    kind: str  # "ib" | "nvlink"
    port: str  # "mlx5_0/1" | "gpu3/link7"
    state: str | None
    verdict: Verdict
    errors_total: float | None
    errors_in_window: float | None
    error_rate_per_s: float | None
    xmit_wait_per_s: float | None = None  # PortXmitWait ticks per second, as read
    xmit_wait_bytes_per_s: float | None = None
    xmit_wait_ratio: float | None = None
    ib: IbPortSample | None = None
    nvlink: NvLinkSample | None = None


def _link_errors(link: NvLinkSample, window_s: float) -> float | None:
    counted = [c for c in NVLINK_FAULT_COUNTERS if c in link.error_rate_per_s]
    if not counted:
        return None
    totals = link.errors_total
    return sum(window_increase(link.error_rate_per_s[c], totals.get(c), window_s) for c in counted)


def fabric_entries(snapshot: FleetSnapshot, kind: str = "all") -> list[FabricEntry]:
    """Ports and links of nodes with usable telemetry, worst first (verdict, error rate,
    share of time waiting for credit)."""
    policy = snapshot.policy
    # the window the rates were taken over: the policy's, or a direct scrape's shorter
    # span while it has few scrapes (the assembler counts IB ports over the same)
    window_s = snapshot.telemetry.window_s if snapshot.telemetry else policy.window_s
    out: list[FabricEntry] = []
    for view in snapshot.views:
        tel = view.telemetry
        if not usable(tel):
            continue
        name = view.info.name
        if kind in ("all", "ib"):
            for p in tel.ib_ports:
                out.append(
                    FabricEntry(
                        node=name,
                        kind="ib",
                        port=p.name,
                        state=p.state,
                        verdict=Verdict.of(ib_port_reasons(p, policy)),
                        errors_total=_sum(p.errors_total, IB_COUNTED),
                        errors_in_window=_sum(p.error_increase, IB_COUNTED),
                        error_rate_per_s=_sum(p.error_rate_per_s, IB_COUNTED),
                        xmit_wait_per_s=p.xmit_wait_per_s,
                        xmit_wait_bytes_per_s=xmit_wait_bytes_per_s(p),
                        xmit_wait_ratio=xmit_wait_ratio(p),
                        ib=p,
                    )
                )
        if kind in ("all", "nvlink"):
            up_by_gpu = gpus_with_links_up(tel)
            for link in tel.nvlinks:
                out.append(
                    FabricEntry(
                        node=name,
                        kind="nvlink",
                        port=link.name,
                        state=None if link.up is None else ("UP" if link.up else "DOWN"),
                        verdict=Verdict.of(
                            nvlink_reasons(link, up_by_gpu.get(link.gpu, False), policy)
                        ),
                        errors_total=_sum(link.errors_total, NVLINK_FAULT_COUNTERS),
                        errors_in_window=_link_errors(link, window_s),
                        error_rate_per_s=_sum(link.error_rate_per_s, NVLINK_FAULT_COUNTERS),
                        nvlink=link,
                    )
                )
    out.sort(
        key=lambda e: (
            -e.verdict.severity,
            -(e.error_rate_per_s or 0.0),
            -(e.xmit_wait_ratio or 0.0),
            -(e.xmit_wait_per_s or 0.0),
            e.node,
            e.port,
        )
    )
    return out
