"""quota-sync: each Kueue ClusterQueue's GPU quota in step with the GPUs really there.

Kueue never checks ``nominalQuota`` against the nodes (kubernetes-sigs/kueue #2665,
#3183, #10270): a quota above what the nodes hold admits gangs whose pods then sit
Pending; nodes cordoned, NotReady or quarantined make it so every day. For each
configured flavor this controller computes the GPUs schedulable now and splits them
between the configured ClusterQueues.

Schedulable GPUs of a flavor: the allocatable ``nvidia.com/gpu`` of the nodes its
``nodeLabels`` select that are Ready, not cordoned, carry no NoSchedule/NoExecute taint
the flavor does not tolerate (its ``tolerations`` and ``nodeTaints``; our quarantine
taint ``krea.ai/unhealthy`` is one; ``ignore_taints``, default ``krea.ai/burst-out``,
which ``burst migrate --out`` sets only to steer inference off nodes it clears for a
training, are not) and are not judged BAD by the health policy
(``krea_ops.queue.flavor_capacity`` decides, as ``queue list`` shows it). Nodes whose
health is UNKNOWN count while ``count_unknown`` (an exporter that stops answering is no
reason to withdraw quota); when health cannot be read at all, nodes are judged by Ready,
cordon and taints only and a ``stale-input`` alert says so.

The split, per flavor: ``schedulable - headroom - promised elsewhere``, where promised
elsewhere is the nominal quota of that flavor held by ClusterQueues this controller does
not manage and by the Cohorts above the managed ones (a Cohort's own quota is lent to
its members too): the flavor's total promise then never exceeds its GPUs. That is shared
out by ``split`` (ClusterQueue -> share, shares summing to at most 1) in whole GPUs by
largest remainder (shares summing to 1 hand out every GPU), then each bounded by
``floor`` and ``ceiling`` (the floor wins, even over capacity: it is the operator's
guarantee). Kueue's semantics kept: only ``nominalQuota`` is written (a lendingLimit
above it is lowered to it, as Kueue requires), never ``borrowingLimit``, cohorts, the
flavor order or other resources; a flavor a ClusterQueue does not list is never added
(``missing``). Lowering a quota evicts nothing: admitted work keeps running and new
work waits.

Damping: a higher quota is written once the same target has held for
``raise_after_s`` (a node flapping Ready must not let Kueue admit gangs onto it); a
lower one after ``lower_after_s`` (default at once: stop promising GPUs that are
gone). While it waits: ``hold``. The targets waiting and since when are the persisted
state (``{"pending": {"cq/flavor": {"quota", "since"}}}``). A flavor whose labels
select no node at all is left alone (``no-nodes``: a label typo must not zero a queue).

Modes: ``apply`` plans one read-modify-write per ClusterQueue
(``runbook.quota.plan_quota``: merge patch with the ``resourceVersion`` read);
``recommend`` writes nothing and reports each change as a ``recommend`` skip and the
gauges. Gauges: ``schedulable_gpus{flavor}``, ``nominal_gpus{cluster_queue,flavor}``
(now) and ``target_gpus{cluster_queue,flavor}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from krea_ops.controllers.base import Alert, Decision, Inputs, Skip, section_values
from krea_ops.errors import BadInput
from krea_ops.fleet import judged_error, load_fleet
from krea_ops.health import severities
from krea_ops.kube.cluster import GPU_RESOURCE, MissingCrd
from krea_ops.model import NodeInfo, Severity
from krea_ops.queue import KUEUE_GROUP, KUEUE_VERSIONS, FlavorCapacity, flavor_capacity
from krea_ops.runbook.plan import Plan
from krea_ops.runbook.quota import QuotaChange, lending_limit, nominal_quota, plan_quota
from krea_ops.settings import Settings

NAME = "quota-sync"
STATE_VERSION = 1
APPLY, RECOMMEND = "apply", "recommend"
# The bundled Kueue setup (deploy/): training and inference ClusterQueues on h200.
DEFAULT_SPLIT = {"h200": {"training": 0.75, "inference": 0.25}}
# Taints that steer pods without taking capacity away: ``burst migrate --out`` keeps
# inference replacements off the nodes it clears for a training, for the move's duration.
IGNORED_TAINTS = ("krea.ai/burst-out",)

Obj = dict[str, Any]


# -- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlavorSplit:
    """One flavor's quota rule: ``shares`` (ClusterQueue -> share of the flavor's
    schedulable GPUs), and its own ``headroom`` (GPUs kept out of every quota), ``floor``
    and ``ceiling`` (None: none) per ClusterQueue."""

    flavor: str
    shares: Mapping[str, float]
    headroom: int = 0
    floor: int = 0
    ceiling: int | None = None


def _whole(what: str, value: Any, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BadInput(f"{NAME}: {what} must be a whole number of GPUs >= 0, not {value!r}")
    if not float(value).is_integer():
        raise BadInput(f"{NAME}: {what} must be a whole number of GPUs, not {value!r}")
    return int(value)


def _seconds(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BadInput(f"{NAME}: {what} must be seconds >= 0, not {value!r}")
    if not math.isfinite(value):
        raise BadInput(f"{NAME}: {what} must be finite")
    return float(value)


def _split(flavor: str, raw: Any, base: QuotaSyncConfig) -> FlavorSplit:
    where = f"flavors.{flavor}"
    if not isinstance(raw, Mapping) or not raw:
        raise BadInput(f"{NAME}: {where} must map ClusterQueues to shares, e.g. training: 0.75")
    values = {str(k): v for k, v in raw.items()}
    headroom, floor, ceiling = base.headroom, base.floor, base.ceiling
    if "split" in values:
        extra = sorted(set(values) - {"split", "headroom", "floor", "ceiling"})
        if extra:
            raise BadInput(f"{NAME}: unknown {where} setting {extra[0]!r}")
        headroom = _whole(f"{where}.headroom", values.get("headroom", headroom)) or 0
        floor = _whole(f"{where}.floor", values.get("floor", floor)) or 0
        ceiling = _whole(f"{where}.ceiling", values.get("ceiling", ceiling), allow_none=True)
        shares_raw = values["split"]
        if not isinstance(shares_raw, Mapping) or not shares_raw:
            raise BadInput(f"{NAME}: {where}.split must map ClusterQueues to shares")
    else:
        shares_raw = values
    shares: dict[str, float] = {}
    for queue, share in shares_raw.items():
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise BadInput(
                f"{NAME}: {where}: the share of ClusterQueue {queue} must be in (0, 1], "
                f"not {share!r}"
            )
        shares[str(queue)] = float(share)
    if sum(shares.values()) > 1 + 1e-9:
        raise BadInput(f"{NAME}: {where}: the shares add up to {sum(shares.values()):g}, over 1")
    if ceiling is not None and ceiling < floor:
        raise BadInput(f"{NAME}: {where}: ceiling {ceiling} is below floor {floor}")
    return FlavorSplit(flavor, shares, headroom, floor, ceiling)


@dataclass(frozen=True)
class QuotaSyncConfig:
    """quota-sync's settings (section ``quota-sync`` of the controllers' settings).

    ``flavors``: the rule per flavor (``FlavorSplit``); from a mapping, either
    ``{flavor: {cq: share, ...}}`` or ``{flavor: {split: {cq: share}, headroom, floor,
    ceiling}}``. ``headroom``, ``floor``, ``ceiling``: the defaults of every flavor
    (GPUs). ``mode``: ``apply`` or ``recommend``. ``raise_after_s`` / ``lower_after_s``:
    how long a higher / lower target must hold before it is written. ``count_unknown``:
    nodes whose health is UNKNOWN are capacity. ``ignore_taints``: taint keys that do not
    take a node's GPUs out of capacity (steering taints)."""

    flavors: tuple[FlavorSplit, ...] = field(
        default_factory=lambda: tuple(FlavorSplit(f, s) for f, s in DEFAULT_SPLIT.items())
    )
    mode: str = APPLY
    headroom: int = 0
    floor: int = 0
    ceiling: int | None = None
    raise_after_s: float = 120.0
    lower_after_s: float = 0.0
    count_unknown: bool = True
    ignore_taints: tuple[str, ...] = IGNORED_TAINTS

    @classmethod
    def from_settings(cls, settings: Settings) -> QuotaSyncConfig:
        """From the krea-ops settings: ``quota_sync_mode``, ``quota_sync_training_share``
        (ClusterQueue ``training`` gets that share of flavor ``h200``, ``inference`` the
        rest; 1: training alone is managed), ``quota_sync_headroom_gpus``,
        ``quota_sync_floor_gpus``, ``quota_sync_ceiling_gpus`` (0: none)."""
        section: dict[str, Any] = {
            "mode": settings.quota_sync_mode,
            "headroom": settings.quota_sync_headroom_gpus,
            "floor": settings.quota_sync_floor_gpus,
        }
        if settings.quota_sync_ceiling_gpus:
            section["ceiling"] = settings.quota_sync_ceiling_gpus
        share = settings.quota_sync_training_share
        if share is not None:
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
                raise BadInput(
                    f"{NAME}: quota_sync_training_share must be in (0, 1], not {share!r}"
                )
            split = {"training": float(share)}
            if share < 1:
                split["inference"] = round(1.0 - float(share), 9)
            section["flavors"] = {"h200": split}
        return cls.from_mapping(section)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> QuotaSyncConfig:
        """From the settings file's section; BadInput (one line) on anything wrong."""
        if data is None:
            return cls()
        values = section_values(NAME, cls, data)
        mode = values.get("mode", APPLY)
        if mode not in (APPLY, RECOMMEND):
            raise BadInput(f"{NAME}: mode must be apply or recommend, not {mode!r}")
        count_unknown = values.get("count_unknown", True)
        if not isinstance(count_unknown, bool):
            raise BadInput(f"{NAME}: count_unknown must be true or false")
        ignore = values.get("ignore_taints", list(IGNORED_TAINTS))
        if not isinstance(ignore, list | tuple) or not all(
            isinstance(k, str) and k for k in ignore
        ):
            raise BadInput(f"{NAME}: ignore_taints must be a list of taint keys")
        base = cls(
            flavors=(),
            mode=mode,
            headroom=_whole("headroom", values.get("headroom", 0)) or 0,
            floor=_whole("floor", values.get("floor", 0)) or 0,
            ceiling=_whole("ceiling", values.get("ceiling"), allow_none=True),
            raise_after_s=_seconds("raise_after_s", values.get("raise_after_s", 120.0)),
            lower_after_s=_seconds("lower_after_s", values.get("lower_after_s", 0.0)),
            count_unknown=count_unknown,
            ignore_taints=tuple(ignore),
        )
        raw = values.get("flavors", DEFAULT_SPLIT)
        if not isinstance(raw, Mapping) or not raw:
            raise BadInput(f"{NAME}: flavors must map each flavor to its ClusterQueues' shares")
        splits = tuple(_split(str(f), v, base) for f, v in raw.items())
        return replace(base, flavors=splits)


