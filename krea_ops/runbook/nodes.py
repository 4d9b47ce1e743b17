"""``nodes evict`` and ``nodes restore`` as plans.

Evict: cordon, taint ``krea.ai/unhealthy=<reason-slug>:NoSchedule`` and annotate
``krea.ai/evicted-by|evicted-reason|evicted-at`` (one read-modify-write per node, every
node before any pod is moved, so an evicted pod cannot land on the next node of the
action), then evict every pod on the nodes through the Eviction API (``--force``:
delete), DaemonSet and mirror pods excepted, as ``kubectl drain`` leaves them.

Gangs: the pods of a JobSet (a training gang) are evicted in steps of their own, before
any other pod of any node, and the plan says what the JobSet will do with the gang. A
JobSet whose Jobs fail on a disruption (``podFailurePolicy`` FailJob on
``DisruptionTarget``, or ``backoffLimit: 0``) and whose ``failurePolicy`` then restarts
it (``RestartJobSetAndIgnoreMaxRestarts``, as ``train launch`` makes them, or
``RestartJobSet`` with restarts left) restarts every pod at once from its newest complete
checkpoint: no rank is left waiting on the evicted one. A JobSet whose Job would only
replace the evicted pod (a ``backoffLimit`` above 0 without such a rule, or an ``Ignore``
rule) would leave its other ranks hanging in their collective until the NCCL timeout:
that plan is refused unless ``force`` (docs/operations.md, "Evicting a training gang").

Restore: remove our taint and annotations and uncordon, in one read-modify-write; every
other taint, label and annotation stays, and so does a cordon someone else had set before
the eviction (``krea.ai/evicted-cordoned-before``). A node without our marks is refused unless
``force`` (someone else cordoned it, for a reason of theirs).

Both plans are built from what the cluster holds now, so a second run plans nothing
and a run killed between two steps plans what is left. Every node is read before
anything is written: an unknown node, an empty reason, a share of the fleet beyond
``max_share`` are refused with nothing written.

Each plan is a read and a pure build: ``read_evict`` (every read an eviction plan needs,
as ``EvictInputs``) then ``build_evict``, ``read_nodes`` then ``build_restore``. The
node-health controller reads in its pass's I/O and builds in its pure decision.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from krea_ops.errors import BadInput
from krea_ops.kube.cluster import VIRTUAL_NODE_LABEL, Cluster
from krea_ops.kube.events import ObjectRef
from krea_ops.kube.rules import UNFINISHED_PODS, controller_of, is_deleting, selector_matches
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.kube.writes import (
    AddTaint,
    Cordon,
    Edit,
    RemoveTaint,
    SetAnnotations,
    Uncordon,
    merge_patch,
    node,
)
from krea_ops.model import Severity as HealthSeverity
from krea_ops.model import Verdict
from krea_ops.runbook.plan import (
    Call,
    EventSpec,
    Finding,
    FindingSeverity,
    Plan,
    PodRef,
    Step,
    StepKind,
)
from krea_ops.training.checkpoints import latest_complete
from krea_ops.training.runs import CHECKPOINT_DIR_ANNOTATION, local_path
from krea_ops.units import counted
from krea_ops.validation import APP as VALIDATION_APP
from krea_ops.validation import APP_LABEL as VALIDATION_APP_LABEL
from krea_ops.validation import RESULT_ANNOTATION, Validation

TAINT_KEY = "krea.ai/unhealthy"
TAINT_EFFECT = "NoSchedule"
EVICTED_BY = "krea.ai/evicted-by"
EVICTED_REASON = "krea.ai/evicted-reason"
EVICTED_AT = "krea.ai/evicted-at"
# set only when the node was already cordoned by someone else: restore leaves that cordon
CORDONED_BEFORE = "krea.ai/evicted-cordoned-before"
# every later eviction of a node already out (who, why, when), as JSON: the first stays in
# the three above
EVICTED_AGAIN = "krea.ai/evicted-again"
OUR_ANNOTATIONS = (EVICTED_BY, EVICTED_REASON, EVICTED_AT, CORDONED_BEFORE, EVICTED_AGAIN)
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
EVENTS_OF_NODES = "default"  # events about cluster-scoped objects live there
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MAX_SHARE = 0.10

Obj = dict[str, Any]


def reason_slug(reason: str) -> str:
    """The taint value for a reason: lower case, runs of anything else than letters and
    digits as one ``-``, at most 63 characters, starting and ending alphanumeric (a label
    value, which a taint value must be)."""
    slug = re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")[:63].strip("-")
    return slug or "unspecified"


def allowed_nodes(fleet: int, max_share: float) -> int:
    """How many nodes one action may take offline: ``max_share`` of the fleet, rounded
    down, and always one (a single bad node can always be evicted)."""
    return max(1, math.floor(fleet * max_share + 1e-9))


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for name in names:
        if name and name not in out:
            out.append(name)
    return tuple(out)


def read_nodes(cluster: Cluster, names: Sequence[str]) -> dict[str, Obj]:
    """Every named node, read before any write; BadInput naming every missing one."""
    if not names:
        raise BadInput("name at least one node (krea-ops nodes list shows them)")
    found: dict[str, Obj] = {}
    missing: list[str] = []
    for name in names:
        answer = cluster.request(f"get node {name}", "GET", f"/api/v1/nodes/{quote(name)}")
        if answer.status == 404:
            missing.append(name)
        elif not answer.ok or answer.body is None:
            raise cluster.refusal(f"get node {name}", answer)
        else:
            found[name] = answer.body
    if missing:
        raise BadInput(
            f"no such node: {', '.join(missing)} (krea-ops nodes list shows the nodes); "
            "nothing was changed"
        )
    return found


def _fleet_size(cluster: Cluster) -> int:
    """Nodes that can be taken offline: every node but the virtual ones (a provider's
    virtual-kubelet node is not capacity of ours)."""
    key, value = VIRTUAL_NODE_LABEL
    nodes = cluster.list_all("list nodes", "/api/v1/nodes", labelSelector=f"{key}!={value}")
    return len(nodes)


def _changes(obj: Obj, edits: Iterable[Edit]) -> tuple[Obj, list[str]]:
    changed: list[str] = []
    for edit in edits:
        out = edit.apply(obj)
        if out is not None:
            obj = out
            changed.append(edit.describe())
    return obj, changed


def update_step(name: str, obj: Obj, edits: tuple[Edit, ...], why: str) -> Step | None:
    new, changed = _changes(obj, edits)
    if not changed:
        return None
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    patch = merge_patch(obj, new)
    patch.setdefault("metadata", {})["resourceVersion"] = version
    target = node(name)
    call = Call(
        "PATCH",
        target.path,
        f"node {name}",
        f"{why} (merge patch; on 409 re-read and re-applied)",
        patch,
        f"resourceVersion {version}",
    )
    return Step(
        StepKind.UPDATE,
        f"node {name}: {', '.join(changed)}",
        (call,),
        node=name,
        target=target,
        edits=edits,
    )


def event_call(namespace: str, kind: str, name: str, why: str) -> Call:
    where = f"{namespace}/" if kind != "node" else ""
    return Call(
        "POST",
        f"/api/v1/namespaces/{namespace}/events",
        f"event about {kind} {where}{name}",
        why,
    )


def node_event(
    name: str,
    obj: Obj,
    action: str,
    reason: str,
    note: str,
    blocked: str | None = None,
    *,
    warning: bool = False,
) -> Step:
    ref = ObjectRef.of(obj, kind="Node", api_version="v1")
    ref = ObjectRef(ref.kind, ref.name, "", ref.uid, ref.api_version)  # not a version
    call = event_call(EVENTS_OF_NODES, "node", name, f"audit: Event {reason} on node {name}")
    return Step(
        StepKind.EVENT,
        f"record Event {reason} on node {name}"
        + (f" ({blocked} if pods are left)" if blocked else ""),
        (call,),
        node=name,
        event=EventSpec(ref, action, reason, note, blocked, warning),
    )


# -- preflight ------------------------------------------------------------------------


def _stays(pod: Obj) -> str | None:
    """Why a pod is not evicted (DaemonSet, mirror, already terminating), or None."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "mirror pod (the kubelet runs it from a file)"
    owner = controller_of(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return f"DaemonSet {owner.get('name')}"
    if (meta.get("labels") or {}).get(VALIDATION_APP_LABEL) == VALIDATION_APP:
        # it tolerates the quarantine: it runs on the node because the node is out
        return f"validation Job {owner.get('name') if owner else ''}".rstrip()
    if is_deleting(pod):
        return "already terminating"
    return None


def _preflight(
    pods: Mapping[str, list[Obj]], budgets: list[Obj], force: bool, timeout_s: float
) -> list[Finding]:
    findings: list[Finding] = []
    for node_name, node_pods in pods.items():
        for pod in node_pods:
            meta = pod.get("metadata") or {}
            ns, name = str(meta.get("namespace")), str(meta.get("name"))
            labels = meta.get("labels") or {}
            for pdb in budgets:
                pmeta = pdb.get("metadata") or {}
                if pmeta.get("namespace") != ns:
                    continue
                if not selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                    continue
                allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
                if allowed == 0:
                    then = (
                        "--force deletes it anyway"
                        if force
                        else f"its eviction waits up to --timeout {timeout_s:g}s"
                    )
                    findings.append(
                        Finding(
                            "budget",
                            FindingSeverity.BLOCKING,
                            f"pod {ns}/{name} on {node_name}: PodDisruptionBudget "
                            f"{ns}/{pmeta.get('name')} allows 0 disruptions now; {then}",
                            node_name,
                            (f"{ns}/{name}", f"{ns}/{pmeta.get('name')}"),
                        )
                    )
            if controller_of(pod) is None:
                findings.append(
                    Finding(
                        "unmanaged",
                        FindingSeverity.WARNING,
                        f"pod {ns}/{name} on {node_name} has no controller: nothing recreates it",
                        node_name,
                        (f"{ns}/{name}",),
                    )
                )
            volumes = [
                str(v.get("name"))
                for v in (pod.get("spec") or {}).get("volumes") or ()
                if "emptyDir" in v
            ]
            if volumes:
                findings.append(
                    Finding(
                        "emptydir",
                        FindingSeverity.WARNING,
                        f"pod {ns}/{name} on {node_name}: the data of emptyDir "
                        f"{', '.join(volumes)} is deleted with it",
                        node_name,
                        (f"{ns}/{name}",),
                    )
                )
    return findings


# -- gangs ----------------------------------------------------------------------------


def gang_of(pod: Obj) -> tuple[str, str] | None:
    """The JobSet (namespace, name) a pod is a rank of, or None."""
    meta = pod.get("metadata") or {}
    jobset = (meta.get("labels") or {}).get(JOBSET_LABEL)
    return (str(meta.get("namespace")), str(jobset)) if jobset else None


def _disruption_rule(job_spec: Obj) -> str | None:
    """The action of the first ``podFailurePolicy`` rule an evicted pod matches (it
    carries ``DisruptionTarget``), or None when no rule does."""
    for rule in (job_spec.get("podFailurePolicy") or {}).get("rules") or ():
        for pattern in rule.get("onPodConditions") or ():
            if pattern.get("type") == "DisruptionTarget" and pattern.get("status") == "True":
                return str(rule.get("action"))
    return None


def gang_fate(jobset: Obj, rjob: str | None, *, evicted: bool = True) -> tuple[str, str]:
    """What the JobSet does when one of its pods (of replicated job ``rjob``) is evicted
    (``evicted``; a pod deleted instead, ``--force``, carries no ``DisruptionTarget``
    condition, so no rule on it applies), as the Job controller and the JobSet controller
    decide it: ``("restarts", why)`` (every pod of the gang replaced at once),
    ``("fails", why)`` (the JobSet ends Failed) or ``("hangs", why)`` (only that pod is
    replaced; the other ranks wait in their collective until the NCCL timeout)."""
    spec = jobset.get("spec") or {}
    rjobs = spec.get("replicatedJobs") or []
    chosen = next((r for r in rjobs if r.get("name") == rjob), rjobs[0] if rjobs else {})
    job_spec = (chosen.get("template") or {}).get("spec") or {}
    action = _disruption_rule(job_spec) if evicted else None
    backoff = int(job_spec.get("backoffLimit", 6))
    if action == "FailJob":
        reason, how = "PodFailurePolicy", "podFailurePolicy FailJob on DisruptionTarget"
        # the Job controller's words (pkg/controller/job/pod_failure_policy.go)
        message = "Pod {pod} has condition DisruptionTarget matching FailJob rule at index"
    elif action == "Ignore" or backoff > 0:
        why = (
            "its podFailurePolicy ignores a disruption"
            if action == "Ignore"
            else f"its Job's backoffLimit is {backoff} and no podFailurePolicy rule fails "
            "the Job on DisruptionTarget"
        )
        return "hangs", f"{why}: the Job replaces only the pod that went"
    else:
        reason, how = "BackoffLimitExceeded", "backoffLimit 0"
        message = "Job has reached the specified backoff limit"
    policy = spec.get("failurePolicy")
    if policy is None:
        return "fails", f"its Job fails ({how}) and it has no failurePolicy"
    rule: Obj = {}
    for candidate in policy.get("rules") or ():
        reasons = candidate.get("onJobFailureReasons") or []
        targets = candidate.get("targetReplicatedJobs") or []
        patterns = candidate.get("onJobFailureMessagePatterns") or []
        if (
            (not reasons or reason in reasons)
            and (not targets or chosen.get("name") in targets)
            and (not patterns or any(_matches(p, message) for p in patterns))
        ):
            rule = candidate
            break
    what = str(rule.get("action", "RestartJobSet"))
    named = f"failurePolicy rule {rule.get('name')!r}" if rule else "failurePolicy"
    if what in ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts"):
        return "restarts", (
            f"its Job fails ({how}) and its {named} restarts the gang without counting "
            "towards maxRestarts"
        )
    if what == "FailJobSet":
        return "fails", f"its Job fails ({how}) and its {named} fails the JobSet"
    jobs = sum(int(r.get("replicas", 1) or 1) for r in rjobs)
    if what.startswith("RestartJob") and not what.startswith("RestartJobSet") and jobs > 1:
        return "hangs", (
            f"its Job fails ({how}) and its {named} restarts only that Job ({what}), not "
            f"the other {jobs - 1}"
        )
    cap = int(policy.get("maxRestarts", 0) or 0)
    counted = int((jobset.get("status") or {}).get("restartsCountTowardsMax") or 0)
    if counted >= cap:
        return "fails", f"its Job fails ({how}) and its maxRestarts {cap} is spent"
    return "restarts", (
        f"its Job fails ({how}) and its {named} restarts the gang, using 1 of its "
        f"{cap - counted} restarts left"
    )


def _health_finding(
    name: str, verdict: Verdict | None, judged: bool, error: str | None
) -> Finding | None:
    """What the restore's preflight says of the node's health now, or None when it is
    OK (or nobody asked)."""
    if verdict is not None and verdict.severity is HealthSeverity.OK:
        return None
    if verdict is not None and verdict.severity in (HealthSeverity.BAD, HealthSeverity.SUSPECT):
        label = verdict.severity.name
        forced = " (--force)" if verdict.severity is HealthSeverity.BAD else ""
        message = f"node {name} is {label} now ({verdict.summary}): restoring{forced} puts it "
        return Finding("health", FindingSeverity.WARNING, message + "back in service", name)
    if verdict is not None or judged or error:
        why = f" ({error})" if error and not judged else ""
        return Finding(
            "health", FindingSeverity.WARNING,
            f"node {name}'s health is not known{why}: nothing says it is sound",
            name,
        )  # fmt: skip
    return None


def _matches(pattern: str, message: str) -> bool:
    try:
        return re.search(pattern, message) is not None
    except re.error:  # not a pattern Python reads (JobSet uses Go's RE2): assume it does
        return True


def _newest_checkpoint(jobset: Obj, mount: tuple[str, Path] | None) -> str:
    """``newest complete checkpoint`` said as precisely as can be cheaply known: the
    checkpoint's path and step when the run's directory is mounted here."""
    folder = ((jobset.get("metadata") or {}).get("annotations") or {}).get(
        CHECKPOINT_DIR_ANNOTATION
    )
    if not folder:
        return "its newest complete checkpoint (if its trainer resumes from one)"
    root = local_path(str(folder), mount)
    newest = latest_complete(root) if root is not None and root.is_dir() else None
    if newest is None or root is None:
        return f"its newest complete checkpoint under {folder}"
    rel = newest.path.relative_to(root).as_posix()
    where = folder.rstrip("/") + ("/" + rel if rel != "." else "")
    return f"its newest complete checkpoint, {where} (step {newest.step})"


def _gangs(
    gangs: Mapping[tuple[str, str], GangRead],
    pods: Mapping[str, list[Obj]],
    force: bool,
) -> tuple[list[Finding], str | None]:
    """A finding per JobSet with pods on the nodes: what happens to its gang; and why the
    plan is refused (a gang that would hang, unless ``force``), or None."""
    members: dict[tuple[str, str], list[tuple[str, Obj]]] = {}
    for node_name, node_pods in pods.items():
        for pod in node_pods:
            gang = gang_of(pod)
            if gang is not None:
                members.setdefault(gang, []).append((node_name, pod))
    findings: list[Finding] = []
    hanging: list[str] = []
    for (ns, name), ranks in sorted(members.items()):
        names = [f"{ns}/{p['metadata']['name']}" for _, p in ranks]
        objects = (f"{ns}/{name}", *names)
        evicting = f"evicting {len(names)} of its pods first ({', '.join(names)})"
        read = gangs.get((ns, name)) or GangRead(None, None, "")
        if read.jobset is None:
            why = "not found" if read.status == 404 else f"HTTP {read.status}"
            findings.append(
                Finding(
                    "gang",
                    FindingSeverity.WARNING,
                    f"JobSet {ns}/{name} could not be read ({why}): what its gang does is "
                    f"unknown; {evicting}",
                    None,
                    objects,
                )
            )
            continue
        rjob = ((ranks[0][1].get("metadata") or {}).get("labels") or {}).get(RJOB_LABEL)
        fate, why = gang_fate(read.jobset, rjob, evicted=not force)
        if fate == "restarts":
            findings.append(
                Finding(
                    "gang",
                    FindingSeverity.WARNING,
                    f"JobSet {ns}/{name} restarts its whole gang at once, from "
                    f"{read.checkpoint}: {why}; {evicting}",
                    None,
                    objects,
                )
            )
        elif fate == "fails":
            findings.append(
                Finding(
                    "gang",
                    FindingSeverity.WARNING,
                    f"JobSet {ns}/{name} will fail: {why}; {evicting} (krea-ops train resume "
                    "relaunches a run of ours from its newest complete checkpoint)",
                    None,
                    objects,
                )
            )
        else:
            hang = (
                f"JobSet {ns}/{name} does not restart its whole gang on a disruption: "
                f"{why}, and its other pods would hang in their collective until the NCCL "
                "timeout"
            )
            then = (
                "--force deletes its pods anyway"
                if force
                else "refused without --force: suspend the JobSet first, evict, then "
                "resume it (docs/operations.md, Evicting a training gang)"
            )
            findings.append(
                Finding("gang", FindingSeverity.WARNING, f"{hang}; {then}", None, objects)
            )
            if not force:
                hanging.append(f"JobSet {ns}/{name}")
    refused = None
    if hanging:
        refused = (
            f"{', '.join(hanging)} would hang until the NCCL timeout (no disruption policy "
            "restarts its gang): suspend it first (its pods stop, no restart counted), or "
            "pass --force"
        )
    return findings, refused


# -- the plans ------------------------------------------------------------------------


def _check_evict_options(reason: str, timeout_s: float, grace_period_s: int | None) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise BadInput("--reason must say why the node is evicted (it goes on the node)")
    if timeout_s < 0:
        raise BadInput("--timeout must be 0 or more seconds")
    if grace_period_s is not None and grace_period_s < 0:
        raise BadInput("--grace-period must be 0 or more seconds")
    return reason


@dataclass(frozen=True)
class GangRead:
    """A JobSet with pods on the nodes, as read: its object (None when it could not be
    read: ``status`` says why), and its newest complete checkpoint as precisely as can be
    cheaply known (``_newest_checkpoint``)."""

    status: int | None
    jobset: Obj | None
    checkpoint: str


@dataclass(frozen=True)
class EvictInputs:
    """What an eviction plan is built from, read from the cluster in one go
    (``read_evict``): the nodes as read (their ``resourceVersion`` is the plan's
    precondition), the fleet's size, the pods each node's drain moves (``stays``: those
    it leaves, as findings), the PodDisruptionBudgets and the JobSets of the gangs with
    pods there. ``build_evict`` turns it into a Plan without another call, so a
    controller can decide on it purely."""

    nodes: tuple[str, ...]
    objs: Mapping[str, Obj]
    fleet: int
    pods: Mapping[str, Sequence[Obj]]  # node -> pods its drain moves, by namespace/name
    stays: tuple[Finding, ...] = ()
    budgets: tuple[Obj, ...] = ()
    gangs: Mapping[tuple[str, str], GangRead] = field(default_factory=dict)

    def only(self, names: Sequence[str]) -> EvictInputs:
        """The same read, for some of its nodes (one plan per node)."""
        keep = tuple(n for n in _unique(names) if n in self.objs)
        pods = {n: self.pods.get(n, ()) for n in keep}
        wanted = {g for ps in pods.values() for g in map(gang_of, ps) if g is not None}
        return EvictInputs(
            nodes=keep,
            objs={n: self.objs[n] for n in keep},
            fleet=self.fleet,
            pods=pods,
            stays=tuple(f for f in self.stays if f.node in keep),
            budgets=self.budgets,
            gangs={g: r for g, r in self.gangs.items() if g in wanted},
        )


def _read_gangs(
    cluster: Cluster, pods: Mapping[str, Sequence[Obj]], mount: tuple[str, Path] | None
) -> dict[tuple[str, str], GangRead]:
    out: dict[tuple[str, str], GangRead] = {}
    for node_pods in pods.values():
        for pod in node_pods:
            gang = gang_of(pod)
            if gang is None or gang in out:
                continue
            ns, name = gang
            path = JOBSET_PATH.format(ns=quote(ns), name=quote(name))
            answer = cluster.request(f"get jobset {ns}/{name}", "GET", path)
            if not answer.ok or answer.body is None:
                out[gang] = GangRead(answer.status, None, "")
            else:
                out[gang] = GangRead(
                    answer.status, answer.body, _newest_checkpoint(answer.body, mount)
                )
    return out


def read_evict(
    cluster: Cluster, names: Sequence[str], *, mount: tuple[str, Path] | None = None
) -> EvictInputs:
    """Every read ``plan_evict`` makes: the nodes (BadInput naming any missing), the
    fleet's size, the pods on each node, when any pod moves the budgets, and each gang's
    JobSet (``mount``: where the pods' checkpoint volume is mounted here, so a gang's
    finding can name the checkpoint it restarts from)."""
    nodes = _unique(names)
    objs = read_nodes(cluster, nodes)
    fleet = _fleet_size(cluster)
    pods: dict[str, list[Obj]] = {}
    stays: list[Finding] = []
    for name in nodes:
        selector = f"spec.nodeName={name},{UNFINISHED_PODS}"
        listed = cluster.list_all(f"list pods on {name}", "/api/v1/pods", fieldSelector=selector)
        moving: list[Obj] = []
        for pod in sorted(
            listed, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
        ):
            why = _stays(pod)
            meta = pod["metadata"]
            if why is None:
                moving.append(pod)
            else:
                stays.append(
                    Finding(
                        "stays",
                        FindingSeverity.INFO,
                        f"pod {meta['namespace']}/{meta['name']} on {name} stays: {why}",
                        name,
                        (f"{meta['namespace']}/{meta['name']}",),
                    )
                )
        pods[name] = moving
    budgets: list[Obj] = []
    if any(pods.values()):
        budgets = cluster.list_all(
            "list poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets"
        )
    return EvictInputs(
        nodes=nodes,
        objs=objs,
        fleet=fleet,
        pods=pods,
        stays=tuple(stays),
        budgets=tuple(budgets),
        gangs=_read_gangs(cluster, pods, mount),
    )


def build_evict(
    inputs: EvictInputs,
    *,
    reason: str,
    user: str,
    now: float,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    grace_period_s: int | None = None,
    force: bool = False,
    max_share: float = DEFAULT_MAX_SHARE,
) -> Plan:
    """The eviction plan of ``inputs``' nodes, made at ``now`` (Unix s): pure."""
    reason = _check_evict_options(reason, timeout_s, grace_period_s)
    nodes = inputs.nodes
    objs = inputs.objs
    slug = reason_slug(reason)
    at = rfc3339(now)

    fleet = inputs.fleet
    offline = [n for n in nodes if not (objs[n].get("spec") or {}).get("unschedulable")]
    limit = allowed_nodes(fleet, max_share)
    findings: list[Finding] = [
        Finding(
            "fleet-share",
            FindingSeverity.INFO,
            f"takes {len(offline)} of {fleet} nodes offline "
            f"({100 * len(offline) / max(fleet, 1):.0f}%; --max-share {max_share:g} allows "
            f"{limit})",
        )
    ]
    refused = None
    if len(offline) > limit:
        refused = (
            f"{len(offline)} nodes is more than --max-share {max_share:g} of the fleet "
            f"({limit} of {fleet} nodes); raise --max-share to do this"
        )
        findings.append(Finding("fleet-share", FindingSeverity.BLOCKING, refused))

    cordon: list[Step] = []
    for name in nodes:
        obj = objs[name]
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        first = _first_eviction(annotations)
        if first is None:
            marks = {EVICTED_BY: user, EVICTED_REASON: reason, EVICTED_AT: at}
            node_slug = slug
        else:
            # already out (node-health's quarantine, another operator's evict): who took
            # it out first, and why, stay; this eviction is added to the ones since
            again = _again(annotations, first, user, reason, at)
            marks = {EVICTED_AGAIN: again} if again is not None else {}
            node_slug = _our_taint_value(obj) or slug
            by, why, when = first
            if (by, why) != (user, reason):
                findings.append(
                    Finding(
                        "already-out", FindingSeverity.WARNING,
                        f"node {name} was already taken out by {by} at {when}: {why}; that "
                        "stays the first reason, and this one is added to it",
                        name,
                    )
                )  # fmt: skip
        if (obj.get("spec") or {}).get("unschedulable") and not evicted_by_us(obj):
            marks[CORDONED_BEFORE] = "true"  # someone else's cordon: restore keeps it
        edits: tuple[Edit, ...] = (
            Cordon(),
            AddTaint(TAINT_KEY, node_slug, TAINT_EFFECT),
            SetAnnotations(marks),
        )
        step = update_step(name, obj, edits, "take the node out of scheduling")
        if step is None:
            findings.append(
                Finding(
                    "already",
                    FindingSeverity.INFO,
                    f"node {name} is already cordoned, tainted and annotated",
                    name,
                )
            )
            continue
        cordon.append(step)
        note = f"cordoned and tainted {TAINT_KEY}={slug}:{TAINT_EFFECT} by {user}: {reason}"
        cordon.append(node_event(name, obj, "Cordon", "Cordoned", note))

    pods = {name: list(inputs.pods[name]) for name in nodes}
    findings.extend(_preflight(pods, list(inputs.budgets), force, timeout_s))
    gang_findings, hangs = _gangs(inputs.gangs, pods, force)
    findings.extend(gang_findings)
    findings.extend(f for f in inputs.stays if f.node in nodes)
    if hangs and refused is None:
        refused = hangs
        findings.append(Finding("gang", FindingSeverity.BLOCKING, hangs))

    # every gang's pods first, on every node: its JobSet restarts the whole gang at once
    # and its new pods cannot land on a node of this action (all cordoned above)
    gang_steps: list[Step] = []
    drain: list[Step] = []
    refs: dict[str, tuple[PodRef, ...]] = {}
    for name in nodes:
        refs[name] = tuple(pod_ref(p) for p in pods[name])
        ranks = tuple(pod_ref(p) for p in pods[name] if gang_of(p) is not None)
        rest = tuple(pod_ref(p) for p in pods[name] if gang_of(p) is None)
        if ranks:
            jobsets = sorted({f"{n}/{j}" for n, j in filter(None, map(gang_of, pods[name]))})
            gang_steps.append(
                drain_step(
                    ranks,
                    name,
                    force,
                    timeout_s,
                    f"of JobSet {', '.join(jobsets)} first (the gang restarts at once)",
                )
            )
        if rest:
            drain.append(drain_step(rest, name, force, timeout_s, ""))
        if not refs[name]:
            continue
        note = f"drained by {user}: {reason}"
        drain.append(node_event(name, objs[name], "Drain", "Drained", note, blocked="DrainBlocked"))

    return Plan(
        action="nodes evict",
        nodes=nodes,
        reason=reason,
        user=user,
        steps=(*cordon, *gang_steps, *drain),
        findings=tuple(findings),
        options={
            "timeout_s": timeout_s,
            "grace_period_s": grace_period_s,
            "force": force,
            "max_share": max_share,
        },
        pods=refs,
        fleet_nodes=fleet,
        refused=refused,
    )


def plan_evict(
    cluster: Cluster,
    names: Sequence[str],
    *,
    reason: str,
    user: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    grace_period_s: int | None = None,
    force: bool = False,
    max_share: float = DEFAULT_MAX_SHARE,
    now: Callable[[], float] = time.time,
    mount: tuple[str, Path] | None = None,
) -> Plan:
    """``mount``: where the pods' checkpoint volume is mounted here (the
    ``training_checkpoint_mount`` setting), so a gang's finding can name the checkpoint
    it restarts from."""
    reason = _check_evict_options(reason, timeout_s, grace_period_s)
    return build_evict(
        read_evict(cluster, names, mount=mount),
        reason=reason,
        user=user,
        now=now(),
        timeout_s=timeout_s,
        grace_period_s=grace_period_s,
        force=force,
        max_share=max_share,
    )


def pod_ref(pod: Obj) -> PodRef:
    meta = pod["metadata"]
    return PodRef(meta["namespace"], meta["name"], meta.get("uid", ""))


def drain_step(
    node_pods: tuple[PodRef, ...], name: str, force: bool, timeout_s: float, what: str
) -> Step:
    """One node's pods evicted (``force``: deleted) in parallel, each call followed by
    the Event about its pod."""
    calls: list[Call] = []
    for ref in node_pods:
        path = f"/api/v1/namespaces/{quote(ref.namespace)}/pods/{quote(ref.name)}"
        if force:
            calls.append(
                Call(
                    "DELETE",
                    path,
                    f"pod {ref.what}",
                    "--force: delete, PodDisruptionBudgets not consulted",
                    None,
                    f"uid {ref.uid}",
                )
            )
        else:
            calls.append(
                Call(
                    "POST",
                    f"{path}/eviction",
                    f"pod {ref.what}",
                    "evict through the Eviction API (429 from a budget retried, 1 s "
                    f"doubling to 30 s, until --timeout {timeout_s:g}s)",
                    None,
                    f"uid {ref.uid}",
                )
            )
        calls.append(
            event_call(
                ref.namespace, "pod", ref.name, f"audit: Event about pod {ref.what}'s eviction"
            )
        )
    kind = StepKind.DELETE if force else StepKind.EVICT
    verb = "delete" if force else "evict"
    return Step(
        kind,
        f"{verb} {counted(len(node_pods), 'pod')} from node {name}" + (f" {what}" if what else ""),
        tuple(calls),
        parallel=True,
        node=name,
        pods=node_pods,
    )


def _first_eviction(annotations: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(who, why, when) of the eviction that took the node out, or None."""
    if EVICTED_BY not in annotations:
        return None
    return (
        annotations[EVICTED_BY],
        annotations.get(EVICTED_REASON, ""),
        annotations.get(EVICTED_AT, ""),
    )


def _again(
    annotations: Mapping[str, str], first: tuple[str, str, str], user: str, reason: str, at: str
) -> str | None:
    """``EVICTED_AGAIN`` with this eviction added; None when it is the first one or one
    already there by the same user for the same reason (a re-run writes nothing)."""
    since = _evicted_again(annotations)
    seen = {(first[0], first[1])} | {(str(e.get("by")), str(e.get("reason"))) for e in since}
    if (user, reason) in seen:
        return None
    since.append({"by": user, "reason": reason, "at": at})
    return json.dumps(since, separators=(",", ":"), ensure_ascii=False)


def _evicted_again(annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """``EVICTED_AGAIN``'s entries (who, why, when), oldest first; none when unreadable."""
    try:
        since = json.loads(annotations.get(EVICTED_AGAIN) or "[]")
    except ValueError:
        return []
    return [e for e in since if isinstance(e, dict)] if isinstance(since, list) else []


def evicted_again_by(annotations: Mapping[str, str]) -> list[str]:
    """Who evicted a node already out again since, oldest first (``EVICTED_AGAIN``)."""
    return [str(e["by"]) for e in _evicted_again(annotations) if e.get("by")]


def _our_taint_value(obj: Obj) -> str | None:
    for taint in (obj.get("spec") or {}).get("taints") or ():
        if taint.get("key") == TAINT_KEY and taint.get("effect") == TAINT_EFFECT:
            return str(taint.get("value") or "")
    return None


def evicted_by_us(obj: Obj) -> bool:
    """The node carries our annotation or our taint."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    taints = (obj.get("spec") or {}).get("taints") or ()
    return EVICTED_BY in annotations or any(t.get("key") == TAINT_KEY for t in taints)


def _validation_doubt(name: str, annotations: Mapping[str, str]) -> str | None:
    """Why a node krea-ops evicted has not earned its way back: its last validation
    failed, or it has none since the eviction; None when it passed since (or krea-ops did
    not evict it)."""
    out_at = parse_time(annotations.get(EVICTED_AT))
    if out_at is None:
        return None
    v = Validation.from_annotation(name, annotations.get(RESULT_ANNOTATION))
    if v is None or v.at < out_at:
        return f"node {name} has no validation since its eviction at {rfc3339(out_at)}"
    if not v.passed:
        return f"node {name} failed its last validation ({', '.join(v.failed())})"
    return None


def plan_restore(
    cluster: Cluster,
    names: Sequence[str],
    *,
    user: str,
    force: bool = False,
    reason: str | None = None,
    verdicts: Mapping[str, Verdict] | None = None,
    health_error: str | None = None,
) -> Plan:
    nodes = _unique(names)
    return build_restore(
        read_nodes(cluster, nodes), nodes, user=user, force=force, reason=reason,
        verdicts=verdicts, health_error=health_error,
    )  # fmt: skip


def build_restore(
    objs: Mapping[str, Obj],
    names: Sequence[str],
    *,
    user: str,
    force: bool = False,
    reason: str | None = None,
    verdicts: Mapping[str, Verdict] | None = None,
    health_error: str | None = None,
    require_validation: bool = True,
) -> Plan:
    """The restore plan of the named nodes from ``objs`` (each node as read): pure.

    ``verdicts``: the nodes' health verdicts now (None: not judged; ``health_error`` says
    why, when the caller tried). A node the verdicts call BAD is refused unless ``force``
    (and then restored with a warning naming the reasons); a SUSPECT one, or one whose
    health is not known, is restored with a warning saying so. A node krea-ops evicted
    whose last validation failed, or that has none since its eviction, is refused unless
    ``force`` (then restored with a warning); ``require_validation=False`` skips that
    check (node-health, which restores only after a pass it judged itself)."""
    nodes = _unique(names)
    findings: list[Finding] = []
    refused: list[str] = []
    bad: list[str] = []
    unvalidated: list[str] = []
    steps: list[Step] = []
    for name in nodes:
        obj = objs[name]
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        keep_cordon = annotations.get(CORDONED_BEFORE) == "true" and not force
        edits: tuple[Edit, ...] = (
            RemoveTaint(TAINT_KEY, TAINT_EFFECT),
            SetAnnotations(dict.fromkeys(OUR_ANNOTATIONS)),
            *(() if keep_cordon else (Uncordon(),)),
        )
        if keep_cordon:
            findings.append(
                Finding(
                    "cordoned-before",
                    FindingSeverity.WARNING,
                    f"node {name} was cordoned before krea-ops evicted it: it stays cordoned "
                    "(kubectl uncordon, or restore --force, lifts that)",
                    name,
                )
            )
        step = update_step(name, obj, edits, "undo nodes evict")
        if step is None:
            findings.append(
                Finding("already", FindingSeverity.INFO, f"node {name} is already restored", name)
            )
            continue
        # its health now, only for a node this restore changes
        verdict = verdicts.get(name) if verdicts is not None else None
        if verdict is not None and verdict.severity is HealthSeverity.BAD and not force:
            bad.append(f"node {name} is BAD now ({verdict.summary})")
            continue
        finding = _health_finding(name, verdict, verdicts is not None, health_error)
        if finding is not None:
            findings.append(finding)
        doubt = _validation_doubt(name, annotations) if require_validation else None
        if doubt is not None:
            if not force:
                unvalidated.append(doubt)
                continue
            findings.append(
                Finding("unvalidated", FindingSeverity.WARNING, f"{doubt}: restored anyway", name)
            )
        if not evicted_by_us(obj):
            if not force:
                refused.append(name)
                continue
            findings.append(
                Finding(
                    "not-ours",
                    FindingSeverity.WARNING,
                    f"node {name} was not evicted by krea-ops (no {EVICTED_BY}); "
                    "--force uncordons it anyway",
                    name,
                )
            )
        steps.append(step)
        note = f"restored (uncordoned, {TAINT_KEY} removed) by {user}"
        note += f": {reason}" if reason else ""
        steps.append(node_event(name, obj, "Restore", "Restored", note))
    if bad:
        raise BadInput(
            f"{'; '.join(bad)}: restoring puts it back in service; pass --force to restore "
            "it anyway; nothing was changed"
        )
    if unvalidated:
        first = unvalidated[0].split(" ", 2)[1]
        raise BadInput(
            f"{'; '.join(unvalidated)}: validate it first (krea-ops nodes validate {first}) "
            "or pass --force to restore it anyway; nothing was changed"
        )
    if refused:
        raise BadInput(
            f"node {', '.join(refused)} was not evicted by krea-ops (no {EVICTED_BY} "
            "annotation, no krea.ai/unhealthy taint): someone else cordoned it; pass --force "
            "to uncordon it anyway; nothing was changed"
        )
    return Plan(
        action="nodes restore",
        nodes=nodes,
        reason=reason,
        user=user,
        steps=tuple(steps),
        findings=tuple(findings),
        options={"force": force},
        fleet_nodes=0,
    )
