"""The one executor: runs a plan's steps in order and records the API calls it made.

Every write goes through a ``RecordingCluster``, the product's ``Cluster`` whose
``request`` notes each call that is not a read (method, path, the object it is about,
the answer's status), so what ran can be compared with what the plan said (a retried
call, 409 or 429, is the same call made again). Node edits are ``kube.writes.update``
(read-modify-write with ``resourceVersion``, bounded retry on 409); evictions are
``kube.eviction.evict_all`` (in parallel up to a cap, 429s retried with jittered backoff
until the deadline), each with the pod's UID as precondition; an evicted pod is waited
for until it is gone. Events go through ``kube.events.EventRecorder``.

An evicted pod on a node whose kubelet stopped posting (Ready Unknown) is not waited for
once it is terminating: nothing but that kubelet would end it.

Blocked pods (a budget still refusing at the deadline, a pod still terminating) make the
result ``blocked`` (exit 3) naming each pod and the budget holding it; the node stays
cordoned, tainted and annotated. Anything else that fails makes it ``failed`` (exit 1).
An error that stops the run (the API server gone) ends it ``failed`` at that step; the
audit log's ``end`` record then lists the steps never begun (``not_run``), so the log
alone says what ran, what failed and what did not run; the same command run again plans
only what is left.

An Event that a run never recorded although it made the change the Event tells of (killed
or stopped between the two steps) is owed: the ``start`` record keeps each Event step's
content, and the next run of the same command (same action, subject and nodes) reads the
audit log's tail, finds the Events owed and records each of them first, once, as steps of
its own (unless its plan records that Event anyway). The change itself is never made
again: its planner finds it made.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from krea_ops.errors import EXIT_BLOCKED, EXIT_FAILED, BadInput, KreaError, Unavailable
from krea_ops.kube.cluster import ApiAnswer, Cluster
from krea_ops.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef, client_secrets
from krea_ops.kube.eviction import CONCURRENCY, EvictionResult, Outcome, evict_all
from krea_ops.kube.rules import condition_status, is_deleting
from krea_ops.kube.times import rfc3339
from krea_ops.kube.writes import update
from krea_ops.runbook.audit import AuditLog, owed_events, tail_records
from krea_ops.runbook.burst import run_move
from krea_ops.runbook.plan import Call, EventSpec, Plan, PodRef, Step, StepKind

POLL_S = 1.0  # how often a pod being deleted is looked at (kubectl drain: 1 s)


@dataclass(frozen=True)
class MadeCall:
    method: str
    path: str
    about: str
    status: int | None  # None: the server could not be reached

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.method, self.path, self.about)


def about(method: str, path: str, body: Any) -> str:
    """The object a call is about, read from its path (an Event: from its body)."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[-1] == "events" and isinstance(body, dict):
        ref = body.get("involvedObject") or {}
        where = f"{ref['namespace']}/" if ref.get("namespace") else ""
        return f"event about {str(ref.get('kind', '')).lower()} {where}{ref.get('name', '')}"
    if "nodes" in parts:
        return f"node {parts[parts.index('nodes') + 1]}"
    if "jobsets" in parts and "namespaces" in parts:
        namespace = parts[parts.index("namespaces") + 1]
        rest = parts[parts.index("jobsets") + 1 :]
        name = rest[0] if rest else ((body or {}).get("metadata") or {}).get("name", "")
        return f"jobset {namespace}/{name}"
    if "pods" in parts and "namespaces" in parts:
        namespace = parts[parts.index("namespaces") + 1]
        return f"pod {namespace}/{parts[parts.index('pods') + 1]}"
    return "/".join(parts)


class RecordingCluster(Cluster):
    """``inner`` (every request goes through its ``request``), noting each call that is
    not a GET in ``made``."""

    def __init__(self, inner: Cluster) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s)
        self.inner = inner
        self.made: list[MadeCall] = []
        self._made_lock = threading.Lock()

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str | int | None] | None = None,
        raw: bool = False,
    ) -> ApiAnswer:
        status: int | None = None
        try:
            answer = self.inner.request(
                what, method, path, body=body, content_type=content_type, query=query, raw=raw
            )
            status = answer.status
            return answer
        finally:
            if method != "GET":
                with self._made_lock:
                    self.made.append(MadeCall(method, path, about(method, path, body), status))

    def take(self) -> list[MadeCall]:
        with self._made_lock:
            out, self.made = self.made, []
        return out