# -- the snapshot --------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaSyncSnapshot:
    """One pass's reading: the ClusterQueues, Cohorts and ResourceFlavors as the API has
    them (name -> object), every node, the health policy's verdict per node (None when
    health could not be read: ``health_error`` says why)."""

    user: str
    api_version: str
    cluster_queues: Mapping[str, Obj]
    cohorts: Mapping[str, Obj]
    flavors: Mapping[str, Obj]
    nodes: tuple[NodeInfo, ...]
    severity: Mapping[str, Severity] | None = None
    health_error: str | None = None
    # input -> when it was last read (the runner's last-read gauge; base.ReadTimes)
    read_at: Mapping[str, float] = field(default_factory=dict)

    def capacity(self, flavor: str, ignore_taints: Sequence[str] = ()) -> FlavorCapacity | None:
        """The flavor's nodes and which are capacity (``queue.flavor_capacity``), taints
        with a key in ``ignore_taints`` tolerated."""
        obj = self.flavors.get(flavor)
        if obj is None:
            return None
        if ignore_taints:
            spec = dict(obj.get("spec") or {})
            extra = [{"key": key, "operator": "Exists"} for key in ignore_taints]
            spec["tolerations"] = [*(spec.get("tolerations") or ()), *extra]
            obj = {**obj, "spec": spec}
        return flavor_capacity(obj, self.nodes, None, self.severity)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _cohort_of(obj: Mapping[str, Any]) -> str | None:
    spec = obj.get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort") or None


