"""The batch/v1 Job and JobSet controllers of the simulated world, and the client helpers
the Kueue, JobSet, Job and training actors share.

Like the real kube-controller-manager Job controller and the JobSet controller, they act
only through the API: a Job that is not suspended gets ``parallelism`` pods (Indexed Jobs
one per completion index, named ``<job>-<index>-<suffix>``, with the completion-index
label, annotation and ``JOB_COMPLETION_INDEX``); its status counts active, ready,
succeeded and failed pods and carries the Suspended, Complete/SuccessCriteriaMet and
Failed/FailureTarget conditions with the real reasons. A JobSet gets one child Job per
replicated job and index (``<jobset>-<rjob>-<index>``, labelled like the real controller,
restart attempt included), suspends and resumes them with itself (copying its pod
template's scheduling directives on resume, as the JobSet controller does for Kueue), and
when a child Job fails it restarts the whole JobSet (all child Jobs deleted and created
again with ``restart-attempt`` + 1) until ``failurePolicy.maxRestarts`` is used up, then
fails it.

The controllers are phases of the Kueue actor's tick (see ``kueue.py``): they read one
``Snapshot`` listed once per tick and write only what changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from krea_ops.kube.quantity import quantity_or_none
from krea_ops.sim.world.actor import World
from krea_ops.sim.world.api import Events

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


class Api:
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


# -- the snapshot one tick works on ----------------------------------------------------

# Where the Kueue actor publishes each tick's Snapshot (``world.services``): the training
# actor works on the same objects instead of listing them again.
SNAPSHOT_SERVICE = "kueue.snapshot"


@dataclass
class Snapshot:
    """What one tick listed. Objects are replaced by the server's answer after each write,
    so later phases of the same tick see earlier phases' effects."""

    time: float
    jobsets: list[Obj] = field(default_factory=list)
    jobs: list[Obj] = field(default_factory=list)
    job_pods: list[Obj] = field(default_factory=list)
    queue_pods: list[Obj] = field(default_factory=list)
    workloads: list[Obj] = field(default_factory=list)
    cluster_queues: list[Obj] = field(default_factory=list)
    local_queues: list[Obj] = field(default_factory=list)

    def pods_of_job(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = defaultdict(list)
        for pod in self.job_pods:
            uid = labels(pod).get(JOB_UID)
            if uid:
                out[uid].append(pod)
        return out

    def pods_of_jobset(self, ns: str, name: str) -> list[Obj]:
        return [
            p
            for p in self.job_pods
            if meta(p).get("namespace") == ns and labels(p).get(JS_NAME) == name
        ]


def replace_in(items: list[Obj], new: Obj | None) -> None:
    if not new:
        return
    uid = meta(new).get("uid")
    for i, old in enumerate(items):
        if meta(old).get("uid") == uid:
            items[i] = new
            return
    items.append(new)


def pod_ready(pod: Obj) -> bool:
    return is_true(pod, "Ready")


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


# -- the Job controller ----------------------------------------------------------------


def _indexed(job: Obj) -> bool:
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def _index_of(pod: Obj) -> int | None:
    raw = annots(pod).get(COMPLETION_INDEX, labels(pod).get(COMPLETION_INDEX))
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _compress_indexes(indexes: set[int]) -> str:
    """The Job status' completedIndexes form: "0-3,5,7-8"."""
    ranges: list[list[int]] = []
    for i in sorted(indexes):
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


class JobController:
    """batch/v1 Jobs: pods, status and conditions like the kube-controller-manager's."""

    component = "job-controller"

    def __init__(self, api: Api, world: World, now: Callable[[], str]) -> None:
        self.api = api
        self.recorder = Events(api, world, self.component)
        self.now = now

    def reconcile(self, snap: Snapshot, held: Callable[[Obj], bool]) -> None:
        """``held(job)``: Kueue has not admitted this Job's workload (treat as suspended)."""
        by_job = snap.pods_of_job()
        for i, job in enumerate(list(snap.jobs)):
            if deleting(job):
                continue
            new = self._sync(job, by_job.get(meta(job).get("uid", ""), []), held(job))
            if new is not None:
                snap.jobs[i] = new

    def _delete_pods(self, pods: list[Obj]) -> None:
        if pods:
            self.api.wrote_pods()
        for pod in pods:
            ns, name = key(pod)
            ignore_gone(self.api.core.delete_namespaced_pod, name, ns)

    def _create_pod(self, job: Obj, index: int | None) -> Obj | None:
        jm = meta(job)
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        pod_labels = dict(tmeta.get("labels") or {})
        pod_annotations = dict(tmeta.get("annotations") or {})
        spec = template.get("spec") or {}
        name_prefix = f"{jm['name']}-"
        if index is not None:
            pod_labels[COMPLETION_INDEX] = str(index)
            pod_annotations[COMPLETION_INDEX] = str(index)
            name_prefix = f"{jm['name']}-{index}-"
            for c in spec.get("containers") or []:
                env = [e for e in c.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"]
                env.append(
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {
                            "fieldRef": {
                                "apiVersion": "v1",
                                "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']",
                            }
                        },
                    }
                )
                c["env"] = env
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": name_prefix,
                "namespace": jm["namespace"],
                "labels": pod_labels,
                "annotations": pod_annotations,
                "ownerReferences": [owner_ref(job, "batch/v1", "Job")],
            },
            "spec": spec,
        }
        self.api.wrote_pods()
        created = ignore_gone(
            lambda: self.api.core.create_namespaced_pod(
                jm["namespace"], body, _preload_content=False
            )
        )
        return None if created is None else dict(json.loads(created.data))

    def _sync(self, job: Obj, pods: list[Obj], held: bool) -> Obj | None:
        spec = job.get("spec") or {}
        old_status = job.get("status") or {}
        status = copy.deepcopy(old_status)
        conditions: list[Obj] = status.setdefault("conditions", [])
        now = self.now()
        parallelism = int(spec.get("parallelism", 1) or 0)
        completions = int(spec.get("completions", 1) or 1)
        backoff = int(spec.get("backoffLimit", 6))
        alive = [p for p in pods if phase(p) not in ("Succeeded", "Failed")]
        active = [p for p in alive if not deleting(p)]
        terminating = [p for p in alive if deleting(p)]
        succeeded = [p for p in pods if phase(p) == "Succeeded"]
        failed = [p for p in pods if phase(p) == "Failed"]
        finished = is_true(job, "Complete") or is_true(job, "Failed")
        suspended = bool(spec.get("suspend"))
        if held and not suspended and not finished:
            return None  # Kueue has not admitted it: no pods until it does
        events: list[tuple[str, str, str]] = []

        if finished:
            if is_true(job, "Failed"):
                self._delete_pods(active)
                active = []
        elif suspended:
            self._delete_pods(active)
            active = []
            if set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended", now,
                             probe=True):  # fmt: skip
                events.append(("Normal", "Suspended", "Job suspended"))
            status.pop("startTime", None)
        elif len(failed) > backoff:
            self._delete_pods(active)
            active = []
            msg = "Job has reached the specified backoff limit"
            set_condition(conditions, "FailureTarget", "True", "BackoffLimitExceeded", msg, now,
                          probe=True)  # fmt: skip
            set_condition(conditions, "Failed", "True", "BackoffLimitExceeded", msg, now,
                          probe=True)  # fmt: skip
            events.append(("Warning", "BackoffLimitExceeded", msg))
        else:
            if condition(job, "Suspended") and is_true(job, "Suspended"):
                set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed", now,
                              probe=True)  # fmt: skip
                events.append(("Normal", "Resumed", "Job resumed"))
            status.setdefault("startTime", now)
            done = False
            if _indexed(job):
                completed = {i for p in succeeded if (i := _index_of(p)) is not None}
                running = {i for p in active if (i := _index_of(p)) is not None}
                if len(completed) >= completions:
                    done = True
                else:
                    room = parallelism - len(active)
                    for index in range(completions):
                        if room <= 0:
                            break
                        if index in completed or index in running:
                            continue
                        if self._create_pod(job, index) is not None:
                            room -= 1
                status["completedIndexes"] = _compress_indexes(completed)
            else:
                if len(succeeded) >= completions:
                    done = True
                else:
                    want = min(parallelism, completions - len(succeeded)) - len(active)
                    for _ in range(max(want, 0)):
                        self._create_pod(job, None)
            if done:
                self._delete_pods(active)
                active = []
                msg = "Reached expected number of succeeded pods"
                set_condition(conditions, "SuccessCriteriaMet", "True", "CompletionsReached", msg,
                              now, probe=True)  # fmt: skip
                set_condition(conditions, "Complete", "True", "CompletionsReached", msg, now,
                              probe=True)  # fmt: skip
                status["completionTime"] = now
                events.append(("Normal", "Completed", "Job completed"))
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if pod_ready(p))
        status["succeeded"] = len(succeeded)
        status["failed"] = len(failed)
        status["terminating"] = len(terminating)
        status.setdefault("uncountedTerminatedPods", {})
        for field_name in ("active", "succeeded", "failed"):
            if status[field_name] == 0 and field_name not in old_status:
                status.pop(field_name)
        if not conditions:
            status.pop("conditions")
        for reason_type, reason, message in events:
            self.recorder.event(job, reason, message,
                                type_=reason_type, api_version="batch/v1", kind="Job")  # fmt: skip
        if status == old_status:
            return None
        patch = dict(status)
        for gone in set(old_status) - set(status):
            patch[gone] = None
        ns, name = key(job)
        out = ignore_gone(
            lambda: self.api.batch.patch_namespaced_job_status(
                name, ns, {"status": patch}, _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )  # fmt: skip
        return None if out is None else dict(json.loads(out.data))


# -- the JobSet controller -------------------------------------------------------------


def job_key(ns: str, name: str) -> str:
    return hashlib.sha1(f"{ns}/{name}".encode()).hexdigest()


def jobset_pod_count(js: Obj) -> int:
    total = 0
    for rj in (js.get("spec") or {}).get("replicatedJobs") or []:
        jspec = ((rj.get("template") or {}).get("spec")) or {}
        parallelism = int(jspec.get("parallelism", 1) or 0)
        completions = jspec.get("completions")
        per_job = min(parallelism, int(completions)) if completions is not None else parallelism
        total += int(rj.get("replicas", 1)) * per_job
    return total


SCHEDULING_FIELDS = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


class JobSetController:
    """jobset.x-k8s.io/v1alpha2 JobSets: child Jobs, suspension, restarts, status."""

    component = "jobset-controller"

    def __init__(self, api: Api, world: World, now: Callable[[], str]) -> None:
        self.api = api
        self.recorder = Events(api, world, self.component)
        self.now = now

    def reconcile(self, snap: Snapshot) -> None:
        children: dict[str, list[Obj]] = defaultdict(list)
        for job in snap.jobs:
            ref = controller_ref(job)
            if ref and ref.get("kind") == "JobSet":
                children[ref.get("uid", "")].append(job)
        for i, js in enumerate(list(snap.jobsets)):
            if deleting(js):
                continue
            new = self._sync(snap, js, children.get(meta(js).get("uid", ""), []))
            if new is not None:
                snap.jobsets[i] = new

    def _child_job(self, js: Obj, rj: Obj, index: int, global_index: int, attempt: int) -> Obj:
        jm = meta(js)
        name = f"{jm['name']}-{rj['name']}-{index}"
        template = copy.deepcopy(rj.get("template") or {})
        extra = {
            JS_NAME: jm["name"],
            JS_RJOB: rj["name"],
            JS_RJOB_REPLICAS: str(rj.get("replicas", 1)),
            JS_JOB_INDEX: str(index),
            JS_GLOBAL_INDEX: str(global_index),
            JS_RESTART: str(attempt),
            JS_JOB_KEY: job_key(jm["namespace"], name),
        }
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        pod_template = spec.setdefault("template", {})
        pmeta = pod_template.setdefault("metadata", {})
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **extra}
        pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **extra}
        spec["suspend"] = bool((js.get("spec") or {}).get("suspend"))
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": jm["namespace"],
                "labels": {**(tmeta.get("labels") or {}), **extra},
                "annotations": {**(tmeta.get("annotations") or {}), **extra},
                "ownerReferences": [owner_ref(js, f"{JOBSET_GROUP}/{JOBSET_VERSION}", "JobSet")],
            },
            "spec": spec,
        }

    def _event(self, js: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        api_version = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
        self.recorder.event(js, reason, message, type_=type_,
                            api_version=api_version, kind="JobSet")  # fmt: skip

    def _delete_jobs(self, jobs: list[Obj]) -> None:
        from kubernetes import client

        body = client.V1DeleteOptions(propagation_policy="Background")
        for job in jobs:
            if deleting(job):
                continue
            ns, name = key(job)
            ignore_gone(self.api.batch.delete_namespaced_job, name, ns, body=body)

    def _failure_action(self, js: Obj, failed_job: Obj) -> str:
        policy = (js.get("spec") or {}).get("failurePolicy")
        if policy is None:
            return "FailJobSet"
        cond = condition(failed_job, "Failed") or {}
        rjob = labels(failed_job).get(JS_RJOB, "")
        for rule in policy.get("rules") or []:
            reasons = rule.get("onJobFailureReasons") or []
            targets = rule.get("targetReplicatedJobs") or []
            if reasons and cond.get("reason") not in reasons:
                continue
            if targets and rjob not in targets:
                continue
            return str(rule.get("action", "RestartJobSet"))
        return "RestartJobSet"

    def _sync(self, snap: Snapshot, js: Obj, children: list[Obj]) -> Obj | None:
        spec = js.get("spec") or {}
        old_status = js.get("status") or {}
        status = copy.deepcopy(old_status)
        conditions: list[Obj] = status.setdefault("conditions", [])
        now = self.now()
        restarts = int(status.get("restarts", 0))
        suspend = bool(spec.get("suspend"))
        rjobs = spec.get("replicatedJobs") or []
        ns, name = key(js)
        terminal = is_true(js, "Completed") or is_true(js, "Failed")

        stale = [j for j in children if int(labels(j).get(JS_RESTART, "0")) < restarts]
        self._delete_jobs(stale)
        current = [
            j
            for j in children
            if int(labels(j).get(JS_RESTART, "0")) == restarts and not deleting(j)
        ]

        if not terminal:
            failed = [j for j in current if is_true(j, "Failed")]
            if failed:
                action = self._failure_action(js, failed[0])
                policy = spec.get("failurePolicy") or {}
                counted = int(status.get("restartsCountTowardsMax", 0))
                ignore_max = action in ("RestartJobSetAndIgnoreMaxRestarts",)
                if action == "FailJobSet" or (
                    not ignore_max and counted >= int(policy.get("maxRestarts", 0) or 0)
                ):
                    if action == "FailJobSet" or not policy:
                        reason, msg = "FailedJobs", "jobset failed due to one or more job failures"
                    else:
                        reason = "ReachedMaxRestarts"
                        msg = "jobset failed due to reaching max number of restarts"
                    set_condition(conditions, "Failed", "True", reason, msg, now)
                    status["terminalState"] = "Failed"
                    self._delete_jobs([j for j in current if not is_true(j, "Failed")])
                    self._event(js, reason, msg, "Warning")
                    terminal = True
                else:
                    restarts += 1
                    status["restarts"] = restarts
                    if not ignore_max:
                        status["restartsCountTowardsMax"] = counted + 1
                    job_name = meta(failed[0]).get("name", "")
                    self._event(
                        js,
                        "Restarting",
                        f"restarting jobset {name} (attempt {restarts}): job {job_name} failed",
                        "Warning",
                    )
                    self._delete_jobs(current)
                    current = []

        if not terminal:
            existing = {meta(j).get("name") for j in children}
            blocking = (spec.get("failurePolicy") or {}).get("restartStrategy") == (
                "BlockingRecreate"
            )
            old_pods = blocking and any(
                int(labels(p).get(JS_RESTART, "0")) < restarts
                for p in snap.pods_of_jobset(ns, name)
            )
            global_index = 0
            for rj in rjobs:
                for index in range(int(rj.get("replicas", 1))):
                    child = f"{name}-{rj['name']}-{index}"
                    if child not in existing and not old_pods:
                        body = self._child_job(js, rj, index, global_index, restarts)
                        created = ignore_gone(
                            self.api.batch.create_namespaced_job, ns, body, _preload_content=False
                        )
                        if created is not None:
                            new_job = json.loads(created.data)
                            snap.jobs.append(new_job)
                            current.append(new_job)
                    global_index += 1
            current = [self._sync_suspend(js, rjobs, j, suspend, snap) for j in current]

        # status
        rj_status = []
        for rj in rjobs:
            mine = [j for j in current if labels(j).get(JS_RJOB) == rj["name"]]
            per_job = (((rj.get("template") or {}).get("spec")) or {}).get("parallelism", 1)
            rj_status.append(
                {
                    "name": rj["name"],
                    "ready": sum(
                        1
                        for j in mine
                        if int((j.get("status") or {}).get("ready", 0))
                        + int((j.get("status") or {}).get("succeeded", 0))
                        >= int(per_job or 0)
                        and not (j.get("spec") or {}).get("suspend")
                    ),
                    "succeeded": sum(1 for j in mine if is_true(j, "Complete")),
                    "failed": sum(1 for j in mine if is_true(j, "Failed")),
                    "active": sum(
                        1 for j in mine if int((j.get("status") or {}).get("active", 0)) > 0
                    ),
                    "suspended": sum(1 for j in mine if (j.get("spec") or {}).get("suspend")),
                }
            )
        status["replicatedJobsStatus"] = rj_status
        status.setdefault("restarts", 0)
        if not terminal:
            if suspend:
                if set_condition(conditions, "Suspended", "True", "SuspendedJobs",
                                 "jobset is suspended", now):  # fmt: skip
                    self._event(js, "SuspendedJobs", "jobset is suspended")
            elif condition(js, "Suspended") is not None and is_true(js, "Suspended"):
                set_condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed",
                              now)  # fmt: skip
                self._event(js, "ResumeJobs", "jobset is resumed")
            want = sum(int(rj.get("replicas", 1)) for rj in rjobs)
            done = sum(r["succeeded"] for r in rj_status)
            if want and done >= want:
                msg = "jobset completed successfully"
                set_condition(conditions, "Completed", "True", "AllJobsCompleted", msg, now)
                status["terminalState"] = "Completed"
                self._event(js, "AllJobsCompleted", msg)
        if not conditions:
            status.pop("conditions")
        if status == old_status:
            return None
        out = ignore_gone(lambda: self.api.patch_jobset_status(js, status))
        return dict(out) if out else None

    def _sync_suspend(
        self, js: Obj, rjobs: list[Obj], job: Obj, suspend: bool, snap: Snapshot
    ) -> Obj:
        jspec = job.get("spec") or {}
        if bool(jspec.get("suspend")) == suspend:
            return job
        new = copy.deepcopy(job)
        new["spec"]["suspend"] = suspend
        if not suspend:
            # As the JobSet controller does on resume: the child's pod template takes the
            # scheduling directives (and labels/annotations) Kueue put on the JobSet.
            rj = next((r for r in rjobs if r.get("name") == labels(job).get(JS_RJOB)), None)
            if rj is not None:
                src = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
                dst = new["spec"].setdefault("template", {})
                for fname in SCHEDULING_FIELDS:
                    value = (src.get("spec") or {}).get(fname)
                    if value is None:
                        dst.setdefault("spec", {}).pop(fname, None)
                    else:
                        dst.setdefault("spec", {})[fname] = copy.deepcopy(value)
                dmeta = dst.setdefault("metadata", {})
                for mname in ("labels", "annotations"):
                    merged = {**(dmeta.get(mname) or {}), **((src.get("metadata") or {}).get(mname)
                                                             or {})}  # fmt: skip
                    dmeta[mname] = merged
        ns, name = key(job)
        out = ignore_gone(
            lambda: self.api.batch.replace_namespaced_job(name, ns, new, _preload_content=False)
        )
        if out is None:
            return job
        fresh: Obj = json.loads(out.data)
        replace_in(snap.jobs, fresh)
        return fresh
