"""burst-taint: keep inference home while in-cluster GPUs are free.

When more than ``free_gpus_high`` healthy in-cluster GPUs have been free for
``hold_s``, every virtual node gets ``krea.ai/burst-disabled=true:NoSchedule``, so no new
inference pod burns money offsite; once fewer than ``free_gpus_low`` have been free for
``hold_s`` (trainings took them), the taint comes off again. Between the two thresholds
nothing changes (hysteresis), and a condition must hold for the whole ``hold_s`` before it
acts, so free GPUs swinging around one threshold never flap the taint. What it wants
(tainted or not) and since when each condition holds are persisted state, so a restart or
a new leader keeps the hold.

Free GPUs: ``nvidia.com/gpu`` allocatable on every in-cluster node that is Ready, not
cordoned, without a NoSchedule/NoExecute taint a GPU pod does not tolerate (every GPU
pod tolerates ``nvidia.com/gpu``, the taint GPU node pools often carry), not virtual,
and healthy by the health policy's verdict (OK or SUSPECT: not BAD, not UNKNOWN), minus
the GPUs requested by the pods on it that have not ended.

Level-based: every pass compares what it wants with every virtual node as it is, so a
virtual node deleted and re-created by its provider (which comes back with only its own
taints) is tainted again at the next pass. Only our key is ever added or removed:
``krea.ai/burst-paused`` (the operator's switch) and the provider's taints stay as they
are (``kube.writes.AddTaint``/``RemoveTaint`` edit one key).

Fail-static: when the telemetry cannot be read, or too few GPU nodes have fresh readings
(``min_fresh_share``; a Prometheus that stopped scraping makes every node UNKNOWN, which
would read as "no GPU free"), nothing changes, the hold timers restart, and the pass says
so: a ``stale`` skip and a ``stale-input`` alert (metrics and log).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from krea_ops.burst import ANN_PRICE, VIRTUAL_NODE_SELECTORS
from krea_ops.controllers.base import Alert, Decision, Inputs, Skip
from krea_ops.kube.cluster import node_info
from krea_ops.kube.writes import AddTaint, Edit, RemoveTaint
from krea_ops.model import NodeInfo, Severity
from krea_ops.runbook.nodes import node_event, update_step
from krea_ops.runbook.plan import Plan, Step
from krea_ops.settings import Settings

NAME = "burst-taint"
TAINT_KEY = "krea.ai/burst-disabled"
TAINT_VALUE = "true"
TAINT_EFFECT = "NoSchedule"
HEALTHY = (Severity.OK, Severity.SUSPECT)
# Taints every GPU pod tolerates: GKE (and many sites) taint GPU nodes
# nvidia.com/gpu=present:NoSchedule, and the ExtendedResourceToleration admission plugin
# gives each pod that requests nvidia.com/gpu the toleration for it.
GPU_POD_TOLERATED = frozenset({"nvidia.com/gpu"})

Obj = dict[str, Any]


@dataclass(frozen=True)
class BurstTaintConfig:
    """``free_gpus_high``: taint when more GPUs than this are free (for ``hold_s``);
    ``free_gpus_low``: remove it when fewer than this are free (for ``hold_s``);
    ``min_fresh_share``: below this share of GPU nodes with fresh readings the telemetry
    counts as stale."""

    free_gpus_high: int = 16
    free_gpus_low: int = 8
    hold_s: float = 300.0
    min_fresh_share: float = 0.5

    def __post_init__(self) -> None:
        from krea_ops.errors import BadInput

        if self.free_gpus_low > self.free_gpus_high:
            raise BadInput(
                f"burst-taint: the low threshold ({self.free_gpus_low}) must not be above "
                f"the high one ({self.free_gpus_high})"
            )
        if self.hold_s < 0 or not 0 <= self.min_fresh_share <= 1:
            raise BadInput("burst-taint: hold_s must be >= 0 and min_fresh_share in 0-1")

    @staticmethod
    def from_settings(settings: Settings) -> BurstTaintConfig:
        return BurstTaintConfig(
            free_gpus_high=settings.burst_taint_free_gpus_high,
            free_gpus_low=settings.burst_taint_free_gpus_low,
            hold_s=settings.burst_taint_hold_s,
        )


@dataclass(frozen=True)
class BurstTaintSnapshot:
    """One pass's reading. ``nodes``: every in-cluster (non-virtual) node;
    ``severity``: its verdict; ``requested``: GPUs requested by unfinished pods per
    node; ``virtual``: each virtual node as the API has it (what the plan edits);
    ``telemetry_error``: why there is no telemetry (None: read); ``fresh_nodes`` of
    ``gpu_nodes``: GPU nodes with usable (not stale, exporter up) readings;
    ``read_at``: when each input was last read successfully (Unix seconds)."""

    user: str
    nodes: tuple[NodeInfo, ...]
    severity: Mapping[str, Severity]
    requested: Mapping[str, int]
    virtual: Mapping[str, Obj]
    telemetry_error: str | None
    gpu_nodes: int
    fresh_nodes: int
    read_at: Mapping[str, float] = field(default_factory=dict)
    # what the pods offsite cost now: GPUs x their burst.krea.ai/usd-per-gpu-hour, and
    # how many GPUs offsite have no price (their cost is unknown, not 0)
    offsite_usd_per_hour: float = 0.0
    offsite_gpus_unpriced: int = 0

    def free_gpus(self) -> tuple[int, int]:
        """(free, healthy) GPUs on the schedulable, healthy in-cluster nodes."""
        free = healthy = 0
        for n in self.nodes:
            if n.virtual or not takes_gpu_pods(n) or self.severity.get(n.name) not in HEALTHY:
                continue
            gpus = n.gpu_allocatable or 0
            healthy += gpus
            free += max(0, gpus - self.requested.get(n.name, 0))
        return free, healthy


def _price(text: str | None) -> float | None:
    try:
        price = float(text) if text is not None else None
    except ValueError:
        return None
    return price if price is not None and price >= 0 else None


def takes_gpu_pods(node: NodeInfo) -> bool:
    """Ready, not cordoned, and no NoSchedule/NoExecute taint a GPU pod does not tolerate."""
    return (
        node.ready is True
        and not node.unschedulable
        and not any(
            t.effect in ("NoSchedule", "NoExecute") and t.key not in GPU_POD_TOLERATED
            for t in node.taints
        )
    )


def is_virtual(labels: Mapping[str, str]) -> bool:
    """A virtual-kubelet node by any of the conventions ``burst status`` finds them by."""
    for selector in VIRTUAL_NODE_SELECTORS:
        key, _, value = selector.partition("=")
        if labels.get(key) == value:
            return True
    return False


def has_taint(obj: Obj) -> bool:
    return any(
        t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT
        for t in (obj.get("spec") or {}).get("taints") or ()
    )


@dataclass(frozen=True)
class BurstTaintState:
    """What burst-taint persists (its key of the state ConfigMap): whether it wants the
    virtual nodes tainted (None: no state yet, the nodes say), since when more than
    ``free_gpus_high`` (``high_since``) or fewer than ``free_gpus_low`` (``low_since``)
    GPUs have been free, the free GPUs of the last judged pass and when it last changed
    a node. A value that is not of its type reads as absent."""

    tainted: bool | None = None
    high_since: float | None = None
    low_since: float | None = None
    free_gpus: int | None = None
    changed_at: float | None = None

    @staticmethod
    def from_json(data: Any) -> BurstTaintState:
        data = data if isinstance(data, Mapping) else {}
        tainted = data.get("tainted")
        free = data.get("free_gpus")
        return BurstTaintState(
            tainted=tainted if isinstance(tainted, bool) else None,
            high_since=_time(data.get("high_since")),
            low_since=_time(data.get("low_since")),
            free_gpus=free if isinstance(free, int) and not isinstance(free, bool) else None,
            changed_at=_time(data.get("changed_at")),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON the ConfigMap keeps: ``tainted`` and both hold times always (null
        when not holding), the free GPUs and the last change once there are any."""
        out: dict[str, Any] = {
            "tainted": self.tainted,
            "high_since": self.high_since,
            "low_since": self.low_since,
        }
        if self.free_gpus is not None:
            out["free_gpus"] = self.free_gpus
        if self.changed_at is not None:
            out["changed_at"] = self.changed_at
        return out


