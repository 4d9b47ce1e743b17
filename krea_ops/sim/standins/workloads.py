"""The workload controllers of the simulated cluster: DaemonSet, Deployment and ReplicaSet
controllers and the taint manager (NoExecute evictions).

The taint manager marks pods it evicts with ``DisruptionTarget`` (reason
``DeletionByTaintManager``) and deletes them. Each tick lists DaemonSets, Deployments and
ReplicaSets once, besides the shared view of pods and nodes.

Their timers are the control plane's, on the wall clock like the stamps they compare
(as in a real kube-controller-manager): ``tolerationSeconds`` from a taint's
``timeAdded``, ``minReadySeconds`` from a pod's Ready transition,
``progressDeadlineSeconds`` from a Deployment's last progress.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from krea_ops.kube.times import rfc3339
from krea_ops.sim.common.actor import World
from krea_ops.sim.common.api import Api, ClusterView, Events, ViewActor
from krea_ops.sim.common.objects import (
    NOT_READY,
    UNREACHABLE,
    UNSCHEDULABLE,
    annotations_of,
    as_dict,
    condition_of,
    controller_uid,
    int_or_percent,
    is_active,
    labels_of,
    meta_of,
    pod_condition,
    pod_ready,
    spec_of,
    status_of,
    template_hash,
    time_or,
)
from krea_ops.sim.standins.scheduler import node_matches_pod, tolerates, untolerated_taint

_DS_TOLERATIONS = (
    {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"},
    {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
)

REVISION = "deployment.kubernetes.io/revision"


def _owner_ref(obj: dict[str, Any], kind: str, api_version: str = "apps/v1") -> dict[str, Any]:
    meta = meta_of(obj)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_rank(pod: dict[str, Any]) -> tuple[Any, ...]:
    """Which pod of a ReplicaSet goes first when it scales down (ActivePodsWithRanks):
    unscheduled, then pending, then not ready, then the more restarted, then the newer."""
    status = status_of(pod)
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(status.get("phase") or "", 0)
    restarts = sum(
        int(as_dict(c).get("restartCount") or 0) for c in status.get("containerStatuses") or []
    )
    return (
        1 if spec_of(pod).get("nodeName") else 0,
        phase_rank,
        1 if pod_ready(pod) else 0,
        -restarts,
        # newer first: negate the creation time
        -time_or(meta_of(pod).get("creationTimestamp"), 0.0),
    )


class Controllers(ViewActor):
    """The DaemonSet, Deployment and ReplicaSet controllers and the taint manager."""

    name = "controllers"

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world, view, api)
        self.period_s = max(2.0, 0.5 * world.config.speed)
        self.ds_events = Events(api, world, "daemonset-controller")
        self.rs_events = Events(api, world, "replicaset-controller")
        self.deploy_events = Events(api, world, "deployment-controller")
        self.taint_events = Events(api, world, "taint-eviction-controller")
        self._evicted: set[str] = set()

    def tick(self) -> None:
        now = self.clock.wall()
        nodes = self.view.nodes(self._wrote)
        pods = self.view.pods(self._wrote)
        owned: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            uid = controller_uid(pod)
            if uid:
                owned[uid].append(pod)
        # One list of ReplicaSets for both controllers: the Deployment controller's scaling
        # (and the ReplicaSets it creates) reach the ReplicaSet controller in the same tick.
        steps: list[Callable[[], None]] = []
        try:
            sets = self._items(self.api.apps.list_replica_set_for_all_namespaces)
        except ApiException:
            pass  # no ReplicaSets to go by: those two controllers wait for the next tick
        else:
            steps += [lambda: self._deployments(sets, now), lambda: self._replicasets(sets, owned)]
        # DaemonSets after the workloads: at start-up their pods (two per node) are one
        # create each, and the workloads' first pods waited for all of them.
        steps.append(lambda: self._daemonsets(nodes, owned))
        steps.append(lambda: self._taint_manager(nodes, pods, now))
        for step in steps:
            self._guard(step)

    # -- DaemonSets ---------------------------------------------------------------------

    def _daemonsets(
        self, nodes: list[dict[str, Any]], owned: dict[str, list[dict[str, Any]]]
    ) -> None:
        for ds in self._items(self.api.apps.list_daemon_set_for_all_namespaces):
            if not meta_of(ds).get("deletionTimestamp"):
                self._sync_daemonset(ds, nodes, owned.get(meta_of(ds)["uid"], []))

    def _ds_eligible(self, ds: dict[str, Any], node: dict[str, Any]) -> bool:
        spec = as_dict(as_dict(spec_of(ds).get("template")).get("spec"))
        tolerations = [as_dict(t) for t in spec.get("tolerations") or []] + list(_DS_TOLERATIONS)
        if untolerated_taint([as_dict(t) for t in spec_of(node).get("taints") or []], tolerations):
            return False
        return node_matches_pod(spec, node)

    def _sync_daemonset(
        self, ds: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> None:
        meta, spec = meta_of(ds), spec_of(ds)
        generation = int(meta.get("generation") or 1)
        template = as_dict(spec.get("template"))
        revision = template_hash(template)
        eligible = {meta_of(n)["name"]: n for n in nodes if self._ds_eligible(ds, n)}
        by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            by_node[str(spec_of(pod).get("nodeName") or "")].append(pod)
        max_unavailable = max(
            1,
            int_or_percent(
                as_dict(as_dict(spec.get("updateStrategy")).get("rollingUpdate")).get(
                    "maxUnavailable", 1
                ),
                len(eligible),
                round_up=True,
            ),
        )
        unavailable = 0
        outdated: list[dict[str, Any]] = []
        status = Counter[str]()
        for name, node_pods in by_node.items():
            if name not in eligible:
                for pod in node_pods:
                    if is_active(pod):
                        status["misscheduled"] += 1
                        self._delete_pod(pod, self.ds_events, "DaemonSet", ds)
        for name in eligible:
            node_pods = by_node.get(name, [])
            for pod in node_pods:
                pod_meta = meta_of(pod)
                if status_of(pod).get("phase") == "Failed" and not pod_meta.get(
                    "deletionTimestamp"
                ):
                    self.ds_events.emit(
                        ds,
                        "DaemonSet",
                        "Warning",
                        "FailedDaemonPod",
                        f"Found failed daemon pod {pod_meta['namespace']}/{pod_meta['name']} "
                        f"on node {name}, will try to kill it",
                        api_version="apps/v1",
                    )
                    self._delete_pod(pod, self.ds_events, "DaemonSet", ds)
            active = [p for p in node_pods if is_active(p)]
            if not active:
                if not any(meta_of(p).get("deletionTimestamp") for p in node_pods):
                    self._create_daemon_pod(ds, template, name, revision, generation)
                unavailable += 1
                continue
            active.sort(key=lambda p: meta_of(p).get("creationTimestamp") or "")
            for extra in active[1:]:
                self._delete_pod(extra, self.ds_events, "DaemonSet", ds)
            pod = active[0]
            status["current"] += 1
            if pod_ready(pod):
                status["ready"] += 1
            else:
                unavailable += 1
            if labels_of(pod).get("pod-template-generation") == str(generation) or (
                labels_of(pod).get("controller-revision-hash") == revision
            ):
                status["updated"] += 1
            else:
                outdated.append(pod)
        if (
            outdated
            and as_dict(spec.get("updateStrategy")).get("type", "RollingUpdate") == "RollingUpdate"
        ):
            outdated.sort(key=lambda p: (pod_ready(p), meta_of(p).get("name")))
            for pod in outdated[: max(0, max_unavailable - unavailable)]:
                self._delete_pod(pod, self.ds_events, "DaemonSet", ds)
        new_status = {
            "currentNumberScheduled": status["current"],
            "desiredNumberScheduled": len(eligible),
            "numberMisscheduled": status["misscheduled"],
            "numberReady": status["ready"],
            "numberAvailable": status["ready"],
            "numberUnavailable": max(0, len(eligible) - status["ready"]),
            "updatedNumberScheduled": status["updated"],
            "observedGeneration": generation,
        }
        old = status_of(ds)
        if any((old.get(k) or 0) != v for k, v in new_status.items()):
            self._write(
                self.api.apps.patch_namespaced_daemon_set_status,
                meta["name"],
                meta["namespace"],
                {"status": new_status},
            )

    def _create_daemon_pod(
        self,
        ds: dict[str, Any],
        template: dict[str, Any],
        node: str,
        revision: str,
        generation: int,
    ) -> None:
        meta = meta_of(ds)
        pod_meta = as_dict(template.get("metadata"))
        spec = json.loads(json.dumps(as_dict(template.get("spec"))))
        tolerations = list(spec.get("tolerations") or [])
        for t in _DS_TOLERATIONS:
            if not any(
                as_dict(x).get("key") == t["key"] and as_dict(x).get("effect") == t["effect"]
                for x in tolerations
            ):
                tolerations.append(dict(t))
        spec["tolerations"] = tolerations
        affinity = as_dict(spec.get("affinity"))
        node_affinity = as_dict(affinity.get("nodeAffinity"))
        required = as_dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
        terms = [dict(as_dict(t)) for t in required.get("nodeSelectorTerms") or []] or [{}]
        name_req = {"key": "metadata.name", "operator": "In", "values": [node]}
        for term in terms:
            term["matchFields"] = [name_req]
        spec["affinity"] = {
            **affinity,
            "nodeAffinity": {
                **node_affinity,
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            },
        }
        spec["nodeName"] = node
        labels = dict(as_dict(pod_meta.get("labels")))
        labels.update(
            {"controller-revision-hash": revision, "pod-template-generation": str(generation)}
        )
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict(as_dict(pod_meta.get("annotations"))),
                "ownerReferences": [_owner_ref(ds, "DaemonSet")],
            },
            "spec": spec,
        }
        created = self._write(self.api.core.create_namespaced_pod, meta["namespace"], body)
        if created:
            self.ds_events.emit(
                ds,
                "DaemonSet",
                "Normal",
                "SuccessfulCreate",
                f"Created pod: {meta_of(created)['name']}",
                api_version="apps/v1",
            )

    def _delete_pod(
        self, pod: dict[str, Any], events: Events, kind: str, owner: dict[str, Any]
    ) -> None:
        meta = meta_of(pod)
        if meta.get("deletionTimestamp"):
            return
        deleted = self._write(
            self.api.core.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            body={"preconditions": {"uid": meta.get("uid")}},
        )
        if deleted is not None:
            events.emit(
                owner,
                kind,
                "Normal",
                "SuccessfulDelete",
                f"Deleted pod: {meta['name']}",
                api_version="apps/v1",
            )

    # -- ReplicaSets --------------------------------------------------------------------

    def _items(self, fn: Callable[..., Any]) -> list[dict[str, Any]]:
        return list((self.api.call(fn) or {}).get("items") or [])

    def _replicasets(
        self, sets: list[dict[str, Any]], owned: dict[str, list[dict[str, Any]]]
    ) -> None:
        for rs in list(sets):
            if not meta_of(rs).get("deletionTimestamp"):
                self._sync_replicaset(rs, owned.get(meta_of(rs)["uid"], []))

    def _sync_replicaset(self, rs: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = meta_of(rs), spec_of(rs)
        want = _replicas(spec)
        active = [p for p in pods if is_active(p)]
        diff = len(active) - want
        if diff < 0:
            for _ in range(min(-diff, 500)):
                created = self._create_rs_pod(rs)
                if created is None:
                    break
                active.append(created)
        elif diff > 0:
            active.sort(key=_pod_rank)
            for pod in active[:diff]:
                self._delete_pod(pod, self.rs_events, "ReplicaSet", rs)
            active = active[diff:]
        ready = sum(1 for p in active if pod_ready(p))
        min_ready = int(spec.get("minReadySeconds") or 0)
        now = self.clock.wall()
        available = 0
        for p in active:
            cond = condition_of(p, "Ready")
            if (
                cond
                and cond.get("status") == "True"
                and (now - time_or(cond.get("lastTransitionTime"), now) >= min_ready)
            ):
                available += 1
        new_status: dict[str, Any] = {
            "replicas": len(active),
            "fullyLabeledReplicas": len(active),
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": int(meta.get("generation") or 1),
        }
        old = status_of(rs)
        if any((old.get(k) or 0) != v for k, v in new_status.items()):
            self._write(
                self.api.apps.patch_namespaced_replica_set_status,
                meta["name"],
                meta["namespace"],
                {"status": new_status},
            )

    def _create_rs_pod(self, rs: dict[str, Any]) -> dict[str, Any] | None:
        meta = meta_of(rs)
        template = as_dict(spec_of(rs).get("template"))
        pod_meta = as_dict(template.get("metadata"))
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": dict(as_dict(pod_meta.get("labels"))),
                "annotations": dict(as_dict(pod_meta.get("annotations"))),
                "ownerReferences": [_owner_ref(rs, "ReplicaSet")],
            },
            "spec": as_dict(template.get("spec")),
        }
        self.writes += 1
        try:
            created = self.api.call(self.api.core.create_namespaced_pod, meta["namespace"], body)
        except ApiException as exc:
            self._wrote = time.monotonic()
            if exc.status in (403, 404, 409, 422):
                self.rs_events.emit(
                    rs,
                    "ReplicaSet",
                    "Warning",
                    "FailedCreate",
                    f"Error creating: {exc.reason}",
                    api_version="apps/v1",
                )
                return None
            raise
        self._wrote = time.monotonic()
        self.rs_events.emit(
            rs,
            "ReplicaSet",
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {meta_of(created)['name']}",
            api_version="apps/v1",
        )
        return dict(created)

    # -- Deployments --------------------------------------------------------------------

    def _deployments(self, sets: list[dict[str, Any]], now: float) -> None:
        deploys = self._items(self.api.apps.list_deployment_for_all_namespaces)
        if not deploys:
            return
        by_owner: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rs in sets:
            uid = controller_uid(rs)
            if uid:
                by_owner[uid].append(rs)
        for d in deploys:
            if not meta_of(d).get("deletionTimestamp"):
                self._guard(
                    lambda d=d: self._sync_deployment(
                        d, by_owner.get(meta_of(d)["uid"], []), sets, now
                    )
                )

    def _scale(self, d: dict[str, Any], rs: dict[str, Any], replicas: int) -> None:
        meta = meta_of(rs)
        old = int(spec_of(rs).get("replicas") or 0)
        if old == replicas:
            return
        result = self._write(
            self.api.apps.patch_namespaced_replica_set,
            meta["name"],
            meta["namespace"],
            {
                "metadata": {
                    "annotations": {
                        "deployment.kubernetes.io/desired-replicas": str(
                            spec_of(d).get("replicas", 1)
                        ),
                    }
                },
                "spec": {"replicas": replicas},
            },
        )
        if result is not None:
            rs.setdefault("spec", {})["replicas"] = replicas
            direction = "up" if replicas > old else "down"
            self.deploy_events.emit(
                d,
                "Deployment",
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {direction} replica set {meta['name']} from {old} to {replicas}",
                api_version="apps/v1",
            )

    def _sync_deployment(
        self,
        d: dict[str, Any],
        sets: list[dict[str, Any]],
        all_sets: list[dict[str, Any]],
        now: float,
    ) -> None:
        meta, spec = meta_of(d), spec_of(d)
        replicas = _replicas(spec)
        template = as_dict(spec.get("template"))
        h = template_hash(template)
        new_rs = next((rs for rs in sets if labels_of(rs).get("pod-template-hash") == h), None)
        old_sets = [rs for rs in sets if rs is not new_rs]
        revisions = [int(annotations_of(rs).get(REVISION, "0") or 0) for rs in sets]
        created_new = False
        strategy = as_dict(spec.get("strategy"))
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        surge = int_or_percent(
            as_dict(strategy.get("rollingUpdate")).get("maxSurge", "25%"), replicas, round_up=True
        )
        unavailable = int_or_percent(
            as_dict(strategy.get("rollingUpdate")).get("maxUnavailable", "25%"),
            replicas,
            round_up=False,
        )
        if rolling and surge == 0 and unavailable == 0:
            unavailable = 1
        if not rolling:
            surge, unavailable = 0, replicas
        old_total = sum(int(spec_of(rs).get("replicas") or 0) for rs in old_sets)
        if new_rs is None and not spec.get("paused"):
            new_rs = self._create_new_rs(
                d, template, h, replicas, old_total, surge, rolling, revisions
            )
            created_new = new_rs is not None
            if new_rs is not None:
                all_sets.append(new_rs)  # its pods come in this tick
        if new_rs is not None and not spec.get("paused"):
            self._rollout(d, new_rs, old_sets, replicas, surge, unavailable, rolling)
            self._cleanup(d, old_sets)
        if new_rs is not None:
            rev = annotations_of(new_rs).get(REVISION)
            if rev and annotations_of(d).get(REVISION) != rev:
                self._write(
                    self.api.apps.patch_namespaced_deployment,
                    meta["name"],
                    meta["namespace"],
                    {"metadata": {"annotations": {REVISION: rev}}},
                )
        self._deployment_status(d, new_rs, old_sets, replicas, unavailable, created_new, now)

    def _create_new_rs(
        self,
        d: dict[str, Any],
        template: dict[str, Any],
        h: str,
        replicas: int,
        old_total: int,
        surge: int,
        rolling: bool,
        revisions: list[int],
    ) -> dict[str, Any] | None:
        meta, spec = meta_of(d), spec_of(d)
        labels = {
            **as_dict(as_dict(template.get("metadata")).get("labels")),
            "pod-template-hash": h,
        }
        tmpl = json.loads(json.dumps(template))
        tmpl.setdefault("metadata", {})["labels"] = labels
        selector = json.loads(json.dumps(as_dict(spec.get("selector"))))
        selector.setdefault("matchLabels", {})["pod-template-hash"] = h
        if old_total == 0:
            start = replicas
        elif rolling:
            start = max(0, min(replicas, replicas + surge - old_total))
        else:
            start = 0
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{h}",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": {
                    REVISION: str(max(revisions, default=0) + 1),
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                    "deployment.kubernetes.io/max-replicas": str(replicas + surge),
                },
                "ownerReferences": [_owner_ref(d, "Deployment")],
            },
            "spec": {
                "replicas": start,
                "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": tmpl,
            },
        }
        created = self._write(self.api.apps.create_namespaced_replica_set, meta["namespace"], body)
        if created is None:
            return None
        self.deploy_events.emit(
            d,
            "Deployment",
            "Normal",
            "ScalingReplicaSet",
            f"Scaled up replica set {meta_of(created)['name']} from 0 to {start}",
            api_version="apps/v1",
        )
        return dict(created)

    def _rollout(
        self,
        d: dict[str, Any],
        new_rs: dict[str, Any],
        old_sets: list[dict[str, Any]],
        replicas: int,
        surge: int,
        unavailable: int,
        rolling: bool,
    ) -> None:
        def count(rs: dict[str, Any]) -> int:
            return int(spec_of(rs).get("replicas") or 0)

        old_active = [rs for rs in old_sets if count(rs) > 0]
        if not old_active:
            self._scale(d, new_rs, replicas)
            return
        if not rolling:  # Recreate: the old pods go first, then the new ones come
            for rs in old_active:
                self._scale(d, rs, 0)
            if all(int(status_of(rs).get("replicas") or 0) == 0 for rs in old_sets):
                self._scale(d, new_rs, replicas)
            return
        total = count(new_rs) + sum(count(rs) for rs in old_active)
        if total < replicas + surge and count(new_rs) < replicas:
            self._scale(d, new_rs, min(replicas, count(new_rs) + replicas + surge - total))
        elif count(new_rs) > replicas:
            self._scale(d, new_rs, replicas)
        # scaleDownOldReplicaSetsForRollingUpdate: first the old pods that aren't available
        # (as far as the new ones' unavailability allows), then as many as keep
        # replicas - maxUnavailable available.
        min_available = replicas - unavailable
        new_unavailable = max(
            0, count(new_rs) - int(status_of(new_rs).get("availableReplicas") or 0)
        )
        all_pods = count(new_rs) + sum(count(rs) for rs in old_active)
        cleanup = all_pods - min_available - new_unavailable
        if cleanup <= 0:
            return
        oldest_first = sorted(old_active, key=lambda r: meta_of(r).get("creationTimestamp") or "")
        for rs in oldest_first:
            unhealthy = count(rs) - int(status_of(rs).get("availableReplicas") or 0)
            step = min(cleanup, unhealthy)
            if step > 0:
                self._scale(d, rs, count(rs) - step)
                cleanup -= step
        available = sum(
            int(status_of(rs).get("availableReplicas") or 0) for rs in [new_rs, *old_sets]
        )
        budget = available - min_available
        for rs in oldest_first:
            if budget <= 0:
                break
            step = min(count(rs), budget)
            if step > 0:
                self._scale(d, rs, count(rs) - step)
                budget -= step

    def _cleanup(self, d: dict[str, Any], old_sets: list[dict[str, Any]]) -> None:
        limit = int(spec_of(d).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in old_sets
            if int(spec_of(rs).get("replicas") or 0) == 0
            and int(status_of(rs).get("replicas") or 0) == 0
            and not meta_of(rs).get("deletionTimestamp")
        ]
        idle.sort(key=lambda r: int(annotations_of(r).get(REVISION, "0") or 0))
        for rs in idle[: max(0, len(idle) - limit)]:
            self._write(
                self.api.apps.delete_namespaced_replica_set,
                meta_of(rs)["name"],
                meta_of(rs)["namespace"],
            )

    def _deployment_status(
        self,
        d: dict[str, Any],
        new_rs: dict[str, Any] | None,
        old_sets: list[dict[str, Any]],
        replicas: int,
        max_unavailable: int,
        created_new: bool,
        now: float,
    ) -> None:
        meta, spec, old = meta_of(d), spec_of(d), status_of(d)
        sets = ([new_rs] if new_rs else []) + old_sets

        def total(key: str) -> int:
            return sum(int(status_of(rs).get(key) or 0) for rs in sets)

        spec_total = sum(int(spec_of(rs).get("replicas") or 0) for rs in sets)
        available = total("availableReplicas")
        updated = int(status_of(new_rs).get("replicas") or 0) if new_rs else 0
        counts = {
            "replicas": total("replicas"),
            "updatedReplicas": updated,
            "readyReplicas": total("readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, spec_total - available),
        }
        stamp = rfc3339(now)
        conditions = {c.get("type"): dict(as_dict(c)) for c in old.get("conditions") or []}

        def set_condition(
            kind: str, status: str, reason: str, message: str, progress: bool
        ) -> None:
            current = conditions.get(kind) or {}
            cond = {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastUpdateTime": current.get("lastUpdateTime") or stamp,
                "lastTransitionTime": current.get("lastTransitionTime") or stamp,
            }
            if current.get("status") != status:
                cond["lastTransitionTime"] = stamp
            if progress or current.get("reason") != reason or current.get("message") != message:
                cond["lastUpdateTime"] = stamp
            conditions[kind] = cond

        if available >= replicas - max_unavailable:
            set_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                False,
            )
        else:
            set_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                False,
            )
        rs_name = meta_of(new_rs)["name"] if new_rs else meta["name"]
        old_pods = sum(int(status_of(rs).get("replicas") or 0) for rs in old_sets)
        complete = (
            updated == replicas
            and available >= replicas
            and old_pods == 0
            and (counts["replicas"] == replicas)
        )
        progressed = any(
            (old.get(k) or 0) != counts[k]
            for k in ("updatedReplicas", "readyReplicas", "availableReplicas")
        )
        progressing = conditions.get("Progressing") or {}
        deadline = int(spec.get("progressDeadlineSeconds") or 600)
        if complete:
            set_condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
                False,
            )
        elif created_new:
            set_condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                f'Created new replica set "{rs_name}"',
                True,
            )
        elif progressed or not progressing:
            set_condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" is progressing.',
                True,
            )
        elif progressing.get("reason") != "ProgressDeadlineExceeded" and (
            now - time_or(progressing.get("lastUpdateTime"), now) > deadline
        ):
            set_condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{rs_name}" has timed out progressing.',
                False,
            )
        new_status: dict[str, Any] = {
            **{k: v for k, v in counts.items()},
            "observedGeneration": int(meta.get("generation") or 1),
            "conditions": [conditions[k] for k in ("Available", "Progressing") if k in conditions],
        }
        if any(old.get(k) != v for k, v in new_status.items() if k != "conditions") or (
            _strip_times(old.get("conditions")) != _strip_times(new_status["conditions"])
            or progressed
        ):
            self._write(
                self.api.apps.patch_namespaced_deployment_status,
                meta["name"],
                meta["namespace"],
                {"status": new_status},
            )

    # -- the taint manager --------------------------------------------------------------

    def _taint_manager(
        self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], now: float
    ) -> None:
        tainted = {}
        for node in nodes:
            taints = [
                as_dict(t)
                for t in spec_of(node).get("taints") or []
                if as_dict(t).get("effect") == "NoExecute"
            ]
            if taints:
                tainted[meta_of(node)["name"]] = taints
        if not tainted:
            self._evicted.clear()
            return
        for pod in pods:
            node_taints = tainted.get(str(spec_of(pod).get("nodeName") or ""))
            if not node_taints or not is_active(pod):
                continue
            uid = str(meta_of(pod).get("uid"))
            if uid in self._evicted:
                continue
            tolerations = [as_dict(t) for t in spec_of(pod).get("tolerations") or []]
            evict = False
            for taint in node_taints:
                matching = [t for t in tolerations if tolerates(t, taint)]
                if not matching:
                    evict = True
                    break
                if any(t.get("tolerationSeconds") is None for t in matching):
                    continue
                seconds = min(float(t["tolerationSeconds"]) for t in matching)
                deadline = time_or(taint.get("timeAdded"), now) + seconds
                if deadline <= now:
                    evict = True
                    break
            if evict:
                self._evict(pod, now)

    def _evict(self, pod: dict[str, Any], now: float) -> None:
        meta = meta_of(pod)
        self._evicted.add(str(meta.get("uid")))
        self._write(
            self.api.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {
                "status": {
                    "conditions": [
                        pod_condition(
                            "DisruptionTarget",
                            "True",
                            rfc3339(now),
                            "DeletionByTaintManager",
                            "Taint manager: deleting due to NoExecute taint",
                        )
                    ]
                }
            },
        )
        self.taint_events.emit(
            pod,
            "Pod",
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
        )
        self._write(
            self.api.core.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            body={"preconditions": {"uid": meta.get("uid")}},
        )


def _replicas(spec: dict[str, Any]) -> int:
    value = spec.get("replicas")
    return 1 if value is None else int(value)


def _strip_times(conditions: Any) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in as_dict(c).items() if k not in ("lastUpdateTime", "lastTransitionTime")}
        for c in conditions or []
    ]
