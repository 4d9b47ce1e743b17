"""Kueue's queue state as snapshots, and why a workload waits.

* :func:`read_queues`: ClusterQueues (quota, reservation, usage, borrowing, counts, the
  Active condition) with their LocalQueues, and for each ResourceFlavor with a GPU quota
  the GPUs its healthy nodes can actually schedule beside the nominal quota promised
  (``drift_gpus``: negative when the quota promises GPUs that are not there, Kueue's
  most complained-about gap: it never checks quota against nodes).
* :func:`read_workloads`: Workloads with a state bucket (pending / reserving / admitted /
  finished / evicted), their gang shape, Kueue's pending reason and message verbatim,
  requeue and eviction history, and their position in the ClusterQueue: from Kueue's
  visibility API when the server serves it, otherwise computed the way BestEffortFIFO
  orders (priority, then creation) and marked estimated.
* :func:`why`: one workload's blockers, with the facts behind them: gang size, quota
  (own, borrowable in the cohort, who borrows), free GPUs per healthy node of the
  flavor, nodes that are cordoned, tainted, not Ready, unhealthy or unknown.

Everything is read through :class:`krea_ops.kube.cluster.Cluster` as Kueue v1beta2,
falling back to v1beta1 (whose field names differ: ``spec.cohort``,
``spec.priorityClassName``). A cluster without Kueue raises ``MissingCrd`` naming the fix.
Node health comes in as ``node_severity`` (node name -> Severity, from the health
module): a BAD node is not capacity, an UNKNOWN one is counted apart; ``None`` judges
nodes by Ready, cordon and taints only. Unknown values are ``None``, never 0.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from krea_ops.errors import BadInput, KreaError
from krea_ops.kube.cluster import GPU_RESOURCE, Cluster, pod_gpus
from krea_ops.kube.quantity import number as quantity
from krea_ops.kube.rules import TERMINAL_PHASES, controller_text, labels_match, tolerates
from krea_ops.kube.times import parse_time
from krea_ops.model import NodeInfo, PodInfo, Severity
from krea_ops.units import counted

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"
VISIBILITY_TIMEOUT_S = 5.0
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
GPU = GPU_RESOURCE

PENDING, RESERVING, ADMITTED, FINISHED, EVICTED = (
    "pending",
    "reserving",
    "admitted",
    "finished",
    "evicted",
)
STATES = (PENDING, RESERVING, ADMITTED, FINISHED, EVICTED)

# Node states for capacity, worst reason first (a node gets the first that applies).
HEALTHY, UNKNOWN, BAD = "healthy", "unknown", "bad"
NOT_READY, CORDONED, TAINTED = "not_ready", "cordoned", "tainted"

Obj = dict[str, Any]


# -- small parsers ---------------------------------------------------------------------


def _conditions(obj: Obj) -> dict[str, Obj]:
    return {
        str(c.get("type")): c
        for c in ((obj.get("status") or {}).get("conditions") or ())
        if isinstance(c, dict)
    }


def _is_true(conds: Mapping[str, Obj], ctype: str) -> bool:
    return (conds.get(ctype) or {}).get("status") == "True"


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


# -- queues ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceQuota:
    """One (flavor, resource) of a ClusterQueue. Quantities are in the resource's unit
    (GPUs for ``nvidia.com/gpu``, cores for ``cpu``, bytes for ``memory``)."""

    flavor: str
    resource: str
    nominal: float | None
    borrowing_limit: float | None = None  # None: no limit (the cohort's unused quota)
    lending_limit: float | None = None  # None: lends all its unused quota
    reserved: float | None = None  # status.flavorsReservation: held by QuotaReserved workloads
    used: float | None = None  # status.flavorsUsage: held by Admitted workloads
    borrowed: float | None = None  # reservation above nominal (from the cohort, or over quota)

    @property
    def free(self) -> float | None:
        """Nominal quota nobody has reserved (0 when borrowing or over quota)."""
        left = _sub(self.nominal, self.reserved)
        return None if left is None else max(left, 0)


@dataclass(frozen=True)
class LocalQueueInfo:
    namespace: str
    name: str
    cluster_queue: str | None
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    active: bool | None = None
    active_reason: str | None = None
    reserved_gpus: float | None = None
    used_gpus: float | None = None


@dataclass(frozen=True)
class ClusterQueueInfo:
    name: str
    cohort: str | None
    queueing_strategy: str | None
    stop_policy: str | None
    active: bool | None  # the Active condition; None when Kueue has not written it
    active_reason: str | None
    active_message: str | None
    pending_workloads: int | None
    reserving_workloads: int | None
    admitted_workloads: int | None
    quotas: tuple[ResourceQuota, ...]
    preemption: Mapping[str, Any] = field(default_factory=dict)
    local_queues: tuple[LocalQueueInfo, ...] = ()

    def quota(self, flavor: str, resource: str = GPU) -> ResourceQuota | None:
        return next((q for q in self.quotas if q.flavor == flavor and q.resource == resource), None)

    @property
    def gpu_quotas(self) -> tuple[ResourceQuota, ...]:
        return tuple(q for q in self.quotas if q.resource == GPU)


@dataclass(frozen=True)
class NodeCapacity:
    """One node a flavor selects, and whether its GPUs are usable capacity."""

    node: str
    gpus: int  # allocatable nvidia.com/gpu (0 when the node has none)
    state: str  # healthy | unknown | bad | not_ready | cordoned | tainted
    detail: str | None = None  # the taint, the Ready reason, the severity


@dataclass(frozen=True)
class FlavorCapacity:
    """The nodes behind one ResourceFlavor against the GPU quota promised on it."""

    flavor: str
    node_labels: Mapping[str, str]
    nodes: int  # nodes matching nodeLabels
    healthy_nodes: int  # Ready, not cordoned, no untolerated taint, not BAD/UNKNOWN
    healthy_gpus: int
    unknown_nodes: int  # schedulable, but the health module cannot see them
    unknown_gpus: int
    unavailable_nodes: int  # not Ready, cordoned, tainted, or BAD
    unavailable_gpus: int
    nominal_gpus: float | None  # nvidia.com/gpu nominalQuota summed over all ClusterQueues
    not_healthy: tuple[NodeCapacity, ...] = ()  # every matching node that is not healthy
    tolerations: tuple[Obj, ...] = ()

    @property
    def drift_gpus(self) -> float | None:
        """Healthy GPUs minus nominal quota: negative means Kueue will admit work that
        has no nodes to run on."""
        return None if self.nominal_gpus is None else self.healthy_gpus - self.nominal_gpus


@dataclass(frozen=True)
class QueueSnapshot:
    api_version: str  # the Kueue version read: v1beta2, or v1beta1 on an old Kueue
    cluster_queues: tuple[ClusterQueueInfo, ...]
    local_queues: tuple[LocalQueueInfo, ...]
    flavors: Mapping[str, FlavorCapacity]  # ResourceFlavors that exist
    health_judged: bool  # node_severity was given
    collected_at: float
    health_error: str | None = None  # why node health could not be read, when it was asked

    def cluster_queue(self, name: str) -> ClusterQueueInfo | None:
        return next((c for c in self.cluster_queues if c.name == name), None)


def _flavor_totals(entries: Any, *, borrowed: bool = False) -> dict[tuple[str, str], float | None]:
    out: dict[tuple[str, str], float | None] = {}
    for fl in entries or ():
        for res in fl.get("resources") or ():
            key = (str(fl.get("name")), str(res.get("name")))
            out[key] = quantity(res.get("borrowed" if borrowed else "total"))
    return out


def parse_local_queue(obj: Obj) -> LocalQueueInfo:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    active = _conditions(obj).get("Active")
    reserved = _flavor_totals(status.get("flavorsReservation"))
    used = _flavor_totals(status.get("flavorsUsage"))

    def gpus(totals: dict[tuple[str, str], float | None], key: str) -> float | None:
        if key not in status:
            return None
        values = [v for (_, r), v in totals.items() if r == GPU and v is not None]
        return sum(values) if values else 0

    return LocalQueueInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        cluster_queue=(obj.get("spec") or {}).get("clusterQueue"),
        pending_workloads=_int(status.get("pendingWorkloads")),
        reserving_workloads=_int(status.get("reservingWorkloads")),
        admitted_workloads=_int(status.get("admittedWorkloads")),
        active=None if active is None else active.get("status") == "True",
        active_reason=None if active is None else active.get("reason"),
        reserved_gpus=gpus(reserved, "flavorsReservation"),
        used_gpus=gpus(used, "flavorsUsage"),
    )


def parse_cluster_queue(obj: Obj, local_queues: Sequence[LocalQueueInfo] = ()) -> ClusterQueueInfo:
    """A ClusterQueue in either API version (v1beta1 names the cohort ``spec.cohort``)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name", ""))
    reserved = _flavor_totals(status.get("flavorsReservation"))
    reserved_borrowed = _flavor_totals(status.get("flavorsReservation"), borrowed=True)
    used = _flavor_totals(status.get("flavorsUsage"))
    used_borrowed = _flavor_totals(status.get("flavorsUsage"), borrowed=True)
    has_reservation = "flavorsReservation" in status
    has_usage = "flavorsUsage" in status
    quotas = []
    for rg in spec.get("resourceGroups") or ():
        for fl in rg.get("flavors") or ():
            for res in fl.get("resources") or ():
                key = (str(fl.get("name")), str(res.get("name")))
                r = reserved.get(key, 0 if has_reservation else None)
                borrowed = reserved_borrowed.get(key)
                if borrowed is None:
                    borrowed = used_borrowed.get(key)
                quotas.append(
                    ResourceQuota(
                        flavor=key[0],
                        resource=key[1],
                        nominal=quantity(res.get("nominalQuota")),
                        borrowing_limit=quantity(res.get("borrowingLimit")),
                        lending_limit=quantity(res.get("lendingLimit")),
                        reserved=r,
                        used=used.get(key, 0 if has_usage else None),
                        borrowed=borrowed if borrowed is not None else (0 if r == 0 else None),
                    )
                )
    active = _conditions(obj).get("Active")
    return ClusterQueueInfo(
        name=name,
        cohort=spec.get("cohortName") or spec.get("cohort") or None,
        queueing_strategy=spec.get("queueingStrategy") or "BestEffortFIFO",
        stop_policy=spec.get("stopPolicy") or "None",
        active=None if active is None else active.get("status") == "True",
        active_reason=None if active is None else active.get("reason"),
        active_message=None if active is None else active.get("message"),
        pending_workloads=_int(status.get("pendingWorkloads")),
        reserving_workloads=_int(status.get("reservingWorkloads")),
        admitted_workloads=_int(status.get("admittedWorkloads")),
        quotas=tuple(quotas),
        preemption=dict(spec.get("preemption") or {}),
        local_queues=tuple(lq for lq in local_queues if lq.cluster_queue == name),
    )