@dataclass(frozen=True)
class StepResult:
    index: int
    kind: StepKind
    description: str
    status: str  # done, unchanged, blocked, failed
    lines: tuple[str, ...]  # what happened, one line each
    made: tuple[MadeCall, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.index,
            "kind": str(self.kind),
            "description": self.description,
            "status": self.status,
            "lines": list(self.lines),
            "calls": [
                {"method": c.method, "path": c.path, "about": c.about, "http_status": c.status}
                for c in self.made
            ],
        }


@dataclass(frozen=True)
class RunResult:
    plan: Plan
    run_id: str
    steps: tuple[StepResult, ...]
    blocked: tuple[str, ...] = ()  # one line per pod still there, and what holds it
    failed: tuple[str, ...] = ()
    stopped: str | None = None  # the error that ended the run before its last step

    @property
    def status(self) -> str:
        if self.failed or self.stopped:
            return "failed"
        return "blocked" if self.blocked else "done"

    @property
    def exit_code(self) -> int:
        return {"failed": EXIT_FAILED, "blocked": EXIT_BLOCKED}.get(self.status, 0)

    @property
    def made(self) -> tuple[MadeCall, ...]:
        return tuple(c for s in self.steps for c in s.made)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "blocked": list(self.blocked),
            "failed": list(self.failed),
            "stopped": self.stopped,
            "steps": [s.as_dict() for s in self.steps],
        }


@dataclass
class _Run:
    """What the steps of one run learn about each other: pods left per node."""

    left: dict[str, list[str]] = field(default_factory=dict)  # node -> lines
    blocked: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def execute(
    cluster: Cluster,
    plan: Plan,
    *,
    audit: AuditLog | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    concurrency: int = CONCURRENCY,
    fence: Callable[[], None] | None = None,
) -> RunResult:
    """Run ``plan``'s steps in order. A refused plan raises before any call.

    ``fence`` (a leader-elected controller's): called before every step; a ``KreaError``
    from it stops the run there (``stopped`` says why) and no later step is made."""
    if plan.refused:
        raise BadInput(f"{plan.refused}; nothing was changed")
    if audit is not None:
        plan = with_owed_events(plan, audit.path)
    recording = RecordingCluster(cluster)
    secrets = client_secrets(cluster)
    run_id = uuid.uuid4().hex
    base = {"run_id": run_id, "action": plan.action, "user": plan.user, "reason": plan.reason}
    if audit is not None:
        audit.append(
            {
                **base,
                "record": "start",
                "time": rfc3339(wall()),
                "plan": plan.as_dict(),
                "events": _event_specs(plan),
            }
        )
    state = _Run()
    results: list[StepResult] = []
    stopped: str | None = None
    with EventRecorder(recording, secrets=secrets) as events:
        for index, step in enumerate(plan.steps, 1):
            if fence is not None:
                try:
                    fence()
                except KreaError as exc:
                    stopped = str(exc)
                    break
            try:
                status, lines = _run_step(recording, events, plan, step, state, clock, concurrency)
            except KreaError as exc:
                status, lines, stopped = "failed", [str(exc)], str(exc)
            result = StepResult(
                index, step.kind, step.description, status, tuple(lines), tuple(recording.take())
            )
            results.append(result)
            if audit is not None:
                audit.append(
                    {**base, "record": "step", "time": rfc3339(wall()), **result.as_dict()}
                )
            if stopped:
                break
    run = RunResult(
        plan, run_id, tuple(results), tuple(state.blocked), tuple(state.failed), stopped
    )
    if audit is not None:
        # a stopped run names the steps it never began, so the log alone says what ran
        not_run = [
            {"step": i, "kind": str(s.kind), "description": s.description}
            for i, s in enumerate(plan.steps, 1)
            if i > len(results)
        ]
        audit.append(
            {
                **base,
                "record": "end",
                "time": rfc3339(wall()),
                "status": run.status,
                "blocked": list(run.blocked),
                "failed": list(run.failed),
                "stopped": stopped,
                "not_run": not_run,
            }
        )
    return run


