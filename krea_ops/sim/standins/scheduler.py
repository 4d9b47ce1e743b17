"""The default scheduler of the simulated cluster, and the scheduling predicates it shares
with the DaemonSet controller and the taint manager (tolerations, node affinity, a pod's
requests).

:class:`Scheduler` binds through ``pods/<name>/binding``; it lists nothing more than the
shared view and writes nothing while no pod waits.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from krea_ops.kube.cluster import Cluster
from krea_ops.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from krea_ops.kube.quantity import as_float, quantity_or_none
from krea_ops.kube.times import rfc3339
from krea_ops.sim.common.actor import Actor, World
from krea_ops.sim.common.api import Api, ClusterView
from krea_ops.sim.common.objects import (
    GPU,
    NOT_READY,
    UNREACHABLE,
    UNSCHEDULABLE,
    as_dict,
    condition_of,
    is_terminal,
    labels_of,
    meta_of,
    node_ready,
    spec_of,
    status_of,
)

GANG_LABELS = ("jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name")


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    key = toleration.get("key")
    if not key:
        return op == "Exists"
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(
    taints: Iterable[dict[str, Any]],
    tolerations: list[dict[str, Any]],
    effects: tuple[str, ...] = ("NoSchedule", "NoExecute"),
) -> dict[str, Any] | None:
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(as_dict(t), taint) for t in tolerations):
            return taint
    return None


def _expression_matches(expr: dict[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_matches_pod(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """``spec.nodeSelector`` and required node affinity."""
    labels = labels_of(node)
    for k, v in as_dict(spec.get("nodeSelector")).items():
        if labels.get(k) != v:
            return False
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = required.get("nodeSelectorTerms")
    if not required or terms is None:
        return True
    name = meta_of(node).get("name")
    for term in terms:
        term = as_dict(term)
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches no node
        if all(
            _expression_matches(as_dict(e), labels.get(as_dict(e).get("key", ""))) for e in exprs
        ) and all(
            _expression_matches(
                as_dict(f), name if as_dict(f).get("key") == "metadata.name" else None
            )
            for f in fields
        ):
            return True
    return False


def preferred_affinity_score(spec: dict[str, Any], node: dict[str, Any]) -> int:
    """The summed weights of the preferred node-affinity terms the node matches."""
    preferred = as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    if not preferred:
        return 0
    labels = labels_of(node)
    score = 0
    for term in preferred:
        pref = as_dict(as_dict(term).get("preference"))
        exprs = pref.get("matchExpressions") or []
        if exprs and all(
            _expression_matches(as_dict(e), labels.get(as_dict(e).get("key", ""))) for e in exprs
        ):
            score += int(as_dict(term).get("weight") or 0)
    return score


_requests_cache: dict[str, dict[str, float]] = {}


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    """What a pod asks of its node: containers' requests (or limits where a request is
    unset) summed, init containers' taken at their peak, plus the overhead."""
    uid = str(meta_of(pod).get("uid") or "")
    cached = _requests_cache.get(uid) if uid else None
    if cached is not None:
        return cached
    spec = spec_of(pod)

    def one(c: dict[str, Any]) -> dict[str, float]:
        res = as_dict(c.get("resources"))
        merged = {**as_dict(res.get("limits")), **as_dict(res.get("requests"))}
        # an unparsable quantity asks for nothing (the server would have refused it)
        return {k: as_float(v) for k, v in merged.items()}

    total: dict[str, float] = defaultdict(float)
    for c in spec.get("containers") or []:
        for k, v in one(as_dict(c)).items():
            total[k] += v
    for c in spec.get("initContainers") or []:
        for k, v in one(as_dict(c)).items():
            total[k] = max(total[k], v)
    for k, v in as_dict(spec.get("overhead")).items():
        total[k] += as_float(v)
    result = {k: v for k, v in total.items() if v}
    if uid:
        if len(_requests_cache) > 20000:
            _requests_cache.clear()
        _requests_cache[uid] = result
    return result


