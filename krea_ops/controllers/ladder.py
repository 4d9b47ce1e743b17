"""node-health's repair ladder: a quarantined node earns its way back through validation.

SUSPECT -> planned swap and BAD -> evict are ``node_health``'s; this module is what comes
after, one pass at a time (pure, over what ``node_health`` read):

* **Record.** A validation Job that finished and whose result is not on its node yet is
  recorded (``runbook.validate.build_record``: annotation, ``krea.ai/needs-repair`` label
  on a failure, the pending-validation taint removed on a pass, an Event).
* **Validate.** A node this controller quarantined is validated once it has been out for
  ``validate_after_s`` (a cool-down: the GPU that was hot has had time to cool, a flapping
  port to settle), at ``validate_level``; a node whose last validation since its
  quarantine failed is validated again after ``validate_retry_s``. A node that joined with
  the taint ``krea.ai/validation=pending:NoSchedule`` is validated at once. Never on a node
  holding a training's pods, whose GPUs are in use or that is not Ready
  (``Skip(why="blocked")``), never more at once than ``validation_share`` of the GPU nodes
  allows, counting those running
  (``Skip(why="validation-share")``), never on a node opted out. Validation counts against
  no blast cap: it takes nothing offline that is not out already.
* **Restore.** A node this controller quarantined whose last validation since its
  quarantine passed, and whose verdict is OK now, is restored (``auto_restore``), or
  reported ready to restore (``Skip(why="ready")``). A node BAD or UNKNOWN now stays out
  whatever its validation said (``Skip(why="bad")`` / ``"unknown"``).
* **Escalate.** A node that failed ``escalate_after`` validations since its quarantine (or
  since it joined) is escalated once: a Warning Event ``NodeNeedsRepair`` on it, and while
  any node is escalated an ``Alert(kind="needs-repair")`` (the rule ``KreaNodeNeedsRepair``
  fires on it). No more automatic validations: a person repairs it, then runs
  ``krea-ops nodes validate``; a pass clears the label and node-health restores it.

State (``validation`` in node-health's state): per node, the validations failed since
its quarantine (``failures``), since when it is counted (``since``), and whether it was
escalated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from krea_ops.controllers.base import Alert, Skip
from krea_ops.kube.rules import meta as _meta
from krea_ops.kube.times import parse_time
from krea_ops.model import Severity, Verdict
from krea_ops.runbook.nodes import EVICTED_AT, build_restore, node_event
from krea_ops.runbook.plan import Plan
from krea_ops.runbook.validate import (
    ValidateInputs,
    blockers,
    build_record,
    build_validate,
    running_validations,
)
from krea_ops.validation import (
    LEVELS,
    NEEDS_REPAIR_LABEL,
    PENDING_TAINT_KEY,
    RESULT_ANNOTATION,
    Validation,
    ValidationSpec,
)

Obj = dict[str, Any]


@dataclass(frozen=True)
class LadderConfig:
    """The ladder's settings (``node_health_validate*``, ``node_health_escalate_after``,
    ``node_health_auto_restore``)."""

    validate_after_s: float = 600.0
    validate_retry_s: float = 1800.0
    level: str = "full"
    escalate_after: int = 3
    auto_restore: bool = True
    new_nodes: bool = True

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"validate_level {self.level!r}: quick or full")
        if self.escalate_after < 1:
            raise ValueError("escalate_after: at least 1")


@dataclass(frozen=True)
class LadderInputs:
    """What ``node_health.read`` gathered for the ladder: the validation Jobs, the results
    of those that finished and are not recorded yet (judged from their logs), the pods on
    the nodes that may be validated, and whether the PriorityClass exists."""

    spec: ValidationSpec
    jobs: tuple[Obj, ...] = ()
    results: Mapping[str, Validation] = field(default_factory=dict)
    pods: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    priority_class: bool = True


@dataclass(frozen=True)
class ValidationMemo:
    """A node's place on the ladder (its entry of ``validation`` in node-health's
    state): since when it is counted (its quarantine, or when it joined pending), the
    validations it failed since, whether it was escalated, and whether it is ready to
    restore by hand. JSON: ``{"since", "failures", "escalated"}``, and ``"ready": true``
    while it is."""

    since: float | None
    failures: int = 0
    escalated: bool = False
    ready: bool = False

    @staticmethod
    def from_json(data: Any) -> ValidationMemo | None:
        """None for an entry that is not an object (it is forgotten)."""
        if not isinstance(data, Mapping):
            return None
        since, failures = data.get("since"), data.get("failures")
        return ValidationMemo(
            since=float(since)
            if isinstance(since, int | float) and not isinstance(since, bool)
            else None,
            failures=int(failures) if isinstance(failures, int | float) else 0,
            escalated=bool(data.get("escalated")),
            ready=bool(data.get("ready")),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "since": self.since,
            "failures": self.failures,
            "escalated": self.escalated,
        }
        if self.ready:
            out["ready"] = True
        return out


@dataclass
class LadderOutcome:
    plans: list[Plan] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    restoring: set[str] = field(default_factory=set)
    escalated_now: list[str] = field(default_factory=list)
    escalated: list[str] = field(default_factory=list)  # every node escalated now
    state: dict[str, Any] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)


def pending(obj: Obj) -> bool:
    """The node carries the pending-validation taint."""
    return any(
        t.get("key") == PENDING_TAINT_KEY for t in (obj.get("spec") or {}).get("taints") or ()
    )


def latest(obj: Obj, name: str, results: Mapping[str, Validation]) -> Validation | None:
    """The node's newest validation: one judged this pass, else what its annotation says."""
    if name in results:
        return results[name]
    return Validation.from_annotation(
        name, (_meta(obj).get("annotations") or {}).get(RESULT_ANNOTATION)
    )


