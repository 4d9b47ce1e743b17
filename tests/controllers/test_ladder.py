"""The repair ladder's decisions (``controllers/ladder.py``), pure: when a quarantined or
joining node is validated, what holds a validation back, when a node is restored, reported
ready, or escalated."""

from __future__ import annotations

from typing import Any

from krea_ops.controllers.ladder import LadderConfig, LadderInputs, climb
from krea_ops.model import Reason, Severity, Verdict
from krea_ops.runbook.plan import StepKind
from krea_ops.settings import Settings
from krea_ops.validation import (
    NEEDS_REPAIR_LABEL,
    PENDING_TAINT_KEY,
    RESULT_ANNOTATION,
    Check,
    Validation,
    ValidationSpec,
)

USER = "system:serviceaccount:krea-ops:node-health"
T0 = 1_790_000_000.0
SPEC = ValidationSpec.from_settings(Settings())
OK = Verdict(Severity.OK)
BAD = Verdict(Severity.BAD, (Reason(Severity.BAD, "gpu_hot", "GPU 3 at 84 °C"),))
CFG = LadderConfig(validate_after_s=600, validate_retry_s=1800, level="quick", escalate_after=3)


def _node(name: str, *, out: bool = True, pending: bool = False, **notes: str) -> dict[str, Any]:
    annotations = dict(notes)
    taints = []
    if out:
        annotations |= {"krea.ai/evicted-by": USER, "krea.ai/evicted-at": "2026-09-21T11:00:00Z"}
        taints.append({"key": "krea.ai/unhealthy", "value": "hot", "effect": "NoSchedule"})
    if pending:
        taints.append({"key": PENDING_TAINT_KEY, "value": "pending", "effect": "NoSchedule"})
    return {
        "metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "7",
                     "annotations": annotations, "labels": {"krea.ai/pool": "h100"}},
        "spec": {"unschedulable": out, "taints": taints},
        "status": {"capacity": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


OUT = 1_789_988_400.0  # 2026-09-21T11:00:00Z


def _result(node: str, at: float, passed: bool, job: str = "krea-ops/j") -> Validation:
    check = Check("dcgm", True, "ok") if passed else Check("dcgm", False, "failed GPU Memory")
    return Validation(node, "quick", at, (check,), job)


def _climb(
    nodes: dict[str, dict[str, Any]],
    now: float,
    *,
    results: dict[str, Validation] | None = None,
    pods: dict[str, list[dict[str, Any]]] | None = None,
    jobs: tuple[dict[str, Any], ...] = (),
    verdicts: dict[str, Verdict] | None = None,
    prev: dict[str, Any] | None = None,
    cfg: LadderConfig = CFG,
    opted_out: set[str] | None = None,
) -> Any:
    ours = {n for n, o in nodes.items() if o["metadata"]["annotations"].get("krea.ai/evicted-by")}
    return climb(
        cfg,
        LadderInputs(SPEC, jobs, results or {}, pods or {}, True),
        nodes,
        verdicts or dict.fromkeys(nodes, OK),
        ours,
        opted_out or set(),
        user=USER,
        now=now,
        prev=prev or {},
    )


def _actions(out: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(p.action, p.nodes) for p in out.plans if p.steps]


def test_a_quarantined_node_is_validated_only_after_the_cool_down() -> None:
    nodes = {"n1": _node("n1")}
    assert _actions(_climb(nodes, OUT + 599)) == []
    out = _climb(nodes, OUT + 600)
    assert _actions(out) == [("nodes validate", ("n1",))]
    assert out.plans[0].steps[0].kind is StepKind.CREATE
    assert out.gauges["validations_running"] == 1


def test_a_pass_restores_and_a_failure_labels_retries_then_escalates_once() -> None:
    nodes = {"n1": _node("n1")}
    # a pass recorded on the node since its quarantine: restored at once
    passed = _result("n1", OUT + 700, True)
    done = {"n1": _node("n1", **{RESULT_ANNOTATION: passed.annotation()})}
    out = _climb(done, OUT + 800)
    assert _actions(out) == [("nodes restore", ("n1",))] and out.restoring == {"n1"}
    # a failure: recorded (label), then retried after validate_retry_s, three times
    prev: dict[str, Any] = {}
    at = OUT + 700
    for n in range(1, 4):
        failed = _result("n1", at, False, job=f"krea-ops/j{n}")
        out = _climb(nodes, at + 1, results={"n1": failed}, prev=prev)
        record = out.plans[0]
        assert record.action == "nodes validate record"
        patch = record.steps[0].calls[0].body
        assert patch["metadata"]["labels"][NEEDS_REPAIR_LABEL] == "dcgm"
        prev = out.state
        assert prev["n1"]["failures"] == n
        nodes = {"n1": _node("n1", **{RESULT_ANNOTATION: failed.annotation()})}
        if n < 3:
            assert [s.why for s in out.skipped] == []
            assert _actions(_climb(nodes, at + 1799, prev=prev)) == []
            assert _actions(_climb(nodes, at + 1800, prev=prev)) == [("nodes validate", ("n1",))]
        at += 1800
    # the third failure escalates: a Warning Event, an alert; no more automatic validation
    reasons = [s.event.reason for s in out.plans[0].steps if s.event is not None]
    assert reasons == ["ValidationFailed", "NodeNeedsRepair"]
    assert out.escalated_now == ["n1"] and [a.kind for a in out.alerts] == ["needs-repair"]
    later = _climb(nodes, at + 10_000, prev=prev)
    assert _actions(later) == [] and [s.why for s in later.skipped] == ["needs-repair"]
    assert later.escalated_now == [] and later.gauges["nodes_escalated"] == 1


def test_a_pass_is_not_a_restore_while_the_node_is_bad_or_restores_are_off() -> None:
    passed = _result("n1", OUT + 700, True)
    nodes = {"n1": _node("n1", **{RESULT_ANNOTATION: passed.annotation()})}
    bad = _climb(nodes, OUT + 800, verdicts={"n1": BAD})
    assert _actions(bad) == [] and [s.why for s in bad.skipped] == ["bad"]
    unknown = _climb(nodes, OUT + 800, verdicts={"n1": Verdict(Severity.UNKNOWN)})
    assert [s.why for s in unknown.skipped] == ["unknown"]
    manual = _climb(nodes, OUT + 800, cfg=LadderConfig(auto_restore=False))
    assert _actions(manual) == [] and [s.why for s in manual.skipped] == ["ready"]
    assert manual.gauges["nodes_ready_to_restore"] == 1
    # a pass from before the quarantine does not count
    old = _result("n1", OUT - 10, True)
    stale = {"n1": _node("n1", **{RESULT_ANNOTATION: old.annotation()})}
    assert _actions(_climb(stale, OUT + 600)) == [("nodes validate", ("n1",))]


def test_never_beside_a_training_nor_beyond_the_share() -> None:
    rank = {
        "metadata": {"namespace": "ml", "name": "dit-0",
                     "labels": {"jobset.sigs.k8s.io/jobset-name": "dit"}},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    out = _climb({"n1": _node("n1")}, OUT + 600, pods={"n1": [rank]})
    assert _actions(out) == [] and [s.why for s in out.skipped] == ["blocked"]
    # nor on a node whose kubelet is gone (it waits until the node is Ready)
    down = _node("n1")
    down["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    out = _climb({"n1": down}, OUT + 600)
    assert _actions(out) == [] and "is not Ready" in out.skipped[0].detail
    # 20 quarantined nodes: 5% of 20 is one at a time
    many = {f"n{i:02d}": _node(f"n{i:02d}") for i in range(20)}
    out = _climb(many, OUT + 600)
    assert len(_actions(out)) == 1
    assert len([s for s in out.skipped if s.why == "validation-share"]) == 19
    opted = _climb({"n1": _node("n1")}, OUT + 600, opted_out={"n1"})
    assert [s.why for s in opted.skipped] == ["opt-out"]


def test_a_node_that_joins_is_validated_at_once_and_its_taint_goes_with_the_pass() -> None:
    nodes = {"new": _node("new", out=False, pending=True)}
    out = _climb(nodes, T0)
    assert _actions(out) == [("nodes validate", ("new",))]
    assert out.state["new"]["since"] == T0
    assert out.gauges["nodes_pending_validation"] == 1
    passed = _result("new", T0 + 60, True)
    after = _climb(nodes, T0 + 61, results={"new": passed}, prev=out.state)
    assert _actions(after) == [("nodes validate record", ("new",))]  # nothing restored
    body = after.plans[0].steps[0].calls[0].body
    assert not body["spec"]["taints"]  # its only taint, the pending one, removed
    # a node without the taint that is not ours is left alone
    assert _actions(_climb({"x": _node("x", out=False)}, T0)) == []


def test_controller_status_names_the_nodes_an_operator_must_act_on() -> None:
    from commands.controller import status_text
    from commands.output import OutputFormat
    from krea_ops.controllers.status import _repairs

    state = {
        "validation": {
            "n1": {"since": T0, "failures": 3, "escalated": True},
            "n2": {"since": T0, "failures": 0, "escalated": False, "ready": True},
            "n3": {"since": T0, "failures": 1, "escalated": False},
        }
    }
    repairs = _repairs(state)
    assert repairs == {"escalated": ["n1"], "ready": ["n2"]}
    row = {
        "controller": "node-health", "lease": "krea-ops/x", "running": True, "leader": "a",
        "last_holder": "a", "acquired_at": None, "renewed_at": None, "lease_duration_s": 15,
        "transitions": 0, "blast_cap": None, "veto": None, "runs": {}, "repairs": repairs,
        "state": state, "last_action": None, "last_action_at_s": None, "ack": None,
    }  # fmt: skip
    text = status_text([row], OutputFormat.table)
    assert "needs repair: n1 (krea-ops nodes history NODE)" in text
    assert "ready to restore: n2 (krea-ops nodes restore NODE)" in text
    # the ladder remembers who waits for a restore by hand
    passed = _result("n1", OUT + 700, True)
    nodes = {"n1": _node("n1", **{RESULT_ANNOTATION: passed.annotation()})}
    manual = _climb(nodes, OUT + 800, cfg=LadderConfig(auto_restore=False))
    assert _repairs({"validation": manual.state}) == {"ready": ["n1"]}