def _shares_out(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """``total`` GPUs shared by ``shares`` in whole GPUs: each its share rounded down,
    the GPUs left to the largest remainders (then by name)."""
    raw = {q: total * s for q, s in shares.items()}
    out = {q: math.floor(v + 1e-9) for q, v in raw.items()}
    whole = math.floor(total * sum(shares.values()) + 1e-9)
    left = whole - sum(out.values())
    for q in sorted(raw, key=lambda q: (-(raw[q] - out[q]), q))[: max(left, 0)]:
        out[q] += 1
    return out


def _cohort_quota(snapshot: QuotaSyncSnapshot, managed: list[str], flavor: str) -> float:
    """The nominal quota on ``flavor`` the Cohorts above the managed ClusterQueues hold
    themselves (each Cohort once, up its parents)."""
    seen: set[str] = set()
    total = 0.0
    for cq in managed:
        obj = snapshot.cluster_queues.get(cq)
        name = _cohort_of(obj) if obj else None
        while name and name not in seen:
            seen.add(name)
            cohort = snapshot.cohorts.get(name)
            if cohort is None:
                break
            total += nominal_quota(cohort, flavor) or 0
            name = (cohort.get("spec") or {}).get("parentName")
    return total


# -- the controller ---------------------------------------------------------------------------


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class PendingQuota:
    """A quota change waiting for its hold: the ``quota`` wanted and ``since`` when it
    has been (None: unreadable, so its hold starts again)."""

    quota: int | float | None
    since: float | None

    @staticmethod
    def from_json(data: Any) -> PendingQuota | None:
        """None for an entry that is not an object (it is forgotten)."""
        if not isinstance(data, Mapping):
            return None
        try:
            since: float | None = float(data["since"])
        except (KeyError, TypeError, ValueError):
            since = None
        return PendingQuota(_number(data.get("quota")), since)

    def to_json(self) -> dict[str, Any]:
        return {"quota": self.quota, "since": self.since}


@dataclass(frozen=True)
class QuotaSyncState:
    """What quota-sync persists (its key of the state ConfigMap, ``{"version": 1,
    "pending": {"<cluster queue>/<flavor>": {"quota", "since"}}}``): the changes that
    wait for ``raise_after_s`` or ``lower_after_s``."""

    pending: Mapping[str, PendingQuota] = field(default_factory=dict)

    @staticmethod
    def from_json(data: Any) -> QuotaSyncState:
        raw = data.get("pending") if isinstance(data, Mapping) else None
        return QuotaSyncState(
            {
                str(k): entry
                for k, v in (raw.items() if isinstance(raw, Mapping) else ())
                if (entry := PendingQuota.from_json(v)) is not None
            }
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "pending": {k: v.to_json() for k, v in self.pending.items()},
        }


class QuotaSync:
    """The quota-sync controller (``krea-ops controller run quota-sync``)."""

    name = NAME

    def __init__(self, config: QuotaSyncConfig | None = None) -> None:
        self.config = config or QuotaSyncConfig()

    @classmethod
    def from_settings(cls, settings: Any) -> QuotaSync:
        """The runner's way in: ``QuotaSyncConfig.from_settings``."""
        return cls(QuotaSyncConfig.from_settings(settings))

    def read(self, inputs: Inputs, now: float) -> QuotaSyncSnapshot:
        """Kueue's ClusterQueues, ResourceFlavors and Cohorts (three lists; Cohorts only
        where the API serves them), every node once, node health (a verdicts-only
        telemetry read). A cluster without Kueue raises ``MissingCrd``."""
        cluster = inputs.cluster
        version = cluster.custom_version(KUEUE_GROUP, "clusterqueues", KUEUE_VERSIONS)
        cqs = {
            _name(o): o
            for o in cluster.custom_objects(KUEUE_GROUP, "clusterqueues", KUEUE_VERSIONS)
        }
        flavor_objs = cluster.custom_objects(KUEUE_GROUP, "resourceflavors", KUEUE_VERSIONS)
        try:
            cohorts = {
                _name(o): o for o in cluster.custom_objects(KUEUE_GROUP, "cohorts", ("v1beta2",))
            }
        except MissingCrd:
            cohorts = {}
        nodes = cluster.nodes()
        fleet = load_fleet(
            cluster,
            inputs.source,
            inputs.policy,
            nodes=nodes,
            source_error=inputs.source_error,
            families=("verdicts",),
        )
        health_error = judged_error(fleet)
        if inputs.source is None and health_error is None:
            health_error = "no telemetry source"
        return QuotaSyncSnapshot(
            inputs.user,
            version,
            cqs,
            cohorts,
            {_name(f): f for f in flavor_objs},
            tuple(nodes),
            None if health_error else severities(fleet.views),
            health_error,
            {"kueue": now, "nodes": now, **({} if health_error else {"telemetry": now})},
        )

    def decide(self, snapshot: QuotaSyncSnapshot, now: float, state: Mapping[str, Any]) -> Decision:
        config = self.config
        stored = QuotaSyncState.from_json(state).pending
        pending: dict[str, PendingQuota] = {}
        skipped: list[Skip] = []
        alerts: list[Alert] = []
        gauges: dict[str, float] = {}
        changes: list[QuotaChange] = []
        if snapshot.health_error:
            alerts.append(
                Alert(
                    "stale-input",
                    f"node health unread ({snapshot.health_error}): GPUs counted on nodes "
                    "that are Ready, not cordoned and not tainted, healthy or not",
                )
            )
        for split in config.flavors:
            flavor = split.flavor
            cap = snapshot.capacity(flavor, config.ignore_taints)
            if cap is None:
                skipped.append(
                    Skip(f"flavor {flavor}", "missing", f"no ResourceFlavor {flavor}: nothing set")
                )
                continue
            if cap.nodes == 0:
                skipped.append(
                    Skip(
                        f"flavor {flavor}",
                        "no-nodes",
                        f"its nodeLabels {dict(cap.node_labels)} select no node: quotas left "
                        "as they are",
                    )
                )
                continue
            schedulable = cap.healthy_gpus + (cap.unknown_gpus if config.count_unknown else 0)
            nodes = cap.healthy_nodes + (cap.unknown_nodes if config.count_unknown else 0)
            gauges[f'schedulable_gpus{{flavor="{flavor}"}}'] = float(schedulable)
            elsewhere = sum(
                nominal_quota(obj, flavor) or 0
                for name, obj in snapshot.cluster_queues.items()
                if name not in split.shares
            )
            elsewhere += _cohort_quota(snapshot, sorted(split.shares), flavor)
            distributable = max(0, math.floor(schedulable - split.headroom - elsewhere + 1e-9))
            targets = _shares_out(distributable, split.shares)
            for cq in sorted(split.shares):
                where = f"clusterqueue {cq}"
                obj = snapshot.cluster_queues.get(cq)
                current = None if obj is None else nominal_quota(obj, flavor)
                if obj is None or current is None:
                    what = (
                        f"no ClusterQueue {cq}"
                        if obj is None
                        else f"ClusterQueue {cq} has no {GPU_RESOURCE} quota on flavor {flavor} "
                        "(add the flavor to its resourceGroups: its place in the flavor order "
                        "is yours to choose)"
                    )
                    skipped.append(Skip(where, "missing", what))
                    continue
                target = max(split.floor, targets[cq])
                if split.ceiling is not None:
                    target = min(target, max(split.ceiling, split.floor))
                labels = f'cluster_queue="{cq}",flavor="{flavor}"'
                gauges[f"nominal_gpus{{{labels}}}"] = float(current)
                gauges[f"target_gpus{{{labels}}}"] = float(target)
                limit = lending_limit(obj, flavor)
                if current == target and (limit is None or limit <= target):
                    continue
                why = (
                    f"{flavor}: {schedulable} schedulable GPUs on {nodes} nodes"
                    + (f", headroom {split.headroom}" if split.headroom else "")
                    + (f", {elsewhere:g} promised elsewhere" if elsewhere else "")
                    + f"; share {split.shares[cq]:g} of {distributable}"
                )
                change = f"nominalQuota {current:g} -> {target} on {flavor} ({why})"
                if config.mode == RECOMMEND:
                    skipped.append(Skip(where, "recommend", change))
                    continue
                key = f"{cq}/{flavor}"
                delay = config.raise_after_s if target > current else config.lower_after_s
                entry = stored.get(key)
                since = now
                if entry is not None and entry.quota == target and entry.since is not None:
                    since = min(entry.since, now)
                pending[key] = PendingQuota(target, since)
                if now - since < delay:
                    left = delay - (now - since)
                    skipped.append(Skip(where, "hold", f"{change}, once it holds {left:.0f}s more"))
                    continue
                changes.append(QuotaChange(cq, flavor, target, why))
        plans: tuple[Plan, ...] = ()
        if changes:
            plan = plan_quota(
                snapshot.cluster_queues,
                changes,
                api_version=snapshot.api_version,
                user=snapshot.user,
                reason="ClusterQueue quota in step with the schedulable GPUs",
            )
            plans = (plan,) if plan.steps else ()
        return Decision(
            NAME,
            plans=plans,
            skipped=tuple(skipped),
            alerts=tuple(alerts),
            gauges=gauges,
            state=QuotaSyncState(pending).to_json(),
        )
