"""Kueue in the simulated world: its objects, an admission controller that behaves like
Kueue's scheduler and job integrations, and (as phases of the same tick) the JobSet and
Job controllers and the simulated DiT trainings.

Objects (created once, left alone when they exist):

- PriorityClasses ``training`` (1000) and ``inference`` (100), WorkloadPriorityClasses of
  the same names and values;
- ResourceFlavors ``h200`` (nodeLabels ``krea.ai/pool: h200``) and ``burst`` (nodeLabels
  ``type: virtual-kubelet``, tolerating ``virtual-kubelet.io/provider``);
- Cohort ``gpu`` with ClusterQueues ``training`` (nominal 75 % of the cluster's GPUs on
  ``h200``; preemption ``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``,
  ``borrowWithinCohort: LowerPriority`` up to priority 100) and ``inference`` (the other
  25 % on ``h200``, then ``burst`` with the providers' capacity, in one resource group;
  ``whenCanBorrow: MayStopSearch``, ``whenCanPreempt: TryNextFlavor``, so inference
  borrows idle on-prem GPUs and, once training reclaims them, is admitted on ``burst``);
- LocalQueues ``training/training`` and ``inference/inference``.

Admission, as Kueue does it: a Workload per Job/JobSet labelled
``kueue.x-k8s.io/queue-name`` (owner reference, one pod set per replicated job, priority
from ``kueue.x-k8s.io/priority-class``) and per bare pod carrying the
``kueue.x-k8s.io/admission`` scheduling gate (the pod integration). Pending workloads are
tried in priority then creation order (BestEffortFIFO); a workload's quota is reserved for
all its pod sets at once or not at all; flavors are tried in order with the ClusterQueue's
flavorFungibility; borrowing stays within the cohort; a workload that does not fit
preempts per the ClusterQueue's preemption policy (candidates in other ClusterQueues only
while those borrow; other ClusterQueues first, then lowest priority, then most recently
admitted; the set minimized), with the real conditions, reasons and messages. Admission
unsuspends the job with the flavor's nodeSelector and tolerations in its pod templates, or
ungates the pod; eviction suspends the job (restoring its templates) or deletes the pod.

Only resources a ClusterQueue covers count against quota (``nvidia.com/gpu`` here): the
simulated Kueue runs as if configured with ``resources.excludeResourcePrefixes`` for the
rest.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from krea_ops.kube.quantity import format_quantity, quantity_or_none
from krea_ops.kube.times import parse_time
from krea_ops.sim.common.actor import Actor, World, WorldConfig
from krea_ops.sim.common.api import Events
from krea_ops.sim.common.jobapi import (
    JOB_UID,
    JOBSET_GROUP,
    JOBSET_VERSION,
    JS_RESTART,
    QUEUE_LABEL,
    JobApi,
    Obj,
    annots,
    condition,
    controller_ref,
    deleting,
    ignore_gone,
    is_true,
    jobset_pod_count,
    key,
    labels,
    meta,
    phase,
    pod_ready,
    pod_requests,
    set_condition,
)
from krea_ops.sim.standins.jobs import (
    SNAPSHOT_SERVICE,
    JobController,
    JobSetController,
    Snapshot,
    replace_in,
)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
PODSET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
COMPONENT = "kueue-admission"
# Kueue's finalizer on ClusterQueues, ResourceFlavors (their webhooks add it) and the
# Workloads its job integrations create: kept while the object is in use.
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
GPU = "nvidia.com/gpu"
COHORT = "gpu"

FIT, PREEMPT, NOFIT = 2, 1, 0

HUMAN_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


# -- the objects -----------------------------------------------------------------------


def quota_split(config: WorldConfig) -> tuple[int, int, int]:
    """(training, inference, burst) nominal GPU quota for a world."""
    total = config.nodes * config.gpus_per_node
    fraction = float(config.extra.get("training_quota_fraction", 0.75))
    training = round(total * fraction)
    burst = sum(p.capacity_gpus for p in config.providers)
    return training, total - training, burst


# The PriorityClass of krea-ops' validation Jobs (``krea_ops.validation.PRIORITY_CLASS``),
# 1000 below inference's; installed with the other PriorityClasses on both control planes.
VALIDATION_PRIORITY_CLASS = "krea-ops-validation"
VALIDATION_PRIORITY = -900


def kueue_objects(config: WorldConfig) -> list[Obj]:
    """Every object the simulated Kueue installation consists of (pure; v1beta2 shapes)."""
    training, inference, burst = quota_split(config)

    def cq(name: str, preemption: Obj, flavors: list[tuple[str, int]]) -> Obj:
        return {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "finalizers": [RESOURCE_IN_USE]},
            "spec": {
                "cohortName": COHORT,
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "stopPolicy": "None",
                "preemption": preemption,
                "flavorFungibility": {
                    "whenCanBorrow": "MayStopSearch",
                    "whenCanPreempt": "TryNextFlavor",
                },
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": f, "resources": [{"name": GPU, "nominalQuota": str(q)}]}
                            for f, q in flavors
                        ],
                    }
                ],
            },
        }

    def priority(kind: str, name: str, value: int, description: str) -> Obj:
        api = "scheduling.k8s.io/v1" if kind == "PriorityClass" else KUEUE_API
        return {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": name},
            "value": value,
            "description": description,
        }

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}},
        priority("PriorityClass", "training", 1000, "Pre-training jobs"),
        priority("PriorityClass", "inference", 100, "Inference serving"),
        priority("WorkloadPriorityClass", "training", 1000, "Pre-training jobs"),
        priority("WorkloadPriorityClass", "inference", 100, "Inference serving"),
        # krea-ops' node validation Jobs (deploy/controllers/validation.yaml): below
        # everything, never preempting.
        {
            **priority(
                "PriorityClass",
                VALIDATION_PRIORITY_CLASS,
                VALIDATION_PRIORITY,
                "krea-ops node validation Jobs: run on an idle (quarantined or new) node, "
                "never preempt anything",
            ),
            "preemptionPolicy": "Never",
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h200", "finalizers": [RESOURCE_IN_USE]},
            "spec": {"nodeLabels": {"krea.ai/pool": "h200"}},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "burst", "finalizers": [RESOURCE_IN_USE]},
            "spec": {
                "nodeLabels": {"type": "virtual-kubelet"},
                "tolerations": [
                    {
                        "key": "virtual-kubelet.io/provider",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                ],
            },
        },
        {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": {"name": COHORT}, "spec": {}},
        cq(
            "training",
            {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            },
            [("h200", training)],
        ),
        cq(
            "inference",
            {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            [("h200", inference), ("burst", burst)],
        ),
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "training", "namespace": "training"},
            "spec": {"clusterQueue": "training"},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "inference", "namespace": "inference"},
            "spec": {"clusterQueue": "inference"},
        },
    ]


_PLURALS = {
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}


def install(api: JobApi, objects: list[Obj]) -> None:
    """Create the objects; those that exist are left as they are (409)."""
    from kubernetes.client.rest import ApiException

    for obj in objects:
        kind = obj["kind"]
        try:
            if kind == "Namespace":
                api.core.create_namespace(obj, _preload_content=False)
            elif kind == "PriorityClass":
                api.scheduling.create_priority_class(obj, _preload_content=False)
            elif kind == "LocalQueue":
                api.custom.create_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, obj["metadata"]["namespace"], "localqueues", obj
                )
            else:
                api.custom.create_cluster_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, _PLURALS[kind], obj
                )
        except ApiException as exc:
            if exc.status != 409:
                raise


# -- what a workload stands for --------------------------------------------------------


@dataclass
class PodSet:
    name: str
    count: int
    template: Obj
    per_pod: dict[str, Decimal]


@dataclass
class Owner:
    """A Job, JobSet or bare pod Kueue manages."""

    kind: str  # JobSet | Job | Pod
    api_version: str
    obj: Obj
    podsets: list[PodSet]
    finished: tuple[str, str] | None  # (reason, message)
    stopped: bool  # suspended / gated
    ready: bool  # PodsReady

    @property
    def uid(self) -> str:
        return str(meta(self.obj).get("uid", ""))


@dataclass
class WL:
    obj: Obj
    status: Obj  # the server's until ``edit()`` makes it this tick's own copy
    owner: Owner | None
    priority: int
    created: float
    cq: str | None = None
    lq: tuple[str, str] | None = None
    orphan: bool = False  # its owner is gone (the garbage collector will remove it)
    admitted_now: bool = False
    evicted_now: bool = False
    edited: bool = False

    def edit(self) -> Obj:
        """The status to change (copied on first write: most workloads stay unchanged)."""
        if not self.edited:
            self.status = copy.deepcopy(self.status)
            self.edited = True
        return self.status

    @property
    def name(self) -> str:
        return str(meta(self.obj).get("name", ""))

    @property
    def ns(self) -> str:
        return str(meta(self.obj).get("namespace", ""))

    def cond(self, ctype: str) -> Obj | None:
        for c in self.status.get("conditions") or []:
            if c.get("type") == ctype:
                return dict(c)
        return None

    def true(self, ctype: str) -> bool:
        c = self.cond(ctype)
        return c is not None and c.get("status") == "True"

    @property
    def reserved(self) -> bool:
        return self.true("QuotaReserved") and bool(self.status.get("admission"))

    @property
    def finished(self) -> bool:
        return self.true("Finished")

    @property
    def counts(self) -> bool:
        """Holds quota: reserved, not finished, its owner still there."""
        return self.reserved and not self.finished and not self.orphan and not deleting(self.obj)

    def usage(self) -> dict[tuple[str, str], Decimal]:
        out: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        for psa in (self.status.get("admission") or {}).get("podSetAssignments") or []:
            flavors = psa.get("flavors") or {}
            for res, qty in (psa.get("resourceUsage") or {}).items():
                if res in flavors:
                    out[(flavors[res], res)] += quantity_or_none(qty) or Decimal(0)
        return dict(out)

    def reserved_at(self) -> float:
        c = self.cond("QuotaReserved")
        return (parse_time(c.get("lastTransitionTime")) or 0.0) if c else 0.0

    def podsets(self) -> list[PodSet]:
        out = []
        for ps in (self.obj.get("spec") or {}).get("podSets") or []:
            template = ps.get("template") or {}
            out.append(
                PodSet(
                    name=ps.get("name", "main"),
                    count=int(ps.get("count", 1)),
                    template=template,
                    per_pod=pod_requests(template.get("spec") or {}),
                )
            )
        return out


def workload_name(kind: str, name: str, uid: str) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK: ``<kind>-<owner>-<hash5>``."""
    digest = hashlib.sha1(f"{name}{kind.lower()}{uid}".encode()).hexdigest()[:5]
    return f"{kind.lower()}-{name}"[: 253 - 6].rstrip("-.") + f"-{digest}"


