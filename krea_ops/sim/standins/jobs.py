"""The batch/v1 Job and JobSet controllers of the simulated world, and the client helpers
the Kueue, JobSet, Job and training actors share.

Like the real kube-controller-manager Job controller and the JobSet controller, they act
only through the API: a Job that is not suspended gets ``parallelism`` pods (Indexed Jobs
one per completion index, named ``<job>-<index>-<suffix>``, with the completion-index
label, annotation and ``JOB_COMPLETION_INDEX``, and the ``job-tracking`` finalizer); its
status counts active, ready, terminating, succeeded and failed pods (``podFailurePolicy``
applied) and carries the Suspended, Complete/SuccessCriteriaMet and Failed/FailureTarget
conditions with the real reasons. A JobSet gets one child Job per
replicated job and index (``<jobset>-<rjob>-<index>``, labelled like the real controller,
restart attempt included), suspends and resumes them with itself (copying its pod
template's scheduling directives on resume, as the JobSet controller does for Kueue), and
when a child Job fails it applies ``failurePolicy``: the whole JobSet restarts (all child
Jobs deleted and created again with ``restart-attempt`` + 1) until ``maxRestarts`` is used
up, then fails, or as its rules say.

The controllers are phases of the Kueue actor's tick (see ``kueue.py``): they read one
``Snapshot`` listed once per tick and write only what changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from krea_ops.sim.common.actor import World
from krea_ops.sim.common.api import Events
from krea_ops.sim.common.jobapi import (
    COMPLETION_INDEX,
    JOB_TRACKING_FINALIZER,
    JOB_UID,
    JOBSET_GROUP,
    JOBSET_VERSION,
    JS_GLOBAL_INDEX,
    JS_JOB_INDEX,
    JS_JOB_KEY,
    JS_NAME,
    JS_RESTART,
    JS_RJOB,
    JS_RJOB_REPLICAS,
    JobApi,
    Obj,
    annots,
    condition,
    controller_ref,
    deleting,
    ignore_gone,
    is_true,
    key,
    labels,
    meta,
    owner_ref,
    phase,
    pod_ready,
    set_condition,
)

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


def _parse_indexes(text: str | None) -> set[int]:
    """The inverse of ``_compress_indexes``."""
    out: set[int] = set()
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return out


def _merge_diff(old: Obj, new: Obj) -> Obj:
    """The JSON merge patch that turns ``old`` into ``new`` (keys gone become null, maps
    are patched key by key, anything else is replaced)."""
    patch: Obj = {k: None for k in old if k not in new}
    for k, v in new.items():
        before = old.get(k)
        if isinstance(v, dict) and isinstance(before, dict):
            if v != before:
                patch[k] = _merge_diff(before, v)
        elif v != before or k not in old:
            patch[k] = v
    return patch


def has_finalizer(pod: Obj) -> bool:
    return JOB_TRACKING_FINALIZER in (meta(pod).get("finalizers") or [])


def terminal(pod: Obj) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def only_replace_failed(job: Obj) -> bool:
    """onlyReplaceFailedPods: a terminating pod is replaced once it has failed, not before."""
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def pod_failed(pod: Obj, job: Obj) -> bool:
    """isPodFailed (pkg/controller/job/job_controller.go): phase Failed; without a pod
    failure policy (and unless only failed pods are replaced) a pod being deleted that has
    not succeeded counts as failed at once, "to account for orphan Pods that never have a
    chance to reach the Failed phase"."""
    if phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return deleting(pod) and phase(pod) != "Succeeded"


def _exit_code_matches(code: int, requirement: Obj) -> bool:
    values = {int(v) for v in requirement.get("values") or []}
    op = requirement.get("operator")
    if op == "In":
        return code in values
    if op == "NotIn":
        return code not in values
    return False


def _matching_container(pod: Obj, requirement: Obj) -> tuple[str, int] | None:
    """matchOnExitCodes: the first terminated container (then init container) with a
    non-zero exit code the requirement matches."""
    status = pod.get("status") or {}
    wanted = requirement.get("containerName")
    for key_ in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key_) or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if not terminated:
                continue
            if wanted is not None and wanted != cs.get("name"):
                continue
            code = int(terminated.get("exitCode", 0) or 0)
            if code != 0 and _exit_code_matches(code, requirement):
                return str(cs.get("name")), code
    return None