def _event_specs(plan: Plan) -> list[dict[str, Any]]:
    """What each Event step of ``plan`` records, for the ``start`` record: a later run
    records from it an Event this run owes (see ``with_owed_events``)."""
    out = []
    for index, step in enumerate(plan.steps, 1):
        spec = step.event
        if step.kind is StepKind.EVENT and spec is not None:
            out.append(
                {
                    "step": index,
                    "regarding": spec.regarding.as_dict(),
                    "action": spec.action,
                    "reason": spec.reason,
                    "note": spec.note,
                }
            )
    return out


def with_owed_events(plan: Plan, audit_log: Path) -> Plan:
    """``plan`` with an Event step first for each Event an interrupted run of the same
    command owes (``owed_events``, from the audit log's tail); ``plan`` itself when none."""
    extra: list[Step] = []
    for run_id, spec, call in owed_events(plan, tail_records(audit_log, plan.action)):
        ref = spec["regarding"]
        regarding = ObjectRef(
            kind=str(ref.get("kind", "")),
            name=str(ref.get("name", "")),
            namespace=str(ref.get("namespace", "")),
            uid=str(ref.get("uid", "")),
            api_version=str(ref.get("apiVersion", "v1")),
            resource_version=str(ref.get("resourceVersion", "")),
            field_path=str(ref.get("fieldPath", "")),
        )
        what = f"{regarding.kind.lower()} {regarding.name}"
        extra.append(
            Step(
                StepKind.EVENT,
                f"record Event {spec.get('reason')} on {what}, owed by run {run_id[:12]} "
                "(it made the change and stopped before recording it)",
                (
                    Call(
                        str(call.get("method", "POST")),
                        str(call.get("path", "")),
                        str(call.get("about", "")),
                        str(call.get("why", "")),
                    ),
                ),
                node=regarding.name if regarding.kind == "Node" else None,
                event=EventSpec(
                    regarding,
                    str(spec.get("action", "")),
                    str(spec.get("reason", "")),
                    str(spec.get("note", "")),
                ),
            )
        )
    return replace(plan, steps=(*extra, *plan.steps)) if extra else plan


def _run_step(
    cluster: Cluster,
    events: EventRecorder,
    plan: Plan,
    step: Step,
    state: _Run,
    clock: Callable[[], float],
    concurrency: int,
) -> tuple[str, list[str]]:
    if step.kind is StepKind.UPDATE:
        assert step.target is not None
        written = update(cluster, step.target, *step.edits)
        return ("done" if written.changed else "unchanged"), [written.summary()]
    if step.kind is StepKind.EVENT:
        spec = step.event
        assert spec is not None
        left = state.left.get(step.node or "", [])
        if left and spec.blocked_reason:
            note = f"{spec.note}; left on the node: {'; '.join(left)}"
            recorded = events.record(
                spec.regarding, WARNING, spec.blocked_reason, spec.action, note
            )
        else:
            kind = WARNING if spec.warning else NORMAL
            recorded = events.record(spec.regarding, kind, spec.reason, spec.action, spec.note)
        if recorded.error:  # events are best effort, as in Kubernetes
            return "failed", [f"event not recorded: {recorded.error}"]
        return "done", [f"event {recorded.namespace}/{recorded.name}"]
    if step.kind is StepKind.CREATE:
        return _create(cluster, step)
    if step.kind is StepKind.REMOVE:
        return _remove(cluster, plan, step, clock)
    if step.kind is StepKind.MIGRATE:
        return _move(cluster, events, plan, step, state, clock)
    return _drain(cluster, events, plan, step, state, clock, concurrency)