def _allocatable(node: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in as_dict(status_of(node).get("allocatable")).items():
        q = quantity_or_none(v)
        if q is not None:  # else the filters' default applies: 0 (pods included)
            out[k] = float(q)
    return out


def _effective_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's taints, plus ``not-ready`` for a node not Ready that carries none of the
    node lifecycle taints yet."""
    taints = [as_dict(t) for t in spec_of(node).get("taints") or []]
    if not node_ready(node) and not any(t.get("key") in (UNREACHABLE, NOT_READY) for t in taints):
        taints.append({"key": NOT_READY, "effect": "NoSchedule"})
    return taints


@dataclass
class _NodeInfo:
    name: str
    node: dict[str, Any]
    alloc: dict[str, float]
    taints: list[dict[str, Any]]
    unschedulable: bool
    rack: str
    spine: str
    used: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    pods: int = 0


@dataclass
class _Gang:
    racks: Counter[str] = field(default_factory=Counter)
    spines: Counter[str] = field(default_factory=Counter)


def _gang_key(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    labels = labels_of(pod)
    for key in GANG_LABELS:
        if labels.get(key):
            return (meta_of(pod).get("namespace") or "", key, labels[key])
    return None


_PREEMPTION_USELESS = "Preemption is not helpful for scheduling"
_NO_VICTIMS = "No preemption victims found for incoming pod"


class Scheduler(Actor):
    """``default-scheduler``: filters, scores and binds through ``pods/<name>/binding``.

    Filters, in the real plugins' order (the first failing one names the node's reason):
    cordon, taints (NoSchedule/NoExecute; a node not Ready counts as ``not-ready``
    tainted), nodeSelector and required node affinity, then resources (requests, or
    limits where unset, against allocatable minus the pods bound there and not finished).
    Scores, in order: preferred node affinity weights; for a gang (pods sharing a
    ``jobset.sigs.k8s.io/jobset-name`` or ``batch.kubernetes.io/job-name``), peers in
    the node's rack, then in its spine, then free GPUs in the rack; then GPUs most
    allocated (packing), then CPU most allocated; ties go to the first node by name.
    A pod that did not fit is tried again when the nodes or the bound pods change, or
    after ``RETRY_S`` wall seconds (stamps and timers are wall time, as the API's)."""

    name = "scheduler"
    RETRY_S = 300.0

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world)
        self.view = view
        self.api = api
        # kube-scheduler records through the events API (events.k8s.io/v1), with an action
        self.events = EventRecorder(
            Cluster(api.core.api_client),
            controller="default-scheduler",
            instance="default-scheduler",
            clock=world.clock.wall,
        )
        self.period_s = max(1.0, 0.5 * world.config.speed)
        self.writes = 0
        self._wrote = 0.0
        self._assumed: dict[str, tuple[str, dict[str, float], dict[str, Any]]] = {}
        self._tried: dict[str, tuple[int, float, str]] = {}  # uid -> (signature, when, message)

    def tick(self) -> None:
        pods = self.view.pods(self._wrote)
        pending = [p for p in pods if self._wants_scheduling(p)]
        if not pending and not self._assumed:
            self._tried.clear()
            return
        # A pod seen for the first time may have been created right after a node was
        # cordoned or tainted: decide on nodes listed after the pods were.
        new = any(str(meta_of(p).get("uid")) not in self._tried for p in pending)
        nodes = self.view.nodes(self.view.fetched("pods") if new else 0.0)
        infos = self._node_infos(nodes)
        gangs: dict[tuple[str, str, str], _Gang] = defaultdict(_Gang)
        seen: set[str] = set()
        active_bound = []
        for pod in pods:
            uid = str(meta_of(pod).get("uid"))
            seen.add(uid)
            name = spec_of(pod).get("nodeName")
            if not name or is_terminal(pod):
                continue
            active_bound.append(uid)
            self._assumed.pop(uid, None)
            self._account(infos.get(name), pod_requests(pod), _gang_key(pod), gangs)
        for uid, (name, reqs, pod) in list(self._assumed.items()):
            if uid not in seen:
                del self._assumed[uid]
                continue
            self._account(infos.get(name), reqs, _gang_key(pod), gangs)
        if not pending:
            return
        signature = hash(
            (
                tuple(self._node_fingerprint(i) for i in infos.values()),
                frozenset(active_bound),
            )
        )
        now = self.clock.wall()
        pending_uids = {str(meta_of(p).get("uid")) for p in pending}
        for uid in [u for u in self._tried if u not in pending_uids]:
            del self._tried[uid]
        # The active queue: priority, then arrival (creation, the resourceVersion within
        # the second creationTimestamp resolves).
        pending.sort(
            key=lambda p: (
                -int(spec_of(p).get("priority") or 0),
                meta_of(p).get("creationTimestamp") or "",
                int(meta_of(p).get("resourceVersion") or 0),
            )
        )
        rack_free = self._rack_free(infos)
        for pod in pending:
            uid = str(meta_of(pod).get("uid"))
            if uid in self._assumed:
                continue
            tried = self._tried.get(uid)
            if tried and tried[0] == signature and now - tried[1] < self.RETRY_S:
                continue
            self._schedule(pod, infos, gangs, rack_free, signature, now)

    @staticmethod
    def _wants_scheduling(pod: dict[str, Any]) -> bool:
        spec = spec_of(pod)
        return (
            not spec.get("nodeName")
            and (spec.get("schedulerName") or "default-scheduler") == "default-scheduler"
            and not spec.get("schedulingGates")
            and not meta_of(pod).get("deletionTimestamp")
            and (status_of(pod).get("phase") or "Pending") == "Pending"
        )

    @staticmethod
    def _node_infos(nodes: list[dict[str, Any]]) -> dict[str, _NodeInfo]:
        infos = {}
        for node in nodes:
            labels = labels_of(node)
            name = meta_of(node)["name"]
            infos[name] = _NodeInfo(
                name=name,
                node=node,
                alloc=_allocatable(node),
                taints=_effective_taints(node),
                unschedulable=bool(spec_of(node).get("unschedulable")),
                rack=labels.get("krea.ai/rack", ""),
                spine=labels.get("krea.ai/spine", ""),
            )
        return infos

    @staticmethod
    def _node_fingerprint(info: _NodeInfo) -> tuple[Any, ...]:
        return (
            info.name,
            repr(info.taints),
            info.unschedulable,
            repr(sorted(info.alloc.items())),
            repr(sorted(labels_of(info.node).items())),
        )

    @staticmethod
    def _account(
        info: _NodeInfo | None,
        reqs: dict[str, float],
        gang: tuple[str, str, str] | None,
        gangs: dict[tuple[str, str, str], _Gang],
    ) -> None:
        if info is None:
            return
        for k, v in reqs.items():
            info.used[k] += v
        info.pods += 1
        if gang is not None:
            gangs[gang].racks[info.rack] += 1
            gangs[gang].spines[info.spine] += 1

    @staticmethod
    def _rack_free(infos: dict[str, _NodeInfo]) -> dict[str, float]:
        free: dict[str, float] = defaultdict(float)
        for info in infos.values():
            if info.unschedulable or any(
                t.get("effect") in ("NoSchedule", "NoExecute") for t in info.taints
            ):
                continue
            free[info.rack] += max(0.0, info.alloc.get(GPU, 0.0) - info.used.get(GPU, 0.0))
        return free

    @staticmethod
    def filter(pod: dict[str, Any], reqs: dict[str, float], info: _NodeInfo) -> list[str]:
        """Why the pod can't go to the node, in the scheduler's words ([] if it can)."""
        spec = spec_of(pod)
        tolerations = [as_dict(t) for t in spec.get("tolerations") or []]
        if info.unschedulable and not any(
            tolerates(t, {"key": UNSCHEDULABLE, "effect": "NoSchedule"}) for t in tolerations
        ):
            return ["node(s) were unschedulable"]
        taint = untolerated_taint(info.taints, tolerations)
        if taint is not None:
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
            ]
        if not node_matches_pod(spec, info.node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        reasons = []
        # a node that reports no "pods" allows none (NodeResourcesFit's fitsRequest,
        # pkg/scheduler/framework/plugins/noderesources/fit.go: AllowedPodNumber 0)
        if info.pods + 1 > info.alloc.get("pods", 0.0):
            reasons.append("Too many pods")
        for k, v in reqs.items():
            if v > 0 and info.used.get(k, 0.0) + v > info.alloc.get(k, 0.0) + 1e-9:
                reasons.append(f"Insufficient {k}")
        return reasons

    def _schedule(
        self,
        pod: dict[str, Any],
        infos: dict[str, _NodeInfo],
        gangs: dict[tuple[str, str, str], _Gang],
        rack_free: dict[str, float],
        signature: int,
        now: float,
    ) -> None:
        reqs = pod_requests(pod)
        gang_key = _gang_key(pod)
        gang = gangs.get(gang_key) if gang_key else None
        best: tuple[Any, ...] | None = None
        best_info: _NodeInfo | None = None
        reasons: Counter[str] = Counter()
        preemption: Counter[str] = Counter()
        gpu_req = reqs.get(GPU, 0.0)
        for info in infos.values():
            why = self.filter(pod, reqs, info)
            if why:
                reasons.update(why)
                resource = all(w.startswith(("Insufficient", "Too many")) for w in why)
                preemption[_NO_VICTIMS if resource else _PREEMPTION_USELESS] += 1
                continue
            gpu_cap = info.alloc.get(GPU, 0.0)
            cpu_cap = info.alloc.get("cpu", 0.0)
            score = (
                preferred_affinity_score(spec_of(pod), info.node),
                gang.racks[info.rack] if gang else 0,
                gang.spines[info.spine] if gang else 0,
                rack_free.get(info.rack, 0.0) if gang_key else 0.0,
                (info.used.get(GPU, 0.0) + gpu_req) / gpu_cap if gpu_cap and gpu_req else 0.0,
                (info.used.get("cpu", 0.0) + reqs.get("cpu", 0.0)) / cpu_cap if cpu_cap else 0.0,
            )
            if best is None or score > best:
                best, best_info = score, info
        if best_info is None:
            self._unschedulable(pod, len(infos), reasons, preemption, signature, now)
            return
        self._bind(pod, best_info, reqs, gang_key, gangs, rack_free)

    def _bind(
        self,
        pod: dict[str, Any],
        info: _NodeInfo,
        reqs: dict[str, float],
        gang_key: tuple[str, str, str] | None,
        gangs: dict[tuple[str, str, str], _Gang],
        rack_free: dict[str, float],
    ) -> None:
        meta = meta_of(pod)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": info.name},
        }
        self.writes += 1
        try:
            self.api.call(
                self.api.core.create_namespaced_pod_binding, meta["name"], meta["namespace"], body
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return
            raise
        finally:
            self._wrote = time.monotonic()
        uid = str(meta.get("uid"))
        self._assumed[uid] = (info.name, reqs, pod)
        self._tried.pop(uid, None)
        self._account(info, reqs, gang_key, gangs)
        rack_free[info.rack] = max(0.0, rack_free.get(info.rack, 0.0) - reqs.get(GPU, 0.0))
        self.events.record(
            ObjectRef.of(pod, kind="Pod"),
            NORMAL,
            "Scheduled",
            "Binding",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {info.name}",
        )

    def _unschedulable(
        self,
        pod: dict[str, Any],
        count: int,
        reasons: Counter[str],
        preemption: Counter[str],
        signature: int,
        now: float,
    ) -> None:
        if count == 0:
            message = "no nodes available to schedule pods"
        else:
            parts = ", ".join(sorted(f"{v} {k}" for k, v in reasons.items()))
            pre = ", ".join(sorted(f"{v} {k}" for k, v in preemption.items()))
            message = (
                f"0/{count} nodes are available: {parts}. "
                f"preemption: 0/{count} nodes are available: {pre}."
            )
        uid = str(meta_of(pod).get("uid"))
        self._tried[uid] = (signature, now, message)
        current = condition_of(pod, "PodScheduled") or {}
        if current.get("status") == "False" and current.get("message") == message:
            return
        meta = meta_of(pod)
        self.writes += 1
        self.api.quiet(
            self.api.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {
                "status": {
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                            "lastProbeTime": None,
                            "lastTransitionTime": rfc3339(now),
                        }
                    ]
                }
            },
        )
        self._wrote = time.monotonic()
        self.events.record(
            ObjectRef.of(pod, kind="Pod"), WARNING, "FailedScheduling", "Scheduling", message
        )
