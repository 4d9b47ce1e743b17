"""Raw-JSON access to Jobs, JobSets and pods through the official client, and the small
object helpers the machines (the trainers, the story) and the stand-ins (the Job, JobSet
and Kueue controllers) share: labels, owner references, conditions, requests.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from krea_ops.kube.quantity import quantity_or_none

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_PLURAL = "jobsets"

JS_NAME = "jobset.sigs.k8s.io/jobset-name"
JS_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
JS_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JS_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JS_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JS_RESTART = "jobset.sigs.k8s.io/restart-attempt"
JS_JOB_KEY = "jobset.sigs.k8s.io/job-key"

JOB_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"

Obj = dict[str, Any]


# -- small helpers ---------------------------------------------------------------------


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def labels(obj: Obj) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annots(obj: Obj) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def key(obj: Obj) -> tuple[str, str]:
    return (meta(obj).get("namespace", ""), meta(obj).get("name", ""))


def deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def controller_ref(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_ref(obj: Obj, api_version: str, kind: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta(obj)["name"],
        "uid": meta(obj)["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def condition(obj: Obj, ctype: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(obj: Obj, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    conditions: list[Obj],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    *,
    generation: int | None = None,
    probe: bool = False,
) -> bool:
    """apimeta.SetStatusCondition: the transition time moves only when the status does."""
    new: Obj = {"type": ctype, "status": status, "reason": reason, "message": message}
    if generation is not None:
        new["observedGeneration"] = generation
    for cond in conditions:
        if cond.get("type") != ctype:
            continue
        before = dict(cond)
        if cond.get("status") != status or "lastTransitionTime" not in cond:
            cond["lastTransitionTime"] = now
            if probe:
                cond["lastProbeTime"] = now
        cond.update(new)
        return cond != before
    new["lastTransitionTime"] = now
    if probe:
        new["lastProbeTime"] = now
    conditions.append(new)
    return True


def pod_requests(spec: Obj) -> dict[str, Decimal]:
    """Effective requests of one pod: containers summed (limits stand in for missing
    requests, as the API server defaults them), at least each init container's."""

    def of(container: Obj) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        # an unparsable quantity asks for nothing (the server would have refused it)
        return {name: quantity_or_none(v) or Decimal(0) for name, v in merged.items()}

    total: dict[str, Decimal] = defaultdict(Decimal)
    for c in spec.get("containers") or []:
        for name, v in of(c).items():
            total[name] += v
    for c in spec.get("initContainers") or []:
        for name, v in of(c).items():
            total[name] = max(total[name], v)
    return dict(total)


# -- API access ------------------------------------------------------------------------


class JobApi:
    """Raw-JSON access through the official client (no model deserialization)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api_client = api_client
        # Typed as Any: bodies are plain dicts (the client accepts them), not its models.
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.scheduling: Any = client.SchedulingV1Api(api_client)
        self.pods_written_at = 0.0  # monotonic time of our last pod create/update/delete

    def wrote_pods(self) -> None:
        self.pods_written_at = time.monotonic()

    @staticmethod
    def _items(resp: Any) -> list[Obj]:
        return list(json.loads(resp.data).get("items") or [])

    def pods(self, selector: str) -> list[Obj]:
        return self._items(
            self.core.list_pod_for_all_namespaces(label_selector=selector, _preload_content=False)
        )

    def jobs(self) -> list[Obj]:
        return self._items(self.batch.list_job_for_all_namespaces(_preload_content=False))

    def custom_list(self, group: str, version: str, plural: str) -> list[Obj]:
        out = self.custom.list_cluster_custom_object(group, version, plural)
        return list(out.get("items") or [])

    def jobsets(self) -> list[Obj]:
        return self.custom_list(JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)

    def replace_jobset(self, js: Obj) -> Obj:
        ns, name = key(js)
        out: Obj = self.custom.replace_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, name, js
        )
        return out

    def patch_jobset_status(self, js: Obj, status: Obj) -> Obj:
        ns, name = key(js)
        out: Obj = self.custom.patch_namespaced_custom_object_status(
            JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, name, {"status": status}
        )
        return out

    def patch_jobset_meta(self, ns: str, name: str, patch: Obj) -> Obj:
        out: Obj = self.custom.patch_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            ns,
            JOBSET_PLURAL,
            name,
            {"metadata": patch},
            _content_type="application/merge-patch+json",
        )
        return out


def api_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return int(status) if isinstance(status, int) else None


def ignore_gone(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an API call; a 404 (already gone) or 409 (changed under us) is not an error:
    the next tick sees the new state."""
    from kubernetes.client.rest import ApiException

    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        if exc.status in (404, 409):
            return None
        raise


def pod_ready(pod: Obj) -> bool:
    return is_true(pod, "Ready")


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def jobset_pod_count(js: Obj) -> int:
    total = 0
    for rj in (js.get("spec") or {}).get("replicatedJobs") or []:
        jspec = ((rj.get("template") or {}).get("spec")) or {}
        parallelism = int(jspec.get("parallelism", 1) or 0)
        completions = jspec.get("completions")
        per_job = min(parallelism, int(completions)) if completions is not None else parallelism
        total += int(rj.get("replicas", 1)) * per_job
    return total
