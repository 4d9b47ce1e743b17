"""``nodes validate``: the plan that starts a validation Job on each node, the reading of a
finished Job into a result, and the plan that records that result on the node.

Starting (``build_validate``, pure over ``ValidateInputs``): one CREATE of the Job
(``krea_ops.validation.job_manifest``) and one Event ``ValidationStarted`` per node. The
preflight refuses, with the reason and nothing changed:

* a node that does not exist, is virtual, has no GPUs, or is not Ready (no kubelet
  would run the Job);
* a node that holds a training's pods: validation never runs beside a gang (evict it
  first, or let the training end);
* a node whose GPUs other pods still use: the validation needs all of them (evict it
  first);
* more validations at once than the share allows (``validation_share`` of the GPU nodes,
  at least one), counting those running;
* a cluster without the ``krea-ops-validation`` PriorityClass (``deploy/controllers``).

A node whose validation is already running gets no new Job: the plan says so and the
caller waits for the running one (an idempotent re-run).

Recording (``build_record``, pure): one read-modify-write of the node with the
``resourceVersion`` read: the ``krea.ai/validation`` annotation (the result as JSON), the
``krea.ai/needs-repair`` label (the failing checks) set on a failure and removed on a pass,
and on a pass the pending-validation taint removed; then an Event ``ValidationPassed``
(Normal) or ``ValidationFailed`` (Warning) with the summary. A result already recorded
(the annotation names the same Job) changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.rules import is_deleting, is_ready, is_terminal, owned_by
from krea_ops.kube.rules import meta as _meta
from krea_ops.kube.writes import RemoveTaint, SetAnnotations, SetLabels
from krea_ops.runbook.nodes import gang_of, node_event, read_nodes, update_step
from krea_ops.runbook.plan import Call, Finding, FindingSeverity, Plan, Step, StepKind
from krea_ops.validation import (
    APP,
    APP_LABEL,
    NEEDS_REPAIR_LABEL,
    NODE_ANNOTATION,
    PENDING_TAINT_EFFECT,
    PENDING_TAINT_KEY,
    PRIORITY_CLASS,
    RESULT_ANNOTATION,
    Baselines,
    Check,
    Validation,
    ValidationSpec,
    check_level,
    job_manifest,
    judge,
    needs_repair_value,
    pool_baselines,
)

Obj = dict[str, Any]
POOL_LABEL = "krea.ai/pool"
SELECTOR = f"{APP_LABEL}={APP}"


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs"


def job_node(job: Obj) -> str | None:
    return (_meta(job).get("annotations") or {}).get(NODE_ANNOTATION)


def job_key(job: Obj) -> str:
    return f"{_meta(job).get('namespace')}/{_meta(job).get('name')}"


def job_finished(job: Obj) -> str | None:
    """``Complete`` or ``Failed`` (with its reason) for a finished Job, None while it runs."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            reason = cond.get("reason")
            return str(cond["type"]) + (f" ({reason})" if reason else "")
    return None


def running_validations(jobs: Sequence[Obj]) -> dict[str, Obj]:
    """Node -> its validation Job still running (not finished, not being deleted)."""
    out: dict[str, Obj] = {}
    for job in jobs:
        node = job_node(job)
        if node and job_finished(job) is None and not is_deleting(job):
            out[node] = job
    return out


def list_validation_jobs(cluster: Cluster, namespace: str) -> list[Obj]:
    return cluster.list_all("validation jobs", jobs_path(namespace), labelSelector=SELECTOR)


@dataclass(frozen=True)
class ValidateInputs:
    """What the plan is made from: the named nodes as read, the pods on each, the
    validation Jobs, how many GPU nodes there are, and whether the PriorityClass exists."""

    nodes: Mapping[str, Obj]
    pods: Mapping[str, Sequence[Obj]]
    jobs: Sequence[Obj]
    gpu_nodes: int
    priority_class: bool


def read_validate(cluster: Cluster, names: Sequence[str], spec: ValidationSpec) -> ValidateInputs:
    nodes = read_nodes(cluster, names)
    pods = {
        n: cluster.list_all(f"pods on node {n}", "/api/v1/pods", fieldSelector=f"spec.nodeName={n}")
        for n in nodes
    }
    jobs = list_validation_jobs(cluster, spec.namespace)
    gpu_nodes = sum(1 for n in cluster.nodes() if not n.virtual and (n.gpu_capacity or 0) > 0)
    return ValidateInputs(nodes, pods, jobs, gpu_nodes, priority_class_exists(cluster))


def priority_class_exists(cluster: Cluster) -> bool:
    """Whether the validation Jobs' PriorityClass is there (a pod naming a missing one is
    refused at admission, so its Job would never run)."""
    what = f"get priorityclass {PRIORITY_CLASS}"
    path = f"/apis/scheduling.k8s.io/v1/priorityclasses/{PRIORITY_CLASS}"
    answer = cluster.request(what, "GET", path)
    if not answer.ok and answer.status != 404:
        raise cluster.refusal(what, answer)
    return answer.ok


