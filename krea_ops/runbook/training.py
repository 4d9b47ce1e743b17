"""``train launch`` and ``train resume`` as plans.

Launch: every check is made before the plan exists, each refusal is one line (exit 2)
and nothing is created: the LocalQueue and the WorkloadPriorityClass must exist (Kueue
would otherwise leave the JobSet suspended for ever: ``LocalQueue ... doesn't exist`` or
``WorkloadPriorityClassNotFound``), the gang must fit the healthy schedulable nodes of
the queue's ClusterQueue's GPU flavors (N nodes with at least ``gpus_per_node`` GPUs
each, Ready, not cordoned, no taint the pods do not tolerate, not BAD/UNKNOWN by
telemetry where telemetry could judge), and a ``--checkpoint-dir`` named must exist as a
directory where the console can read it (``training_checkpoint_mount`` maps the pods'
path to a local one; without a mapping it is not checked, and the plan says so). The
plan is one call: create the JobSet (``krea_ops.training.manifests``). A JobSet of that
name made by the same launch (its ``krea.ai/launch-hash``) makes the plan empty: a
second identical launch is a no-op; any other JobSet of that name is refused.

Resume: the run is found by name (a JobSet with our marks); the checkpoint is the newest
*complete* one under its checkpoint directory (``training.checkpoints.latest_complete``:
never the step a crash left half-written) or the one named, which must be complete. The
plan deletes the finished JobSet (Foreground, UID precondition: its Jobs and pods are
gone before the step ends) and creates it again with the same spec and
``krea.ai/resume-from``/``RESUME_FROM``/``--resume-from`` pointing at the checkpoint. A
JobSet still running or suspended is refused: it resumes by itself, from its newest
complete checkpoint, on its next restart (docs/operations.md says why).

Checkpoint request (a planned swap's first half, ``build_checkpoint_request``): one
PATCH of the running JobSet's annotations ``krea.ai/checkpoint-requested-at|-by|-reason``
made with the resourceVersion it was read at (on 409 re-read and re-applied), and an
Event ``PlannedSwap`` on the JobSet; the trainer's launcher answers with
``krea.ai/checkpoint-completed-at|-step`` (``training.swaps``, docs/operations.md).

A resume killed between its two steps (the old JobSet deleted, the new one not yet
created) leaves no JobSet to read the run from; run again, it finds the interrupted
run in the audit log (its ``start`` record holds the plan, the manifest included; its
delete step ``done``, its create step not) and plans that create alone, so the run is
not lost and is created once.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.events import ObjectRef
from krea_ops.kube.times import rfc3339
from krea_ops.kube.writes import SetAnnotations, custom_object
from krea_ops.model import Severity as NodeSeverity
from krea_ops.queue import (
    GPU,
    HEALTHY,
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    UNKNOWN,
    flavor_selects,
    flavor_tolerations,
    node_capacity,
)
from krea_ops.runbook.nodes import drain_step, gang_fate, pod_ref
from krea_ops.runbook.plan import (
    Call,
    EventSpec,
    Finding,
    FindingSeverity,
    Plan,
    Step,
    StepKind,
)
from krea_ops.training.checkpoints import inspect_checkpoint, latest_complete
from krea_ops.training.manifests import (
    JOBSET_PATH,
    TrainingSpec,
    launch_hash,
    spec_of,
    training_jobset,
)
from krea_ops.training.runs import local_path
from krea_ops.training.swaps import (
    CHECKPOINT_REQUESTED_AT,
    CHECKPOINT_REQUESTED_BY,
    CHECKPOINT_REQUESTED_REASON,
)

Obj = dict[str, Any]
NOTHING = "nothing was created"
POD_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)


def _get(cluster: Cluster, what: str, path: str) -> Obj | None:
    """The object, or None on 404; any other refusal is the server's line."""
    answer = cluster.request(f"get {what}", "GET", path)
    if answer.status == 404:
        return None
    if not answer.ok or answer.body is None:
        raise cluster.refusal(f"get {what}", answer)
    body: Obj = answer.body
    return body