# -- quota -----------------------------------------------------------------------------


class Quota:
    """Nominal quota, borrowing limits and cohorts of the ClusterQueues."""

    def __init__(self, cqs: dict[str, Obj]) -> None:
        self.cqs = cqs
        self.nominal: dict[str, dict[tuple[str, str], Decimal]] = {}
        self.borrow_limit: dict[str, dict[tuple[str, str], Decimal | None]] = {}
        self.cohort: dict[str, str] = {}
        for name, cq in cqs.items():
            spec = cq.get("spec") or {}
            self.cohort[name] = spec.get("cohortName") or f"/{name}"
            nominal: dict[tuple[str, str], Decimal] = {}
            limits: dict[tuple[str, str], Decimal | None] = {}
            for rg in spec.get("resourceGroups") or []:
                for fl in rg.get("flavors") or []:
                    for res in fl.get("resources") or []:
                        fr = (fl["name"], res["name"])
                        nominal[fr] = quantity_or_none(res.get("nominalQuota", 0)) or Decimal(0)
                        bl = res.get("borrowingLimit")
                        limits[fr] = None if bl is None else quantity_or_none(bl) or Decimal(0)
            self.nominal[name] = nominal
            self.borrow_limit[name] = limits

    def in_cohort(self, cq: str) -> bool:
        return not self.cohort[cq].startswith("/")

    def members(self, cq: str) -> list[str]:
        return [c for c in self.cqs if self.cohort[c] == self.cohort[cq]]

    def nominal_of(self, cq: str, fr: tuple[str, str]) -> Decimal:
        return self.nominal.get(cq, {}).get(fr, Decimal(0))

    def cohort_nominal(self, cq: str, fr: tuple[str, str]) -> Decimal:
        return sum((self.nominal_of(c, fr) for c in self.members(cq)), Decimal(0))

    def available(self, cq: str, fr: tuple[str, str], usage: Usage) -> Decimal:
        nominal = self.nominal_of(cq, fr)
        used = usage[cq][fr]
        if not self.in_cohort(cq):
            return max(nominal - used, Decimal(0))
        free_in_cohort = self.cohort_nominal(cq, fr) - sum(
            (usage[c][fr] for c in self.members(cq)), Decimal(0)
        )
        limit = self.borrow_limit.get(cq, {}).get(fr)
        by_limit = nominal + limit - used if limit is not None else free_in_cohort
        return max(min(by_limit, free_in_cohort), Decimal(0))

    def max_capacity(self, cq: str, fr: tuple[str, str]) -> Decimal:
        nominal = self.nominal_of(cq, fr)
        if not self.in_cohort(cq):
            return nominal
        limit = self.borrow_limit.get(cq, {}).get(fr)
        cohort = self.cohort_nominal(cq, fr)
        return min(nominal + limit, cohort) if limit is not None else cohort

    def borrowing(self, cq: str, fr: tuple[str, str], usage: Usage) -> bool:
        return usage[cq][fr] > self.nominal_of(cq, fr)


Usage = dict[str, dict[tuple[str, str], Decimal]]


def new_usage() -> Usage:
    return defaultdict(lambda: defaultdict(Decimal))


def copy_usage(usage: Usage) -> Usage:
    out = new_usage()
    for cq, per in usage.items():
        for fr, v in per.items():
            out[cq][fr] = v
    return out


@dataclass
class Choice:
    rank: int
    mode: int
    flavor: str
    borrow: bool


@dataclass
class Assignment:
    mode: int
    message: str = ""
    borrow: bool = False
    flavors: list[dict[str, str]] = field(default_factory=list)
    usage: list[dict[str, Decimal]] = field(default_factory=list)
    needs: dict[tuple[str, str], Decimal] = field(default_factory=dict)
    targets: list[WL] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # target name -> Preempted reason


def _selector_fits(template: Obj, flavor: Obj) -> bool:
    """The pod's nodeSelector does not contradict the flavor's node labels."""
    selector = (template.get("spec") or {}).get("nodeSelector") or {}
    node_labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return all(node_labels.get(k, v) == v for k, v in selector.items())


# -- the admission controller ----------------------------------------------------------