def _gpus(obj: Obj) -> int:
    raw = ((obj.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


def _pod_gpus(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or ():
        res = c.get("resources") or {}
        raw = (res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get(
            "nvidia.com/gpu"
        )
        with contextlib.suppress(ValueError):
            total += int(str(raw)) if raw is not None else 0
    return total


def _virtual(obj: Obj) -> bool:
    return (_meta(obj).get("labels") or {}).get("type") == "virtual-kubelet"


def blockers(name: str, obj: Obj, pods: Sequence[Obj]) -> str | None:
    """Why a validation must not start on this node now, or None."""
    if _virtual(obj):
        return f"node {name} is a virtual node: there is no hardware to validate"
    if _gpus(obj) <= 0:
        return f"node {name} has no GPUs"
    if not is_ready(obj):
        return f"node {name} is not Ready: its kubelet would not run the validation"
    live = [p for p in pods if not is_terminal(p)]
    gangs = sorted({"/".join(g) for p in live if (g := gang_of(p)) is not None})
    if gangs:
        return (
            f"node {name} holds pods of training {', '.join(gangs)}: validation never runs "
            "beside a gang (evict the node first, or wait for the training to end)"
        )
    users = [
        f"{_meta(p).get('namespace')}/{_meta(p).get('name')}"
        for p in live
        if _pod_gpus(p) > 0 and (_meta(p).get("labels") or {}).get(APP_LABEL) != APP
    ]
    if users:
        more = f" and {len(users) - 3} more" if len(users) > 3 else ""
        return (
            f"node {name} has pods using its GPUs ({', '.join(users[:3])}{more}): the "
            "validation needs all of them (evict the node first)"
        )
    return None


def build_validate(
    inputs: ValidateInputs,
    names: Sequence[str],
    level: str,
    spec: ValidationSpec,
    *,
    user: str,
    reason: str | None,
    now: float,
) -> Plan:
    """The plan of ``nodes validate`` (see the module); ``options["jobs"]``: node -> the
    Job (namespace/name) to wait for, new or already running."""
    check_level(level)
    nodes = tuple(dict.fromkeys(names))
    refused = [b for n in nodes if (b := blockers(n, inputs.nodes[n], inputs.pods.get(n, ())))]
    if refused:
        raise BadInput("; ".join(refused) + "; nothing was changed")
    if not inputs.priority_class:
        raise BadInput(
            f"PriorityClass {PRIORITY_CLASS} does not exist: apply deploy/controllers "
            "(validation.yaml) first; nothing was changed"
        )
    running = running_validations(inputs.jobs)
    steps: list[Step] = []
    findings: list[Finding] = []
    jobs: dict[str, str] = {}
    new = [n for n in nodes if n not in running]
    allowed = spec.at_once(inputs.gpu_nodes)
    busy = len(running)
    plan_refused = None
    if new and busy + len(new) > allowed:
        plan_refused = (
            f"validating {len(new)} more node(s) with {busy} running would exceed "
            f"validation_share ({spec.share:.0%} of {inputs.gpu_nodes} GPU nodes: {allowed} "
            f"at once): validate at most {max(0, allowed - busy)} now"
        )
    for name in nodes:
        if name in running:
            jobs[name] = job_key(running[name])
            findings.append(
                Finding(
                    "already",
                    FindingSeverity.INFO,
                    f"node {name}: validation {jobs[name]} is already running; waiting for it",
                    name,
                )
            )
            continue
        obj = inputs.nodes[name]
        manifest = job_manifest(name, level, _gpus(obj), spec, user=user, reason=reason, now=now)
        meta = manifest["metadata"]
        jobs[name] = f"{meta['namespace']}/{meta['name']}"
        about = f"job {jobs[name]}"
        call = Call(
            "POST",
            jobs_path(spec.namespace),
            about,
            f"validate node {name} ({level}): DCGM diagnostics, NCCL all-reduce"
            + (", InfiniBand bandwidth" if level == "full" else ""),
            manifest,
        )
        steps.append(Step(StepKind.CREATE, f"create Job {jobs[name]}", (call,), node=name))
        note = f"validation {level} started by {user} (Job {jobs[name]})"
        note += f": {reason}" if reason else ""
        steps.append(node_event(name, obj, "Validate", "ValidationStarted", note))
    return Plan(
        action="nodes validate",
        nodes=nodes,
        reason=reason,
        user=user,
        steps=tuple(steps),
        findings=tuple(findings),
        options={"level": level, "jobs": jobs},
        refused=plan_refused,
    )


# -- the result ------------------------------------------------------------------------------


def pool_results(nodes: Sequence[Any], pool: str | None, but: str) -> list[Validation]:
    """The latest validation of each other node of the pool (``NodeInfo`` objects)."""
    out = []
    for n in nodes:
        if n.name == but or n.labels.get(POOL_LABEL) != pool:
            continue
        v = Validation.from_annotation(n.name, n.annotations.get(RESULT_ANNOTATION))
        if v is not None:
            out.append(v)
    return out


def job_pod(pods: Sequence[Obj], job: Obj) -> Obj | None:
    """The Job's pod (owned by its UID), the newest if there are several."""
    uid = _meta(job).get("uid")
    mine = [p for p in pods if owned_by(p, uid)]
    mine.sort(key=lambda p: str(_meta(p).get("creationTimestamp") or ""))
    return mine[-1] if mine else None


def outcome(
    job: Obj,
    pod: Obj | None,
    log: Sequence[str] | None,
    baselines: Baselines,
    spec: ValidationSpec,
    *,
    at: float,
) -> Validation:
    """A finished Job's result: its pod's log judged; a Job that ended without a log
    (never scheduled, cut by its deadline before the checks printed) fails with why."""
    node = job_node(job) or "?"
    level = (_meta(job).get("labels") or {}).get("krea.ai/validation-level", "?")
    by = (_meta(job).get("annotations") or {}).get("krea.ai/requested-by")
    if log:
        return judge(node, level, "\n".join(log), baselines, spec, at=at, job=job_key(job), by=by)
    finished = job_finished(job) or "unfinished"
    phase = (pod.get("status") or {}).get("phase") if pod else None
    why = f"Job {finished} with no log" + (f" (pod {phase})" if phase else " (no pod ran)")
    return Validation(node, level, at, (Check("job", False, why),), job_key(job), by)


def build_record(obj: Obj, v: Validation, *, user: str) -> Plan:
    """The plan that records ``v`` on its node (see the module); no steps when this Job's
    result is already there."""
    name = v.node
    annotations = _meta(obj).get("annotations") or {}
    recorded = Validation.from_annotation(name, annotations.get(RESULT_ANNOTATION))
    steps: list[Step] = []
    findings: list[Finding] = []
    if recorded is not None and v.job and recorded.job == v.job:
        findings.append(
            Finding("already", FindingSeverity.INFO, f"node {name}: {v.job} already recorded", name)
        )
    else:
        edits: tuple[Any, ...] = (
            SetAnnotations({RESULT_ANNOTATION: v.annotation()}),
            SetLabels({NEEDS_REPAIR_LABEL: None if v.passed else needs_repair_value(v)}),
        )
        if v.passed:
            edits += (RemoveTaint(PENDING_TAINT_KEY, PENDING_TAINT_EFFECT),)
        step = update_step(name, obj, edits, f"record validation {v.job or ''} ({v.result})")
        if step is not None:
            steps.append(step)
        reason = "ValidationPassed" if v.passed else "ValidationFailed"
        steps.append(
            node_event(name, obj, "Validate", reason, v.summary()[:1000], warning=not v.passed)
        )
    return Plan(
        action="nodes validate record",
        nodes=(name,),
        reason=v.summary()[:200],
        user=user,
        steps=tuple(steps),
        findings=tuple(findings),
        options={"job": v.job, "result": v.result},
    )


@dataclass
class Waiting:
    """What a wait for validations found: results judged, and Jobs still running."""

    done: dict[str, Validation] = field(default_factory=dict)
    running: dict[str, str] = field(default_factory=dict)  # node -> what its pod is doing


def read_finished(
    cluster: Cluster,
    spec: ValidationSpec,
    wanted: Mapping[str, str],
    now: float,
    *,
    jobs_read: Sequence[Obj] | None = None,
    nodes_read: Sequence[Any] | None = None,
) -> Waiting:
    """One look at the Jobs ``wanted`` (node -> namespace/name): each finished one judged
    from its pod's log against its pool's baselines. ``jobs_read``/``nodes_read``: the
    validation Jobs and the nodes (``NodeInfo``) the caller has just listed, not listed
    again."""
    listed = list_validation_jobs(cluster, spec.namespace) if jobs_read is None else jobs_read
    jobs = {job_key(j): j for j in listed}
    pods = cluster.list_all("validation pods", f"/api/v1/namespaces/{quote(spec.namespace)}/pods",
                 labelSelector=SELECTOR)  # fmt: skip
    infos = cluster.nodes() if nodes_read is None else nodes_read
    pool_of = {n.name: n.labels.get(POOL_LABEL) for n in infos}
    out = Waiting()
    for node, key in wanted.items():
        job = jobs.get(key)
        if job is None:
            out.done[node] = Validation(
                node, "?", now, (Check("job", False, f"Job {key} is gone"),), key
            )
            continue
        pod = job_pod(pods, job)
        if job_finished(job) is None:
            phase = (pod.get("status") or {}).get("phase") if pod else "no pod yet"
            out.running[node] = str(phase)
            continue
        log = cluster.pod_log(spec.namespace, str(_meta(pod).get("name"))) if pod else None
        baselines = pool_baselines(pool_results(infos, pool_of.get(node), node), spec)
        out.done[node] = outcome(job, pod, log, baselines, spec, at=now)
    return out