class BurstTaint:
    """The controller (``controllers.base.Controller``)."""

    name = NAME

    def __init__(self, config: BurstTaintConfig | None = None) -> None:
        self.config = config or BurstTaintConfig()

    @staticmethod
    def from_settings(settings: Settings) -> BurstTaint:
        return BurstTaint(BurstTaintConfig.from_settings(settings))

    # -- read -------------------------------------------------------------------------

    def read(self, inputs: Inputs, now: float) -> BurstTaintSnapshot:
        """One node list, one list of unfinished pods, one verdicts-only telemetry read.
        A telemetry failure does not fail the read (``decide`` stays static on it); an
        API server that cannot be read does (Unavailable)."""
        from krea_ops.errors import Unavailable
        from krea_ops.fleet import judged_error, load_fleet, usable

        cluster = inputs.cluster
        objs = cluster.list_all("list nodes", "/api/v1/nodes")
        infos: list[NodeInfo] = []
        virtual: dict[str, Obj] = {}
        for obj in objs:
            info = node_info(obj)
            if info.virtual or is_virtual(info.labels):
                virtual[info.name] = obj
            else:
                infos.append(info)
        requested: dict[str, int] = {}
        spend, unpriced = 0.0, 0
        for pod in cluster.active_pods():
            if pod.node and pod.gpus:
                requested[pod.node] = requested.get(pod.node, 0) + pod.gpus
                if pod.node in virtual and pod.phase == "Running":
                    price = _price(pod.annotations.get(ANN_PRICE))
                    if price is None:
                        unpriced += pod.gpus
                    else:
                        spend += pod.gpus * price
        read_at = {"nodes": now, "pods": now}
        error = inputs.source_error or (None if inputs.source else "no telemetry source")
        severity: dict[str, Severity] = {}
        gpu_nodes = fresh = 0
        if inputs.source is not None:
            try:
                fleet = load_fleet(
                    cluster, inputs.source, inputs.policy, nodes=infos, families=("verdicts",)
                )
            except Unavailable as exc:
                error = str(exc)
            else:
                error = judged_error(fleet)
                for view in fleet.views:
                    severity[view.info.name] = view.verdict.severity
                    if (view.info.gpu_capacity or 0) > 0:
                        gpu_nodes += 1
                        fresh += usable(view.telemetry)
                if error is None and fleet.telemetry is not None:
                    read_at["telemetry"] = fleet.telemetry.collected_at
        return BurstTaintSnapshot(
            user=inputs.user,
            nodes=tuple(infos),
            severity=severity,
            requested=requested,
            virtual=virtual,
            telemetry_error=error,
            gpu_nodes=gpu_nodes,
            fresh_nodes=fresh,
            read_at=read_at,
            offsite_usd_per_hour=spend,
            offsite_gpus_unpriced=unpriced,
        )

    # -- decide -----------------------------------------------------------------------

    def decide(
        self, snapshot: BurstTaintSnapshot, now: float, state: Mapping[str, Any]
    ) -> Decision:
        cfg = self.config
        stored = BurstTaintState.from_json(state)
        wanted = stored.tainted
        if wanted is None:  # no state yet: what the nodes show
            wanted = any(has_taint(o) for o in snapshot.virtual.values())
        gauges: dict[str, float] = {
            "virtual_nodes": float(len(snapshot.virtual)),
            "burst_disabled": float(wanted),
            "offsite_usd_per_hour": snapshot.offsite_usd_per_hour,
            "offsite_gpus_unpriced": float(snapshot.offsite_gpus_unpriced),
        }
        stale = self._stale(snapshot)
        if stale is not None:
            # nothing changes, and the hold restarts: what happened meanwhile is unknown
            held = replace(stored, tainted=wanted, high_since=None, low_since=None)
            return Decision(
                controller=NAME,
                skipped=(Skip("virtual nodes", "stale", stale),),
                alerts=(Alert("stale-input", f"burst-taint changes nothing: {stale}"),),
                gauges=gauges,
                state=held.to_json(),
            )
        free, healthy = snapshot.free_gpus()
        gauges.update(free_gpus=float(free), healthy_gpus=float(healthy))
        high_since, low_since = stored.high_since, stored.low_since
        skipped: list[Skip] = []
        if free > cfg.free_gpus_high:
            high_since, low_since = (high_since if high_since is not None else now), None
            if not wanted:
                if now - high_since >= cfg.hold_s:
                    wanted = True
                else:
                    skipped.append(
                        self._hold(f"{free} GPUs free > {cfg.free_gpus_high}", now - high_since)
                    )
        elif free < cfg.free_gpus_low:
            high_since, low_since = None, (low_since if low_since is not None else now)
            if wanted:
                if now - low_since >= cfg.hold_s:
                    wanted = False
                else:
                    skipped.append(
                        self._hold(f"{free} GPUs free < {cfg.free_gpus_low}", now - low_since)
                    )
        else:
            high_since = low_since = None
        gauges["burst_disabled"] = float(wanted)
        reason = (
            f"{free} of {healthy} healthy in-cluster GPUs free "
            f"({'above' if wanted else 'below'} the "
            f"{cfg.free_gpus_high if wanted else cfg.free_gpus_low}-GPU threshold "
            f"for {cfg.hold_s:g}s)"
        )
        plan = self._plan(snapshot, wanted, reason)
        acts = plan is not None and bool(plan.steps)
        new_state = BurstTaintState(
            tainted=wanted,
            high_since=high_since,
            low_since=low_since,
            free_gpus=free,
            changed_at=now if acts else stored.changed_at,
        )
        return Decision(
            controller=NAME,
            plans=(plan,) if plan is not None and acts else (),
            skipped=tuple(skipped),
            gauges=gauges,
            state=new_state.to_json(),
        )

    def _stale(self, snapshot: BurstTaintSnapshot) -> str | None:
        if snapshot.telemetry_error:
            return f"telemetry unavailable: {snapshot.telemetry_error}"
        if snapshot.gpu_nodes and (
            snapshot.fresh_nodes < self.config.min_fresh_share * snapshot.gpu_nodes
        ):
            return (
                f"telemetry stale: {snapshot.fresh_nodes} of {snapshot.gpu_nodes} GPU nodes "
                f"have fresh readings (at least {self.config.min_fresh_share:.0%} needed)"
            )
        return None

    def _hold(self, condition: str, held_s: float) -> Skip:
        return Skip(
            "virtual nodes",
            "hold",
            f"{condition} for {held_s:.0f}s of the {self.config.hold_s:g}s hold; no change yet",
        )

    def _plan(self, snapshot: BurstTaintSnapshot, wanted: bool, reason: str) -> Plan | None:
        edits: tuple[Edit, ...]
        if wanted:
            edits = (AddTaint(TAINT_KEY, TAINT_VALUE, TAINT_EFFECT),)
            why, event, note = (
                "no new inference offsite while in-cluster GPUs are free",
                "BurstDisabled",
                f"krea-ops burst-taint: {TAINT_KEY}={TAINT_VALUE}:{TAINT_EFFECT} added: ",
            )
        else:
            edits = (RemoveTaint(TAINT_KEY, TAINT_EFFECT),)
            why, event, note = (
                "in-cluster GPUs are taken: inference may burst offsite again",
                "BurstEnabled",
                f"krea-ops burst-taint: {TAINT_KEY} removed: ",
            )
        steps: list[Step] = []
        for name in sorted(snapshot.virtual):
            obj = snapshot.virtual[name]
            step = update_step(name, obj, edits, why)
            if step is not None:
                steps += [step, node_event(name, obj, "BurstTaint", event, note + reason)]
        if not steps:
            return None
        return Plan(
            action="burst-taint " + ("add" if wanted else "remove"),
            nodes=tuple(s.node for s in steps if s.node and s.target is not None),
            reason=reason,
            user=snapshot.user,
            steps=tuple(steps),
            options={"taint": f"{TAINT_KEY}={TAINT_VALUE}:{TAINT_EFFECT}"},
        )


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