def jobset_path(namespace: str, name: str | None = None) -> str:
    base = JOBSET_PATH.format(ns=quote(namespace))
    return f"{base}/{quote(name)}" if name else base


def _kueue(cluster: Cluster, plural: str) -> str:
    version = cluster.custom_version(KUEUE_GROUP, plural, KUEUE_VERSIONS)
    return f"/apis/{KUEUE_GROUP}/{version}"


def _capacity(
    cluster: Cluster, spec: TrainingSpec, node_severity: Mapping[str, NodeSeverity] | None
) -> tuple[str, list[Finding]]:
    """The queue's ClusterQueue, and a finding saying how many nodes can take a rank;
    BadInput when the queue or the priority class is missing or the gang cannot fit."""
    ns = spec.namespace
    base = _kueue(cluster, "localqueues")
    lq = _get(cluster, f"localqueue {ns}/{spec.queue}",
              f"{base}/namespaces/{quote(ns)}/localqueues/{quote(spec.queue)}")  # fmt: skip
    if lq is None:
        raise BadInput(
            f"no LocalQueue {ns}/{spec.queue} (krea-ops queue list shows the queues); {NOTHING}"
        )
    wpc_path = f"{base}/workloadpriorityclasses/{quote(spec.priority)}"
    if _get(cluster, f"workloadpriorityclass {spec.priority}", wpc_path) is None:
        raise BadInput(f"no WorkloadPriorityClass {spec.priority} (--priority); {NOTHING}")
    cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
    cq = _get(cluster, f"clusterqueue {cq_name}", f"{base}/clusterqueues/{quote(cq_name)}")
    if cq is None:
        raise BadInput(
            f"LocalQueue {ns}/{spec.queue} points at ClusterQueue {cq_name}, which does not "
            f"exist; {NOTHING}"
        )
    flavors: list[Obj] = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or ():
        for fl in group.get("flavors") or ():
            if not any(r.get("name") == GPU for r in fl.get("resources") or ()):
                continue
            name = str(fl.get("name"))
            obj = _get(cluster, f"resourceflavor {name}", f"{base}/resourceflavors/{quote(name)}")
            if obj is not None:
                flavors.append(obj)
    fit: set[str] = set()
    unknown: set[str] = set()  # would fit, but no telemetry judges them yet
    for node in cluster.nodes():
        for flavor in flavors:
            if not flavor_selects(flavor, node):
                continue
            tolerations = (*flavor_tolerations(flavor), *POD_TOLERATIONS)
            cap = node_capacity(node, tolerations, node_severity)
            if cap.gpus < spec.gpus_per_node:
                continue
            if cap.state == HEALTHY:
                fit.add(node.name)
            elif cap.state == UNKNOWN:
                unknown.add(node.name)
    unknown -= fit
    names = ", ".join(str((f.get("metadata") or {}).get("name")) for f in flavors) or "none"
    judged = "by telemetry too" if node_severity is not None else "telemetry not read"
    have = (
        f"{len(fit)} healthy schedulable nodes with at least {spec.gpus_per_node} GPUs in "
        f"ClusterQueue {cq_name}'s GPU flavors ({names}; {judged})"
    )
    if unknown:
        have += (
            f", and {len(unknown)} more whose health is not known yet (no reading from "
            "their exporters: just started, not scraped yet, or down; krea-ops nodes list "
            "says which)"
        )
    if len(fit) < spec.nodes:
        verdict = "cannot run yet" if len(fit) + len(unknown) >= spec.nodes else "cannot run"
        raise BadInput(
            f"a gang of {spec.nodes} nodes x {spec.gpus_per_node} GPUs {verdict}: {have}; {NOTHING}"
        )
    return cq_name, [Finding("capacity", FindingSeverity.INFO, f"the gang fits: {have}")]


def _local(pod_path: str, mount: tuple[str, Path] | None) -> Path | None:
    return local_path(pod_path, mount)