def _create(cluster: Cluster, step: Step) -> tuple[str, list[str]]:
    """POST the call's body; any refusal (409 included: someone made it meanwhile) stops
    the run with the server's words."""
    (call,) = step.calls
    answer = cluster.request(f"create {call.about}", "POST", call.path, body=call.body)
    if not answer.ok:
        raise cluster.refusal(f"create {call.about}", answer)
    uid = ((answer.body or {}).get("metadata") or {}).get("uid")
    return "done", [f"{call.about} created (uid {uid})"]


def _remove(
    cluster: Cluster, plan: Plan, step: Step, clock: Callable[[], float]
) -> tuple[str, list[str]]:
    """DELETE with the call's DeleteOptions (a UID precondition), then wait until an
    object of that UID is no more, up to ``timeout_s``: what the next step creates may
    take its name."""
    (call,) = step.calls
    answer = cluster.request(f"delete {call.about}", "DELETE", call.path, body=call.body)
    if answer.status == 404:
        return "unchanged", [f"{call.about} was already gone"]
    if not answer.ok:
        raise cluster.refusal(f"delete {call.about}", answer)
    uid = ((call.body or {}).get("preconditions") or {}).get("uid")
    deadline = clock() + float(plan.options.get("timeout_s", 300))
    while True:
        got = cluster.request(f"get {call.about}", "GET", call.path)
        if got.status == 404 or (got.ok and (got.body or {}).get("metadata", {}).get("uid") != uid):
            return "done", [f"{call.about} deleted"]
        if clock() >= deadline:
            raise KreaError(f"{call.about} is still being deleted; run the command again")
        time.sleep(min(POLL_S, max(0.0, deadline - clock())))


def _move(
    cluster: Cluster,
    events: EventRecorder,
    plan: Plan,
    step: Step,
    state: _Run,
    clock: Callable[[], float],
) -> tuple[str, list[str]]:
    """One pod of ``burst migrate``, paced by ``runbook.burst.run_move``; the moves
    after one that did not finish are not made (the run ends blocked)."""
    if state.blocked or state.failed:
        return "skipped", ["not moved: an earlier move did not finish"]
    pod, node = step.pods[0], step.node or ""
    timeout_s = float(plan.options.get("timeout_s", 600))
    status, lines, problem = run_move(cluster, step, timeout_s, clock)
    if problem is not None:
        (state.failed if status == "failed" else state.blocked).append(problem)
        _pod_event(events, plan, pod, node, WARNING, "MigrationBlocked", problem)
    else:
        _pod_event(events, plan, pod, node, NORMAL, "Migrated", f"moved off node {node}")
    return status, lines


def _drain(
    cluster: Cluster,
    events: EventRecorder,
    plan: Plan,
    step: Step,
    state: _Run,
    clock: Callable[[], float],
    concurrency: int,
) -> tuple[str, list[str]]:
    node = step.node or ""
    timeout_s = float(plan.options.get("timeout_s", 300))
    grace = plan.options.get("grace_period_s")
    deadline = clock() + timeout_s
    if step.kind is StepKind.DELETE:
        results = [_delete(cluster, pod, grace) for pod in step.pods]
    else:
        results = evict_all(
            cluster,
            [(p.namespace, p.name, p.uid) for p in step.pods],
            deadline=deadline,
            concurrency=concurrency,
            grace_period_s=grace,
            clock=clock,
        )
    lines: list[str] = []
    left: list[str] = []
    verb = "deleted" if step.kind is StepKind.DELETE else "evicted"
    lost: list[bool] = []  # whether the node's kubelet stopped posting: read once, if asked

    def kubelet_lost() -> bool:
        if not lost:
            lost.append(_kubelet_lost(cluster, node))
        return lost[0]

    for pod, result in zip(step.pods, results, strict=True):
        left_there = result.done and _gone(cluster, pod, deadline, clock, kubelet_lost)
        if left_there is not False:
            line = f"pod {pod.what} {verb}"
            if left_there is None:
                line += (
                    f" (it stays Terminating on {node}, whose kubelet stopped posting its "
                    "status, until the node comes back or is deleted)"
                )
            lines.append(line)
            _pod_event(events, plan, pod, node, NORMAL, "Evicted", f"{verb} from node {node}")
            continue
        if result.done:
            text = f"pod {pod.what} is still terminating after {timeout_s:g}s"
        elif result.outcome is Outcome.BLOCKED:
            budget = f"PodDisruptionBudget {pod.namespace}/{result.budget}"
            text = f"pod {pod.what} held by {budget if result.budget else 'a budget'}"
        else:
            text = result.summary()
        # the step's line (audit, Event) keeps the server's words; the exit line is short
        lines.append(f"{text}: {result.message}" if result.message else text)
        left.append(text)
        failed = not result.done and result.outcome not in (Outcome.BLOCKED, Outcome.THROTTLED)
        (state.failed if failed else state.blocked).append(text)
        _pod_event(events, plan, pod, node, WARNING, "EvictionBlocked", lines[-1])
    state.left.setdefault(node, []).extend(left)  # a gang's step, then the rest
    return ("blocked" if left else "done"), lines


