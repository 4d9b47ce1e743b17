"""A Plan: the API calls an action will make, in order, and what the preflight found.

The same object is printed by ``--dry-run`` (as text, or as data with ``-o json|yaml``),
fills the confirmation, and is run by the one executor (``runbook.execute``), which
records the calls it really made so a test can hold the two side by side.

A ``Step`` is one unit of work on one or more objects: a read-modify-write of a node (its
edits sent as one merge patch carrying the ``resourceVersion`` read), the evictions of a
node's pods (run in parallel, each with the pod's UID as precondition), an Event. Steps
run in order; the calls inside a ``parallel`` step run at once, so their order is not
part of the plan. A ``Finding`` is what the operator should know before the first write:
a budget that allows no disruption, a pod nothing will recreate, emptyDir data that is
lost, a gang (JobSet) that restarts, the share of the fleet taken offline. A plan may be
``refused`` (beyond ``max_share``): it is printed, and never run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from krea_ops.kube.events import ObjectRef
from krea_ops.kube.writes import Edit, Target


@dataclass(frozen=True)
class MoveSpec:
    """What the executor needs to pace one move: the pod's workload (its controller's
    UID and a selector to list its pods), the nodes of the side it goes to (``to``:
    ``in-cluster`` or ``virtual``), the Ready count the workload must not fall below,
    and the GPUs it needs there. ``node_selector``: the nodeSelector its replacement
    will have, where it differs from the pod's (Kueue admits the replacement anew and
    gives it its flavor's node labels); None: the pod's own."""

    namespace: str
    controller_uid: str
    workload: str
    label_selector: str
    to: str
    virtual_nodes: tuple[str, ...]
    ready_floor: int
    gpus: int
    node_selector: tuple[tuple[str, str], ...] | None = None


class StepKind(enum.StrEnum):
    UPDATE = "update"  # read-modify-write of one object (kube.writes.update)
    EVICT = "evict"  # Eviction API calls, retried on 429 until the timeout
    DELETE = "delete"  # pod deletes (--force): budgets are not consulted
    EVENT = "event"  # a Kubernetes Event about an object touched
    CREATE = "create"  # create one object (the call's body), 409 is the step's failure
    REMOVE = "remove"  # delete one object (UID precondition) and wait until it is gone
    # one pod moved (burst migrate): waits for the workload's Ready count and a free GPU,
    # evicts (429 retried), then waits until the replacement is Ready where it should be
    MIGRATE = "migrate"


@dataclass(frozen=True)
class Call:
    """One API call: method, path, the object it is about (``node gpu-node-003``,
    ``pod ml/train-0``), its body (None for none), its precondition (``resourceVersion
    812``, ``uid 5f1e...``) and why it is made."""

    method: str
    path: str
    about: str
    why: str
    body: dict[str, Any] | None = None
    precondition: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the call when plan and execution are compared: a retried call
        (409, 429) is the same call."""
        return (self.method, self.path, self.about)

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "about": self.about,
            "why": self.why,
            "precondition": self.precondition,
            "body": self.body,
        }


@dataclass(frozen=True)
class PodRef:
    """A pod the plan evicts: its UID is the eviction's precondition."""

    namespace: str
    name: str
    uid: str

    @property
    def what(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class EventSpec:
    """The Event a step records; ``blocked_reason``/``blocked_note``: the Warning it
    records instead when pods of its node were left (a budget held them)."""

    regarding: ObjectRef
    action: str
    reason: str
    note: str
    blocked_reason: str | None = None
    warning: bool = False  # a Warning Event (a failed validation), not a Normal one


@dataclass(frozen=True)
class Step:
    kind: StepKind
    description: str
    calls: tuple[Call, ...]
    parallel: bool = False
    node: str | None = None  # the node the step serves
    # what the executor needs to make the calls (not part of the printed plan)
    target: Target | None = field(default=None, compare=False)
    edits: tuple[Edit, ...] = field(default=(), compare=False)
    pods: tuple[PodRef, ...] = field(default=(), compare=False)
    event: EventSpec | None = field(default=None, compare=False)
    move: MoveSpec | None = field(default=None, compare=False)  # a MIGRATE step's pacing

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "description": self.description,
            "node": self.node,
            "parallel": self.parallel,
            "calls": [c.as_dict() for c in self.calls],
        }


class FindingSeverity(enum.StrEnum):
    INFO = "info"
    WARNING = "warning"  # the operator should decide knowing this
    BLOCKING = "blocking"  # a step will wait on it (a budget) or the plan is refused


@dataclass(frozen=True)
class Finding:
    kind: str  # budget, unmanaged, emptydir, gang, fleet-share, already, not-ours
    severity: FindingSeverity
    message: str
    node: str | None = None
    objects: tuple[str, ...] = ()  # pod ns/name, pdb ns/name, jobset ns/name

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": str(self.severity),
            "node": self.node,
            "message": self.message,
            "objects": list(self.objects),
        }


@dataclass(frozen=True)
class Plan:
    """An action's plan. ``options`` holds what the executor needs beyond the calls
    (timeout, grace period, force), so the plan alone says how it will run."""

    action: str  # "nodes evict", "nodes restore"
    nodes: tuple[str, ...]
    reason: str | None
    user: str
    steps: tuple[Step, ...]
    findings: tuple[Finding, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    pods: dict[str, tuple[PodRef, ...]] = field(default_factory=dict)  # node -> pods
    fleet_nodes: int = 0
    refused: str | None = None  # why this plan must not run
    subject: str | None = None  # what the action is about when not nodes ("training/dit")

    @property
    def calls(self) -> tuple[Call, ...]:
        return tuple(c for s in self.steps for c in s.calls)

    @property
    def writes_nothing(self) -> bool:
        return not self.steps

    def as_dict(self) -> dict[str, Any]:
        """The plan as data (``--dry-run -o json``): docs/cli.md documents this shape."""
        return {
            "action": self.action,
            **({"subject": self.subject} if self.subject else {}),
            "nodes": list(self.nodes),
            "reason": self.reason,
            "user": self.user,
            "fleet_nodes": self.fleet_nodes,
            "options": dict(self.options),
            "refused": self.refused,
            "findings": [f.as_dict() for f in self.findings],
            "steps": [s.as_dict() for s in self.steps],
        }

    def lines(self) -> list[str]:
        """The plan as text, one line per call, each finding after the steps."""
        head = f"{self.action} {self.subject or ' '.join(self.nodes)}"
        if self.reason:
            head += f" (reason: {self.reason})"
        out = [f"Plan: {head}, by {self.user}"]
        if not self.steps:
            what = "it is already as asked" if self.subject else "every node is already as asked"
            out.append(f"  nothing to do: {what}")
        for i, step in enumerate(self.steps, 1):
            together = " (in parallel)" if step.parallel and len(step.calls) > 1 else ""
            out.append(f"  {i}. {step.description}{together}")
            for call in step.calls:
                pre = f" [if {call.precondition}]" if call.precondition else ""
                out.append(f"       {call.method} {call.path}{pre}  # {call.why}")
        if self.findings:
            out.append("Preflight:")
            for finding in self.findings:
                out.append(f"  {finding.severity.upper()}: {finding.message}")
        if self.refused:
            out.append(f"Refused: {self.refused}")
        return out