def _check_dir(spec: TrainingSpec, mount: tuple[str, Path] | None) -> list[Finding]:
    where = _local(spec.checkpoints, mount)
    if where is None:
        return [
            Finding(
                "checkpoint-dir",
                FindingSeverity.WARNING,
                f"checkpoint directory {spec.checkpoints} is not mounted here "
                "(setting training_checkpoint_mount): not checked",
            )
        ]
    if spec.checkpoint_dir is not None:
        if not where.exists():
            raise BadInput(
                f"--checkpoint-dir {spec.checkpoint_dir}: {where} does not exist here "
                f"(checked through training_checkpoint_mount); {NOTHING}"
            )
        if not where.is_dir():
            raise BadInput(
                f"--checkpoint-dir {spec.checkpoint_dir}: {where} is not a directory; {NOTHING}"
            )
    return [
        Finding(
            "checkpoint-dir",
            FindingSeverity.INFO,
            f"checkpoints go to {spec.checkpoints} ({where})",
        )
    ]


def _pod_path(spec: TrainingSpec, local_root: Path, found: Path) -> str:
    rel = found.relative_to(local_root).as_posix()
    return spec.checkpoints.rstrip("/") + ("/" + rel if rel != "." else "")


def resolve_checkpoint(
    spec: TrainingSpec,
    wanted: str,
    mount: tuple[str, Path] | None,
    flag: str,
    nothing: str = NOTHING,
) -> tuple[str, Finding]:
    """The checkpoint (as the pods see it) ``wanted`` names: ``latest`` is the newest
    complete one under the run's checkpoint directory; a path must be complete. BadInput
    with the reason otherwise."""
    root = _local(spec.checkpoints, mount)
    if wanted == "latest":
        if root is None:
            raise BadInput(
                f"{flag} latest: {spec.checkpoints} is not mounted here (setting "
                f"training_checkpoint_mount), so no checkpoint can be chosen; {nothing}"
            )
        newest = latest_complete(root) if root.is_dir() else None
        if newest is None:
            raise BadInput(
                f"{flag} latest: no complete checkpoint under {spec.checkpoints} ({root}); "
                f"{nothing}"
            )
        chosen = _pod_path(spec, root, newest.path)
        message = f"resumes from {chosen}, the newest complete checkpoint (step {newest.step})"
        return chosen, Finding("checkpoint", FindingSeverity.INFO, message)
    here = _local(wanted, mount)
    pod = wanted
    if here is None:  # a path of this machine under the mount's local root
        candidate = Path(wanted).expanduser()
        if root is not None and candidate.is_relative_to(root):
            here, pod = candidate, _pod_path(spec, root, candidate)
    if here is None:
        raise BadInput(
            f"{flag} {wanted}: not under a mounted checkpoint directory (setting "
            f"training_checkpoint_mount), so its completeness cannot be checked; {nothing}"
        )
    if not here.exists():
        raise BadInput(f"{flag} {wanted}: {here} does not exist; {nothing}")
    cp = inspect_checkpoint(here)
    if not cp.complete:
        raise BadInput(f"{flag} {wanted}: the checkpoint is incomplete: {cp.reason}; {nothing}")
    message = f"resumes from {pod} (step {cp.step}, complete)"
    return pod, Finding("checkpoint", FindingSeverity.INFO, message)


def _create_step(spec: TrainingSpec, manifest: Obj, why: str) -> Step:
    about = f"jobset {spec.namespace}/{spec.name}"
    call = Call("POST", jobset_path(spec.namespace), about, why, manifest)
    return Step(StepKind.CREATE, f"create JobSet {spec.namespace}/{spec.name}", (call,))