def _kubelet_lost(cluster: Cluster, node: str) -> bool:
    """Whether ``node``'s kubelet stopped posting its status: its Ready condition is
    Unknown (the node lifecycle controller's mark once ``--node-monitor-grace-period``
    passed without a heartbeat). A pod deleted there keeps its grace period (the API
    server's pod strategy, ``CheckGracefulDelete``, zeroes it only for an unbound or
    finished pod) and only its kubelet ends it; the pod GC removes the pods of nodes that
    are gone or carry the out-of-service taint, not those of unreachable ones."""
    if not node:
        return False
    answer = cluster.request(f"get node {node}", "GET", f"/api/v1/nodes/{node}")
    if not answer.ok or not isinstance(answer.body, dict):
        return False
    return condition_status(answer.body, "Ready") == "Unknown"


def _pod_event(
    events: EventRecorder, plan: Plan, pod: PodRef, node: str, type_: str, reason: str, note: str
) -> None:
    ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
    why = f"{note} by krea-ops ({plan.action}, by {plan.user}"
    why += f", reason: {plan.reason})" if plan.reason else ")"
    events.record(ref, type_, reason, "Evict", why)


def _delete(cluster: Cluster, pod: PodRef, grace: int | None) -> EvictionResult:
    """``--force``: delete the pod (budgets are not consulted), UID as precondition."""
    options: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": pod.uid},
    }
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
    try:
        answer = cluster.request(f"delete pod {pod.what}", "DELETE", path, body=options)
    except Unavailable as exc:
        return EvictionResult(pod.namespace, pod.name, Outcome.FAILED, str(exc))
    if answer.ok:
        return EvictionResult(pod.namespace, pod.name, Outcome.EVICTED, http_status=answer.status)
    if answer.status in (404, 409):  # gone, or a new pod of that name (UID precondition)
        return EvictionResult(pod.namespace, pod.name, Outcome.GONE, answer.message)
    message = answer.message or f"HTTP {answer.status}"
    return EvictionResult(
        pod.namespace, pod.name, Outcome.FAILED, message, None, None, answer.status
    )


def _gone(
    cluster: Cluster,
    pod: PodRef,
    deadline: float,
    clock: Callable[[], float],
    kubelet_lost: Callable[[], bool] = lambda: False,
) -> bool | None:
    """Wait until the pod of that UID is no more (404, or a successor took its name): True.
    None: it is terminating on a node whose kubelet stopped posting (``kubelet_lost``),
    where nothing will finish its deletion before the node comes back or is deleted, so
    there is nothing to wait for (its controller replaced it already). False: still there
    at the deadline."""
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
    while True:
        answer = cluster.request(f"get pod {pod.what}", "GET", path)
        if answer.status == 404:
            return True
        meta = (answer.body or {}).get("metadata") or {}
        if answer.ok and meta.get("uid") != pod.uid:
            return True
        if answer.ok and is_deleting(answer.body or {}) and kubelet_lost():
            return None
        if clock() >= deadline:
            return False
        time.sleep(min(POLL_S, max(0.0, deadline - clock())))