def flavor_tolerations(flavor: Obj) -> tuple[Obj, ...]:
    """What pods admitted on the flavor tolerate: its ``tolerations``, and its
    ``nodeTaints`` (taints its nodes are known to carry; Kueue requires the workload to
    tolerate them before it assigns the flavor)."""
    spec = flavor.get("spec") or {}
    out = [dict(t) for t in spec.get("tolerations") or ()]
    for t in spec.get("nodeTaints") or ():
        out.append(
            {
                "key": t.get("key"),
                "operator": "Equal",
                "value": t.get("value"),
                "effect": t.get("effect"),
            }
        )
    return tuple(out)


def flavor_selects(flavor: Obj, node: NodeInfo) -> bool:
    return labels_match((flavor.get("spec") or {}).get("nodeLabels"), node.labels)


def node_capacity(
    node: NodeInfo,
    tolerations: Sequence[Obj],
    node_severity: Mapping[str, Severity] | None,
) -> NodeCapacity:
    """Whether the node's GPUs are capacity for pods tolerating ``tolerations``."""
    gpus = node.gpu_allocatable or 0
    if node.ready is not True:
        detail = node.ready_reason or ("Ready=Unknown" if node.ready is None else "NotReady")
        return NodeCapacity(node.name, gpus, NOT_READY, detail)
    if node.unschedulable:
        return NodeCapacity(node.name, gpus, CORDONED, None)
    for taint in node.taints:
        as_obj = {"key": taint.key, "value": taint.value, "effect": taint.effect}
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, as_obj):
            return NodeCapacity(node.name, gpus, TAINTED, str(taint))
    # a judged fleet without this node (new since its read) is of unknown health, as
    # burst migrate and train launch count it; no judgement at all (telemetry
    # unavailable) leaves the API's view, with the reason beside it (health_error)
    severity = None if node_severity is None else node_severity.get(node.name, Severity.UNKNOWN)
    # the state says it ("bad", "unknown"); the reasons are the nodes view's to give
    if severity is Severity.BAD:
        return NodeCapacity(node.name, gpus, BAD, None)
    if severity is Severity.UNKNOWN:
        return NodeCapacity(node.name, gpus, UNKNOWN, None)
    return NodeCapacity(node.name, gpus, HEALTHY, None)