def plan_launch(
    cluster: Cluster,
    spec: TrainingSpec,
    *,
    user: str,
    node_severity: Mapping[str, NodeSeverity] | None = None,
    mount: tuple[str, Path] | None = None,
    now: float | None = None,
) -> tuple[Plan, Obj]:
    """The plan of ``train launch`` and the JobSet it creates (see the module)."""
    spec.validate()
    findings = _check_dir(spec, mount)
    if spec.resume_from is not None:
        chosen, found = resolve_checkpoint(spec, spec.resume_from, mount, "--resume-from")
        spec = dataclasses.replace(spec, resume_from=chosen)
        findings.append(found)
    _, capacity = _capacity(cluster, spec, node_severity)
    findings = capacity + findings
    stamp = rfc3339(time.time() if now is None else now)
    manifest = training_jobset(spec, launched_by=user, launched_at=stamp)
    existing = _get(cluster, f"jobset {spec.namespace}/{spec.name}",
                    jobset_path(spec.namespace, spec.name))  # fmt: skip
    steps: tuple[Step, ...] = ()
    what = f"JobSet {spec.namespace}/{spec.name}"
    if existing is None:
        steps = (_create_step(spec, manifest, "the gang, suspended for Kueue to admit"),)
    elif launch_hash(existing) == launch_hash(manifest):
        findings.append(
            Finding("already", FindingSeverity.INFO, f"{what} exists, launched as asked")
        )
    else:
        raise BadInput(
            f"{what} exists and was not launched with these options (krea-ops train resume "
            f"{spec.name} relaunches a finished run; delete it to launch anew); {NOTHING}"
        )
    plan = Plan(
        action="train launch",
        nodes=(),
        reason=None,
        user=user,
        steps=steps,
        findings=tuple(findings),
        options={"nodes": spec.nodes, "gpus_per_node": spec.gpus_per_node,
                 "queue": spec.queue, "priority": spec.priority,
                 "checkpoint_dir": spec.checkpoints, "resume_from": spec.resume_from},
        subject=f"{spec.namespace}/{spec.name}",
    )  # fmt: skip
    return plan, manifest


FINISHED = ("Failed", "Completed")


def read_spec(cluster: Cluster, name: str, *, namespace: str) -> TrainingSpec:
    """The launch spec of our training ``namespace/name`` as its JobSet holds it;
    BadInput when there is none or it is not ours."""
    obj = _get(cluster, f"jobset {namespace}/{name}", jobset_path(namespace, name))
    if obj is None:
        raise BadInput(f"no training {namespace}/{name} (krea-ops train list shows them)")
    return spec_of(obj)


def _state(obj: Obj) -> str:
    status = obj.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
    for done in FINISHED:
        if conds.get(done) == "True":
            return done
    return "Suspended" if (obj.get("spec") or {}).get("suspend") else "Running"


def plan_resume(
    cluster: Cluster,
    name: str,
    *,
    namespace: str,
    checkpoint: str = "latest",
    user: str,
    mount: tuple[str, Path] | None = None,
    now: float | None = None,
    timeout_s: float = 300.0,
    audit_log: Path | None = None,
) -> tuple[Plan, Obj]:
    """The plan of ``train resume`` and the JobSet it creates (see the module);
    ``audit_log``: where to find a resume of this run interrupted after its delete."""
    what = f"JobSet {namespace}/{name}"
    old = _get(cluster, f"jobset {namespace}/{name}", jobset_path(namespace, name))
    if old is None:
        interrupted = interrupted_resume(audit_log, namespace, name)
        if interrupted is None:
            raise BadInput(f"no training {namespace}/{name} (krea-ops train list shows them)")
        return _finish_resume(interrupted, namespace, name, user, timeout_s)
    spec = spec_of(old)
    state = _state(old)
    if state not in FINISHED:
        raise BadInput(
            f"{what} is {state}: it resumes by itself from its newest complete checkpoint "
            "on its next restart; resume relaunches a Failed or Completed run; "
            "nothing was changed"
        )
    chosen, found = resolve_checkpoint(
        spec, checkpoint, mount, "--checkpoint", "nothing was changed"
    )
    spec = dataclasses.replace(spec, resume_from=chosen)
    stamp = rfc3339(time.time() if now is None else now)
    manifest = training_jobset(spec, launched_by=user, launched_at=stamp)
    uid = str((old.get("metadata") or {}).get("uid") or "")
    options = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": uid},
    }
    about = f"jobset {namespace}/{name}"
    delete = Call(
        "DELETE",
        jobset_path(namespace, name),
        about,
        f"the {state} run goes, its Jobs and pods first (Foreground)",
        options,
        f"uid {uid}",
    )
    steps = (
        Step(StepKind.REMOVE, f"delete the {state} {what} and wait until it is gone", (delete,)),
        _create_step(spec, manifest, f"the gang again, resuming from {chosen}"),
    )
    findings = [
        found,
        Finding(
            "gang",
            FindingSeverity.INFO,
            f"{what} is {state} after {(old.get('status') or {}).get('restarts', 0)} restarts; "
            "Kueue queues the new gang like any other",
        ),
    ]
    plan = Plan(
        action="train resume",
        nodes=(),
        reason=None,
        user=user,
        steps=steps,
        findings=tuple(findings),
        options={"checkpoint": chosen, "timeout_s": timeout_s},
        subject=f"{namespace}/{name}",
    )
    return plan, manifest


