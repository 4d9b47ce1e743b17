"""``burst pause|unpause|migrate`` as plans.

Pause: our own taint ``krea.ai/burst-paused=true:NoSchedule`` on every virtual node, with
annotations ``krea.ai/burst-paused-by|-reason|-at`` (one read-modify-write per node;
the provider's taints, ``virtual-kubelet.io/provider`` and the node lifecycle ones, stay
as they are). NoSchedule: no new placement offsite; running offsite pods keep running.
A real virtual-kubelet writes ``spec.taints`` only when it creates its Node and later
patches only status and metadata, so the taint survives its heartbeats and restarts; a
Node deleted and re-created comes back without it (run ``burst pause`` again).
Unpause removes that taint (whatever its effect) and our annotations, nothing else.

Migrate ``--back``: inference pods on virtual nodes go back to in-cluster GPUs, one at a
time. The virtual nodes are paused for the duration (the plan's first step, unless they
are paused already, and its last step lifts that pause): an evicted pod's replacement,
which tolerates the provider taint but never ours, can then only land in-cluster. Each
eviction (Eviction API, budgets respected, 429 retried) waits until the workload has one
more Ready pod in-cluster than before it, and is made only while a Ready pod of the
workload would not take it below its Ready count at the start minus one, and while an
in-cluster GPU is free for it.

Migrate ``--out``: the reverse, to clear in-cluster GPUs (ahead of a large training).
The nodes the chosen pods leave, and every other in-cluster node with room for one of
them, get taint ``krea.ai/burst-out=true:NoSchedule`` for the duration, so each
replacement, which prefers in-cluster nodes, lands on a virtual node; the last step
removes that taint, and the GPUs are free for what is waiting for them.

A run killed or stopped before its last steps leaves its steering on (the pause, whose
reason names ``burst migrate --back``; the ``krea.ai/burst-out`` taint): the same command
run again lifts it at its end, also when it has nothing left to move (then that is its
whole plan), so a rerun converges to what one clean run leaves.

Both are bounded: ``--max N`` pods per run (default: as many as the free GPUs on the
other side hold), chosen in order (``--back``: the dearest provider first), and the
plan names each pod in that order. No free GPU on the other side: refused, nothing is
written.

Migrate is a read and a pure build, as ``runbook.nodes``' evict is: ``read_migrate``
(every read of the cluster and of the audit log, as ``MigrateInputs``) then
``build_migrate``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from krea_ops.burst import (
    ANN_PRICE,
    INFERENCE_SELECTOR,
    PAUSE_TAINT_EFFECT,
    PAUSE_TAINT_KEY,
    PAUSE_TAINT_VALUE,
    PAUSED_AT,
    PAUSED_BY,
    PAUSED_REASON,
    VK_TAINT_KEY,
)
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster, node_info, pod_gpus
from krea_ops.kube.rules import (
    UNFINISHED_PODS,
    controller_of,
    format_selector,
    is_active,
    is_ready,
    labels_match,
    selector_matches,
    tolerates,
)
from krea_ops.kube.rules import (
    meta as _meta,
)
from krea_ops.kube.times import rfc3339
from krea_ops.kube.writes import AddTaint, Edit, RemoveTaint, SetAnnotations
from krea_ops.model import Severity as HealthSeverity
from krea_ops.queue import BAD as CAPACITY_BAD
from krea_ops.queue import HEALTHY, node_capacity
from krea_ops.queue import UNKNOWN as CAPACITY_UNKNOWN
from krea_ops.runbook.audit import interrupted_calls, owes_events
from krea_ops.runbook.nodes import (
    event_call,
    node_event,
    read_nodes,
    update_step,
)
from krea_ops.runbook.plan import (
    Call,
    Finding,
    FindingSeverity,
    MoveSpec,
    Plan,
    PodRef,
    Step,
    StepKind,
)
from krea_ops.units import counted

# The burst conventions are ``krea_ops.burst``'s, the ones ``burst status`` reads. The
# console finds the virtual nodes (``burst.status.find_virtual_nodes``) and hands their
# names to these plans.
OUT_TAINT_KEY = "krea.ai/burst-out"
OUT_TAINT_VALUE = "true"
OUT_TAINT_EFFECT = "NoSchedule"
DEFAULT_MIGRATE_TIMEOUT_S = 600.0
BACK = "back"
OUT = "out"

Obj = dict[str, Any]


# -- pause and unpause -------------------------------------------------------------------


def _virtual_objs(cluster: Cluster, virtual_nodes: Sequence[str]) -> dict[str, Obj]:
    names = sorted(set(virtual_nodes))
    if not names:
        raise BadInput(
            "no virtual-kubelet nodes in the cluster (bursting is not set up); nothing was changed"
        )
    return read_nodes(cluster, names)


def _pause_edits(obj: Obj, reason: str, user: str, at: str) -> tuple[Edit, ...]:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    paused = any(
        t.get("key") == PAUSE_TAINT_KEY for t in (obj.get("spec") or {}).get("taints") or ()
    )
    return (
        AddTaint(PAUSE_TAINT_KEY, PAUSE_TAINT_VALUE, PAUSE_TAINT_EFFECT),
        SetAnnotations(
            {
                PAUSED_BY: user,
                PAUSED_REASON: reason,
                # the first pause's time stays: a re-run changes nothing
                PAUSED_AT: (annotations.get(PAUSED_AT) if paused else None) or at,
            }
        ),
    )


UNPAUSE_EDITS: tuple[Edit, ...] = (
    RemoveTaint(PAUSE_TAINT_KEY),
    SetAnnotations(dict.fromkeys((PAUSED_BY, PAUSED_REASON, PAUSED_AT))),
)


def _pause_steps(objs: Mapping[str, Obj], reason: str, user: str, at: str) -> list[Step]:
    steps: list[Step] = []
    for name, obj in objs.items():
        step = update_step(
            name, obj, _pause_edits(obj, reason, user, at), "stop new placements offsite"
        )
        if step is None:
            continue
        note = f"bursting paused ({PAUSE_TAINT_KEY}={PAUSE_TAINT_VALUE}:NoSchedule) by {user}: "
        steps += [step, node_event(name, obj, "Pause", "BurstPaused", note + reason)]
    return steps


def _unpause_steps(objs: Mapping[str, Obj], user: str, why: str | None) -> list[Step]:
    steps: list[Step] = []
    for name, obj in objs.items():
        step = update_step(name, obj, UNPAUSE_EDITS, "allow placements offsite again")
        if step is None:
            continue
        note = f"bursting resumed ({PAUSE_TAINT_KEY} removed) by {user}"
        note += f": {why}" if why else ""
        steps += [step, node_event(name, obj, "Unpause", "BurstResumed", note)]
    return steps


def plan_pause(
    cluster: Cluster,
    virtual_nodes: Sequence[str],
    *,
    reason: str,
    user: str,
    now: Callable[[], float] = time.time,
) -> Plan:
    """Taint every virtual node with ours and say who, why and since when."""
    reason = (reason or "").strip()
    if not reason:
        raise BadInput("--reason must say why bursting is paused (it goes on the node)")
    objs = _virtual_objs(cluster, virtual_nodes)
    steps = _pause_steps(objs, reason, user, rfc3339(now()))
    findings = [
        Finding(
            "already",
            FindingSeverity.INFO,
            f"node {name} is already paused by {user} with that reason",
            name,
        )
        for name in objs
        if not any(s.node == name for s in steps)
    ]
    findings.append(
        Finding(
            "running",
            FindingSeverity.INFO,
            "pods running offsite keep running (NoSchedule); burst migrate --back moves them",
        )
    )
    return Plan(
        action="burst pause",
        nodes=tuple(objs),
        reason=reason,
        user=user,
        steps=tuple(steps),
        findings=tuple(findings),
        options={"taint": f"{PAUSE_TAINT_KEY}={PAUSE_TAINT_VALUE}:{PAUSE_TAINT_EFFECT}"},
    )


def plan_unpause(
    cluster: Cluster, virtual_nodes: Sequence[str], *, user: str, reason: str | None = None
) -> Plan:
    """Remove our pause taint and annotations from every virtual node; nothing else."""
    objs = _virtual_objs(cluster, virtual_nodes)
    steps = _unpause_steps(objs, user, reason)
    findings = [
        Finding("already", FindingSeverity.INFO, f"node {name} is not paused", name)
        for name in objs
        if not any(s.node == name for s in steps)
    ]
    return Plan(
        action="burst unpause",
        nodes=tuple(objs),
        reason=reason,
        user=user,
        steps=tuple(steps),
        findings=tuple(findings),
        options={"taint": f"{PAUSE_TAINT_KEY}={PAUSE_TAINT_VALUE}:{PAUSE_TAINT_EFFECT}"},
    )


# -- capacity --------------------------------------------------------------------------


def fits_node(pod: Obj, node: Obj) -> bool:
    """A healthy node the pod may be scheduled on: Ready, not cordoned, no taint of
    effect NoSchedule or NoExecute it does not tolerate, its nodeSelector matched."""
    spec = node.get("spec") or {}
    if not is_ready(node) or spec.get("unschedulable"):
        return False
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    for taint in spec.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return False
    wanted = (pod.get("spec") or {}).get("nodeSelector")
    return labels_match(wanted, _meta(node).get("labels") or {})


@dataclass
class Side:
    """The nodes of one side (in-cluster or virtual) and the GPUs free on each of its
    healthy ones; ``unhealthy``: the GPU nodes left out by telemetry (node -> why)."""

    nodes: dict[str, Obj]
    free: dict[str, int]
    unhealthy: dict[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> int:
        """The healthy nodes (``queue list``'s rule: Ready, not cordoned, not BAD or of
        unknown health; their taints are judged per pod when a pod is placed)."""
        return len(self.free)

    @property
    def most_free(self) -> int:
        return max((v for v in self.free.values()), default=0)

    @property
    def total_free(self) -> int:
        return sum(max(v, 0) for v in self.free.values())

    def place(self, pod: Obj) -> str | None:
        """First fit: a node with room and no taint against the pod; takes its GPUs."""
        need = max(pod_gpus(pod.get("spec") or {}), 0)
        for name in sorted(self.free, key=lambda n: (-self.free[n], n)):
            if self.free[name] >= need and fits_node(pod, self.nodes[name]):
                self.free[name] -= need
                return name
        return None


ANY_TAINT: tuple[Obj, ...] = ({"operator": "Exists"},)


def read_side(
    cluster: Cluster,
    virtual: bool,
    virtual_names: Iterable[str],
    node_severity: Mapping[str, HealthSeverity] | None = None,
) -> Side:
    """GPUs free per node: allocatable minus what active pods bound there ask for.
    In-cluster: GPU nodes that are Ready and not cordoned (the taints are judged per pod
    in ``fits_node``) and, with ``node_severity`` (the health verdicts ``queue list``
    counts healthy nodes by), neither BAD nor of unknown health. Virtual: the virtual
    nodes that are Ready."""
    names = set(virtual_names)
    nodes = {
        _meta(n).get("name", ""): n
        for n in cluster.list_all("list nodes", "/api/v1/nodes")
        if (_meta(n).get("name") in names) == virtual
    }
    # queue list's rule, the one healthy-node count (queue.node_capacity); every taint
    # tolerated here, as a pod's own tolerations are judged when it is placed (fits_node)
    free: dict[str, int] = {}
    unhealthy: dict[str, str] = {}
    for name, obj in nodes.items():
        cap = node_capacity(node_info(obj), ANY_TAINT, None if virtual else node_severity)
        if cap.gpus <= 0:
            continue
        if cap.state == HEALTHY:
            free[name] = cap.gpus
        elif cap.state in (CAPACITY_BAD, CAPACITY_UNKNOWN):
            unhealthy[name] = "BAD" if cap.state == CAPACITY_BAD else "health unknown"
    if free:
        selector = f"spec.nodeName!=,{UNFINISHED_PODS}"
        for pod in cluster.list_all("list pods", "/api/v1/pods", fieldSelector=selector):
            where = (pod.get("spec") or {}).get("nodeName")
            if where in free:
                free[where] -= pod_gpus(pod.get("spec") or {})
    return Side(nodes, free, unhealthy)


def _left_out(side: Side) -> str:
    """`` (2 more left out: 1 BAD, 1 of unknown health)``, or nothing."""
    if not side.unhealthy:
        return ""
    bad = sum(1 for why in side.unhealthy.values() if why == "BAD")
    unknown = len(side.unhealthy) - bad
    parts = [f"{bad} BAD"] if bad else []
    if unknown:
        parts.append(f"{unknown} of unknown health")
    return f"; {len(side.unhealthy)} more left out: {', '.join(parts)}"


def workload_name(pod: Obj) -> str:
    """``Deployment ns/x`` for a pod of a Deployment's ReplicaSet, else the controller's
    kind and name."""
    meta = _meta(pod)
    owner = controller_of(pod) or {}
    name = str(owner.get("name", ""))
    kind = str(owner.get("kind", "Pod"))
    template_hash = (meta.get("labels") or {}).get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        kind, name = "Deployment", name[: -len(template_hash) - 1]
    return f"{kind} {meta.get('namespace')}/{name}"


# -- migrate ---------------------------------------------------------------------------


def order_back(pods: list[Obj]) -> list[Obj]:
    """The dearest provider first (most saved per move), then by workload and name."""

    def price(pod: Obj) -> float:
        try:
            return float((_meta(pod).get("annotations") or {}).get(ANN_PRICE) or 0.0)
        except ValueError:
            return 0.0

    return sorted(pods, key=lambda p: (-price(p), workload_name(p), _meta(p).get("name", "")))


def _order_out(pods: list[Obj]) -> list[Obj]:
    """The newest first (the least warmed-up cache lost), then by name."""
    return sorted(
        pods,
        key=lambda p: (str(_meta(p).get("creationTimestamp") or ""), _meta(p).get("name", "")),
        reverse=True,
    )


@dataclass(frozen=True)
class MigrateInputs:
    """What a migrate plan is built from, read from the cluster and the audit log in one
    go (``read_migrate``), for one command (``direction``, ``selector``, ``user``,
    ``max_pods``): the virtual nodes as read (their ``resourceVersion`` is the plan's
    precondition), the side the pods go to (``there``) and, ``--out``, the in-cluster
    side they leave (``home``), the Running pods matching the selector, the
    PodDisruptionBudgets (read when a pod of the selector runs on the side it leaves),
    and what an interrupted run of the same command left: the moves it made
    (``moved``, which ``--max`` bounds) and whether it owes an Event (``owes_event``).
    ``build_migrate`` turns it into a Plan without another call."""

    direction: str
    selector: str
    user: str
    max_pods: int | None
    virtual: Mapping[str, Obj]
    there: Side
    home: Side | None
    pods: tuple[Obj, ...]
    budgets: tuple[Obj, ...] = ()
    moved: int = 0
    owes_event: bool = False

    @property
    def action(self) -> str:
        return f"burst migrate --{self.direction}"

    @property
    def steer_reason(self) -> str:
        return f"{self.action} by krea-ops (replacements go in-cluster)"


def _check_migrate_options(direction: str, max_pods: int | None, timeout_s: float) -> None:
    if direction not in (BACK, OUT):
        raise BadInput("say which way: --back (offsite pods home) or --out (in-cluster pods out)")
    if max_pods is not None and max_pods < 1:
        raise BadInput("--max must be 1 or more pods")
    if timeout_s <= 0:
        raise BadInput("--timeout must be more than 0 seconds")


def read_migrate(
    cluster: Cluster,
    virtual_nodes: Sequence[str],
    *,
    direction: str,
    user: str,
    max_pods: int | None = None,
    selector: str | None = None,
    audit_log: Path | None = None,
    node_severity: Mapping[str, HealthSeverity] | None = None,
) -> MigrateInputs:
    """Every read ``plan_migrate`` makes: the virtual nodes (BadInput when there are
    none, or one named is missing), both sides' free GPUs (``read_side``; ``node_severity``
    judges the in-cluster side a pod comes home to), the Running pods matching
    ``selector``, the budgets, and the audit log's tail for an interrupted run of the
    same command."""
    _check_migrate_options(direction, max_pods, 1.0)
    selector = selector or INFERENCE_SELECTOR
    vobjs = _virtual_objs(cluster, virtual_nodes)
    virtual = tuple(vobjs)
    back = direction == BACK
    there = read_side(cluster, not back, virtual, node_severity)  # where the pods go
    home = None if back else read_side(cluster, False, virtual)  # --out: where pods are now
    here_names = set(virtual) if home is None else set(home.nodes)
    listed = cluster.list_all(
        f"list pods matching {selector}",
        "/api/v1/pods",
        labelSelector=selector,
        fieldSelector="status.phase=Running",
    )
    budgets: list[Obj] = []
    if any((p.get("spec") or {}).get("nodeName") in here_names for p in listed):
        budgets = cluster.list_all(
            "list poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets"
        )
    inputs = MigrateInputs(
        direction=direction,
        selector=selector,
        user=user,
        max_pods=max_pods,
        virtual=vobjs,
        there=there,
        home=home,
        pods=tuple(listed),
        budgets=tuple(budgets),
    )
    if audit_log is None:
        return inputs
    moved = 0
    if max_pods is not None:
        # a run of this very command killed before its end has moved some already: --max
        # bounds the command, not each attempt at it
        moved = interrupted_calls(
            _probe(inputs, {"direction": direction, "max": max_pods, "selector": selector}),
            audit_log,
            "/eviction",
            ("direction", "max", "selector"),
        )
    return replace(inputs, moved=moved, owes_event=owes_events(_probe(inputs), audit_log))


def _probe(inputs: MigrateInputs, options: Mapping[str, Any] | None = None) -> Plan:
    """The command's plan as the audit log knows it (action, subject, nodes, options)."""
    return Plan(
        action=inputs.action,
        nodes=tuple(inputs.virtual),
        reason=inputs.steer_reason,
        user=inputs.user,
        steps=(),
        options=dict(options or {}),
    )