def flavor_capacity(
    flavor: Obj,
    nodes: Sequence[NodeInfo],
    nominal_gpus: float | None,
    node_severity: Mapping[str, Severity] | None = None,
) -> FlavorCapacity:
    tolerations = flavor_tolerations(flavor)
    mine = [
        node_capacity(n, tolerations, node_severity) for n in nodes if flavor_selects(flavor, n)
    ]
    healthy = [c for c in mine if c.state == HEALTHY]
    unknown = [c for c in mine if c.state == UNKNOWN]
    unavailable = [c for c in mine if c.state not in (HEALTHY, UNKNOWN)]
    return FlavorCapacity(
        flavor=str((flavor.get("metadata") or {}).get("name", "")),
        node_labels=dict((flavor.get("spec") or {}).get("nodeLabels") or {}),
        nodes=len(mine),
        healthy_nodes=len(healthy),
        healthy_gpus=sum(c.gpus for c in healthy),
        unknown_nodes=len(unknown),
        unknown_gpus=sum(c.gpus for c in unknown),
        unavailable_nodes=len(unavailable),
        unavailable_gpus=sum(c.gpus for c in unavailable),
        nominal_gpus=nominal_gpus,
        not_healthy=tuple(c for c in mine if c.state != HEALTHY),
        tolerations=tolerations,
    )


@dataclass
class _Raw:
    """One read of Kueue's objects (and the nodes) shared by the public functions."""

    version: str
    cluster_queues: list[Obj]
    local_queues: list[Obj]
    flavors: dict[str, Obj]
    nodes: list[NodeInfo]


def _custom(cluster: Cluster, plural: str) -> list[Obj]:
    return cluster.custom_objects(KUEUE_GROUP, plural, KUEUE_VERSIONS)


def _read_raw(cluster: Cluster) -> _Raw:
    version = cluster.custom_version(KUEUE_GROUP, "clusterqueues", KUEUE_VERSIONS)
    cqs = _custom(cluster, "clusterqueues")
    lqs = _custom(cluster, "localqueues")
    flavors = {
        str((f.get("metadata") or {}).get("name")): f for f in _custom(cluster, "resourceflavors")
    }
    return _Raw(version, cqs, lqs, flavors, cluster.nodes())


def _snapshot(raw: _Raw, node_severity: Mapping[str, Severity] | None) -> QueueSnapshot:
    lqs = tuple(
        sorted(
            (parse_local_queue(o) for o in raw.local_queues), key=lambda q: (q.namespace, q.name)
        )
    )
    cqs = tuple(sorted((parse_cluster_queue(o, lqs) for o in raw.cluster_queues),
                       key=lambda c: c.name))  # fmt: skip
    nominal: dict[str, float] = defaultdict(float)
    has_gpu: set[str] = set()
    for cq in cqs:
        for q in cq.gpu_quotas:
            has_gpu.add(q.flavor)
            nominal[q.flavor] += q.nominal or 0
    flavors = {
        name: flavor_capacity(
            obj,
            raw.nodes,
            quantity(nominal[name]) if name in has_gpu else None,
            node_severity,
        )
        for name, obj in sorted(raw.flavors.items())
    }
    return QueueSnapshot(
        api_version=raw.version,
        cluster_queues=cqs,
        local_queues=lqs,
        flavors=flavors,
        health_judged=node_severity is not None,
        collected_at=time.time(),
    )


def read_queues(
    cluster: Cluster,
    node_severity: Mapping[str, Severity]
    | Callable[[list[NodeInfo]], Mapping[str, Severity] | None]
    | None = None,
) -> QueueSnapshot:
    """ClusterQueues, LocalQueues and flavor capacity: three Kueue lists and one node
    list (no pods: this stays cheap on a 4,096-node cluster). ``node_severity`` may be a
    function of that node list, called after Kueue's objects were read."""
    raw = _read_raw(cluster)
    severity = node_severity(raw.nodes) if callable(node_severity) else node_severity
    return _snapshot(raw, severity)


# -- workloads -------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSetInfo:
    name: str
    count: int
    gpus_per_pod: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    flavor: str | None = None  # the nvidia.com/gpu flavor Kueue assigned (once reserved)

    @property
    def total_gpus(self) -> int:
        return self.count * self.gpus_per_pod


@dataclass(frozen=True)
class WorkloadInfo:
    namespace: str
    name: str
    owner: str | None  # "JobSet/dit" from the controller reference
    local_queue: str | None
    cluster_queue: str | None  # the admission's, else the LocalQueue's
    state: str  # pending | reserving | admitted | finished | evicted
    active: bool  # spec.active (False: deactivated, held until re-activated)
    priority: int | None
    priority_class: str | None
    pod_sets: tuple[PodSetInfo, ...]
    pending_reason: str | None = None  # QuotaReserved=False reason, verbatim
    pending_message: str | None = None
    evicted_reason: str | None = None  # Evicted=True reason
    evicted_message: str | None = None
    preempted_reason: str | None = None  # Preempted=True reason (InCohortReclamation ...)
    finished_reason: str | None = None
    # Kueue bug #14811: Evicted=True while the admission is still set: the workload holds
    # quota (often for hours) with no pods running.
    evicted_holding_quota: bool = False
    requeue_count: int | None = None
    requeue_at: float | None = None
    evictions: int = 0  # schedulingStats.evictions counts summed: times evicted/preempted
    created_at: float | None = None
    admitted_at: float | None = None
    finished_at: float | None = None
    position: int | None = None  # in the ClusterQueue's pending list, 0 = next
    position_estimated: bool | None = None  # True: computed here, not from the visibility API

    @property
    def pods(self) -> int:
        return sum(ps.count for ps in self.pod_sets)

    @property
    def total_gpus(self) -> int:
        return sum(ps.total_gpus for ps in self.pod_sets)

    @property
    def gpus_per_pod(self) -> int:
        return max((ps.gpus_per_pod for ps in self.pod_sets), default=0)

    @property
    def flavors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(ps.flavor for ps in self.pod_sets if ps.flavor))

    @property
    def waiting(self) -> bool:
        """In the queue: not holding quota, not finished, not deactivated."""
        return self.state in (PENDING, EVICTED) and self.active

    @property
    def reason(self) -> str | None:
        """Kueue's reason worth showing next to the workload, verbatim: none for work that
        holds its quota (unless it is stuck there, Kueue bug #14811); for an evicted one
        why it was evicted; else why it waits, or how it finished."""
        if self.state in (ADMITTED, RESERVING) and not self.evicted_holding_quota:
            return None
        if self.state == EVICTED and self.evicted_reason:
            return self.evicted_reason
        return self.pending_reason or self.evicted_reason or self.finished_reason

    @property
    def message(self) -> str | None:
        """Kueue's message that goes with ``reason``."""
        if self.state == EVICTED and self.evicted_message:
            return self.evicted_message
        return self.pending_message or self.evicted_message

    @property
    def position_text(self) -> str | None:
        """The queue position as both UIs print it: ``3``, or ``~3`` for an estimate made
        here (Kueue's visibility API not served); None when not queued."""
        if self.position is None:
            return None
        return f"~{self.position}" if self.position_estimated else str(self.position)

    @property
    def gang(self) -> str:
        """The gang's shape: ``4x8`` (pods x GPUs each) when every pod asks the same,
        else its GPUs in all (``40 GPUs``)."""
        if self.pod_sets and len({ps.gpus_per_pod for ps in self.pod_sets}) == 1:
            return f"{self.pods}x{self.gpus_per_pod}"
        return f"{self.total_gpus} GPUs"