@dataclasses.dataclass(frozen=True)
class Interrupted:
    """A ``train resume`` that deleted its JobSet and stopped before creating it again."""

    run_id: str
    time: str
    manifest: Obj


def interrupted_resume(audit_log: Path | None, namespace: str, name: str) -> Interrupted | None:
    """The last ``train resume`` of ``namespace/name`` in the audit log, if its delete step
    is ``done`` and its create step never was; None otherwise (no log, no such run, a
    line that does not parse is skipped: a record cut by a crash)."""
    if audit_log is None:
        return None
    try:
        text = Path(audit_log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    starts: dict[str, Obj] = {}
    done: dict[str, set[int]] = {}
    last: str | None = None
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        run_id = str(record.get("run_id") or "")
        if record.get("record") == "start":
            plan = record.get("plan") or {}
            if (
                record.get("action") == "train resume"
                and plan.get("subject") == f"{namespace}/{name}"
            ):
                starts[run_id], done[run_id], last = record, set(), run_id
        elif record.get("record") == "step" and run_id in done and record.get("status") == "done":
            done[run_id].add(int(record.get("step") or 0))
    if last is None or done[last] != {1}:
        return None
    steps = (starts[last].get("plan") or {}).get("steps") or []
    if len(steps) != 2 or steps[1].get("kind") != str(StepKind.CREATE):
        return None
    calls = steps[1].get("calls") or []
    body = calls[0].get("body") if calls else None
    if not isinstance(body, dict):
        return None
    return Interrupted(last, str(starts[last].get("time") or "?"), body)


def _finish_resume(
    interrupted: Interrupted, namespace: str, name: str, user: str, timeout_s: float
) -> tuple[Plan, Obj]:
    manifest = interrupted.manifest
    spec = spec_of(manifest)
    chosen = spec.resume_from
    what = f"JobSet {namespace}/{name}"
    finding = Finding(
        "interrupted",
        FindingSeverity.WARNING,
        f"{what} was deleted by the resume begun at {interrupted.time} (run "
        f"{interrupted.run_id[:12]}), which stopped before creating it again: this creates "
        f"it as that resume planned, resuming from {chosen}",
    )
    plan = Plan(
        action="train resume",
        nodes=(),
        reason=None,
        user=user,
        steps=(_create_step(spec, manifest, f"the gang again, resuming from {chosen}"),),
        findings=(finding,),
        options={"checkpoint": chosen, "timeout_s": timeout_s},
        subject=f"{namespace}/{name}",
    )
    return plan, manifest


JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"


def build_checkpoint_request(
    namespace: str,
    name: str,
    *,
    resource_version: str,
    uid: str = "",
    reason: str,
    user: str,
    now: float,
) -> Plan:
    """The plan asking the trainer of JobSet ``namespace/name`` (read at
    ``resource_version``) for a checkpoint now: pure (module docstring)."""
    if not reason.strip():
        raise BadInput("a checkpoint request needs a reason; nothing was changed")
    stamp = rfc3339(now)
    notes = {
        CHECKPOINT_REQUESTED_AT: stamp,
        CHECKPOINT_REQUESTED_BY: user,
        CHECKPOINT_REQUESTED_REASON: reason,
    }
    target = custom_object(JOBSET_GROUP, JOBSET_VERSION, "JobSet", "jobsets", name, namespace)
    what = f"jobset {namespace}/{name}"
    edit = SetAnnotations(notes)
    patch = {"metadata": {"annotations": notes, "resourceVersion": resource_version}}
    update = Step(
        StepKind.UPDATE,
        f"JobSet {namespace}/{name}: {edit.describe()}",
        (
            Call(
                "PATCH",
                target.path,
                what,
                "ask the trainer's launcher for a checkpoint now (merge patch; on 409 re-read "
                "and re-applied)",
                patch,
                f"resourceVersion {resource_version}",
            ),
        ),
        target=target,
        edits=(edit,),
    )
    event = jobset_event(
        namespace,
        name,
        uid,
        "RequestCheckpoint",
        "PlannedSwap",
        f"checkpoint requested by {user}: {reason}",
    )
    return Plan(
        action="train checkpoint-request",
        nodes=(),
        reason=reason,
        user=user,
        steps=(update, event),
        findings=(
            Finding(
                "checkpoint-request",
                FindingSeverity.INFO,
                f"the trainer's launcher answers with krea.ai/checkpoint-completed-at and "
                f"-step once the checkpoint is committed (requested at {stamp})",
                objects=(f"{namespace}/{name}",),
            ),
        ),
        options={"requested_at": stamp},
        subject=f"{namespace}/{name}",
    )


def jobset_event(namespace: str, name: str, uid: str, action: str, reason: str, note: str) -> Step:
    """The step recording an Event ``reason`` about JobSet ``namespace/name``."""
    ref = ObjectRef("JobSet", name, namespace, uid, f"{JOBSET_GROUP}/{JOBSET_VERSION}")
    return Step(
        StepKind.EVENT,
        f"record Event {reason} on JobSet {namespace}/{name}",
        (
            Call(
                "POST",
                f"/api/v1/namespaces/{quote(namespace)}/events",
                f"event about jobset {namespace}/{name}",
                f"audit: Event {reason} on JobSet {namespace}/{name}",
            ),
        ),
        event=EventSpec(ref, action, reason, note),
    )


def build_gang_restart(
    namespace: str,
    name: str,
    *,
    uid: str,
    spec: Mapping[str, Any],
    pod: Obj,
    reason: str,
    user: str,
    timeout_s: float = 300.0,
) -> Plan:
    """The plan restarting a training gang through its JobSet's own failure policy: rank
    0's pod (``pod``, its UID the precondition) evicted through the Eviction API, so that
    it carries ``DisruptionTarget``; what the JobSet then does (``runbook.nodes.gang_fate``)
    is the preflight, and a plan whose JobSet would not restart the whole gang (only the
    pod replaced, or the JobSet failed) is refused. Then an Event on the JobSet says who
    restarted it and why. Pure."""
    if not reason.strip():
        raise BadInput("a gang restart needs a reason; nothing was changed")
    ref = pod_ref(pod)
    rjob = ((pod.get("metadata") or {}).get("labels") or {}).get(
        "jobset.sigs.k8s.io/replicatedjob-name"
    )
    fate, why = gang_fate({"spec": dict(spec), "status": {}}, rjob)
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    evict = drain_step((ref,), node, False, timeout_s, "(rank 0: the JobSet restarts the gang)")
    event = jobset_event(
        namespace, name, uid, "Restart", "GangRestarted", f"gang restarted by {user}: {reason}"
    )
    severity = FindingSeverity.INFO if fate == "restarts" else FindingSeverity.BLOCKING
    return Plan(
        action="train restart",
        nodes=(node,) if node else (),
        reason=reason,
        user=user,
        steps=(evict, event),
        findings=(
            Finding(
                "gang",
                severity,
                f"JobSet {namespace}/{name} {fate}: {why}",
                objects=(f"{namespace}/{name}",),
            ),
        ),
        options={"timeout_s": timeout_s},
        pods={node: (ref,)},
        refused=None
        if fate == "restarts"
        else f"JobSet {namespace}/{name} would not restart the gang ({why})",
        subject=f"{namespace}/{name}",
    )