def quarantined_at(obj: Obj) -> float | None:
    return parse_time((_meta(obj).get("annotations") or {}).get(EVICTED_AT))


def _for(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def climb(
    cfg: LadderConfig,
    inputs: LadderInputs,
    nodes: Mapping[str, Obj],
    verdicts: Mapping[str, Verdict],
    ours: set[str],
    opted_out: set[str],
    *,
    user: str,
    now: float,
    prev: Mapping[str, Any],
) -> LadderOutcome:
    """One pass of the ladder over the GPU nodes ``nodes`` (see the module)."""
    out = LadderOutcome()
    spec = inputs.spec
    running = running_validations(inputs.jobs)
    gpu_nodes = len(nodes)
    slots = spec.at_once(gpu_nodes) - sum(1 for n in running if n in nodes)
    prev_nodes = {
        str(k): memo for k, v in prev.items() if (memo := ValidationMemo.from_json(v)) is not None
    }
    state: dict[str, ValidationMemo] = {}

    def since_of(name: str, obj: Obj) -> float | None:
        if name in ours:
            return quarantined_at(obj)
        if cfg.new_nodes and pending(obj):
            had = prev_nodes.get(name)
            return had.since if had is not None and had.since is not None else now
        return None

    # record what finished; count failures since the node went out
    for name, v in sorted(inputs.results.items()):
        obj = nodes.get(name)
        if obj is None:
            continue
        plan = build_record(obj, v, user=user)
        since = since_of(name, obj)
        memo = prev_nodes.get(name) or ValidationMemo(None)
        if since is not None and memo.since != since:
            memo = ValidationMemo(since)
        if plan.steps:
            memo = replace(memo, failures=0 if v.passed else memo.failures + 1)
            if (
                not v.passed
                and memo.failures >= cfg.escalate_after
                and not memo.escalated
                and since is not None
            ):
                memo = replace(memo, escalated=True)
                out.escalated_now.append(name)
                note = (
                    f"failed validation {memo.failures} times since it went out "
                    f"({', '.join(v.failed())}): needs a person; repair it, then "
                    f"krea-ops nodes validate {name}"
                )
                step = node_event(name, obj, "Escalate", "NodeNeedsRepair", note, warning=True)
                plan = dataclasses.replace(plan, steps=(*plan.steps, step))
        out.plans.append(plan)
        state[name] = memo

    for name, obj in sorted(nodes.items()):
        since = since_of(name, obj)
        if since is None:
            continue
        memo = state.get(name) or prev_nodes.get(name) or ValidationMemo(None)
        if memo.since != since:
            memo = ValidationMemo(since)
        state[name] = memo
        last = latest(obj, name, inputs.results)
        current = last if last is not None and last.at >= since else None
        if name in running:
            continue
        if current is not None and current.passed:
            if name in ours:
                _restore(cfg, out, name, obj, current, verdicts.get(name), name in opted_out, user)
            continue
        if memo.escalated:
            out.skipped.append(
                Skip(
                    name,
                    "needs-repair",
                    f"failed validation {memo.failures} times: needs a person "
                    f"(repair it, then krea-ops nodes validate {name})",
                )
            )
            continue
        wait = cfg.validate_after_s if name in ours else 0.0
        due_at = since + wait if current is None else current.at + cfg.validate_retry_s
        if now < due_at:
            continue
        if name in opted_out:
            out.skipped.append(Skip(name, "opt-out", "due for validation: not validated"))
            continue
        busy = blockers(name, obj, inputs.pods.get(name, ()))
        if busy is not None:
            out.skipped.append(Skip(name, "blocked", busy))
            continue
        if not inputs.priority_class:
            out.alerts.append(
                Alert(
                    "validation-unavailable",
                    "the PriorityClass krea-ops-validation does not exist: no node is "
                    "validated (apply deploy/controllers)",
                    (name,),
                )
            )
            continue
        if slots <= 0:
            out.skipped.append(
                Skip(name, "validation-share", "due for validation: the validation share is full")
            )
            continue
        why = (
            f"node-health: out since {_for(now - since)} ago"
            if current is None
            else f"node-health: retry after a failed validation ({', '.join(current.failed())})"
        )
        if name not in ours:
            why = "node-health: a node that joined is validated before it takes pods"
        plan = build_validate(
            ValidateInputs({name: obj}, {name: inputs.pods.get(name, ())}, inputs.jobs,
                           gpu_nodes, inputs.priority_class),
            [name], cfg.level, spec, user=user, reason=why, now=now,
        )  # fmt: skip
        if plan.refused:
            out.skipped.append(Skip(name, "validation-share", plan.refused))
            continue
        out.plans.append(plan)
        slots -= 1

    ready = {s.target for s in out.skipped if s.why == "ready"}
    state = {name: replace(memo, ready=name in ready) for name, memo in state.items()}
    escalated = sorted(n for n, m in state.items() if m.escalated)
    out.escalated = escalated
    if escalated:
        out.alerts.append(
            Alert(
                "needs-repair",
                f"{len(escalated)} node(s) failed validation {cfg.escalate_after} times and "
                f"need a person: {', '.join(escalated[:10])}",
                tuple(escalated),
            )
        )
    out.state = {n: m.to_json() for n, m in state.items() if n in nodes}
    started = sum(1 for p in out.plans if p.action == "nodes validate" and p.steps)
    out.gauges = {
        "validations_running": float(sum(1 for n in running if n in nodes) + started),
        "nodes_needs_repair": float(
            sum(1 for o in nodes.values() if NEEDS_REPAIR_LABEL in (_meta(o).get("labels") or {}))
        ),
        "nodes_escalated": float(len(escalated)),
        "nodes_pending_validation": float(sum(1 for o in nodes.values() if pending(o))),
        "nodes_ready_to_restore": float(sum(1 for s in out.skipped if s.why == "ready")),
    }
    return out


def _restore(
    cfg: LadderConfig,
    out: LadderOutcome,
    name: str,
    obj: Obj,
    v: Validation,
    verdict: Verdict | None,
    opted_out: bool,
    user: str,
) -> None:
    passed = f"passed validation ({v.job or v.level})"
    severity = verdict.severity if verdict is not None else Severity.UNKNOWN
    if severity is Severity.BAD:
        out.skipped.append(Skip(name, "bad", f"{passed} but BAD now: stays out"))
        return
    if severity is Severity.UNKNOWN:
        out.skipped.append(Skip(name, "unknown", f"{passed} but UNKNOWN now: not restored blind"))
        return
    if not cfg.auto_restore or opted_out:
        out.skipped.append(
            Skip(name, "ready", f"{passed}: ready to restore (krea-ops nodes restore {name})")
        )
        return
    out.plans.append(
        build_restore({name: obj}, [name], user=user, reason=f"node-health: {passed}",
                      require_validation=False)
    )  # fmt: skip
    out.restoring.add(name)