def plan_migrate(
    cluster: Cluster,
    virtual_nodes: Sequence[str],
    *,
    direction: str,
    user: str,
    max_pods: int | None = None,
    selector: str | None = None,
    timeout_s: float = DEFAULT_MIGRATE_TIMEOUT_S,
    now: Callable[[], float] = time.time,
    audit_log: Path | None = None,
    node_severity: Mapping[str, HealthSeverity] | None = None,
) -> Plan:
    """``read_migrate`` then ``build_migrate``. ``audit_log``: where an interrupted run
    of the same command may have left an Event owed (``runbook.execute.owed_events``):
    with nothing left to move or lift, the command still runs to record it, instead of
    being refused. ``node_severity``: the nodes' health verdicts, by which a BAD node or
    one of unknown health takes no pod home (None: not judged)."""
    _check_migrate_options(direction, max_pods, timeout_s)
    inputs = read_migrate(
        cluster,
        virtual_nodes,
        direction=direction,
        user=user,
        max_pods=max_pods,
        selector=selector,
        audit_log=audit_log,
        node_severity=node_severity,
    )
    return build_migrate(inputs, timeout_s=timeout_s, now=now())


def build_migrate(
    inputs: MigrateInputs, *, timeout_s: float = DEFAULT_MIGRATE_TIMEOUT_S, now: float
) -> Plan:
    """The migrate plan of ``inputs``, made at ``now`` (Unix s): pure (the sides' free
    GPUs it places pods on are copies)."""
    direction, selector, user, max_pods = (
        inputs.direction,
        inputs.selector,
        inputs.user,
        inputs.max_pods,
    )
    _check_migrate_options(direction, max_pods, timeout_s)
    vobjs = inputs.virtual
    virtual = tuple(vobjs)
    back = direction == BACK
    action = inputs.action
    there = replace(inputs.there, free=dict(inputs.there.free))  # placing takes its GPUs
    home = inputs.home
    here_names = set(virtual) if home is None else set(home.nodes)
    listed = inputs.pods
    findings: list[Finding] = []
    candidates: list[Obj] = []
    for pod in listed:
        where = (pod.get("spec") or {}).get("nodeName")
        if where not in here_names or not is_active(pod):
            continue
        what = f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"
        owner = controller_of(pod)
        if owner is None or owner.get("kind") == "DaemonSet":
            why = "no controller: nothing recreates it" if owner is None else "a DaemonSet pod"
            findings.append(
                Finding(
                    "stays",
                    FindingSeverity.INFO,
                    f"pod {what} on {where} stays: {why}",
                    where,
                    (what,),
                )
            )
            continue
        if not back:
            provider = next(
                (
                    t
                    for n in vobjs.values()
                    for t in (n.get("spec") or {}).get("taints") or ()
                    if t.get("key") == VK_TAINT_KEY
                ),
                {"key": VK_TAINT_KEY, "effect": "NoSchedule"},
            )
            if not tolerates((pod.get("spec") or {}).get("tolerations") or (), provider):
                findings.append(
                    Finding(
                        "stays",
                        FindingSeverity.INFO,
                        f"pod {what} on {where} stays: it does not tolerate {VK_TAINT_KEY}",
                        where,
                        (what,),
                    )
                )
                continue
        candidates.append(pod)
    ordered = order_back(candidates) if back else _order_out(candidates)
    steer_reason = inputs.steer_reason
    # what an earlier run of this command steered with and never lifted (it was killed or
    # stopped before its last steps): this run lifts it at its end
    if back:
        left_paused = {
            n: o
            for n, o in vobjs.items()
            if _paused(o) and (_meta(o).get("annotations") or {}).get(PAUSED_REASON) == steer_reason
        }
        left_steps = _unpause_steps(left_paused, user, f"{action} finished")
        left_names = list(left_paused)
    else:
        assert home is not None
        left_names = sorted(n for n, o in home.nodes.items() if _has_out_taint(o))
        left_steps = _untaint_steps({n: home.nodes[n] for n in left_names})

    side = "in-cluster" if back else "virtual-node"
    free_before = there.total_free
    chosen: list[tuple[Obj, str]] = []
    left_over: list[str] = []
    budget = max_pods
    if max_pods is not None:
        moved = inputs.moved
        budget = max(0, max_pods - moved)
        if moved:
            findings.append(
                Finding(
                    "already-moved",
                    FindingSeverity.INFO,
                    f"an interrupted run of this command moved {moved} of its --max "
                    f"{max_pods} pods: this run moves at most {budget}",
                )
            )
    for pod in ordered:
        what = f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"
        if budget is not None and len(chosen) >= budget:
            left_over.append(f"{what} (--max {max_pods})")
            continue
        target = there.place(pod)
        if target is None:
            left_over.append(f"{what} (no {side} GPU free for it)")
            continue
        chosen.append((pod, target))
    refusal = None
    if not ordered:
        refusal = (
            f"no running pod matching {selector} on "
            f"{'virtual' if back else 'in-cluster'} nodes to move"
        )
    elif budget == 0:
        refusal = f"the --max {max_pods} pods were moved by an interrupted run of this command"
    elif free_before <= 0:
        refusal = (
            f"no {side} GPU is free (0 free on {counted(there.healthy, 'healthy node')}"
            f"{_left_out(there)}) for the {counted(len(ordered), 'pod')} to move"
        )
    elif not chosen:
        smallest = min(pod_gpus(p.get("spec") or {}) for p in ordered)
        why = (
            f"at most {there.most_free} on one node and the smallest pod asks for {smallest}"
            if there.most_free < smallest
            else "none of the nodes with room is one the pods' node selector and tolerations allow"
        )
        refusal = (
            f"no {side} node has room for any of the {counted(len(ordered), 'pod')} to move: "
            f"{free_before} GPUs free on {counted(there.healthy, 'healthy node')}"
            f"{_left_out(there)}, {why}"
        )
    owed = False
    if refusal is not None and not left_steps:
        owed = inputs.owes_event
        if not owed:
            raise BadInput(f"{refusal}; nothing was changed")
    if refusal is not None:
        return Plan(
            action=action,
            nodes=virtual,
            reason=steer_reason,
            user=user,
            steps=tuple(left_steps),
            findings=(
                Finding("nothing-to-move", FindingSeverity.INFO, f"{refusal}: nothing is moved"),
                _left_finding(back, left_names)
                if not owed
                else Finding(
                    "owed-event",
                    FindingSeverity.INFO,
                    "an interrupted run of this command made a change and stopped before "
                    "its Event: this run records it",
                ),
            ),
            options={
                "direction": direction,
                "max": max_pods,
                "selector": selector,
                "timeout_s": timeout_s,
                "free_gpus": free_before,
            },
        )
    findings.insert(
        0,
        Finding(
            "capacity",
            FindingSeverity.INFO,
            f"{free_before} {side} GPUs free on {counted(there.healthy, 'healthy node')}"
            f"{_left_out(there)}; moves {len(chosen)} of {counted(len(ordered), 'pod')} "
            f"({sum(pod_gpus(p.get('spec') or {}) for p, _ in chosen)} GPUs)",
        ),
    )
    if left_over:
        findings.append(
            Finding(
                "stays",
                FindingSeverity.INFO,
                f"{len(left_over)} pods stay: {', '.join(left_over)}",
                None,
                tuple(x.split(" ", 1)[0] for x in left_over),
            )
        )

    # Ready counts per workload now: the floor each move keeps (minus one while it runs).
    ready_now: dict[str, int] = {}
    by_uid: dict[str, list[Obj]] = {}
    for pod in listed:
        owner = controller_of(pod)
        if owner is not None and is_active(pod):
            by_uid.setdefault(str(owner.get("uid")), []).append(pod)
    for uid, pods in by_uid.items():
        ready_now[uid] = sum(1 for p in pods if is_ready(p))
    budgets = inputs.budgets
    moving: dict[str, list[str]] = {}
    for pod, _ in chosen:
        moving.setdefault(workload_name(pod), []).append(_meta(pod).get("name", ""))
    for workload, names in moving.items():
        pod = next(p for p, _ in chosen if workload_name(p) == workload)
        uid = str((controller_of(pod) or {}).get("uid"))
        ready = ready_now.get(uid, 0)
        findings.append(
            Finding(
                "drops",
                FindingSeverity.WARNING if ready <= 1 else FindingSeverity.INFO,
                f"{workload}: {ready} Ready; drops to {ready - 1} Ready while each of its "
                f"{len(names)} moving pods is replaced (one at a time)",
                None,
                (workload,),
            )
        )
        labels = _meta(pod).get("labels") or {}
        for pdb in budgets:
            if _meta(pdb).get("namespace") != _meta(pod).get("namespace"):
                continue
            if not selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                continue
            if (pdb.get("status") or {}).get("disruptionsAllowed") == 0:
                findings.append(
                    Finding(
                        "budget",
                        FindingSeverity.BLOCKING,
                        f"{workload}: PodDisruptionBudget {_meta(pdb).get('namespace')}/"
                        f"{_meta(pdb).get('name')} allows 0 disruptions now; its moves wait "
                        f"up to --timeout {timeout_s:g}s",
                        None,
                        (workload,),
                    )
                )

    # The mechanism that steers each replacement, on for the duration.
    at = rfc3339(now)
    before: list[Step] = []
    after: list[Step] = []
    if back:
        to_pause = {
            n: o
            for n, o in vobjs.items()
            if not any(
                t.get("key") == PAUSE_TAINT_KEY for t in (o.get("spec") or {}).get("taints") or ()
            )
        }
        before = _pause_steps(to_pause, steer_reason, user, at)
        # the unpause is planned on the nodes as the pause leaves them
        paused_objs = {}
        for name, obj in to_pause.items():
            for edit in _pause_edits(obj, steer_reason, user, at):
                obj = edit.apply(obj) or obj
            paused_objs[name] = obj
        after = _unpause_steps({**left_paused, **paused_objs}, user, f"{action} finished")
        if left_paused:
            findings.append(_left_finding(back, left_names))
        elif not to_pause:
            findings.append(
                Finding(
                    "steer",
                    FindingSeverity.INFO,
                    "the virtual nodes are paused already: replacements go in-cluster; "
                    "they stay paused after the move",
                )
            )
        else:
            findings.append(
                Finding(
                    "steer",
                    FindingSeverity.INFO,
                    f"the virtual nodes are paused ({PAUSE_TAINT_KEY}) while pods move, so "
                    "replacements land in-cluster; the last step lifts that pause (a run "
                    "stopped half-way leaves it: krea-ops burst unpause)",
                )
            )
    else:
        paused = [
            n
            for n, o in vobjs.items()
            if any(
                t.get("key") == PAUSE_TAINT_KEY for t in (o.get("spec") or {}).get("taints") or ()
            )
        ]
        if len(paused) == len(vobjs):
            raise BadInput(
                "bursting is paused on every virtual node: run krea-ops burst unpause first; "
                "nothing was changed"
            )
        # the nodes the pods leave, and every other in-cluster node with room for one of
        # them: a replacement, which prefers in-cluster nodes, would land there otherwise
        sources = {str((p.get("spec") or {}).get("nodeName")) for p, _ in chosen}
        assert home is not None
        need = min(pod_gpus(p.get("spec") or {}) for p, _ in chosen)
        for name, free in home.free.items():
            if free >= need and any(fits_node(p, home.nodes[name]) for p, _ in chosen):
                sources.add(name)
        sources.update(left_names)  # still tainted by an earlier run: lifted at the end
        if left_names:
            findings.append(_left_finding(back, left_names))
        srcs = {name: home.nodes[name] for name in sorted(sources)}
        out_edit: tuple[Edit, ...] = (AddTaint(OUT_TAINT_KEY, OUT_TAINT_VALUE, OUT_TAINT_EFFECT),)
        off_edit: tuple[Edit, ...] = (RemoveTaint(OUT_TAINT_KEY, OUT_TAINT_EFFECT),)
        for name in sources:
            step = update_step(name, srcs[name], out_edit, "keep replacements off this node")
            if step is not None:
                before.append(step)
            tainted = AddTaint(OUT_TAINT_KEY, OUT_TAINT_VALUE, OUT_TAINT_EFFECT).apply(srcs[name])
            undo = update_step(
                name, tainted or srcs[name], off_edit, "free the node's GPUs for what waits"
            )
            if undo is not None:
                after.append(undo)
        findings.append(
            Finding(
                "steer",
                FindingSeverity.INFO,
                f"the nodes the pods leave and those with room for them "
                f"({', '.join(srcs)}) are tainted "
                f"{OUT_TAINT_KEY}={OUT_TAINT_VALUE}:NoSchedule while pods move, so replacements "
                "land on virtual nodes; the last step removes that taint",
            )
        )

    moves: list[Step] = []
    refs: dict[str, list[PodRef]] = {}
    for pod, target in chosen:
        owner = controller_of(pod) or {}
        floor = ready_now.get(str(owner.get("uid")), 0) - 1
        step = move_step(pod, target, virtual, floor, timeout_s, back=back)
        refs.setdefault(str(step.node), []).extend(step.pods)
        moves.append(step)
    return Plan(
        action=action,
        nodes=virtual,
        reason=steer_reason,
        user=user,
        steps=(*before, *moves, *after),
        findings=tuple(findings),
        options={
            "direction": direction,
            "max": max_pods,
            "selector": selector,
            "timeout_s": timeout_s,
            "free_gpus": free_before,
        },
        pods={k: tuple(v) for k, v in refs.items()},
    )