def workload_state(obj: Obj) -> tuple[str, bool]:
    """(state bucket, evicted_holding_quota) from the conditions, as kueuectl buckets."""
    conds = _conditions(obj)
    admission = (obj.get("status") or {}).get("admission")
    evicted = _is_true(conds, "Evicted")
    if _is_true(conds, "Finished"):
        return FINISHED, False
    if _is_true(conds, "QuotaReserved"):
        state = ADMITTED if _is_true(conds, "Admitted") else RESERVING
        return state, evicted and bool(admission)
    if evicted:
        return EVICTED, bool(admission)
    return PENDING, False


def parse_workload(obj: Obj, lq_to_cq: Mapping[tuple[str, str], str | None]) -> WorkloadInfo:
    """A Workload in either API version (v1beta1: ``spec.priorityClassName``)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conds = _conditions(obj)
    ns = str(meta.get("namespace", ""))
    queue = spec.get("queueName") or None
    admission = status.get("admission") or {}
    assigned = {
        str(psa.get("name")): (psa.get("flavors") or {}).get(GPU)
        for psa in admission.get("podSetAssignments") or ()
    }
    pod_sets = []
    for ps in spec.get("podSets") or ():
        tspec = (ps.get("template") or {}).get("spec") or {}
        name = str(ps.get("name", "main"))
        pod_sets.append(
            PodSetInfo(
                name=name,
                count=_int(ps.get("count")) or 0,
                gpus_per_pod=pod_gpus(tspec),
                node_selector=dict(tspec.get("nodeSelector") or {}),
                flavor=assigned.get(name),
            )
        )
    owner = controller_text(obj)
    ref = spec.get("priorityClassRef") or {}
    state, holding = workload_state(obj)
    cq = admission.get("clusterQueue") or (lq_to_cq.get((ns, queue)) if queue else None)
    qr = conds.get("QuotaReserved") or {}
    evicted = conds.get("Evicted") or {}
    preempted = conds.get("Preempted") or {}
    finished = conds.get("Finished") or {}
    admitted = conds.get("Admitted") or {}
    requeue = status.get("requeueState") or {}
    history = (status.get("schedulingStats") or {}).get("evictions") or ()
    evictions = sum(_int(e.get("count")) or 0 for e in history)
    return WorkloadInfo(
        namespace=ns,
        name=str(meta.get("name", "")),
        owner=owner,
        local_queue=queue,
        cluster_queue=cq,
        state=state,
        active=spec.get("active") is not False,
        priority=_int(spec.get("priority")),
        priority_class=ref.get("name") or spec.get("priorityClassName") or None,
        pod_sets=tuple(pod_sets),
        pending_reason=qr.get("reason") if qr.get("status") == "False" else None,
        pending_message=qr.get("message") if qr.get("status") == "False" else None,
        evicted_reason=evicted.get("reason") if evicted.get("status") == "True" else None,
        evicted_message=evicted.get("message") if evicted.get("status") == "True" else None,
        preempted_reason=preempted.get("reason") if preempted.get("status") == "True" else None,
        finished_reason=finished.get("reason") if finished.get("status") == "True" else None,
        evicted_holding_quota=holding,
        requeue_count=_int(requeue.get("count")),
        requeue_at=parse_time(requeue.get("requeueAt")),
        evictions=evictions,
        created_at=parse_time(meta.get("creationTimestamp")),
        admitted_at=(
            parse_time(admitted.get("lastTransitionTime"))
            if admitted.get("status") == "True"
            else None
        ),
        finished_at=(
            parse_time(finished.get("lastTransitionTime"))
            if finished.get("status") == "True"
            else None
        ),
    )


def _visible_positions(cluster: Cluster, cq: str) -> dict[tuple[str, str], int] | None:
    """Positions from Kueue's visibility API, or None when it is not served (not
    installed, APIService down, forbidden): the caller estimates instead, quietly."""
    path = f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/clusterqueues/{cq}/pendingworkloads"
    try:
        timeout, cluster.timeout_s = cluster.timeout_s, VISIBILITY_TIMEOUT_S
        try:
            body = cluster.get(f"get {path}", path, limit=1000)
        finally:
            cluster.timeout_s = timeout
    except KreaError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        return None
    out: dict[tuple[str, str], int] = {}
    for item in body["items"]:
        meta = item.get("metadata") or {}
        pos = _int(item.get("positionInClusterQueue"))
        if pos is not None:
            out[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = pos
    return out


def _with_positions(cluster: Cluster | None, wls: list[WorkloadInfo]) -> list[WorkloadInfo]:
    from dataclasses import replace

    by_cq: dict[str, list[WorkloadInfo]] = defaultdict(list)
    for wl in wls:
        if wl.waiting and wl.cluster_queue:
            by_cq[wl.cluster_queue].append(wl)
    positions: dict[tuple[str, str], tuple[int | None, bool]] = {}
    visibility = cluster is not None
    for cq, queued in sorted(by_cq.items()):
        visible = _visible_positions(cluster, cq) if visibility and cluster else None
        if visible is not None:
            for wl in queued:
                positions[(wl.namespace, wl.name)] = (visible.get((wl.namespace, wl.name)), False)
            continue
        visibility = False  # not served for one ClusterQueue: not served at all
        order = sorted(
            queued,
            key=lambda w: (-(w.priority or 0), w.created_at or 0.0, w.namespace, w.name),
        )
        for i, wl in enumerate(order):
            positions[(wl.namespace, wl.name)] = (i, True)
    out = []
    for wl in wls:
        pos = positions.get((wl.namespace, wl.name))
        out.append(replace(wl, position=pos[0], position_estimated=pos[1]) if pos else wl)
    return out


def _lq_map(local_queues: Iterable[Obj]) -> dict[tuple[str, str], str | None]:
    return {
        (
            str((o.get("metadata") or {}).get("namespace", "")),
            str((o.get("metadata") or {}).get("name", "")),
        ): (o.get("spec") or {}).get("clusterQueue")
        for o in local_queues
    }


def _all_workloads(cluster: Cluster, local_queues: Iterable[Obj]) -> list[WorkloadInfo]:
    lq_to_cq = _lq_map(local_queues)
    wls = [parse_workload(o, lq_to_cq) for o in _custom(cluster, "workloads")]
    wls.sort(key=lambda w: (w.namespace, w.name))
    return _with_positions(cluster, wls)


def read_workloads(
    cluster: Cluster, *, namespace: str | None = None, queue: str | None = None
) -> tuple[WorkloadInfo, ...]:
    """Workloads, optionally of one namespace and of one queue (a LocalQueue or a
    ClusterQueue name). Every namespace is read so that positions count the whole
    ClusterQueue."""
    lqs = _custom(cluster, "localqueues")
    return tuple(
        w
        for w in _all_workloads(cluster, lqs)
        if (namespace is None or w.namespace == namespace)
        and (queue is None or queue in (w.local_queue, w.cluster_queue))
    )


def find_workload(
    workloads: Sequence[WorkloadInfo], name: str, namespace: str | None = None
) -> WorkloadInfo:
    """The workload named ``name`` (or, failing that, the one whose owner, say the JobSet,
    is named ``name``); BadInput when there is none or more than one."""
    scope = [w for w in workloads if namespace is None or w.namespace == namespace]
    hits = [w for w in scope if w.name == name]
    if not hits:
        hits = [w for w in scope if w.owner and w.owner.split("/", 1)[-1] == name]
    where = f"namespace {namespace}" if namespace else "any namespace"
    if not hits:
        raise BadInput(f"workload {name} not found in {where}; krea-ops queue workloads lists them")
    if len(hits) > 1:
        names = ", ".join(f"{w.namespace}/{w.name}" for w in hits[:6])
        raise BadInput(f"workload {name} is ambiguous ({names}); pass --namespace")
    return hits[0]


# -- why -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeFree:
    node: str
    allocatable_gpus: int
    requested_gpus: int  # GPU requests of the active pods bound to it

    @property
    def free_gpus(self) -> int:
        return max(self.allocatable_gpus - self.requested_gpus, 0)


@dataclass(frozen=True)
class Borrower:
    cluster_queue: str
    borrowed_gpus: float


@dataclass(frozen=True)
class FlavorFit:
    """One flavor the workload could get: its quota and its nodes."""

    flavor: str
    # quota (GPUs); None when unknown (no status yet, or the flavor has no GPU quota)
    nominal_gpus: float | None
    reserved_gpus: float | None
    free_quota_gpus: float | None  # nominal - reserved, never below 0
    borrowing_limit_gpus: float | None
    can_borrow: bool  # the ClusterQueue is in a cohort and its borrowing limit is not 0
    available_gpus: float | None  # what quota could give now, borrowing included
    max_gpus: float | None  # the most quota could ever give (nominal + borrowable)
    borrowers: tuple[Borrower, ...]  # cohort members borrowing on this flavor
    # nodes
    nodes: int
    healthy_nodes: int
    healthy_gpus: int
    free_healthy_gpus: int
    nodes_fitting_one_pod: int  # healthy nodes with free GPUs >= the largest pod
    nodes_big_enough: int  # healthy nodes with allocatable >= the largest pod
    pods_placeable: int  # of gpu_pods, how many a best-fit placement puts on free GPUs now
    gpu_pods: int  # GPU pods to place: the gang's (pending), its unbound ones (admitted)
    # of the whole gang's GPU pods, how many fit on the healthy nodes were they empty
    pods_placeable_empty: int
    gang_gpu_pods: int
    need_gpus: int  # the GPUs quota must give (the whole gang)
    free_by_node: tuple[NodeFree, ...]  # healthy nodes, most free first
    not_healthy: tuple[NodeCapacity, ...]
    node_selector_conflict: bool = False  # the pods' nodeSelector excludes this flavor

    @property
    def quota_fits(self) -> bool | None:
        return None if self.available_gpus is None else self.available_gpus >= self.need_gpus

    @property
    def capacity_fits(self) -> bool:
        return self.pods_placeable >= self.gpu_pods

    @property
    def capacity_ever_fits(self) -> bool:
        return self.pods_placeable_empty >= self.gang_gpu_pods


@dataclass(frozen=True)
class WhyReport:
    workload: WorkloadInfo
    pods: int
    gpus_per_pod: int  # the largest pod's GPUs
    total_gpus: int
    whole_node: bool | None  # each GPU pod needs every GPU of a node of its flavor
    cluster_queue: ClusterQueueInfo | None
    local_queue_found: bool
    flavors: tuple[FlavorFit, ...]
    pods_running: int | None  # the workload's pods bound to nodes (admitted ones)
    pods_unscheduled: int | None  # its pods not yet bound
    blockers: tuple[str, ...]  # codes, most fundamental first (see BLOCKERS)
    kueue_reason: str | None  # what Kueue says, verbatim (QuotaReserved or Evicted)
    kueue_message: str | None
    summary: str  # one paragraph for the operator
    health_error: str | None = None  # why node health could not be read, when it was asked


BLOCKERS = {
    "finished": "the workload finished",
    "deactivated": "spec.active is false: it waits until someone re-activates it",
    "no_local_queue": "its LocalQueue does not exist",
    "no_cluster_queue": "its ClusterQueue does not exist",
    "cluster_queue_inactive": "its ClusterQueue is not Active",
    "quota_max": "it asks for more GPUs than its quota can ever give, borrowing included",
    "quota": "not enough unreserved quota now",
    "preempting": "Kueue is preempting workloads to make room",
    "capacity_max": "not enough healthy nodes to hold the gang even when empty",
    "capacity": "not enough free GPUs on healthy nodes now",
    "evicted_holding_quota": (
        "nothing in Kueue: it is Evicted yet still holds its quota (Kueue bug #14811); "
        "set spec.active to false, then true, to release and requeue it"
    ),
    "admission_checks": "quota reserved, waiting for admission checks",
}


def _place(free: list[int], sizes: Mapping[int, int]) -> int:
    """Pods placed by best-fit decreasing on per-node free GPUs; ``sizes`` is GPUs per pod
    -> pods. The work is bounded by the pods that fit, not by the pods asked for (a pod
    set's count may be anything up to 2^31 - 1)."""
    slots = sorted(free)
    placed = 0
    for size in sorted(sizes, reverse=True):
        pods = sizes[size]
        if size <= 0:  # takes no GPU: placed wherever there is a node
            placed += pods if slots else 0
            continue
        while pods > 0:
            i = bisect.bisect_left(slots, size)  # the tightest slot it fits in
            if i == len(slots):
                break  # no slot has room for one more pod of this size
            slots[i] -= size
            slots.sort()
            placed += 1
            pods -= 1
    return placed


def _gang_sizes(wl: WorkloadInfo) -> Counter[int]:
    """GPUs per pod -> pods, over the workload's GPU pod sets."""
    sizes: Counter[int] = Counter()
    for ps in wl.pod_sets:
        if ps.gpus_per_pod and ps.count > 0:
            sizes[ps.gpus_per_pod] += ps.count
    return sizes


def _selector_fits(selector: Mapping[str, str], flavor: Obj) -> bool:
    labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return all(labels.get(k, v) == v for k, v in selector.items())


def _cohort_quota(
    cq: ClusterQueueInfo, cqs: Sequence[ClusterQueueInfo], flavor: str
) -> tuple[float | None, float | None, tuple[Borrower, ...]]:
    """(available now, maximum ever, borrowers) of GPU quota on ``flavor`` for ``cq``,
    as Kueue's classic (non fair-sharing) borrowing computes it."""
    own = cq.quota(flavor)
    if own is None or own.nominal is None:
        return None, None, ()
    if own.reserved is None:
        return None, None, ()
    members = [c for c in cqs if cq.cohort and c.cohort == cq.cohort]
    if not cq.cohort or not members:
        return max(own.nominal - own.reserved, 0), own.nominal, ()
    cohort_nominal = 0.0
    cohort_reserved = 0.0
    borrowers = []
    for c in members:
        q = c.quota(flavor)
        if q is None or q.nominal is None:
            continue
        lendable = q.nominal
        if c.name != cq.name and q.lending_limit is not None:
            lendable = min(q.nominal, q.lending_limit)
        cohort_nominal += lendable
        reserved = q.reserved or 0
        # a lender's reservation inside the part it keeps does not use the cohort's pool
        kept = q.nominal - lendable
        cohort_reserved += max(reserved - kept, 0)
        if q.borrowed:
            borrowers.append(Borrower(c.name, q.borrowed))
    free_in_cohort = cohort_nominal - cohort_reserved
    limit = own.borrowing_limit
    by_limit = own.nominal + limit - own.reserved if limit is not None else free_in_cohort
    available = max(min(by_limit, free_in_cohort), 0)
    maximum = min(own.nominal + limit, cohort_nominal) if limit is not None else cohort_nominal
    return quantity(available), quantity(maximum), tuple(borrowers)


def _flavor_fit(
    wl: WorkloadInfo,
    flavor: Obj,
    cq: ClusterQueueInfo | None,
    cqs: Sequence[ClusterQueueInfo],
    nodes: Sequence[NodeInfo],
    requested: Mapping[str, int],
    node_severity: Mapping[str, Severity] | None,
    sizes: Mapping[int, int],
) -> FlavorFit:
    name = str((flavor.get("metadata") or {}).get("name", ""))
    quota = cq.quota(name) if cq else None
    available, maximum, borrowers = _cohort_quota(cq, cqs, name) if cq else (None, None, ())
    tolerations = flavor_tolerations(flavor)
    caps = [
        node_capacity(n, tolerations, node_severity) for n in nodes if flavor_selects(flavor, n)
    ]
    healthy = [c for c in caps if c.state == HEALTHY]
    free = sorted(
        (NodeFree(c.node, c.gpus, requested.get(c.node, 0)) for c in healthy),
        key=lambda f: (-f.free_gpus, f.node),
    )
    gang = _gang_sizes(wl)
    largest = max(gang, default=0)
    selector_ok = all(_selector_fits(ps.node_selector, flavor) for ps in wl.pod_sets)
    return FlavorFit(
        flavor=name,
        nominal_gpus=quota.nominal if quota else None,
        reserved_gpus=quota.reserved if quota else None,
        free_quota_gpus=quota.free if quota else None,
        borrowing_limit_gpus=quota.borrowing_limit if quota else None,
        can_borrow=bool(cq and cq.cohort and (quota is None or quota.borrowing_limit != 0)),
        available_gpus=available,
        max_gpus=maximum,
        borrowers=tuple(b for b in borrowers if not cq or b.cluster_queue != cq.name)
        + tuple(b for b in borrowers if cq and b.cluster_queue == cq.name),
        nodes=len(caps),
        healthy_nodes=len(healthy),
        healthy_gpus=sum(c.gpus for c in healthy),
        free_healthy_gpus=sum(f.free_gpus for f in free),
        nodes_fitting_one_pod=sum(1 for f in free if largest and f.free_gpus >= largest),
        nodes_big_enough=sum(1 for c in healthy if largest and c.gpus >= largest),
        pods_placeable=_place([f.free_gpus for f in free], sizes),
        gpu_pods=sum(sizes.values()),
        pods_placeable_empty=_place([c.gpus for c in healthy], gang),
        gang_gpu_pods=sum(gang.values()),
        need_gpus=wl.total_gpus,
        free_by_node=tuple(free),
        not_healthy=tuple(c for c in caps if c.state != HEALTHY),
        node_selector_conflict=not selector_ok,
    )


def _names(caps: Sequence[NodeCapacity], limit: int = 4) -> str:
    parts = []
    for c in caps[:limit]:
        what = c.state.replace("_", " ")
        if c.detail:
            what += f" {c.detail}"
        parts.append(f"{c.node} ({what}, {c.gpus} GPUs)")
    more = len(caps) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _n(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _flavor_sentence(fit: FlavorFit, wl: WorkloadInfo, cq: ClusterQueueInfo | None) -> str:
    parts = []
    if fit.nominal_gpus is not None:
        quota = (
            f"quota {_n(fit.nominal_gpus)} nominal, {_n(fit.reserved_gpus)} reserved, "
            f"{_n(fit.free_quota_gpus)} free"
        )
        if cq and cq.cohort:
            if fit.can_borrow:
                quota += f"; may borrow in cohort {cq.cohort}"
                if fit.borrowing_limit_gpus is not None:
                    quota += f" up to {_n(fit.borrowing_limit_gpus)}"
            else:
                quota += f"; borrowing limit 0 in cohort {cq.cohort}"
            others = [b for b in fit.borrowers if b.cluster_queue != cq.name]
            if others:
                quota += (
                    " (borrowing now: "
                    + ", ".join(f"{b.cluster_queue} {_n(b.borrowed_gpus)}" for b in others)
                    + ")"
                )
            else:
                quota += " (nobody else is borrowing)"
        else:
            quota += "; no cohort to borrow from"
        held = sum(ps.total_gpus for ps in wl.pod_sets if ps.flavor == fit.flavor)
        if wl.state in (ADMITTED, RESERVING) or wl.evicted_holding_quota:
            quota += f"; this workload holds {held} of the reserved GPUs"
        else:
            quota += f", so {_n(fit.available_gpus)} available of {wl.total_gpus} needed"
            if fit.max_gpus is not None and fit.max_gpus < wl.total_gpus:
                quota += f" and at most {_n(fit.max_gpus)} ever"
        parts.append(quota)
    nodes = (
        f"{fit.healthy_nodes} of {counted(fit.nodes, 'node')} healthy, "
        f"{fit.free_healthy_gpus} of their {fit.healthy_gpus} GPUs free"
    )
    if len({f.free_gpus for f in fit.free_by_node}) > 1:
        hist = Counter(f.free_gpus for f in fit.free_by_node)
        nodes += (
            " ("
            + ", ".join(
                f"{count} with {free} free" for free, count in sorted(hist.items(), reverse=True)
            )
            + ")"
        )
    if fit.gpu_pods:
        nodes += (
            f"; {counted(fit.nodes_fitting_one_pod, 'node')} can host one "
            f"{wl.gpus_per_pod}-GPU pod now, {fit.gpu_pods} pods to place"
        )
    parts.append(nodes)
    if fit.not_healthy:
        gpus = sum(c.gpus for c in fit.not_healthy)
        parts.append(f"not usable: {_names(fit.not_healthy)} ({gpus} GPUs in all)")
    if fit.node_selector_conflict:
        parts.append("the pods' nodeSelector excludes this flavor's nodes")
    return f"On flavor {fit.flavor}: " + "; ".join(parts) + "."


def _blockers(
    wl: WorkloadInfo,
    cq: ClusterQueueInfo | None,
    lq_found: bool,
    fits: Sequence[FlavorFit],
    unscheduled: int | None,
) -> list[str]:
    out: list[str] = []
    if wl.state == FINISHED:
        return ["finished"]
    if wl.evicted_holding_quota:
        out.append("evicted_holding_quota")
    if not wl.active:
        out.append("deactivated")
    if wl.local_queue and not lq_found and wl.state in (PENDING, EVICTED):
        out.append("no_local_queue")
    if lq_found and wl.cluster_queue and cq is None:
        out.append("no_cluster_queue")
    if cq is not None and cq.active is False:
        out.append("cluster_queue_inactive")
    usable = [f for f in fits if not f.node_selector_conflict] or list(fits)
    if wl.state in (PENDING, EVICTED):
        quota_known = [f for f in usable if f.available_gpus is not None]
        if quota_known and all((f.max_gpus or 0) < wl.total_gpus for f in quota_known):
            out.append("quota_max")
        elif quota_known and not any(f.quota_fits for f in quota_known):
            out.append("quota")
        if _preempting(wl):
            out.append("preempting")
        if usable and wl.total_gpus:
            if not any(f.capacity_ever_fits for f in usable):
                out.append("capacity_max")
            elif not any(f.capacity_fits for f in usable):
                out.append("capacity")
    elif wl.state == RESERVING:
        out.append("admission_checks")
    elif wl.state == ADMITTED and unscheduled:
        placed = [f for f in fits if f.flavor in wl.flavors] or usable
        if placed and not any(f.capacity_fits for f in placed):
            ever = any(f.capacity_ever_fits for f in placed)
            out.append("capacity" if ever else "capacity_max")
    return out


# Kueue's scheduler (pkg/scheduler/scheduler.go) appends this to the inadmissible message
# once it has issued preemptions for the workload; the condition's reason says so only
# with the UnadmittedWorkloadsObservability gate on (WaitingForPreemptedWorkloads), and is
# "Pending" otherwise, Kueue's default.
PREEMPTING_MESSAGE = "Pending the preemption of "


def _preempting(wl: WorkloadInfo) -> bool:
    """Kueue has evicted workloads to make room for this one and waits for them to go."""
    return wl.pending_reason == "WaitingForPreemptedWorkloads" or (
        PREEMPTING_MESSAGE in (wl.pending_message or "")
    )


def why(
    cluster: Cluster,
    name: str,
    namespace: str | None = None,
    node_severity: Mapping[str, Severity]
    | Callable[[], Mapping[str, Severity] | None]
    | None = None,
) -> WhyReport:
    """Why ``name`` (a Workload, or the JobSet/Job it belongs to) waits, from one read of
    Kueue's objects, the nodes and the active pods. ``node_severity`` may be a function,
    called only once the workload is found (node health costs a telemetry read)."""
    raw = _read_raw(cluster)
    workloads = _all_workloads(cluster, raw.local_queues)
    wl = find_workload(workloads, name, namespace)
    severity = node_severity() if callable(node_severity) else node_severity
    snap = _snapshot(raw, severity)
    pods = cluster.active_pods()
    return explain(wl, snap, raw.flavors, raw.nodes, pods, severity)


def _belongs(pod: PodInfo, wl: WorkloadInfo) -> bool:
    """The pod is one of the workload's: Kueue's annotation, else its owner's labels."""
    if pod.namespace != wl.namespace:
        return False
    tagged = pod.annotations.get(WORKLOAD_ANNOTATION)
    if tagged is not None:
        return tagged == wl.name
    kind, _, owner = (wl.owner or "").partition("/")
    if kind == "JobSet":
        return pod.labels.get("jobset.sigs.k8s.io/jobset-name") == owner
    if kind == "Job":
        return pod.labels.get("batch.kubernetes.io/job-name") == owner
    if kind == "Pod":
        return pod.name == owner
    return False


def explain(
    wl: WorkloadInfo,
    snap: QueueSnapshot,
    flavors: Mapping[str, Obj],
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    node_severity: Mapping[str, Severity] | None = None,
) -> WhyReport:
    """The report for one workload from what was read (pure)."""
    requested: dict[str, int] = defaultdict(int)
    for p in pods:
        if p.node and p.phase not in TERMINAL_PHASES:
            requested[p.node] += p.gpus
    mine = [p for p in pods if _belongs(p, wl)]
    running = unscheduled = None
    if wl.state in (ADMITTED, RESERVING) or wl.evicted_holding_quota:
        running = sum(1 for p in mine if p.node)
        unscheduled = sum(1 for p in mine if not p.node)
        if not mine and wl.state == ADMITTED:
            unscheduled = None
    cq = snap.cluster_queue(wl.cluster_queue) if wl.cluster_queue else None
    lq_found = any(
        q.namespace == wl.namespace and q.name == wl.local_queue for q in snap.local_queues
    )
    # the flavors to look at: the assigned ones, else the ClusterQueue's GPU flavors in order
    names = list(wl.flavors) or [q.flavor for q in (cq.gpu_quotas if cq else ())]
    if wl.state == ADMITTED and unscheduled:
        sizes = Counter(p.gpus for p in mine if not p.node and p.gpus) or Counter(
            {wl.gpus_per_pod: unscheduled}
        )
    else:
        sizes = _gang_sizes(wl)
    fits = tuple(
        _flavor_fit(wl, flavors[n], cq, snap.cluster_queues, nodes, requested, node_severity, sizes)
        for n in dict.fromkeys(names)
        if n in flavors
    )
    blockers = _blockers(wl, cq, lq_found, fits, unscheduled)
    whole: bool | None = None
    if fits and wl.gpus_per_pod:
        first = fits[0]
        biggest = max(
            [f.allocatable_gpus for f in first.free_by_node] + [c.gpus for c in first.not_healthy],
            default=0,
        )
        if biggest:
            whole = all(ps.gpus_per_pod >= biggest for ps in wl.pod_sets if ps.gpus_per_pod)
    kueue_reason, kueue_message = wl.pending_reason, wl.pending_message
    if wl.evicted_reason and (wl.state == EVICTED or wl.evicted_holding_quota):
        kueue_reason = kueue_reason or wl.evicted_reason
        kueue_message = kueue_message or wl.evicted_message
    report = WhyReport(
        workload=wl,
        pods=wl.pods,
        gpus_per_pod=wl.gpus_per_pod,
        total_gpus=wl.total_gpus,
        whole_node=whole,
        cluster_queue=cq,
        local_queue_found=lq_found,
        flavors=fits,
        pods_running=running,
        pods_unscheduled=unscheduled,
        blockers=tuple(blockers),
        kueue_reason=kueue_reason,
        kueue_message=kueue_message,
        summary="",
    )
    from dataclasses import replace

    return replace(report, summary=_summary(report))


def _summary(r: WhyReport) -> str:
    wl = r.workload
    cq = r.cluster_queue
    owner = f" ({wl.owner})" if wl.owner else ""
    s = [f"{wl.namespace}/{wl.name}{owner} is {wl.state}"]
    if wl.local_queue:
        s[0] += f" in LocalQueue {wl.local_queue}"
        if wl.cluster_queue:
            s[0] += f" (ClusterQueue {wl.cluster_queue})"
    elif wl.cluster_queue:
        s[0] += f" in ClusterQueue {wl.cluster_queue}"
    if wl.position is not None:
        s[0] += f", position {wl.position}" + (" (estimated)" if wl.position_estimated else "")
    s[0] += "."
    if wl.state == FINISHED:
        s.append(f"It finished ({wl.finished_reason or 'no reason given'}); nothing waits.")
        return " ".join(s)
    gang = f"Gang: {counted(r.pods, 'pod')}"
    if r.gpus_per_pod:
        per = {ps.gpus_per_pod for ps in wl.pod_sets if ps.gpus_per_pod}
        gang += (
            f" x {r.gpus_per_pod} GPUs = {r.total_gpus} GPUs"
            if len(per) == 1
            else f" needing {r.total_gpus} GPUs (up to {r.gpus_per_pod} per pod)"
        )
        if r.whole_node:
            gang += ", each pod needs a whole node"
    else:
        gang += ", no GPUs"
    s.append(gang + ", all or nothing.")
    if wl.state == ADMITTED:
        if wl.evicted_holding_quota:
            pass
        elif r.pods_unscheduled:
            verb = "has" if r.pods_unscheduled == 1 else "have"
            s.append(
                f"Kueue admitted it, but {r.pods_unscheduled} of its "
                f"{counted(r.pods, 'pod')} {verb} no node yet ({r.pods_running} bound): "
                "the quota promised GPUs the healthy nodes do not have free."
            )
        elif r.pods_running is not None:
            s.append(f"Admitted and {r.pods_running} pods bound to nodes; nothing waits.")
    for fit in r.flavors:
        s.append(_flavor_sentence(fit, wl, cq))
    if cq is not None and cq.active is False:
        s.append(f"ClusterQueue {cq.name} is not Active ({cq.active_reason}: {cq.active_message}).")
    waiting = [BLOCKERS[b] for b in r.blockers]
    if waiting:
        s.append("Waiting for: " + "; ".join(waiting) + ".")
    elif wl.state in (PENDING, EVICTED):
        s.append("Nothing here blocks it: Kueue should admit it on its next pass.")
    if wl.evictions or wl.requeue_count:
        hist = f"Evicted {counted(wl.evictions, 'time')} so far"
        if wl.requeue_count:
            hist += f", requeued {counted(wl.requeue_count, 'time')}"
        s.append(hist + ".")
    if r.kueue_reason or r.kueue_message:
        s.append(f'Kueue says: {r.kueue_reason or "-"} "{r.kueue_message or ""}".')
    return " ".join(s)


def as_json(value: Any) -> Any:
    """A dataclass tree as JSON-ready data (properties the CLI documents are added)."""
    from dataclasses import fields, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: as_json(getattr(value, f.name)) for f in fields(value)
               if not f.name.startswith("_")}  # fmt: skip
        for prop in _PROPERTIES.get(type(value).__name__, ()):
            out[prop] = as_json(getattr(value, prop))
        return out
    if isinstance(value, Mapping):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, Decimal):
        return quantity(str(value))
    if isinstance(value, Severity):
        return str(value)
    return value


_PROPERTIES: dict[str, tuple[str, ...]] = {
    "ResourceQuota": ("free",),
    "FlavorCapacity": ("drift_gpus",),
    "PodSetInfo": ("total_gpus",),
    "WorkloadInfo": ("pods", "total_gpus"),
    "NodeFree": ("free_gpus",),
    "FlavorFit": ("quota_fits", "capacity_fits", "capacity_ever_fits"),
}


__all__ = [
    "ADMITTED",
    "BLOCKERS",
    "EVICTED",
    "FINISHED",
    "PENDING",
    "RESERVING",
    "STATES",
    "Borrower",
    "ClusterQueueInfo",
    "FlavorCapacity",
    "FlavorFit",
    "LocalQueueInfo",
    "NodeCapacity",
    "NodeFree",
    "PodSetInfo",
    "QueueSnapshot",
    "ResourceQuota",
    "WhyReport",
    "WorkloadInfo",
    "as_json",
    "explain",
    "find_workload",
    "flavor_capacity",
    "node_capacity",
    "parse_cluster_queue",
    "parse_local_queue",
    "parse_workload",
    "read_queues",
    "read_workloads",
    "why",
    "workload_state",
]