def _matching_condition(pod: Obj, patterns: list[Obj]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        for pattern in patterns:
            if cond.get("type") == pattern.get("type") and cond.get("status") == pattern.get(
                "status", "True"
            ):
                return str(cond.get("type"))
    return None


def match_pod_failure_policy(job: Obj, pod: Obj) -> tuple[str | None, bool, str | None]:
    """matchPodFailurePolicy (pkg/controller/job/pod_failure_policy.go): ``(FailJob
    message or None, whether the failure counts towards backoffLimit, matched action)``;
    the first matching rule wins. ``FailIndex`` (backoffLimitPerIndex) is not simulated:
    a rule with it is skipped, as upstream skips an action it does not know."""
    policy = (job.get("spec") or {}).get("podFailurePolicy")
    if not policy:
        return None, True, None
    ns, name = key(pod)
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            hit = _matching_container(pod, rule["onExitCodes"])
            if hit is None:
                continue
            what = f"Container {hit[0]} for pod {ns}/{name} failed with exit code {hit[1]}"
        elif rule.get("onPodConditions") is not None:
            ctype = _matching_condition(pod, rule["onPodConditions"])
            if ctype is None:
                continue
            what = f"Pod {ns}/{name} has condition {ctype}"
        else:
            continue
        if action == "Ignore":
            return None, False, action
        if action == "Count":
            return None, True, action
        if action == "FailJob":
            return f"{what} matching FailJob rule at index {index}", True, action
    return None, True, None


class JobController:
    """batch/v1 Jobs: pods, status and conditions like the kube-controller-manager's.

    Pod tracking with finalizers, as pkg/controller/job/job_controller.go does it: every
    pod is created with the ``batch.kubernetes.io/job-tracking`` finalizer, so a pod that
    ends (or is deleted: evicted, drained) stays until the controller has counted it. A
    finished pod goes into ``status.uncountedTerminatedPods`` first, then its finalizer is
    removed, then it moves into ``status.succeeded``/``status.failed`` -- pods an ``Ignore``
    rule of ``spec.podFailurePolicy`` matches are never counted. A Job that fails (more
    failed pods than ``spec.backoffLimit``, or a ``FailJob`` rule) gets the interim
    ``FailureTarget`` condition at once, its other pods are deleted (and counted as
    failed), and ``Failed`` with the same reason and message once none of its pods is
    still terminating (the delayed terminal condition of Kubernetes 1.31+).

    Not simulated: the exponential back-off before a failed pod is replaced,
    ``backoffLimitPerIndex``/``FailIndex``, ``activeDeadlineSeconds``, successPolicy."""

    component = "job-controller"

    def __init__(self, api: JobApi, world: World, now: Callable[[], str]) -> None:
        self.api = api
        self.recorder = Events(api, world, self.component)
        self.now = now
        # finalizerExpectations: pods whose finalizer we removed, so a pod list older than
        # the removal does not count them twice
        self._removed: set[str] = set()

    def reconcile(self, snap: Snapshot, held: Callable[[Obj], bool]) -> None:
        """``held(job)``: Kueue has not admitted this Job's workload (treat as suspended)."""
        by_job = snap.pods_of_job()
        listed = {str(meta(p).get("uid")) for p in snap.job_pods}
        self._removed &= listed
        jobs = {meta(j).get("uid", "") for j in snap.jobs}
        for i, job in enumerate(list(snap.jobs)):
            pods = by_job.get(meta(job).get("uid", ""), [])
            if deleting(job):
                # canRemoveFinalizer: a Job being deleted lets all its pods go
                self._remove_finalizers([p for p in pods if has_finalizer(p)])
                continue
            new = self._sync(job, pods, held(job))
            if new is not None:
                snap.jobs[i] = new
        # the orphan worker: pods whose Job is gone keep no tracking finalizer
        orphans = [
            p
            for uid, pods in by_job.items()
            if uid not in jobs
            for p in pods
            if has_finalizer(p)
        ]
        self._remove_finalizers(orphans)

    def _remove_finalizers(self, pods: list[Obj]) -> list[str]:
        """removeTrackingFinalizerFromPods; returns the uids it succeeded for (a pod that
        is already gone counts as done)."""
        from kubernetes.client.rest import ApiException

        done = []
        for pod in pods:
            uid = str(meta(pod).get("uid"))
            if uid in self._removed:
                done.append(uid)
                continue
            ns, name = key(pod)
            patch = {
                "metadata": {"$deleteFromPrimitiveList/finalizers": [JOB_TRACKING_FINALIZER]}
            }
            self.api.wrote_pods()
            try:
                self.api.core.patch_namespaced_pod(
                    name,
                    ns,
                    patch,
                    _content_type="application/strategic-merge-patch+json",
                    _preload_content=False,
                )
            except ApiException as exc:
                if exc.status != 404:
                    continue
            self._removed.add(uid)
            done.append(uid)
        return done

    def _delete_pods(self, pods: list[Obj], *, release: bool = False) -> None:
        """deleteActivePods (finalizers kept: the pods are counted once terminated) or, with
        ``release``, deleteJobPods (finalizer removed first: a suspended Job's pods are not
        counted as failed)."""
        if release:
            self._remove_finalizers([p for p in pods if has_finalizer(p)])
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
                "finalizers": [JOB_TRACKING_FINALIZER],
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

    def _patch_status(self, job: Obj, old_status: Obj, status: Obj) -> Obj | None:
        patch = _merge_diff(old_status, status)
        ns, name = key(job)
        out = ignore_gone(
            lambda: self.api.batch.patch_namespaced_job_status(
                name, ns, {"status": patch}, _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )  # fmt: skip
        return None if out is None else dict(json.loads(out.data))

    def _sync(self, job: Obj, pods: list[Obj], held: bool) -> Obj | None:
        spec = job.get("spec") or {}
        old_status = job.get("status") or {}
        status = copy.deepcopy(old_status)
        conditions: list[Obj] = status.setdefault("conditions", [])
        now = self.now()
        if is_true(job, "Complete") or is_true(job, "Failed"):
            return None  # IsJobFinished: nothing more to do
        parallelism = int(spec.get("parallelism", 1) or 0)
        completions = int(spec.get("completions", 1) or 1)
        backoff = int(spec.get("backoffLimit", 6))
        suspended = bool(spec.get("suspend"))
        if held and not suspended:
            return None  # Kueue has not admitted it: no pods until it does
        indexed = _indexed(job)
        # pods whose finalizer we removed are counted already, whatever this list says
        tracked = [
            p for p in pods if has_finalizer(p) and str(meta(p).get("uid")) not in self._removed
        ]
        uncounted = status.get("uncountedTerminatedPods") or {}
        unc_failed = list(uncounted.get("failed") or [])
        unc_succeeded = list(uncounted.get("succeeded") or [])
        active = [p for p in pods if not terminal(p) and not deleting(p)]
        terminating = [p for p in pods if not terminal(p) and deleting(p)]
        events: list[tuple[str, str, str]] = []

        def valid_index(pod: Obj) -> bool:
            ix = _index_of(pod)
            return not indexed or (ix is not None and 0 <= ix < completions)

        new_failed = [
            p
            for p in tracked
            if str(meta(p).get("uid")) not in unc_failed and pod_failed(p, job) and valid_index(p)
        ]
        failed_total = (
            int(status.get("failed", 0))
            + sum(1 for p in new_failed if match_pod_failure_policy(job, p)[1])
            + len(unc_failed)
        )
        completed = _parse_indexes(status.get("completedIndexes")) if indexed else set()
        if indexed:
            completed |= {
                i
                for p in pods
                if phase(p) == "Succeeded" and (i := _index_of(p)) is not None and i < completions
            }
            succeeded_total = len(completed)
        else:
            succeeded_total = (
                int(status.get("succeeded", 0))
                + len(unc_succeeded)
                + sum(
                    1
                    for p in tracked
                    if phase(p) == "Succeeded" and str(meta(p).get("uid")) not in unc_succeeded
                )
            )

        # the finished condition, as syncJob decides it
        finished: tuple[str, str] | None = None  # (reason, message) of a failure
        target = condition(job, "FailureTarget")
        if target is not None and target.get("status") == "True":
            finished = (str(target.get("reason", "")), str(target.get("message", "")))
        elif spec.get("podFailurePolicy"):
            for p in pods:
                if pod_failed(p, job):
                    message = match_pod_failure_policy(job, p)[0]
                    if message is not None:
                        finished = ("PodFailurePolicy", message)
                        break
        if finished is None and failed_total > backoff:
            finished = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        success = False

        if finished is not None:
            self._delete_pods(active)  # deleteActivePods: finalizers kept, counted below
            terminating += active
            active = []
            if target is None:
                # the interim FailureTarget, written before any finalizer is removed
                set_condition(conditions, "FailureTarget", "True", finished[0], finished[1],
                              now, probe=True)  # fmt: skip
        elif suspended:
            # manageJob on a suspended Job: deleteJobPods, finalizers removed first, so the
            # pods are not counted as failures
            self._delete_pods(active, release=True)
            active = []
            if set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended", now,
                             probe=True):  # fmt: skip
                events.append(("Normal", "Suspended", "Job suspended"))
            status.pop("startTime", None)
        else:
            if condition(job, "Suspended") and is_true(job, "Suspended"):
                set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed", now,
                              probe=True)  # fmt: skip
                events.append(("Normal", "Resumed", "Job resumed"))
                status["startTime"] = now
            status.setdefault("startTime", now)
            want = max(min(completions - succeeded_total, parallelism), 0)
            waiting = len(terminating) if only_replace_failed(job) else 0
            room = want - waiting - len(active)
            excess = len(active) - want
            if excess > 0:
                # manageJob's activePodsForRemoval: pods of an index already done go first;
                # deleteJobPods releases them uncounted
                active.sort(key=lambda p: _index_of(p) not in completed if indexed else True)
                self._delete_pods(active[:excess], release=True)
                terminating += active[:excess]
                active = active[excess:]
            elif indexed:
                busy = {i for p in active if (i := _index_of(p)) is not None}
                if only_replace_failed(job):
                    busy |= {i for p in terminating if (i := _index_of(p)) is not None}
                for index in range(completions):
                    if room <= 0:
                        break
                    if index in completed or index in busy:
                        continue
                    if self._create_pod(job, index) is not None:
                        room -= 1
            else:
                for _ in range(max(room, 0)):
                    self._create_pod(job, None)
            success = succeeded_total >= completions and not active

        # trackJobStatusAndRemoveFinalizers
        release: list[Obj] = []
        for p in tracked:
            uid = str(meta(p).get("uid"))
            failed_now = pod_failed(p, job)
            if not (finished is not None or success or phase(p) == "Succeeded" or failed_now):
                continue  # canRemoveFinalizer: still running
            release.append(p)
            if phase(p) == "Succeeded" and uid not in unc_failed:
                if not indexed and uid not in unc_succeeded:
                    unc_succeeded.append(uid)
            elif (
                (failed_now or finished is not None)
                and uid not in unc_failed
                and valid_index(p)
                and match_pod_failure_policy(job, p)[1]  # an Ignore rule: never counted
            ):
                unc_failed.append(uid)
        if indexed:
            status["completedIndexes"] = _compress_indexes(completed)
            status["succeeded"] = len(completed)
        status["uncountedTerminatedPods"] = {
            k: v for k, v in (("succeeded", unc_succeeded), ("failed", unc_failed)) if v
        }
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if pod_ready(p))
        status["terminating"] = len(terminating)
        for field_name in ("active", "succeeded", "failed"):
            if not status.get(field_name) and field_name not in old_status:
                status.pop(field_name, None)
        if not conditions:
            status.pop("conditions")
        current = job
        if status != old_status:
            # flush: the uncounted pods (and FailureTarget) are on record before the
            # finalizers that hold their pods go
            current = self._patch_status(job, old_status, status) or job
            old_status, status = status, copy.deepcopy(status)
        conditions = status.setdefault("conditions", [])
        removed = set(self._remove_finalizers(release))
        # cleanUncountedPodsWithoutFinalizers: what lost its finalizer moves into the counts
        with_finalizer = {str(meta(p).get("uid")) for p in tracked} - removed
        still_failed = [u for u in unc_failed if u in with_finalizer]
        still_succeeded = [u for u in unc_succeeded if u in with_finalizer]
        status["failed"] = int(status.get("failed", 0)) + len(unc_failed) - len(still_failed)
        if not indexed:
            status["succeeded"] = (
                int(status.get("succeeded", 0)) + len(unc_succeeded) - len(still_succeeded)
            )
        status["uncountedTerminatedPods"] = {
            k: v for k, v in (("succeeded", still_succeeded), ("failed", still_failed)) if v
        }
        for field_name in ("succeeded", "failed"):
            if not status.get(field_name) and field_name not in old_status:
                status.pop(field_name, None)
        # enactJobFinished: the terminal condition once nothing is uncounted or terminating
        settled = not still_failed and not still_succeeded and not terminating
        if finished is not None and settled:
            set_condition(conditions, "Failed", "True", finished[0], finished[1], now,
                          probe=True)  # fmt: skip
            events.append(("Warning", finished[0], finished[1]))
        elif success and settled:
            msg = "Reached expected number of succeeded pods"
            set_condition(conditions, "SuccessCriteriaMet", "True", "CompletionsReached", msg,
                          now, probe=True)  # fmt: skip
            set_condition(conditions, "Complete", "True", "CompletionsReached", msg, now,
                          probe=True)  # fmt: skip
            status["completionTime"] = now
            events.append(("Normal", "Completed", "Job completed"))
        if not conditions:
            status.pop("conditions")
        for reason_type, reason, message in events:
            self.recorder.event(job, reason, message,
                                type_=reason_type, api_version="batch/v1", kind="Job")  # fmt: skip
        if status == old_status:
            return current if current is not job else None
        return self._patch_status(job, old_status, status) or current