def _paused(obj: Obj) -> bool:
    return any(t.get("key") == PAUSE_TAINT_KEY for t in (obj.get("spec") or {}).get("taints") or ())


def _has_out_taint(obj: Obj) -> bool:
    return any(t.get("key") == OUT_TAINT_KEY for t in (obj.get("spec") or {}).get("taints") or ())


def _untaint_steps(objs: Mapping[str, Obj]) -> list[Step]:
    off: tuple[Edit, ...] = (RemoveTaint(OUT_TAINT_KEY, OUT_TAINT_EFFECT),)
    steps = [update_step(n, o, off, "free the node's GPUs for what waits") for n, o in objs.items()]
    return [s for s in steps if s is not None]


def _left_finding(back: bool, names: Sequence[str]) -> Finding:
    what = (
        f"pause ({PAUSE_TAINT_KEY}) of {', '.join(names)}"
        if back
        else f"taint {OUT_TAINT_KEY} on {', '.join(names)}"
    )
    return Finding(
        "interrupted",
        FindingSeverity.WARNING,
        f"an earlier burst migrate --{BACK if back else OUT} stopped before lifting its {what}: "
        "this run lifts it at its end",
    )


# Labels of a pod that its replacement need not share, left out of the selector that lists
# the workload's pods: the ReplicaSet's template hash, and the node's topology labels the
# API server copies onto a pod when it is bound (the PodTopologyLabels admission plugin,
# on by default since 1.35: "copies the `topology.kubernetes.io/{zone,region}` labels from
# the assigned Node object ... onto the Binding", kubernetes pkg/features/kube_features.go;
# plugin/pkg/admission/podtopologylabels/admission.go): a replacement bound elsewhere (on a
# virtual node, in another zone) has other values or none.
NOT_THE_WORKLOADS_LABELS = frozenset(
    ("pod-template-hash", "topology.kubernetes.io/zone", "topology.kubernetes.io/region")
)


