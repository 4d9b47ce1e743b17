"""migrate-back: the gentle descheduler that brings offsite inference home.

When it acts: while the virtual nodes carry the burst-taint controller's
``krea.ai/burst-disabled=true:NoSchedule`` (healthy in-cluster GPUs are free) and no
Ready virtual node is open to new pods (each carries that taint or the operator's
``krea.ai/burst-paused``): a replacement then cannot land offsite again. No such taint on
any virtual node: nothing is planned, nothing is skipped. A virtual node still open:
nothing moves (``hold``).

What it moves: Running pods matching ``selector`` (``krea.ai/workload=inference``) on
virtual nodes, owned by a controller (not a DaemonSet), dearest provider first
(``runbook.burst.order_back``). Each move is a ``MIGRATE`` step of the runbook's
``burst migrate --back`` (``runbook.burst.move_step``): the executor waits until the
workload has more Ready pods than its floor, checks that an in-cluster GPU is still free,
evicts through the Eviction API (budgets respected, 429 retried until ``move_timeout_s``,
the pod's UID as precondition), then waits until a replacement is Ready in-cluster; a
move that does not finish ends the pass's plan (the moves after it are not made). So
inference comes home one pod at a time, without the mass eviction a NoExecute taint
would cause.

Which pods are left, and why (``Skip.why``):

- ``floor``: the move would leave its workload below ``min_ready`` Ready pods (its Ready
  count minus one), or the workload's last move has not got its replacement Ready yet
  (its Ready count is below the count recorded when that move was planned; remembered
  in the state until it is back, or ``floor_hold_s`` has passed: a workload scaled down
  meanwhile is not held forever). A workload never goes below its Ready count minus one.
- ``budget``: a PodDisruptionBudget selecting the pod allows 0 disruptions now, or more
  than one selects it (the Eviction API refuses those with 500).
- ``no-room``: no healthy in-cluster node has room for it now. Room: GPU nodes that are
  Ready, not cordoned, carry no NoSchedule/NoExecute taint the pod does not tolerate,
  match its nodeSelector, and are not judged BAD by the health policy (UNKNOWN ones
  count as room while ``count_unknown``, as does every node when health cannot be read,
  which raises a ``stale-input`` alert); first fit, most free GPUs first, each planned
  move taking its GPUs and leaving at least ``keep_free_gpus`` free. A Kueue-managed
  pod (label ``kueue.x-k8s.io/queue-name``) also needs quota: its replacement is
  admitted anew, on the first flavor of its ClusterQueue with room (its unused quota,
  then what its cohort lends within its borrowingLimit); where that is no in-cluster
  flavor (none has room, or the first with room is the virtual nodes'), the replacement
  would go offsite again or wait Pending, so the pod stays.
- ``pace``: a token bucket is empty. One bucket for the cluster, one per namespace, one
  per workload (``kind namespace/name``); each holds at most ``burst`` tokens and
  refills at ``per_hour``; a move takes one token from all three. The buckets live in
  the controller's persisted state (``{"buckets": {key: {"tokens", "at"}}}``), refilled
  from ``now`` and the stored time, so a restarted controller keeps its pace (the
  upstream descheduler resets its limits every cycle and has no rate). A bucket absent
  from the state is full; a full bucket is dropped from it; an unreadable entry counts
  as empty (a corrupt state never buys a burst of evictions). A token is spent when the
  move is planned: one the executor does not make (an earlier move blocked) is not
  given back, so the pace errs slow. A runner that only prints plans (``--dry-run``)
  should not keep the state it returns.

Gauges: ``burst_disabled`` (1 while the taint holds); while it holds,
``offsite_pods``, ``moves_planned``, ``cluster_bucket_tokens`` and ``empty_buckets``
(buckets, of any kind, without a whole token); while pods also run offsite,
``free_in_cluster_gpus`` (healthy room).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from krea_ops.burst import (
    DISABLED_TAINT_EFFECT,
    DISABLED_TAINT_KEY,
    DISABLED_TAINT_VALUE,
    INFERENCE_SELECTOR,
    PAUSE_TAINT_KEY,
)
from krea_ops.burst.status import find_virtual_nodes
from krea_ops.controllers.base import Alert, Decision, Inputs, Skip, section_values
from krea_ops.errors import BadInput
from krea_ops.fleet import judged_error, load_fleet
from krea_ops.health import severities
from krea_ops.kube.cluster import MissingCrd, node_info, pod_gpus
from krea_ops.kube.rules import (
    UNFINISHED_PODS,
    controller_of,
    is_active,
    is_ready,
    selector_matches,
)
from krea_ops.kube.rules import meta as _meta
from krea_ops.model import NodeInfo, Severity
from krea_ops.queue import (
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    ClusterQueueInfo,
    LocalQueueInfo,
    parse_cluster_queue,
    parse_local_queue,
)
from krea_ops.runbook.burst import (
    Side,
    move_step,
    order_back,
    read_side,
    workload_name,
)
from krea_ops.runbook.plan import Finding, FindingSeverity, Plan, PodRef, Step
from krea_ops.settings import Settings

NAME = "migrate-back"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
STATE_VERSION = 1
# refills add up in floating point (ten of 0.1 make 0.999...): a token this close is whole
TOKEN_EPSILON = 1e-6
Obj = dict[str, Any]


# -- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """One token bucket: at most ``burst`` moves at once, refilled at ``per_hour``."""

    per_hour: float
    burst: float

    def refill(self, level: BucketLevel | None, now: float) -> float:
        """The tokens of a stored level at ``now``: absent is full, unreadable is empty, a
        clock that went back refills nothing."""
        if level is None:
            return self.burst
        if level.at is None:
            return 0.0
        gained = max(0.0, now - level.at) * self.per_hour / 3600.0
        return max(0.0, min(self.burst, level.tokens + gained))


@dataclass(frozen=True)
class BucketLevel:
    """A bucket as stored: ``tokens`` at ``at``. ``at`` None: the stored entry could not
    be read, and the bucket counts as empty (a corrupt state never buys a burst of
    evictions)."""

    tokens: float
    at: float | None

    @staticmethod
    def from_json(data: Any) -> BucketLevel:
        try:
            tokens, at = float(data["tokens"]), float(data["at"])
        except (KeyError, TypeError, ValueError):
            return UNREADABLE
        if not (math.isfinite(tokens) and math.isfinite(at)):
            return UNREADABLE
        return BucketLevel(tokens, at)

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "at": self.at}


UNREADABLE = BucketLevel(0.0, None)


@dataclass(frozen=True)
class MoveMemo:
    """A workload's last move: its Ready pods (by name) when the move was planned, and
    when; it holds the workload's next move until it is back to that count."""

    ready: int
    at: float

    @staticmethod
    def from_json(data: Any) -> MoveMemo | None:
        """None for an entry that cannot be read (it is forgotten)."""
        try:
            return MoveMemo(int(data["ready"]), float(data["at"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_json(self) -> dict[str, Any]:
        return {"ready": self.ready, "at": self.at}


@dataclass(frozen=True)
class MigrateBackState:
    """What migrate-back persists (its key of the state ConfigMap, ``{"version": 1,
    "buckets": {key: {"tokens", "at"}}, "moves": {workload: {"ready", "at"}}}``): the
    token buckets that are not full, and the workloads whose last move's replacement is
    not Ready yet."""

    buckets: Mapping[str, BucketLevel] = field(default_factory=dict)
    moves: Mapping[str, MoveMemo] = field(default_factory=dict)

    @staticmethod
    def from_json(data: Any) -> MigrateBackState:
        data = data if isinstance(data, Mapping) else {}
        buckets = data.get("buckets")
        moves = data.get("moves")
        return MigrateBackState(
            buckets={  # a null entry is as absent: full
                str(k): BucketLevel.from_json(v)
                for k, v in (buckets.items() if isinstance(buckets, Mapping) else ())
                if v is not None
            },
            moves={
                str(k): memo
                for k, v in (moves.items() if isinstance(moves, Mapping) else ())
                if (memo := MoveMemo.from_json(v)) is not None
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "buckets": {k: v.to_json() for k, v in self.buckets.items()},
            "moves": {k: v.to_json() for k, v in self.moves.items()},
        }


def _bucket(section: str, raw: Any, default: Bucket) -> Bucket:
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        raise BadInput(f"{NAME}: {section} must be a mapping with per_hour and burst")
    values = {str(k).replace("-", "_"): v for k, v in raw.items()}
    unknown = sorted(set(values) - {"per_hour", "burst"})
    if unknown:
        raise BadInput(f"{NAME}: unknown {section} setting {unknown[0]!r} (per_hour, burst)")
    per_hour = _number(f"{section}.per_hour", values.get("per_hour", default.per_hour))
    burst = _number(f"{section}.burst", values.get("burst", default.burst))
    if per_hour < 0 or burst < 1:
        raise BadInput(f"{NAME}: {section} needs per_hour >= 0 and burst >= 1")
    return Bucket(per_hour, burst)


def _number(what: str, value: Any) -> float:
    if isinstance(value, bool):
        raise BadInput(f"{NAME}: {what} must be a number, not {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{NAME}: {what} must be a number, not {value!r}") from None
    if not math.isfinite(out):
        raise BadInput(f"{NAME}: {what} must be a finite number")
    return out


@dataclass(frozen=True)
class MigrateBackConfig:
    """migrate-back's settings (section ``migrate-back`` of the controllers' settings).

    ``selector``: the offsite pods it brings home. ``cluster``, ``namespace``,
    ``workload``: the token buckets (moves per hour and at once). ``min_ready``: Ready
    pods a workload keeps while one of its pods moves (1: a single-replica service is
    never moved, it would go dark). ``move_timeout_s``: how long one move may wait for
    its budget, then for its replacement Ready. ``count_unknown``: nodes whose health
    cannot be judged count as room. ``floor_hold_s``: how long a workload whose last
    replacement is not Ready is left alone at most. ``keep_free_gpus``: healthy
    in-cluster GPUs no move may take (room kept for a training that waits; burst-taint's
    low threshold keeps the two from working against each other)."""

    selector: str = INFERENCE_SELECTOR
    cluster: Bucket = field(default_factory=lambda: Bucket(per_hour=60.0, burst=4.0))
    namespace: Bucket = field(default_factory=lambda: Bucket(per_hour=30.0, burst=2.0))
    workload: Bucket = field(default_factory=lambda: Bucket(per_hour=12.0, burst=1.0))
    min_ready: int = 1
    move_timeout_s: float = 300.0
    count_unknown: bool = True
    floor_hold_s: float = 3600.0
    keep_free_gpus: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> MigrateBackConfig:
        """From the krea-ops settings: ``migrate_back_cluster_per_minute``,
        ``migrate_back_namespace_per_minute``, ``migrate_back_workload_per_minute`` (each
        bucket's refill; the buckets' sizes stay as they are)."""
        base = cls()
        section: dict[str, Any] = {}
        for kind in ("cluster", "namespace", "workload"):
            rate = getattr(settings, f"migrate_back_{kind}_per_minute")
            default: Bucket = getattr(base, kind)
            per_hour = _number(f"migrate_back_{kind}_per_minute", rate) * 60.0
            section[kind] = {"per_hour": per_hour, "burst": default.burst}
        return cls.from_mapping(section)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> MigrateBackConfig:
        """From the settings file's section; BadInput (one line) on anything wrong."""
        if data is None:
            return cls()
        values = section_values(NAME, cls, data)
        base = cls()
        selector = values.get("selector", base.selector)
        if not isinstance(selector, str) or not selector.strip():
            raise BadInput(f"{NAME}: selector must be a label selector")
        min_ready = _number("min_ready", values.get("min_ready", base.min_ready))
        if min_ready < 0 or not float(min_ready).is_integer():
            raise BadInput(f"{NAME}: min_ready must be a whole number >= 0")
        timeout = _number("move_timeout_s", values.get("move_timeout_s", base.move_timeout_s))
        hold = _number("floor_hold_s", values.get("floor_hold_s", base.floor_hold_s))
        keep = _number("keep_free_gpus", values.get("keep_free_gpus", base.keep_free_gpus))
        if keep < 0 or not float(keep).is_integer():
            raise BadInput(f"{NAME}: keep_free_gpus must be a whole number >= 0")
        if timeout <= 0 or hold < 0:
            raise BadInput(f"{NAME}: move_timeout_s must be > 0 and floor_hold_s >= 0")
        count_unknown = values.get("count_unknown", base.count_unknown)
        if not isinstance(count_unknown, bool):
            raise BadInput(f"{NAME}: count_unknown must be true or false")
        return cls(
            selector=selector.strip(),
            cluster=_bucket("cluster", values.get("cluster"), base.cluster),
            namespace=_bucket("namespace", values.get("namespace"), base.namespace),
            workload=_bucket("workload", values.get("workload"), base.workload),
            min_ready=int(min_ready),
            move_timeout_s=timeout,
            count_unknown=count_unknown,
            floor_hold_s=hold,
            keep_free_gpus=int(keep),
        )


# -- the snapshot --------------------------------------------------------------------------


@dataclass(frozen=True)
class MigrateBackSnapshot:
    """One pass's reading. ``virtual``: the virtual nodes. ``in_cluster``: the other
    nodes as the API has them; ``free_gpus``: GPUs free on the Ready, uncordoned ones
    (allocatable minus what active pods bound there ask for). ``severity``: the health
    policy's verdict per node, None when health could not be read (``health_error``).
    ``pods``: active pods matching the selector, wherever they run; ``budgets``: the
    PodDisruptionBudgets. ``kueue``: Kueue's queues where a pod to move is
    Kueue-managed (None: none is, or Kueue is not installed). Pods and budgets are read
    only while the taint holds and a pod runs offsite."""

    user: str
    virtual: tuple[NodeInfo, ...]
    in_cluster: Mapping[str, Obj] = field(default_factory=dict)
    free_gpus: Mapping[str, int] = field(default_factory=dict)
    severity: Mapping[str, Severity] | None = None
    health_error: str | None = None
    pods: tuple[Obj, ...] = ()
    budgets: tuple[Obj, ...] = ()
    kueue: KueueQueues | None = None
    # input -> when it was last read (the runner's last-read gauge; base.ReadTimes)
    read_at: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class KueueQueues:
    """Kueue's ClusterQueues (quota, reservation, cohort), LocalQueues and each
    ResourceFlavor's nodeLabels: what decides where Kueue admits a replacement."""

    cluster_queues: tuple[ClusterQueueInfo, ...]
    local_queues: tuple[LocalQueueInfo, ...]
    flavor_labels: Mapping[str, Mapping[str, str]]


def read_kueue(cluster: Any) -> KueueQueues | None:
    """Three Kueue lists; None where Kueue is not installed."""
    try:
        cqs = cluster.custom_objects(KUEUE_GROUP, "clusterqueues", KUEUE_VERSIONS)
        lqs = cluster.custom_objects(KUEUE_GROUP, "localqueues", KUEUE_VERSIONS)
        flavors = cluster.custom_objects(KUEUE_GROUP, "resourceflavors", KUEUE_VERSIONS)
    except MissingCrd:
        return None
    return KueueQueues(
        tuple(parse_cluster_queue(o) for o in cqs),
        tuple(parse_local_queue(o) for o in lqs),
        {
            str(_meta(f).get("name")): dict((f.get("spec") or {}).get("nodeLabels") or {})
            for f in flavors
        },
    )


class _Quota:
    """Kueue's view of room: the GPU quota a Kueue-managed replacement can be admitted
    on, flavor by flavor in its ClusterQueue's order (its own unused quota, then what
    the other ClusterQueues of its cohort lend, within its borrowingLimit), less what
    this pass's moves take. Hierarchical Cohorts' own quota is left out (it only adds
    room, so the check errs strict)."""

    def __init__(self, kueue: KueueQueues, virtual: Sequence[NodeInfo]) -> None:
        self.kueue = kueue
        self.virtual = virtual
        self.taken: dict[tuple[str, str], int] = {}

    def _offsite(self, flavor: str) -> bool:
        labels = self.kueue.flavor_labels.get(flavor) or {}
        return bool(labels) and any(
            all(v.labels.get(k) == val for k, val in labels.items()) for v in self.virtual
        )

    def _available(self, cq: ClusterQueueInfo, flavor: str) -> float:
        mine = cq.quota(flavor)
        if mine is None or mine.nominal is None:
            return 0.0
        reserved = mine.reserved or 0.0
        own = max(0.0, mine.nominal - reserved)
        borrow = 0.0
        if cq.cohort:
            for other in self.kueue.cluster_queues:
                theirs = other.quota(flavor)
                if other.name == cq.name or other.cohort != cq.cohort or theirs is None:
                    continue
                unused = max(0.0, (theirs.nominal or 0.0) - (theirs.reserved or 0.0))
                if theirs.lending_limit is not None:
                    unused = min(unused, theirs.lending_limit)
                borrow += unused - self.taken.get((other.name, flavor), 0)
            if mine.borrowing_limit is not None:
                borrowed = max(0.0, reserved - mine.nominal)
                borrow = min(borrow, mine.borrowing_limit - borrowed)
        return own + max(0.0, borrow) - self.taken.get((cq.name, flavor), 0)

    def admit(self, pod: Obj) -> tuple[str | None, dict[str, str] | None, str | None]:
        """Where Kueue would admit the pod's replacement: (``cq/flavor``, the
        replacement's nodeSelector, None) in-cluster, else (None, None, why not). A pod
        without Kueue's queue label: (None, None, None)."""
        queue = (_meta(pod).get("labels") or {}).get(QUEUE_LABEL)
        if not queue:
            return None, None, None
        namespace = _meta(pod).get("namespace")
        lq = next(
            (q for q in self.kueue.local_queues if q.namespace == namespace and q.name == queue),
            None,
        )
        cq = next((c for c in self.kueue.cluster_queues if lq and c.name == lq.cluster_queue), None)
        if cq is None:
            return None, None, f"LocalQueue {namespace}/{queue} leads to no ClusterQueue"
        need = pod_gpus(pod.get("spec") or {})
        for quota in cq.gpu_quotas:
            if self._available(cq, quota.flavor) < need:
                continue
            if self._offsite(quota.flavor):
                return (
                    None,
                    None,
                    (
                        f"Kueue would admit its replacement on flavor {quota.flavor} "
                        f"(offsite): ClusterQueue {cq.name} has no {need} GPUs of in-cluster "
                        "quota free"
                    ),
                )
            # the pod carries the node labels of the flavor it was admitted on (offsite);
            # its replacement gets those of the flavor it is admitted on now
            selector = dict((pod.get("spec") or {}).get("nodeSelector") or {})
            for other in cq.gpu_quotas:
                if self._offsite(other.flavor):
                    for key, value in (self.kueue.flavor_labels.get(other.flavor) or {}).items():
                        if selector.get(key) == value:
                            del selector[key]
            selector.update(self.kueue.flavor_labels.get(quota.flavor) or {})
            return f"{cq.name}/{quota.flavor}", selector, None
        return None, None, f"ClusterQueue {cq.name} has no {need} GPUs of quota free"

    def take(self, admitted: str, pod: Obj) -> None:
        cq, _, flavor = admitted.partition("/")
        key = (cq, flavor)
        self.taken[key] = self.taken.get(key, 0) + pod_gpus(pod.get("spec") or {})


def _disabled(node: NodeInfo) -> bool:
    return any(
        t.key == DISABLED_TAINT_KEY
        and (t.value or "") == DISABLED_TAINT_VALUE
        and t.effect == DISABLED_TAINT_EFFECT
        for t in node.taints
    )


def _closed(node: NodeInfo) -> bool:
    """No new pod lands on it: our burst-disabled taint or the operator's pause."""
    return any(
        t.key in (DISABLED_TAINT_KEY, PAUSE_TAINT_KEY) and t.effect in ("NoSchedule", "NoExecute")
        for t in node.taints
    )


# -- small pure helpers ----------------------------------------------------------------------


def _what(pod: Mapping[str, Any]) -> str:
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


def _budgets_of(pod: Mapping[str, Any], budgets: Iterable[Obj]) -> list[Obj]:
    labels = _meta(pod).get("labels") or {}
    return [
        b
        for b in budgets
        if _meta(b).get("namespace") == _meta(pod).get("namespace")
        and selector_matches((b.get("spec") or {}).get("selector"), labels)
    ]


def _room(snapshot: MigrateBackSnapshot, count_unknown: bool) -> Side:
    """The healthy in-cluster nodes with their free GPUs, for first-fit placement."""
    free: dict[str, int] = {}
    for name, gpus in snapshot.free_gpus.items():
        if name not in snapshot.in_cluster:
            continue
        judged = None if snapshot.severity is None else snapshot.severity.get(name)
        if judged is Severity.BAD:
            continue
        if (judged is None or judged is Severity.UNKNOWN) and not count_unknown:
            continue
        free[name] = gpus
    return Side({n: dict(snapshot.in_cluster[n]) for n in free}, free)


class _Pace:
    """The three kinds of bucket, refilled to ``now`` from the stored state."""

    def __init__(
        self, config: MigrateBackConfig, stored: Mapping[str, BucketLevel], now: float
    ) -> None:
        self.config = config
        self.now = now
        self.tokens: dict[str, float] = {}
        for key, level in stored.items():
            bucket = self.bucket(key)
            if bucket is not None:
                self.tokens[key] = bucket.refill(level, now)

    def bucket(self, key: str) -> Bucket | None:
        if key == "cluster":
            return self.config.cluster
        if key.startswith("namespace/"):
            return self.config.namespace
        if key.startswith("workload/"):
            return self.config.workload
        return None  # a key of an older version: dropped

    def _get(self, key: str) -> float:
        if key not in self.tokens:
            bucket = self.bucket(key)
            assert bucket is not None
            self.tokens[key] = bucket.burst
        return self.tokens[key]

    def empty(self, keys: Sequence[str]) -> str | None:
        """The first of ``keys`` without a whole token, or None."""
        return next((k for k in keys if self._get(k) < 1.0 - TOKEN_EPSILON), None)

    def take(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.tokens[key] = max(0.0, self._get(key) - 1.0)

    def next_token_s(self, key: str) -> float | None:
        bucket = self.bucket(key)
        if bucket is None or bucket.per_hour <= 0:
            return None
        return (1.0 - self._get(key)) * 3600.0 / bucket.per_hour

    def stored(self) -> dict[str, BucketLevel]:
        """Buckets not full, as the state keeps them (absent means full)."""
        out: dict[str, BucketLevel] = {}
        for key in sorted(self.tokens):
            bucket = self.bucket(key)
            if bucket is not None and self.tokens[key] < bucket.burst:
                out[key] = BucketLevel(self.tokens[key], self.now)
        return out


def _keys(pod: Obj) -> tuple[str, str, str]:
    return ("cluster", f"namespace/{_meta(pod).get('namespace')}", f"workload/{workload_name(pod)}")


# -- the controller ---------------------------------------------------------------------------


class MigrateBack:
    """The migrate-back controller (``krea-ops controller run migrate-back``)."""

    name = NAME

    def __init__(self, config: MigrateBackConfig | None = None) -> None:
        self.config = config or MigrateBackConfig()

    @classmethod
    def from_settings(cls, settings: Any) -> MigrateBack:
        """The runner's way in: ``MigrateBackConfig.from_settings``."""
        return cls(MigrateBackConfig.from_settings(settings))

    def read(self, inputs: Inputs, now: float) -> MigrateBackSnapshot:
        """The virtual nodes (label-selected lists); while one carries the taint, the
        pods matching the selector on each (field-selected lists); while any runs there,
        also every node, the active pods bound to nodes (for free GPUs), node health (a
        verdicts-only telemetry read), the pods matching the selector everywhere (Ready
        counts) and the budgets. The taint can hold for hours with nothing offsite: those
        passes cost a few small lists."""
        cluster = inputs.cluster
        virtual = tuple(info for info, _ in find_virtual_nodes(cluster))
        read_at = {"virtual_nodes": now}
        if not any(_disabled(v) for v in virtual):
            return MigrateBackSnapshot(inputs.user, virtual, read_at=read_at)
        offsite = [
            pod
            for v in virtual
            for pod in cluster.list_all(
                f"list pods matching {self.config.selector} on {v.name}",
                "/api/v1/pods",
                labelSelector=self.config.selector,
                fieldSelector=f"spec.nodeName={v.name},status.phase=Running",
            )
        ]
        read_at["offsite_pods"] = now
        if not offsite:
            return MigrateBackSnapshot(inputs.user, virtual, read_at=read_at)
        side = read_side(cluster, False, [v.name for v in virtual])
        fleet = load_fleet(
            cluster,
            inputs.source,
            inputs.policy,
            nodes=[node_info(obj) for obj in side.nodes.values()],
            source_error=inputs.source_error,
            families=("verdicts",),
        )
        health_error = judged_error(fleet)
        if inputs.source is None and health_error is None:
            health_error = "no telemetry source"
        pods = cluster.list_all(
            f"list pods matching {self.config.selector}",
            "/api/v1/pods",
            labelSelector=self.config.selector,
            fieldSelector=UNFINISHED_PODS,
        )
        budgets = cluster.list_all(
            "list poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets"
        )
        managed = any(QUEUE_LABEL in (_meta(p).get("labels") or {}) for p in offsite)
        kueue = read_kueue(cluster) if managed else None
        read_at.update(nodes=now, pods=now, budgets=now)
        if managed:
            read_at["kueue"] = now
        if not health_error:
            read_at["telemetry"] = now
        return MigrateBackSnapshot(
            user=inputs.user,
            virtual=virtual,
            in_cluster=side.nodes,
            free_gpus=dict(side.free),
            severity=None if health_error else severities(fleet.views),
            health_error=health_error,
            pods=tuple(pods),
            budgets=tuple(budgets),
            kueue=kueue,
            read_at=read_at,
        )

    def decide(
        self, snapshot: MigrateBackSnapshot, now: float, state: Mapping[str, Any]
    ) -> Decision:
        config = self.config
        stored = MigrateBackState.from_json(state)
        disabled = [v for v in snapshot.virtual if _disabled(v)]
        if not disabled:
            return Decision(NAME, gauges={"burst_disabled": 0.0})
        pace = _Pace(config, stored.buckets, now)
        gauges: dict[str, float] = {"burst_disabled": 1.0}
        skipped: list[Skip] = []
        alerts: list[Alert] = []
        virtual_names = {v.name for v in snapshot.virtual}
        offsite = [
            p
            for p in snapshot.pods
            if (p.get("spec") or {}).get("nodeName") in virtual_names
            and (p.get("status") or {}).get("phase") == "Running"
            and is_active(p)
        ]
        gauges["offsite_pods"] = float(len(offsite))
        room = _room(snapshot, config.count_unknown)

        def done(
            steps: list[Step], moves: Mapping[str, MoveMemo], findings: list[Finding]
        ) -> Decision:
            gauges["moves_planned"] = float(len(steps))
            buckets = pace.stored()
            new_state = MigrateBackState(buckets, dict(moves))
            # the cluster's bucket always (a gauge left out keeps its last value); the
            # namespaces' and workloads' as one count (one series each would be unbounded)
            cluster_bucket = buckets.get("cluster")
            gauges["cluster_bucket_tokens"] = float(
                config.cluster.burst if cluster_bucket is None else cluster_bucket.tokens
            )
            gauges["empty_buckets"] = float(
                sum(1 for e in buckets.values() if e.tokens < 1.0 - TOKEN_EPSILON)
            )
            plans: tuple[Plan, ...] = ()
            if steps:
                refs: dict[str, list[PodRef]] = {}
                for step in steps:
                    refs.setdefault(str(step.node), []).extend(step.pods)
                plans = (
                    Plan(
                        action=NAME,
                        nodes=tuple(sorted(virtual_names)),
                        reason=(
                            f"{DISABLED_TAINT_KEY} holds on "
                            f"{', '.join(v.name for v in disabled)}: in-cluster GPUs are free"
                        ),
                        user=snapshot.user,
                        steps=tuple(steps),
                        findings=tuple(findings),
                        options={
                            "direction": "back",
                            "selector": config.selector,
                            "timeout_s": config.move_timeout_s,
                            "free_gpus": room.total_free,
                        },
                        pods={k: tuple(v) for k, v in refs.items()},
                    ),
                )
            return Decision(
                NAME,
                plans=plans,
                skipped=tuple(skipped),
                alerts=tuple(alerts),
                gauges=gauges,
                state=new_state.to_json(),
            )

        # Ready pods per workload (controller UID, as the executor counts them) and per
        # workload name (the memory of moves, which outlives a ReplicaSet).
        ready_by_uid: dict[str, int] = {}
        ready_by_name: dict[str, int] = {}
        for pod in snapshot.pods:
            owner = controller_of(pod)
            if owner is None or not is_active(pod) or not is_ready(pod):
                continue
            uid = str(owner.get("uid"))
            ready_by_uid[uid] = ready_by_uid.get(uid, 0) + 1
            ready_by_name[workload_name(pod)] = ready_by_name.get(workload_name(pod), 0) + 1
        moves: dict[str, MoveMemo] = {
            workload: memo
            for workload, memo in stored.moves.items()
            if ready_by_name.get(workload, 0) < memo.ready and now - memo.at < config.floor_hold_s
        }

        if not offsite:  # (the in-cluster nodes were not read)
            return done([], moves, [])
        gauges["free_in_cluster_gpus"] = float(room.total_free)
        if snapshot.health_error:
            how = "counted as room" if config.count_unknown else "not counted as room"
            alerts.append(
                Alert(
                    "stale-input",
                    f"node health unread ({snapshot.health_error}); in-cluster nodes are "
                    f"judged by Ready, cordon and taints only and {how}",
                )
            )
        open_nodes = [v for v in snapshot.virtual if v.ready is True and not _closed(v)]
        if open_nodes:
            for node in open_nodes:
                skipped.append(
                    Skip(
                        f"node {node.name}",
                        "hold",
                        f"virtual node {node.name} still takes new pods (no "
                        f"{DISABLED_TAINT_KEY} or {PAUSE_TAINT_KEY} taint): a replacement "
                        "could land offsite again; nothing moves",
                    )
                )
            return done([], moves, [])

        steps: list[Step] = []
        planned: dict[str, int] = {}  # workload -> moves planned this pass
        quota = _Quota(snapshot.kueue, snapshot.virtual) if snapshot.kueue else None
        virtual_order = tuple(sorted(virtual_names))
        for pod in order_back(offsite):
            what = f"pod {_what(pod)}"
            owner = controller_of(pod)
            if owner is None or owner.get("kind") == "DaemonSet":
                continue  # nothing would recreate it in-cluster: not ours to move
            workload = workload_name(pod)
            ready_now = ready_by_uid.get(str(owner.get("uid")), 0)
            if workload in moves and workload not in planned:
                was = moves[workload].ready
                skipped.append(
                    Skip(
                        what,
                        "floor",
                        f"{workload}: {ready_by_name.get(workload, 0)} Ready, {was} before its "
                        "last move: waiting for that replacement to be Ready",
                    )
                )
                continue
            if ready_now - 1 < config.min_ready:
                skipped.append(
                    Skip(
                        what,
                        "floor",
                        f"{workload}: {ready_now} Ready; a move would leave "
                        f"{ready_now - 1}, below min_ready {config.min_ready}",
                    )
                )
                continue
            budgets = _budgets_of(pod, snapshot.budgets)
            if len(budgets) > 1:
                names = ", ".join(str(_meta(b).get("name")) for b in budgets)
                skipped.append(
                    Skip(
                        what,
                        "budget",
                        f"{len(budgets)} PodDisruptionBudgets select it ({names}): the "
                        "Eviction API refuses such pods",
                    )
                )
                continue
            if budgets and ((budgets[0].get("status") or {}).get("disruptionsAllowed") or 0) < 1:
                skipped.append(
                    Skip(
                        what,
                        "budget",
                        f"PodDisruptionBudget {_meta(budgets[0]).get('namespace')}/"
                        f"{_meta(budgets[0]).get('name')} allows 0 disruptions now",
                    )
                )
                continue
            # the pace first: a placement costs a sort of the nodes, and with an empty
            # bucket every pod left would pay it for nothing
            keys = _keys(pod)
            empty = pace.empty(keys)
            if empty is not None:
                wait = pace.next_token_s(empty)
                when = f"next token in {wait:.0f}s" if wait is not None else "no refill"
                skipped.append(Skip(what, "pace", f"bucket {empty} is empty ({when})"))
                continue
            admitted, selector = None, None
            if quota is not None:
                admitted, selector, refused = quota.admit(pod)
                if refused is not None:
                    skipped.append(Skip(what, "no-room", refused))
                    continue
            probe = pod
            if selector is not None:  # placed as its replacement will be
                probe = {**pod, "spec": {**(pod.get("spec") or {}), "nodeSelector": selector}}
            target = room.place(probe)
            if target is None:
                need = pod_gpus(pod.get("spec") or {})
                skipped.append(
                    Skip(
                        what,
                        "no-room",
                        f"no healthy in-cluster node has {need} GPUs free for it "
                        f"({room.total_free} free in all)",
                    )
                )
                continue
            if room.total_free < config.keep_free_gpus:
                need = pod_gpus(pod.get("spec") or {})
                room.free[target] += need  # not taken after all
                skipped.append(
                    Skip(
                        what,
                        "no-room",
                        f"its {need} GPUs would leave {room.total_free - need} free in-cluster, "
                        f"below keep_free_gpus {config.keep_free_gpus}",
                    )
                )
                continue
            if quota is not None and admitted is not None:
                quota.take(admitted, pod)
            pace.take(keys)
            planned[workload] = planned.get(workload, 0) + 1
            moves[workload] = MoveMemo(ready_by_name.get(workload, 0), now)
            steps.append(
                move_step(
                    pod,
                    target,
                    virtual_order,
                    ready_now - 1,
                    config.move_timeout_s,
                    node_selector=selector,
                )
            )
        findings: list[Finding] = []
        if steps:
            findings.append(
                Finding(
                    "capacity",
                    FindingSeverity.INFO,
                    f"{gauges['free_in_cluster_gpus']:g} healthy in-cluster GPUs free; moves "
                    f"{len(steps)} of {len(offsite)} offsite pods, one at a time, each "
                    "replacement Ready in-cluster before the next",
                )
            )
        return done(steps, moves, findings)