class Kueue:
    """Kueue's scheduler, workload controller and Job/JobSet/Pod integrations."""

    def __init__(self, api: JobApi, world: World, now: Callable[[], str]) -> None:
        self.api = api
        self.recorder = Events(api, world, COMPONENT)
        self.now = now
        self.flavors: dict[str, Obj] = {}
        self.wpcs: dict[str, int] = {}
        self.pcs: dict[str, int] = {}
        self._config_age = 0
        self._warned: set[str] = set()
        self._ungate_without_selector = False
        # Kueue's UnadmittedWorkloadsObservability feature gate (off by default): the
        # scheduler's QuotaReserved=False reasons are "Pending" unless it is on.
        self.tiered = bool(world.config.extra.get("unadmitted_workloads_observability", False))

    # -- configuration ------------------------------------------------------------------

    def refresh_config(self, force: bool = False) -> None:
        self._config_age -= 1
        if self._config_age > 0 and not force:
            return
        self._config_age = 6
        self.flavors = {
            meta(f)["name"]: f
            for f in self.api.custom_list(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors")
        }
        self.wpcs = {
            meta(w)["name"]: int(w.get("value", 0))
            for w in self.api.custom_list(KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses")
        }
        raw = self.api.scheduling.list_priority_class(_preload_content=False)
        self.pcs = {meta(p)["name"]: int(p.get("value", 0)) for p in json.loads(raw.data)["items"]}

    # -- owners --------------------------------------------------------------------------

    def owners(self, snap: Snapshot) -> dict[str, Owner]:
        out: dict[str, Owner] = {}
        for js in snap.jobsets:
            if QUEUE_LABEL not in labels(js) or controller_ref(js) or deleting(js):
                continue
            spec = js.get("spec") or {}
            podsets = []
            for rj in spec.get("replicatedJobs") or []:
                jspec = (rj.get("template") or {}).get("spec") or {}
                template = jspec.get("template") or {}
                parallelism = int(jspec.get("parallelism", 1) or 0)
                completions = jspec.get("completions")
                per_job = min(parallelism, int(completions)) if completions else parallelism
                podsets.append(
                    PodSet(
                        rj["name"],
                        int(rj.get("replicas", 1)) * per_job,
                        template,
                        pod_requests(template.get("spec") or {}),
                    )
                )
            finished = None
            for ctype, reason in (("Completed", "Succeeded"), ("Failed", "Failed")):
                if is_true(js, ctype):
                    finished = (reason, str((condition(js, ctype) or {}).get("message", "")))
            ns, name = key(js)
            restarts = str((js.get("status") or {}).get("restarts", 0))
            pods = [
                p
                for p in snap.pods_of_jobset(ns, name)
                if labels(p).get(JS_RESTART, "0") == restarts and not deleting(p)
            ]
            done = sum(1 for p in pods if pod_ready(p) or phase(p) == "Succeeded")
            out[meta(js)["uid"]] = Owner(
                "JobSet",
                f"{JOBSET_GROUP}/{JOBSET_VERSION}",
                js,
                podsets,
                finished,
                bool(spec.get("suspend")),
                done >= jobset_pod_count(js) > 0,
            )
        for job in snap.jobs:
            if QUEUE_LABEL not in labels(job) or controller_ref(job) or deleting(job):
                continue
            spec = job.get("spec") or {}
            template = spec.get("template") or {}
            parallelism = int(spec.get("parallelism", 1) or 0)
            completions = spec.get("completions")
            count = min(parallelism, int(completions)) if completions else parallelism
            finished = None
            if is_true(job, "Complete"):
                finished = ("Succeeded", "Job finished successfully")
            elif is_true(job, "Failed"):
                finished = ("Failed", str((condition(job, "Failed") or {}).get("message", "")))
            status = job.get("status") or {}
            ready = int(status.get("ready", 0)) + int(status.get("succeeded", 0)) >= count
            out[meta(job)["uid"]] = Owner(
                "Job",
                "batch/v1",
                job,
                [PodSet("main", count, template, pod_requests(template.get("spec") or {}))],
                finished,
                bool(spec.get("suspend")),
                ready,
            )
        for pod in snap.queue_pods:
            ref = controller_ref(pod)
            if ref and ref.get("kind") in ("Job", "JobSet"):
                continue
            spec = pod.get("spec") or {}
            gates = [
                g for g in spec.get("schedulingGates") or [] if g.get("name") == ADMISSION_GATE
            ]
            if not gates and WORKLOAD_ANNOTATION not in annots(pod):
                continue  # not gated by Kueue's webhook: not Kueue's to manage
            pm = meta(pod)
            template = {
                "metadata": {
                    k: v for k, v in (("labels", pm.get("labels")), ("annotations",
                                                                      pm.get("annotations")))
                    if v
                },
                "spec": {
                    k: v
                    for k, v in spec.items()
                    if k not in ("nodeName", "schedulingGates")
                },
            }  # fmt: skip
            finished = None
            if phase(pod) == "Succeeded":
                finished = ("Succeeded", "Pod succeeded")
            elif phase(pod) == "Failed":
                msg = str((pod.get("status") or {}).get("message") or "Pod failed")
                finished = ("Failed", msg)
            out[pm["uid"]] = Owner(
                "Pod",
                "v1",
                pod,
                [PodSet("main", 1, template, pod_requests(spec))],
                finished,
                bool(gates),
                pod_ready(pod),
            )
        return out

    def _priority(self, owner: Owner) -> tuple[int, Obj | None] | None:
        wpc = labels(owner.obj).get(PRIORITY_LABEL)
        if wpc:
            if wpc not in self.wpcs:
                return None
            ref = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": wpc}
            return self.wpcs[wpc], ref
        pc = None
        for ps in owner.podsets:
            pc = pc or (ps.template.get("spec") or {}).get("priorityClassName")
        if pc and pc in self.pcs:
            ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc}
            return self.pcs[pc], ref
        return 0, None

    def _create_workload(self, owner: Owner) -> Obj | None:
        from kubernetes.client.rest import ApiException

        m = meta(owner.obj)
        prio = self._priority(owner)
        if prio is None:
            tag = f"{m.get('namespace')}/{m.get('name')}"
            if tag not in self._warned:
                self._warned.add(tag)
                wpc = labels(owner.obj).get(PRIORITY_LABEL)
                self.recorder.event(
                    owner.obj,
                    "WorkloadPriorityClassNotFound",
                    f'workloadPriorityClass "{wpc}" not found',
                    type_="Warning",
                    api_version=owner.api_version,
                    kind=owner.kind,
                )
            return None
        value, ref = prio
        spec: Obj = {
            "queueName": labels(owner.obj)[QUEUE_LABEL],
            "podSets": [
                {"name": ps.name, "count": ps.count, "template": ps.template}
                for ps in owner.podsets
            ],
            "priority": value,
            "active": True,
        }
        if ref is not None:
            spec["priorityClassRef"] = ref
        body = {
            "apiVersion": KUEUE_API,
            "kind": "Workload",
            "metadata": {
                "name": workload_name(owner.kind, m["name"], m["uid"]),
                "namespace": m["namespace"],
                "labels": {JOB_UID_LABEL: m["uid"]},
                "finalizers": [RESOURCE_IN_USE],
                "ownerReferences": [
                    {
                        "apiVersion": owner.api_version,
                        "kind": owner.kind,
                        "name": m["name"],
                        "uid": m["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        try:
            created: Obj = self.api.custom.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, m["namespace"], "workloads", body
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise
        self.recorder.event(
            owner.obj,
            "CreatedWorkload",
            f"Created Workload: {m['namespace']}/{meta(created)['name']}",
            api_version=owner.api_version,
            kind=owner.kind,
        )
        return created

    # -- the tick ------------------------------------------------------------------------

    def reconcile(self, snap: Snapshot) -> None:
        self.refresh_config()
        now = self.now()
        owners = self.owners(snap)
        cqs = {meta(c)["name"]: c for c in snap.cluster_queues}
        lqs = {key(q): q for q in snap.local_queues}
        quota = Quota(cqs)

        wls: list[WL] = []
        by_owner: dict[str, WL] = {}
        for obj in snap.workloads:
            wl = self._wl(obj, owners)
            wls.append(wl)
            if wl.owner is not None:
                by_owner[wl.owner.uid] = wl
        for uid, owner in owners.items():
            if uid in by_owner or owner.finished is not None or deleting(owner.obj):
                continue
            created = self._create_workload(owner)
            if created is not None:
                snap.workloads.append(created)
                wl = self._wl(created, owners)
                wls.append(wl)
                by_owner[uid] = wl

        for wl in wls:
            self._route(wl, lqs, cqs)
            self._follow_owner(wl, now, cqs, lqs)

        self._admit(wls, quota, cqs, lqs, now)

        for wl in wls:
            if wl.owner is not None and not wl.orphan:
                self._sync_owner(wl, snap)
        # owners Kueue has not admitted must not run (the webhook suspends them at creation)
        for uid, owner in owners.items():
            if owner.kind == "Pod" or uid in by_owner:
                continue
            if owner.finished is None and not owner.stopped:
                self._stop_owner(owner, None, snap, "")

        for wl in wls:
            self._write(wl, snap)
        self._queue_status(wls, quota, cqs, lqs, now)
        self._finalizers(wls, cqs)

    def held(self, snap: Snapshot) -> Callable[[Obj], bool]:
        """For the Job controller: Kueue-managed Jobs whose workload is not admitted."""
        admitted = set()
        for obj in snap.workloads:
            wl = WL(obj, obj.get("status") or {}, None, 0, 0.0)
            ref = controller_ref(obj)
            if ref and wl.reserved:
                admitted.add(ref.get("uid"))

        def held(job: Obj) -> bool:
            managed = QUEUE_LABEL in labels(job) and controller_ref(job) is None
            return managed and meta(job).get("uid") not in admitted

        return held

    # -- per workload --------------------------------------------------------------------

    def _wl(self, obj: Obj, owners: dict[str, Owner]) -> WL:
        ref = controller_ref(obj)
        owner = owners.get(ref.get("uid", "")) if ref else None
        spec = obj.get("spec") or {}
        return WL(
            obj=obj,
            status=obj.get("status") or {},
            owner=owner,
            priority=int(spec.get("priority", 0) or 0),
            created=parse_time(meta(obj).get("creationTimestamp")) or 0.0,
            orphan=ref is not None and owner is None,
        )

    def _route(self, wl: WL, lqs: dict[tuple[str, str], Obj], cqs: dict[str, Obj]) -> None:
        admission = wl.status.get("admission") or {}
        queue = (wl.obj.get("spec") or {}).get("queueName")
        if queue:
            wl.lq = (wl.ns, queue)
        if wl.reserved and admission.get("clusterQueue"):
            wl.cq = admission["clusterQueue"]
        elif wl.lq in lqs:
            wl.cq = (lqs[wl.lq].get("spec") or {}).get("clusterQueue")

    def _set(self, wl: WL, ctype: str, status: str, reason: str, message: str, now: str) -> bool:
        gen = meta(wl.obj).get("generation")
        have = wl.cond(ctype)
        if have is not None and (
            have.get("status"),
            have.get("reason"),
            have.get("message"),
            have.get("observedGeneration"),
        ) == (status, reason, message, gen):
            return False  # unchanged: no copy, no write
        conds = wl.edit().setdefault("conditions", [])
        return set_condition(conds, ctype, status, reason, message, now, generation=gen)

    def _event(self, wl: WL, reason: str, message: str, type_: str = "Normal") -> None:
        self.recorder.event(wl.obj, reason, message, type_=type_,
                            api_version=KUEUE_API, kind="Workload")  # fmt: skip

    def _follow_owner(
        self, wl: WL, now: str, cqs: dict[str, Obj], lqs: dict[tuple[str, str], Obj]
    ) -> None:
        """Finished, deactivated, stopped queues, PodsReady, requeueing."""
        owner = wl.owner
        if wl.orphan or wl.finished:
            return
        if owner is not None and owner.finished is not None:
            reason, message = owner.finished
            if self._set(wl, "Finished", "True", reason, message, now):
                self._event(wl, "Finished", message)
            return
        spec = wl.obj.get("spec") or {}
        cq = cqs.get(wl.cq or "")
        lq = lqs.get(wl.lq) if wl.lq else None
        cq_stop = ((cq or {}).get("spec") or {}).get("stopPolicy", "None")
        lq_stop = ((lq or {}).get("spec") or {}).get("stopPolicy", "None")
        if wl.reserved:
            if spec.get("active") is False:
                self._evict(wl, "Deactivated", "The workload is deactivated", now)
            elif cq_stop == "HoldAndDrain":
                self._evict(wl, "ClusterQueueStopped", "The ClusterQueue is stopped", now)
            elif lq_stop == "HoldAndDrain":
                self._evict(wl, "LocalQueueStopped", "The LocalQueue is stopped", now)
        requeued = wl.cond("Requeued")
        if requeued is not None and requeued.get("status") == "False":
            why = requeued.get("reason")
            if why == "Deactivated" and spec.get("active") is not False:
                self._set(wl, "Requeued", "True", "Reactivated", "The workload was reactivated",
                          now)  # fmt: skip
            elif why == "ClusterQueueStopped" and cq_stop == "None":
                self._set(wl, "Requeued", "True", "ClusterQueueRestarted",
                          "The ClusterQueue was restarted after being stopped", now)  # fmt: skip
            elif why == "LocalQueueStopped" and lq_stop == "None":
                self._set(wl, "Requeued", "True", "LocalQueueRestarted",
                          "The LocalQueue was restarted after being stopped", now)  # fmt: skip
        if wl.reserved and owner is not None and not owner.stopped:
            if owner.ready:
                msg = "All pods reached readiness and the workload is running"
                self._set(wl, "PodsReady", "True", "PodsReady", msg, now)
            else:
                prev = wl.cond("PodsReady") or {}
                was = prev.get("status") == "True" or prev.get("reason") == "WaitForRecovery"
                self._set(wl, "PodsReady", "False", "WaitForRecovery" if was else "WaitForStart",
                          "Not all pods are ready or succeeded", now)  # fmt: skip

    def _evict(
        self,
        wl: WL,
        reason: str,
        message: str,
        now: str,
        preempted: str | None = None,
        underlying: str = "",
    ) -> None:
        self._set(wl, "Evicted", "True", reason, message, now)
        if preempted:
            self._set(wl, "Preempted", "True", preempted, message, now)
        wl.edit().pop("admission", None)
        self._set(wl, "QuotaReserved", "False", "Pending", message, now)
        self._set(wl, "Admitted", "False", "NoReservation", "The workload has no reservation", now)
        if wl.cond("PodsReady") is not None:
            self._set(wl, "PodsReady", "False", "WaitForStart",
                      "Not all pods are ready or succeeded", now)  # fmt: skip
        requeue = reason not in ("Deactivated", "ClusterQueueStopped", "LocalQueueStopped")
        self._set(wl, "Requeued", "True" if requeue else "False", reason, message, now)
        stats = wl.edit().setdefault("schedulingStats", {})
        evictions = stats.setdefault("evictions", [])
        for entry in evictions:
            if entry.get("reason") == reason and entry.get("underlyingCause", "") == underlying:
                entry["count"] = int(entry.get("count", 0)) + 1
                break
        else:
            evictions.append({"reason": reason, "underlyingCause": underlying, "count": 1})
        wl.evicted_now = True
        self._event(wl, f"EvictedDueTo{reason}", message)
        if preempted:
            self._event(wl, "Preempted", message)

    def _pending(self, wl: WL, reason: str, message: str, now: str) -> None:
        before = (wl.cond("QuotaReserved") or {}).get("message")
        self._set(wl, "QuotaReserved", "False", reason, message, now)
        self._set(wl, "Admitted", "False", "NoReservation", "The workload has no reservation", now)
        if message != before:
            self._event(wl, "Pending", message)

    # -- admission -----------------------------------------------------------------------

    def _admissible(self, wl: WL, cqs: dict[str, Obj], lqs: dict[tuple[str, str], Obj],
                    now: str) -> bool:  # fmt: skip
        if wl.reserved or wl.finished or wl.orphan:
            return False
        if (wl.obj.get("spec") or {}).get("active") is False:
            return False
        if wl.owner is not None and deleting(wl.owner.obj):
            return False
        queue = (wl.obj.get("spec") or {}).get("queueName", "")
        if wl.lq is None or wl.lq not in lqs:
            self._pending(wl, "Inadmissible", f"LocalQueue {queue} doesn't exist", now)
            return False
        if not wl.cq or wl.cq not in cqs:
            self._pending(wl, "Inadmissible", f"ClusterQueue {wl.cq} doesn't exist", now)
            return False
        cq_stop = (cqs[wl.cq].get("spec") or {}).get("stopPolicy", "None")
        lq_stop = (lqs[wl.lq].get("spec") or {}).get("stopPolicy", "None")
        if cq_stop != "None" or self._missing_flavors(cqs[wl.cq]) or deleting(cqs[wl.cq]):
            self._pending(wl, "Inadmissible", f"ClusterQueue {wl.cq} is inactive", now)
            return False
        if lq_stop != "None":
            self._pending(wl, "Inadmissible", f"LocalQueue {queue} is inactive", now)
            return False
        return True

    def _missing_flavors(self, cq: Obj) -> list[str]:
        names = [
            fl["name"]
            for rg in (cq.get("spec") or {}).get("resourceGroups") or []
            for fl in rg.get("flavors") or []
        ]
        return [n for n in names if n not in self.flavors]

    def _admit(
        self,
        wls: list[WL],
        quota: Quota,
        cqs: dict[str, Obj],
        lqs: dict[tuple[str, str], Obj],
        now: str,
    ) -> None:
        usage = new_usage()
        for wl in wls:
            if wl.counts and wl.cq in cqs:
                for fr, qty in wl.usage().items():
                    usage[wl.cq][fr] += qty
        pending = [wl for wl in wls if self._admissible(wl, cqs, lqs, now)]
        pending.sort(key=lambda w: (-w.priority, w.created, w.name))
        preempting: set[str] = set()
        for wl in pending:
            assert wl.cq is not None
            a = self._assign(wl, wl.cq, quota, usage, wls)
            if a.mode == FIT:
                self._reserve(wl, a, now)
                for fr, qty in a.needs.items():
                    usage[wl.cq][fr] += qty
                continue
            if a.mode == PREEMPT:
                # Kueue's resourcesToReserve: what is free now is held for the preemptor,
                # or lower-priority workloads admitted after it in the same cycle take the
                # capacity its preemptions free, and it waits forever (seen: new inference
                # pods kept refilling what the large training had reclaimed).
                for fr, qty in a.needs.items():
                    usage[wl.cq][fr] += min(qty, quota.available(wl.cq, fr, usage))
                cohort = quota.cohort[wl.cq]
                if cohort in preempting:
                    self._pending(wl, self._reason("WaitingForQuota"), a.message, now)
                    continue
                preempting.add(cohort)
                paths = {c: f"/{quota.cohort[c]}/{c}" if quota.in_cohort(c) else f"/{c}"
                         for c in cqs}  # fmt: skip
                job_uid = labels(wl.obj).get(JOB_UID_LABEL) or "UNKNOWN"
                for target in a.targets:
                    reason = a.reasons[target.name]
                    message = (
                        f"Preempted to accommodate a workload (UID: {meta(wl.obj).get('uid')}, "
                        f"JobUID: {job_uid}) due to {HUMAN_REASONS[reason]}; "
                        f"preemptor path: {paths[wl.cq]}; preemptee path: "
                        f"{paths.get(target.cq or '', '')}"
                    )
                    self._evict(target, "Preempted", message, now, preempted=reason)
                n = len(a.targets)
                self._pending(
                    wl,
                    self._reason("WaitingForPreemptedWorkloads"),
                    f"{a.message}. Pending the preemption of {n} workload(s)",
                    now,
                )
                continue
            self._pending(wl, self._reason("WaitingForQuota"), a.message, now)

    def _reason(self, tiered: str) -> str:
        """The scheduler's reason for a workload it could not admit: ``Pending``
        (scheduler.go, UnsetQuotaReservationWithCondition(wl, "Pending", msg)), or the
        tiered reason when the UnadmittedWorkloadsObservability gate is on."""
        return tiered if self.tiered else "Pending"

    def _assign(self, wl: WL, cq: str, quota: Quota, usage: Usage, wls: list[WL]) -> Assignment:
        spec = self.cqs_spec(quota, cq)
        fungibility = spec.get("flavorFungibility") or {}
        when_borrow = fungibility.get("whenCanBorrow", "MayStopSearch")
        when_preempt = fungibility.get("whenCanPreempt", "TryNextFlavor")
        assumed: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        out = Assignment(FIT)
        for ps in wl.podsets():
            req = {r: q * ps.count for r, q in ps.per_pod.items() if q > 0}
            ps_flavors: dict[str, str] = {}
            ps_usage: dict[str, Decimal] = {}
            for rg in spec.get("resourceGroups") or []:
                rres = [r for r in rg.get("coveredResources") or [] if r in req]
                if not rres:
                    continue
                best: Choice | None = None
                reasons: list[str] = []
                for fl in rg.get("flavors") or []:
                    fname = fl["name"]
                    flavor = self.flavors.get(fname)
                    if flavor is None:
                        reasons.append(f"flavor {fname} not found")
                        continue
                    if not _selector_fits(ps.template, flavor):
                        reasons.append(f"flavor {fname} doesn't match node affinity")
                        continue
                    mode, borrow = FIT, False
                    need: dict[tuple[str, str], Decimal] = {}
                    for r in rres:
                        fr = (fname, r)
                        val = assumed[fr] + req[r]
                        need[fr] = val
                        avail = quota.available(cq, fr, usage)
                        if val <= avail:
                            borrow |= usage[cq][fr] + val > quota.nominal_of(cq, fr)
                            continue
                        cap = quota.max_capacity(cq, fr)
                        if val > cap:
                            reasons.append(
                                f"insufficient quota for {r} in flavor {fname}, request > "
                                f"maximum capacity ({format_quantity(val)} > "
                                f"{format_quantity(cap)})"
                            )
                            mode = NOFIT
                        else:
                            reasons.append(
                                f"insufficient unused quota for {r} in flavor {fname}, "
                                f"{format_quantity(val - avail)} more needed"
                            )
                            mode = min(mode, PREEMPT)
                    if mode == PREEMPT:
                        found = self._targets(wl, cq, need, quota, usage, wls)
                        if found is None:
                            mode = NOFIT
                        else:
                            borrow = found[1]
                    rank = (3 if not borrow else 2) if mode == FIT else mode
                    if best is None or rank > best.rank:
                        best = Choice(rank, mode, fname, borrow)
                    if mode == FIT and (not borrow or when_borrow == "MayStopSearch"):
                        break
                    if mode == PREEMPT and when_preempt == "MayStopSearch":
                        break
                if best is None or best.mode == NOFIT:
                    return Assignment(
                        NOFIT,
                        f"couldn't assign flavors to pod set {ps.name}: " + ", ".join(reasons),
                    )
                if best.mode == PREEMPT and not out.message:
                    out.message = f"couldn't assign flavors to pod set {ps.name}: " + ", ".join(
                        reasons
                    )
                for r in rres:
                    ps_flavors[r] = best.flavor
                    ps_usage[r] = req[r]
                    assumed[(best.flavor, r)] += req[r]
                out.mode = min(out.mode, best.mode)
                out.borrow |= best.borrow
            out.flavors.append(ps_flavors)
            out.usage.append(ps_usage)
        out.needs = dict(assumed)
        if out.mode == PREEMPT:
            found = self._targets(wl, cq, out.needs, quota, usage, wls)
            if found is None:
                out.mode = NOFIT
            else:
                out.targets, _, out.reasons = found[0], found[1], found[2]
        return out

    @staticmethod
    def cqs_spec(quota: Quota, cq: str) -> Obj:
        return dict(quota.cqs[cq].get("spec") or {})

    def _targets(
        self,
        wl: WL,
        cq: str,
        need: dict[tuple[str, str], Decimal],
        quota: Quota,
        usage: Usage,
        wls: list[WL],
    ) -> tuple[list[WL], bool, dict[str, str]] | None:
        """Kueue's classic preemption: the workloads to evict so ``need`` fits in ``cq``,
        whether the preemptor then borrows, and each target's Preempted reason."""
        pre = self.cqs_spec(quota, cq).get("preemption") or {}
        within = pre.get("withinClusterQueue", "Never")
        reclaim = pre.get("reclaimWithinCohort", "Never")
        bwc = pre.get("borrowWithinCohort") or {}
        borrow_policy = bwc.get("policy", "Never")
        threshold = bwc.get("maxPriorityThreshold")
        frs = set(need)
        cands: list[WL] = []
        for other in wls:
            if not other.counts or other.evicted_now or other.admitted_now or other is wl:
                continue
            if other.cq not in quota.cqs or not frs & set(other.usage()):
                continue
            if other.cq == cq:
                lower = other.priority < wl.priority
                newer_equal = other.priority == wl.priority and other.created > wl.created
                if (within == "LowerPriority" and lower) or (
                    within == "LowerOrNewerEqualPriority" and (lower or newer_equal)
                ):
                    cands.append(other)
                continue
            same_cohort = quota.cohort.get(other.cq or "") == quota.cohort[cq]
            lower = other.priority < wl.priority
            if (
                quota.in_cohort(cq)
                and same_cohort
                and (reclaim == "Any" or (reclaim == "LowerPriority" and lower))
            ):
                cands.append(other)
        if not cands:
            return None
        cands.sort(key=lambda o: (o.cq == cq, o.priority, -o.reserved_at()))
        sim = copy_usage(usage)
        removed: list[WL] = []

        def borrows() -> bool:
            return any(sim[cq][fr] + v > quota.nominal_of(cq, fr) for fr, v in need.items())

        def fits() -> bool:
            if any(v > quota.available(cq, fr, sim) for fr, v in need.items()):
                return False
            if borrows() and any(o.cq != cq for o in removed):
                if borrow_policy == "Never":
                    return False
                if threshold is not None and any(
                    o.cq != cq and o.priority > int(threshold) for o in removed
                ):
                    return False
            return True

        def move(o: WL, sign: int) -> None:
            assert o.cq is not None
            for fr, qty in o.usage().items():
                sim[o.cq][fr] += sign * qty

        for o in cands:
            assert o.cq is not None
            if o.cq != cq and not any(
                quota.borrowing(o.cq, fr, sim) for fr in o.usage() if fr in frs
            ):
                continue
            move(o, -1)
            removed.append(o)
            if fits():
                break
        else:
            return None
        for o in reversed(removed[:-1]):
            move(o, +1)
            if fits():
                removed.remove(o)
            else:
                move(o, -1)
        borrowing = borrows()
        reasons = {
            o.name: "InClusterQueue"
            if o.cq == cq
            else ("InCohortReclaimWhileBorrowing" if borrowing else "InCohortReclamation")
            for o in removed
        }
        return removed, borrowing, reasons

    def _reserve(self, wl: WL, a: Assignment, now: str) -> None:
        assert wl.cq is not None
        queued_since = wl.created
        requeued = wl.cond("Requeued")
        if requeued is not None:
            queued_since = parse_time(requeued.get("lastTransitionTime")) or 0.0
        wait = max((parse_time(now) or 0.0) - queued_since, 0.0)
        wl.edit()["admission"] = {
            "clusterQueue": wl.cq,
            "podSetAssignments": [
                {
                    "name": ps.name,
                    "flavors": a.flavors[i],
                    "resourceUsage": {r: format_quantity(q) for r, q in a.usage[i].items()},
                    "count": ps.count,
                }
                for i, ps in enumerate(wl.podsets())
            ],
        }
        self._set(wl, "QuotaReserved", "True", "QuotaReserved",
                  f"Quota reserved in ClusterQueue {wl.cq}", now)  # fmt: skip
        for ctype in ("Evicted", "Preempted"):
            prev = wl.cond(ctype)
            if prev is not None and prev.get("status") == "True":
                self._set(wl, ctype, "False", "QuotaReserved",
                          f"Previously: {prev.get('message', '')}", now)  # fmt: skip
        self._set(wl, "Admitted", "True", "Admitted", "The workload is admitted", now)
        self._set(wl, "PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded",
                  now)  # fmt: skip
        wl.edit().pop("requeueState", None)
        wl.admitted_now = True
        self._event(wl, "QuotaReserved",
                    f"Quota reserved in ClusterQueue {wl.cq}, wait time since queued was "
                    f"{wait:.0f}s")  # fmt: skip
        msg = f"Admitted by ClusterQueue {wl.cq}, wait time since reservation was 0s"
        self._event(wl, "Admitted", msg)

    # -- the jobs ------------------------------------------------------------------------

    def _flavor_directives(self, wl: WL, podset: str) -> tuple[dict[str, str], list[Obj]]:
        selector: dict[str, str] = {}
        tolerations: list[Obj] = []
        for psa in (wl.status.get("admission") or {}).get("podSetAssignments") or []:
            if psa.get("name") != podset:
                continue
            for fname in dict.fromkeys((psa.get("flavors") or {}).values()):
                spec = (self.flavors.get(fname) or {}).get("spec") or {}
                selector.update(spec.get("nodeLabels") or {})
                tolerations.extend(spec.get("tolerations") or [])
        return selector, tolerations

    def _inject(self, pod_template: Obj, wl: WL, podset: str) -> None:
        selector, tolerations = self._flavor_directives(wl, podset)
        spec = pod_template.setdefault("spec", {})
        if selector:
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
        if tolerations:
            have = list(spec.get("tolerations") or [])
            spec["tolerations"] = have + [t for t in tolerations if t not in have]
        tmeta = pod_template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), PODSET_LABEL: podset}
        tmeta["annotations"] = {**(tmeta.get("annotations") or {}), WORKLOAD_ANNOTATION: wl.name}

    @staticmethod
    def _restore(pod_template: Obj, original: Obj | None) -> None:
        spec = pod_template.setdefault("spec", {})
        orig = (original or {}).get("spec") or {}
        for fname in ("nodeSelector", "tolerations"):
            if orig.get(fname) is None:
                spec.pop(fname, None)
            else:
                spec[fname] = copy.deepcopy(orig[fname])

    def _sync_owner(self, wl: WL, snap: Snapshot) -> None:
        owner = wl.owner
        assert owner is not None
        if owner.finished is not None or deleting(owner.obj):
            return
        run = wl.reserved and not wl.finished
        if run and owner.stopped:
            self._start_owner(wl, owner, snap)
        elif not run and not owner.stopped:
            evicted = wl.cond("Evicted") or {}
            message = str(evicted.get("message") or "") if evicted.get("status") == "True" else ""
            self._stop_owner(owner, wl, snap, message)

    def _start_owner(self, wl: WL, owner: Owner, snap: Snapshot) -> None:
        from kubernetes.client.rest import ApiException

        obj = copy.deepcopy(owner.obj)
        ns, name = key(obj)
        cq = (wl.status.get("admission") or {}).get("clusterQueue", "")
        if owner.kind == "JobSet":
            for rj in obj["spec"].get("replicatedJobs") or []:
                template = rj.setdefault("template", {}).setdefault("spec", {})
                self._inject(template.setdefault("template", {}), wl, rj["name"])
            obj["spec"]["suspend"] = False
            replace_in(snap.jobsets, ignore_gone(lambda: self.api.replace_jobset(obj)))
        elif owner.kind == "Job":
            self._inject(obj["spec"].setdefault("template", {}), wl, "main")
            obj["spec"]["suspend"] = False
            out = ignore_gone(
                lambda: self.api.batch.replace_namespaced_job(name, ns, obj, _preload_content=False)
            )
            if out is not None:
                replace_in(snap.jobs, json.loads(out.data))
        else:
            self._inject(obj, wl, "main")
            gates = obj["spec"].get("schedulingGates") or []
            obj["spec"]["schedulingGates"] = [g for g in gates if g.get("name") != ADMISSION_GATE]
            if not obj["spec"]["schedulingGates"]:
                obj["spec"].pop("schedulingGates")
            if self._ungate_without_selector:
                obj["spec"]["nodeSelector"] = (owner.obj.get("spec") or {}).get("nodeSelector")
                if obj["spec"]["nodeSelector"] is None:
                    obj["spec"].pop("nodeSelector")
            self.api.wrote_pods()
            try:
                out = self.api.core.replace_namespaced_pod(name, ns, obj, _preload_content=False)
            except ApiException as exc:
                if exc.status == 422 and not self._ungate_without_selector:
                    # This API server refuses nodeSelector additions on gated pods
                    # (Kubernetes allows them since 1.27): ungate with tolerations only.
                    self._ungate_without_selector = True
                    self.recorder.event(
                        owner.obj, "UngateWithoutNodeSelector",
                        "the API server refused nodeSelector on a gated pod; ungated with "
                        "tolerations only", type_="Warning",
                        api_version="v1", kind="Pod",
                    )  # fmt: skip
                    return
                if exc.status in (404, 409):
                    return
                raise
            replace_in(snap.queue_pods, json.loads(out.data))
        self.recorder.event(owner.obj, "Started", f"Admitted by clusterQueue {cq}",
                            api_version=owner.api_version,
                            kind=owner.kind)  # fmt: skip

    def _stop_owner(self, owner: Owner, wl: WL | None, snap: Snapshot, message: str) -> None:
        obj = copy.deepcopy(owner.obj)
        ns, name = key(obj)
        originals = {ps.name: ps.template for ps in wl.podsets()} if wl is not None else {}
        if owner.kind == "JobSet":
            for rj in obj["spec"].get("replicatedJobs") or []:
                if rj["name"] in originals:
                    template = rj.setdefault("template", {}).setdefault("spec", {})
                    self._restore(template.setdefault("template", {}), originals[rj["name"]])
            obj["spec"]["suspend"] = True
            replace_in(snap.jobsets, ignore_gone(lambda: self.api.replace_jobset(obj)))
        elif owner.kind == "Job":
            if "main" in originals:
                self._restore(obj["spec"].setdefault("template", {}), originals["main"])
            obj["spec"]["suspend"] = True
            out = ignore_gone(
                lambda: self.api.batch.replace_namespaced_job(name, ns, obj, _preload_content=False)
            )
            if out is not None:
                replace_in(snap.jobs, json.loads(out.data))
        else:
            if phase(owner.obj) in ("Succeeded", "Failed"):
                return
            # As Kueue's pod integration stops a pod (pod_controller.go Stop): the
            # ``TerminationTarget`` condition with the stop reason, then the delete.
            reason = "WorkloadEvicted"
            evicted = wl.cond("Evicted") if wl is not None else None
            if evicted is not None and evicted.get("status") == "True":
                reason += "DueTo" + str(evicted.get("reason") or "")
            condition = {
                "type": "TerminationTarget",
                "status": "True",
                "lastTransitionTime": self.now(),
                "reason": reason,
                "message": message,
            }
            ignore_gone(
                self.api.core.patch_namespaced_pod_status,
                name,
                ns,
                {"status": {"conditions": [condition]}},
            )
            self.api.wrote_pods()
            ignore_gone(self.api.core.delete_namespaced_pod, name, ns)
        if message:
            self.recorder.event(
                owner.obj, "Stopped", message, api_version=owner.api_version, kind=owner.kind
            )

    # -- writing ------------------------------------------------------------------------

    def _write(self, wl: WL, snap: Snapshot) -> None:
        old = wl.obj.get("status") or {}
        if not wl.edited or wl.status == old:
            return
        patch = dict(wl.status)
        for gone in set(old) - set(wl.status):
            patch[gone] = None
        out = ignore_gone(
            lambda: self.api.custom.patch_namespaced_custom_object_status(
                KUEUE_GROUP, KUEUE_VERSION, wl.ns, "workloads", wl.name, {"status": patch},
                _content_type="application/merge-patch+json",
            )
        )  # fmt: skip
        replace_in(snap.workloads, out)

    def _queue_status(
        self,
        wls: list[WL],
        quota: Quota,
        cqs: dict[str, Obj],
        lqs: dict[tuple[str, str], Obj],
        now: str,
    ) -> None:
        live = [w for w in wls if not w.finished and not w.orphan]

        def totals(ws: list[WL], admitted: bool) -> dict[tuple[str, str], Decimal]:
            out: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
            for w in ws:
                if w.reserved and (not admitted or w.true("Admitted")):
                    for fr, q in w.usage().items():
                        out[fr] += q
            return out

        def flavors(cq: Obj, used: dict[tuple[str, str], Decimal], name: str | None) -> list[Obj]:
            out = []
            for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
                for fl in rg.get("flavors") or []:
                    resources = []
                    for r in rg.get("coveredResources") or []:
                        total = used.get((fl["name"], r), Decimal(0))
                        entry = {"name": r, "total": format_quantity(total)}
                        if name is not None:
                            nominal = quota.nominal_of(name, (fl["name"], r))
                            entry["borrowed"] = format_quantity(max(total - nominal, Decimal(0)))
                        resources.append(entry)
                    out.append({"name": fl["name"], "resources": resources})
            return out

        for name, cq in cqs.items():
            mine = [w for w in live if w.cq == name]
            status = copy.deepcopy(cq.get("status") or {})
            status["pendingWorkloads"] = sum(1 for w in mine if not w.reserved)
            status["reservingWorkloads"] = sum(1 for w in mine if w.reserved)
            status["admittedWorkloads"] = sum(1 for w in mine if w.reserved and w.true("Admitted"))
            status["flavorsReservation"] = flavors(cq, totals(mine, False), name)
            status["flavorsUsage"] = flavors(cq, totals(mine, True), name)
            conds = status.setdefault("conditions", [])
            missing = self._missing_flavors(cq)
            stop = (cq.get("spec") or {}).get("stopPolicy", "None")
            if deleting(cq):
                # clusterqueue.go inactiveReason()
                set_condition(conds, "Active", "False", "Terminating",
                              "Can't admit new workloads; clusterQueue is terminating", now)
            elif missing:
                set_condition(conds, "Active", "False", "FlavorNotFound",
                              "Can't admit new workloads: references missing ResourceFlavor(s): "
                              + ",".join(missing) + ".", now)  # fmt: skip
            elif stop != "None":
                set_condition(conds, "Active", "False", "Stopped",
                              "Can't admit new workloads: is stopped.", now)  # fmt: skip
            else:
                set_condition(conds, "Active", "True", "Ready", "Can admit new workloads", now)
            if status != (cq.get("status") or {}):
                self._patch_cq(name, status)
        for (ns, name), lq in lqs.items():
            mine = [w for w in live if w.lq == (ns, name)]
            target = (lq.get("spec") or {}).get("clusterQueue", "")
            cq_obj = cqs.get(target)
            status = copy.deepcopy(lq.get("status") or {})
            status["pendingWorkloads"] = sum(1 for w in mine if not w.reserved)
            status["reservingWorkloads"] = sum(1 for w in mine if w.reserved)
            status["admittedWorkloads"] = sum(1 for w in mine if w.reserved and w.true("Admitted"))
            conds = status.setdefault("conditions", [])
            if cq_obj is None:
                status["flavorsReservation"] = []
                status["flavorsUsage"] = []
                set_condition(conds, "Active", "False", "ClusterQueueDoesNotExist",
                              "Can't submit new workloads to clusterQueue", now)  # fmt: skip
            else:
                status["flavorsReservation"] = flavors(cq_obj, totals(mine, False), None)
                status["flavorsUsage"] = flavors(cq_obj, totals(mine, True), None)
                if (lq.get("spec") or {}).get("stopPolicy", "None") != "None":
                    set_condition(conds, "Active", "False", "Stopped",
                                  "LocalQueue is stopped", now)  # fmt: skip
                else:
                    set_condition(conds, "Active", "True", "Ready",
                                  "Can submit new workloads to localQueue", now)  # fmt: skip
            if status != (lq.get("status") or {}):
                self._patch_lq(ns, name, status)

    # -- the resource-in-use finalizer -----------------------------------------------------

    def _finalizers(self, wls: list[WL], cqs: dict[str, Obj]) -> None:
        """Kueue's ``kueue.x-k8s.io/resource-in-use``: added to ClusterQueues and
        ResourceFlavors that lack it (the controllers' fallback to their webhooks);
        released from a ClusterQueue being deleted once no workload holds quota in it
        (clusterqueue_controller.go, ClusterQueueEmpty), from a ResourceFlavor being
        deleted once no ClusterQueue names it (resourceflavor_controller.go,
        ClusterQueuesUsingFlavor), and from a Workload once it is finished, orphaned
        or being deleted (its quota released)."""
        for name, cq in cqs.items():
            in_use = any(w.cq == name and w.reserved and not w.finished for w in wls)
            self._hold(cq, "clusterqueues", in_use)
        using = {
            fl.get("name")
            for cq in cqs.values()
            for rg in (cq.get("spec") or {}).get("resourceGroups") or []
            for fl in rg.get("flavors") or []
        }
        for name, flavor in self.flavors.items():
            self._hold(flavor, "resourceflavors", name in using)
        for wl in wls:
            if RESOURCE_IN_USE in (meta(wl.obj).get("finalizers") or []) and (
                wl.finished or wl.orphan or deleting(wl.obj)
            ):
                self._release(wl.obj, "workloads", wl.ns)

    def _hold(self, obj: Obj, plural: str, in_use: bool) -> None:
        finalizers = list(meta(obj).get("finalizers") or [])
        if not deleting(obj):
            if RESOURCE_IN_USE not in finalizers:
                self._set_finalizers(obj, plural, "", [*finalizers, RESOURCE_IN_USE])
        elif RESOURCE_IN_USE in finalizers and not in_use:
            self._release(obj, plural, "")

    def _release(self, obj: Obj, plural: str, ns: str) -> None:
        left = [f for f in meta(obj).get("finalizers") or [] if f != RESOURCE_IN_USE]
        self._set_finalizers(obj, plural, ns, left)

    def _set_finalizers(self, obj: Obj, plural: str, ns: str, finalizers: list[str]) -> None:
        body = {
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": meta(obj).get("resourceVersion"),
            }
        }
        name = meta(obj)["name"]
        custom = self.api.custom
        if ns:
            ignore_gone(
                custom.patch_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, ns, plural,
                name, body, _content_type="application/merge-patch+json",
            )  # fmt: skip
        else:
            ignore_gone(
                custom.patch_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, plural, name,
                body, _content_type="application/merge-patch+json",
            )  # fmt: skip

    def _patch_cq(self, name: str, status: Obj) -> None:
        ignore_gone(
            lambda: self.api.custom.patch_cluster_custom_object_status(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name, {"status": status},
                _content_type="application/merge-patch+json",
            )
        )  # fmt: skip

    def _patch_lq(self, ns: str, name: str, status: Obj) -> None:
        ignore_gone(
            lambda: self.api.custom.patch_namespaced_custom_object_status(
                KUEUE_GROUP, KUEUE_VERSION, ns, "localqueues", name, {"status": status},
                _content_type="application/merge-patch+json",
            )
        )  # fmt: skip


# -- the actor -------------------------------------------------------------------------


class KueueActor(Actor):
    """One tick: list Workloads, queues, JobSets, Jobs and their pods once, then run the
    Kueue admission controller, the JobSet controller and the Job controller on that
    snapshot (each seeing the others' writes), and publish the snapshot for the training
    actor (``world.services["kueue.snapshot"]``).

    The period is 2 simulated seconds (Kueue reacts to events within about a second; a
    chain of admissions, evictions and restarts is several ticks long), stretched at
    high ``--speed`` to half a wall second as the cluster actors' are (``kueue_period_s``
    in ``WorldConfig.extra`` overrides it). Pods come from the cluster actors' shared list
    (``world.services["cluster-view"]``) when it exists, refreshed after this actor's own
    pod writes, else from two label-selected lists."""

    name = "kueue"
    period_s = 2.0

    def __init__(self, world: World) -> None:
        super().__init__(world)
        default = max(self.period_s, 0.5 * world.config.speed)
        self.period_s = float(world.config.extra.get("kueue_period_s", default))
        self.api = JobApi(world.client)
        self.kueue = Kueue(self.api, world, world.clock.rfc3339)
        self.jobsets = JobSetController(self.api, world, world.clock.rfc3339)
        self.jobs = JobController(self.api, world, world.clock.rfc3339)
        self._installed = False

    def setup(self) -> None:
        install(self.api, kueue_objects(self.world.config))
        self._installed = True
        self.kueue.refresh_config(force=True)

    def _pods(self) -> tuple[list[Obj], list[Obj]]:
        view = self.world.services.get("cluster-view")
        if view is None:
            return self.api.pods(JOB_UID), self.api.pods(QUEUE_LABEL)
        # Fresh enough to hold what our previous tick created or deleted.
        pods = list(view.pods(fresh_after=self.api.pods_written_at))
        return (
            [p for p in pods if JOB_UID in labels(p)],
            [p for p in pods if QUEUE_LABEL in labels(p)],
        )

    def snapshot(self) -> Snapshot:
        api = self.api
        job_pods, queue_pods = self._pods()
        snap = Snapshot(
            time=self.clock.time(),
            workloads=api.custom_list(KUEUE_GROUP, KUEUE_VERSION, "workloads"),
            cluster_queues=api.custom_list(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues"),
            local_queues=api.custom_list(KUEUE_GROUP, KUEUE_VERSION, "localqueues"),
            jobsets=api.jobsets(),
            jobs=api.jobs(),
            job_pods=job_pods,
            queue_pods=queue_pods,
        )
        return snap

    def tick(self) -> None:
        if not self._installed:
            self.setup()
        snap = self.snapshot()
        self.kueue.reconcile(snap)
        self.jobsets.reconcile(snap)
        self.jobs.reconcile(snap, self.kueue.held(snap))
        self.world.services[SNAPSHOT_SERVICE] = snap


__all__ = [
    "ADMISSION_GATE",
    "KUEUE_API",
    "PRIORITY_LABEL",
    "KueueActor",
    "kueue_objects",
    "quota_split",
    "workload_name",
]