def move_step(
    pod: Obj,
    target: str,
    virtual_nodes: Sequence[str],
    ready_floor: int,
    timeout_s: float,
    *,
    back: bool = True,
    node_selector: Mapping[str, str] | None = None,
) -> Step:
    """The MIGRATE step that moves ``pod`` (``--back``: home, where ``target`` has room
    now; else offsite), never taking its workload below ``ready_floor`` Ready pods, and
    waits for its replacement Ready on the other side (``run_move`` paces it).
    ``node_selector``: the replacement's, where it is not the pod's (``MoveSpec``). The
    migrate-back controller builds its plans from it too."""
    meta = _meta(pod)
    ns, name, uid = str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid"))
    ref = PodRef(ns, name, uid)
    source = str((pod.get("spec") or {}).get("nodeName"))
    owner = controller_of(pod) or {}
    workload = workload_name(pod)
    labels = meta.get("labels") or {}
    pod_selector = format_selector(
        {k: v for k, v in labels.items() if k not in NOT_THE_WORKLOADS_LABELS}
    )
    path = f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}"
    gpus = pod_gpus(pod.get("spec") or {})
    calls = (
        Call(
            "POST",
            f"{path}/eviction",
            f"pod {ref.what}",
            f"evict through the Eviction API (429 retried until --timeout {timeout_s:g}s), "
            f"only while {workload} has {max(ready_floor + 1, 0)}+ Ready pods and a GPU is "
            f"free {'in-cluster' if back else 'offsite'}",
            None,
            f"uid {uid}",
        ),
        event_call(ns, "pod", name, f"audit: Event about pod {ref.what}'s move"),
    )
    return Step(
        StepKind.MIGRATE,
        f"move pod {ref.what} ({workload}, {gpus} GPU) from {source} "
        f"{'in-cluster (room on ' + target + ')' if back else 'to a virtual node'}; "
        f"wait for its replacement Ready {'in-cluster' if back else 'offsite'}",
        calls,
        node=source,
        pods=(ref,),
        move=MoveSpec(
            ns,
            str(owner.get("uid")),
            workload,
            pod_selector,
            "in-cluster" if back else "virtual",
            tuple(virtual_nodes),
            ready_floor,
            gpus,
            None if node_selector is None else tuple(sorted(node_selector.items())),
        ),
    )