# -- the JobSet controller -------------------------------------------------------------


def _regex_search(pattern: str, text: str) -> bool:
    """Go's regexp.MatchString: the pattern anywhere in the text; an invalid one never
    matches."""
    import re

    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def job_key(ns: str, name: str) -> str:
    return hashlib.sha1(f"{ns}/{name}".encode()).hexdigest()


SCHEDULING_FIELDS = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


class JobSetController:
    """jobset.x-k8s.io/v1alpha2 JobSets: child Jobs, suspension, restarts, status."""

    component = "jobset-controller"

    def __init__(self, api: JobApi, world: World, now: Callable[[], str]) -> None:
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
        """deleteJobs: foreground deletion, so a Job goes only after its pods have."""
        from kubernetes import client

        body = client.V1DeleteOptions(propagation_policy="Foreground")
        for job in jobs:
            if deleting(job):
                continue
            ns, name = key(job)
            ignore_gone(self.api.batch.delete_namespaced_job, name, ns, body=body)

    @staticmethod
    def _failed_at(job: Obj) -> str:
        return str((condition(job, "Failed") or {}).get("lastTransitionTime") or "")

    def _failure_rule(self, js: Obj, failed: list[Obj]) -> tuple[Obj | None, str, Obj]:
        """findFirstFailedPolicyRuleAndJob (pkg/controllers/failure_policy.go): the first
        rule (in order) that some failed child Job matches -- by its Failed condition's
        reason (``onJobFailureReasons``), message (``onJobFailureMessagePatterns``, regular
        expressions) and replicated job (``targetReplicatedJobs``) -- with the earliest
        failed such Job; no rule: the earliest failed Job. Returns (rule, its name, job)."""
        policy = (js.get("spec") or {}).get("failurePolicy") or {}
        ordered = sorted(failed, key=self._failed_at)
        for index, rule in enumerate(policy.get("rules") or []):
            reasons = rule.get("onJobFailureReasons") or []
            patterns = rule.get("onJobFailureMessagePatterns") or []
            targets = rule.get("targetReplicatedJobs") or []
            for job in ordered:
                cond = condition(job, "Failed") or {}
                if reasons and cond.get("reason") not in reasons:
                    continue
                if patterns and not any(
                    _regex_search(p, str(cond.get("message", ""))) for p in patterns
                ):
                    continue
                rjob = labels(job).get(JS_RJOB, "")
                if not rjob or (targets and rjob not in targets):
                    continue
                return rule, str(rule.get("name") or f"failurePolicyRule{index}"), job
        return None, "", ordered[0]

    def _apply_failure_policy(
        self, js: Obj, status: Obj, conditions: list[Obj], failed: list[Obj], now: str
    ) -> bool:
        """executeFailurePolicy (pkg/controllers/failure_policy.go), with the reasons and
        messages of pkg/constants/constants.go. Returns whether the JobSet failed.

        No failurePolicy: Failed ``FailedJobs``. A ``FailJobSet`` rule: Failed
        ``FailJobSetFailurePolicyAction``. ``RestartJobSet`` (also when no rule matches):
        Failed ``ReachedMaxRestarts`` once ``restartsCountTowardsMax`` has reached
        ``maxRestarts``, else ``restarts`` and ``restartsCountTowardsMax`` + 1 and the
        ``RestartingJobSet`` condition; ``RestartJobSetAndIgnoreMaxRestarts``: ``restarts``
        + 1 only. ``RestartJob``/``RestartJobAndIgnoreMaxRestarts`` need the alpha feature
        gate ``RestartJob`` (off by default): the real controller then fails the reconcile
        and does nothing, and so does this one."""
        policy = (js.get("spec") or {}).get("failurePolicy")

        def fail(reason: str, base: str, job: Obj) -> bool:
            msg = f"{base} (first failed job: {meta(job).get('name')})"
            if set_condition(conditions, "Failed", "True", reason, msg, now):
                self._event(js, reason, msg, "Warning")
            if condition({"status": status}, "RestartingJobSet") is not None:
                set_condition(conditions, "RestartingJobSet", "False", "JobSetFailed",
                              "jobset failed", now)  # fmt: skip
            status["terminalState"] = "Failed"
            return True

        if policy is None:
            first = sorted(failed, key=self._failed_at)[0]
            return fail("FailedJobs", "jobset failed due to one or more job failures", first)
        rule, rule_name, job = self._failure_rule(js, failed)
        action = str(rule.get("action", "RestartJobSet")) if rule else "RestartJobSet"
        if action == "FailJobSet":
            return fail("FailJobSetFailurePolicyAction",
                        "applying FailJobSet failure policy action", job)  # fmt: skip
        counted = int(status.get("restartsCountTowardsMax", 0))
        if action == "RestartJobSet":
            if counted >= int(policy.get("maxRestarts", 0) or 0):
                base = "jobset failed due to reaching max number of restarts"
                return fail("ReachedMaxRestarts", base, job)
            event_reason = "RestartJobSetFailurePolicyAction"
        elif action == "RestartJobSetAndIgnoreMaxRestarts":
            event_reason = "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
        else:
            return False  # RestartJob*: behind a feature gate that is off
        message = (
            f"applying {action} failure policy action (first failed job: {meta(job).get('name')})"
        )
        status["restarts"] = int(status.get("restarts", 0)) + 1
        if action == "RestartJobSet":
            status["restartsCountTowardsMax"] = counted + 1
        self._event(js, event_reason, message, "Warning")
        reason = f"FailurePolicy_{rule_name}" if rule else "DefaultFailurePolicy"
        if set_condition(conditions, "RestartingJobSet", "True", reason, message, now):
            self._event(js, reason, message, "Warning")
        return False

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
                terminal = self._apply_failure_policy(js, status, conditions, failed, now)
                if terminal:
                    self._delete_jobs([j for j in current if not is_true(j, "Failed")])
                restarts = int(status.get("restarts", 0))
                if restarts != int(old_status.get("restarts", 0)):
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
        all_ready = all(
            r["ready"] >= int(rj.get("replicas", 1)) for r, rj in zip(rj_status, rjobs, strict=True)
        )
        restarting = is_true({"status": status}, "RestartingJobSet")
        if not terminal and not suspend and all_ready and restarting:
            # setRestartingConditionFalse once every child Job is ready again
            msg = "all jobs are ready"
            set_condition(conditions, "RestartingJobSet", "False", "JobsReady", msg, now)
            self._event(js, "JobsReady", msg)
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