def moved_pods(plan: Plan) -> Sequence[PodRef]:
    """The pods a migrate plan moves, in order."""
    return [p for s in plan.steps if s.kind is StepKind.MIGRATE for p in s.pods]


# -- the executor's pacing of one move ------------------------------------------------

POLL_S = 1.0


def _workload_ready(cluster: Cluster, move: MoveSpec) -> tuple[int, int]:
    """(Ready pods of the workload, those of them on the side the move goes to)."""
    pods = cluster.list_all(
        f"list pods of {move.workload}",
        f"/api/v1/namespaces/{quote(move.namespace)}/pods",
        labelSelector=move.label_selector or None,
    )
    total = there = 0
    for pod in pods:
        owner = controller_of(pod) or {}
        if str(owner.get("uid")) != move.controller_uid or not is_active(pod) or not is_ready(pod):
            continue
        total += 1
        offsite = (pod.get("spec") or {}).get("nodeName") in move.virtual_nodes
        there += offsite == (move.to == "virtual")
    return total, there


def _wait(check: Callable[[], bool], deadline: float, clock: Callable[[], float]) -> bool:
    while True:
        if check():
            return True
        if clock() >= deadline:
            return False
        time.sleep(min(POLL_S, max(0.0, deadline - clock())))


def run_move(
    cluster: Cluster, step: Step, timeout_s: float, clock: Callable[[], float] = time.monotonic
) -> tuple[str, list[str], str | None]:
    """Move ``step``'s pod: (status, lines, the problem line when it did not finish).

    1. wait until its workload has more Ready pods than the floor (a move never takes it
       below its Ready count at planning minus one);
    2. check that a GPU is free for it on the other side (else: blocked, not evicted);
    3. evict it through the Eviction API (budgets respected, 429 retried until the
       deadline), with its UID as precondition;
    4. wait until the workload has one more Ready pod on the other side than before.
    """
    from krea_ops.kube.eviction import evict_until

    move, pod = step.move, step.pods[0]
    assert move is not None
    deadline = clock() + timeout_s
    path = f"/api/v1/namespaces/{quote(pod.namespace)}/pods/{quote(pod.name)}"
    answer = cluster.request(f"get pod {pod.what}", "GET", path)
    current = answer.body if answer.ok else None
    if current is None or _meta(current).get("uid") != pod.uid or not is_active(current):
        return "unchanged", [f"pod {pod.what} is gone already: nothing to move"], None

    counts: list[tuple[int, int]] = []

    def above_floor() -> bool:
        counts.append(_workload_ready(cluster, move))
        return counts[-1][0] > move.ready_floor

    if not _wait(above_floor, deadline, clock):
        problem = (
            f"pod {pod.what} not moved: {move.workload} has {counts[-1][0]} Ready pods, "
            f"a move needs {move.ready_floor + 1} (waited {timeout_s:g}s)"
        )
        return "blocked", [problem], problem
    there_before = counts[-1][1]
    side = read_side(cluster, move.to == "virtual", move.virtual_nodes)
    probe = current
    if move.node_selector is not None:  # the replacement's, not the pod's
        spec = {**(current.get("spec") or {}), "nodeSelector": dict(move.node_selector)}
        probe = {**current, "spec": spec}
    if side.place(probe) is None:
        where = "in-cluster" if move.to == "in-cluster" else "offsite"
        problem = f"pod {pod.what} not moved: no {where} GPU is free for it now"
        return "blocked", [problem], problem
    result = evict_until(
        cluster, pod.namespace, pod.name, deadline=deadline, uid=pod.uid, clock=clock
    )
    if not result.done:
        problem = f"pod {pod.what} not evicted: {result.summary()}"
        return ("failed" if result.outcome.value == "failed" else "blocked"), [problem], problem
    lines = [f"pod {pod.what} evicted ({result.attempts} calls)"]

    def replaced() -> bool:
        counts.append(_workload_ready(cluster, move))
        return counts[-1][1] > there_before

    if not _wait(replaced, deadline, clock):
        problem = (
            f"pod {pod.what} evicted, but no replacement of {move.workload} is Ready "
            f"{move.to} after {timeout_s:g}s"
        )
        return "blocked", [*lines, problem], problem
    total, there = counts[-1]
    lines.append(f"{move.workload}: replacement Ready {move.to} ({total} Ready, {there} {move.to})")
    return "done", lines, None
