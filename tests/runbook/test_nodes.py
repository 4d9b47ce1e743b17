"""nodes evict / restore as plans run by the one executor, against the simulated API server:
the plan is the calls that are then made; a drain respects budgets and leaves DaemonSet
and mirror pods; nobody else's taint is lost; a second run writes nothing."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from krea_ops.errors import BadInput, KreaError
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.kube.writes import AddTaint, node, update
from krea_ops.model import OK_VERDICT, Reason, Verdict
from krea_ops.model import Severity as HealthSeverity
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.execute import RunResult, execute
from krea_ops.runbook.nodes import (
    CORDONED_BEFORE,
    EVICTED_AGAIN,
    EVICTED_AT,
    EVICTED_BY,
    EVICTED_REASON,
    TAINT_KEY,
    plan_evict,
    plan_restore,
    reason_slug,
)
from krea_ops.runbook.plan import FindingSeverity, Plan
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.validation import RESULT_ANNOTATION, Check, Validation
from tests.conftest import wait_for
from tests.runbook.conftest import (
    budget,
    cordon,
    events_about,
    fleet,
    node_obj,
    pod_names,
    pod_on,
    settle,
)
from tests.validated import pass_validation, record_validation

BAD = "gpu-node-001"
REASON = "XID 79: GPU fell off the bus"
OTHER_TAINT = {"key": "example.com/maintenance", "value": "bios", "effect": "NoSchedule"}
# The 429 a budget answers, in the API server's words (kubernetes/kubernetes
# pkg/registry/core/pod/storage/eviction.go, as tests/kube/test_eviction.py quotes them)
REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


def evict_plan(cluster: Cluster, *nodes: str, **options: Any) -> Plan:
    return plan_evict(cluster, list(nodes or (BAD,)), reason=REASON, user="alice", **options)


def assert_plan_was_run(plan: Plan, result: RunResult) -> None:
    """Step by step, the calls made are the calls planned (a call retried on 409/429 is the
    same call; within a parallel step the order is free)."""
    assert [s.index for s in result.steps] == list(range(1, len(plan.steps) + 1))
    for step, ran in zip(plan.steps, result.steps, strict=True):
        planned = [c.key for c in step.calls]
        made = list(dict.fromkeys(c.key for c in ran.made))
        if step.parallel:
            assert sorted(made) == sorted(planned), step.description
        else:
            assert made == planned, step.description


def test_evict_runs_exactly_its_plan_and_leaves_daemonset_and_mirror_pods(
    cluster: Cluster,
) -> None:
    fleet(cluster, 10)
    pod_on(cluster, BAD, "web-0", labels={"app": "web"})
    pod_on(cluster, BAD, "exporter-x1", owned_by=("DaemonSet", "exporter"))
    pod_on(
        cluster,
        BAD,
        "kube-proxy-gpu",
        owned_by=None,
        annotations={"kubernetes.io/config.mirror": "abc"},
    )
    pod_on(
        cluster,
        BAD,
        "train-0",
        labels={"jobset.sigs.k8s.io/jobset-name": "dit-xl"},
        owned_by=("Job", "dit-xl-workers-0"),
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    pod_on(cluster, BAD, "debug", owned_by=None)
    pod_on(cluster, "gpu-node-002", "web-1", labels={"app": "web"})

    plan = evict_plan(cluster)

    kinds = [str(s.kind) for s in plan.steps]
    assert kinds == ["update", "event", "evict", "evict", "event"]  # the gang's pod first
    patch = plan.steps[0].calls[0]
    assert (patch.method, patch.path) == ("PATCH", f"/api/v1/nodes/{BAD}")
    assert (
        patch.precondition
        == f"resourceVersion {node_obj(cluster, BAD)['metadata']['resourceVersion']}"
    )
    gang = [c.about for c in plan.steps[2].calls if c.path.endswith("/eviction")]
    assert gang == ["pod default/train-0"]
    evictions = [c for c in plan.steps[3].calls if c.path.endswith("/eviction")]
    assert sorted(c.about for c in evictions) == ["pod default/debug", "pod default/web-0"]
    found = {(f.kind, f.objects[0] if f.objects else "") for f in plan.findings}
    assert ("gang", "default/dit-xl") in found
    assert ("unmanaged", "default/debug") in found
    assert ("emptydir", "default/train-0") in found
    assert ("stays", "default/exporter-x1") in found and (
        "stays",
        "default/kube-proxy-gpu",
    ) in found

    result = execute(cluster, plan)

    assert result.status == "done" and result.exit_code == 0
    assert_plan_was_run(plan, result)
    assert pod_names(cluster, BAD) == ["default/exporter-x1", "default/kube-proxy-gpu"]
    assert pod_names(cluster, "gpu-node-002") == ["default/web-1"]
    after = node_obj(cluster, BAD)
    assert after["spec"]["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": reason_slug(REASON), "effect": "NoSchedule"} in after[
        "spec"
    ]["taints"]
    assert reason_slug(REASON) == "xid-79-gpu-fell-off-the-bus"
    notes = after["metadata"]["annotations"]
    assert notes[EVICTED_BY] == "alice" and notes[EVICTED_REASON] == REASON
    assert notes[EVICTED_AT].endswith("Z")
    reasons = sorted(e["reason"] for e in events_about(cluster, "default", BAD))
    assert reasons == ["Cordoned", "Drained"]
    assert [e["reason"] for e in events_about(cluster, "default", "web-0")] == ["Evicted"]


def test_a_second_run_writes_nothing(cluster: Cluster) -> None:
    fleet(cluster, 10)
    pod_on(cluster, BAD, "web-0")
    execute(cluster, evict_plan(cluster))
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]

    again = evict_plan(cluster)
    result = execute(cluster, again)

    assert again.steps == () and result.made == () and result.status == "done"
    assert any(f.kind == "already" for f in again.findings)
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version


def test_a_run_killed_after_the_cordon_converges_when_run_again(cluster: Cluster) -> None:
    fleet(cluster, 10)
    pod_on(cluster, BAD, "web-0")
    plan = evict_plan(cluster)
    first_two = Plan(**{**plan.__dict__, "steps": plan.steps[:2]})  # killed after step 2
    execute(cluster, first_two)
    assert pod_names(cluster, BAD) == ["default/web-0"]

    rest = evict_plan(cluster)
    assert [str(s.kind) for s in rest.steps] == ["evict", "event"]
    result = execute(cluster, rest)

    assert_plan_was_run(rest, result)
    assert pod_names(cluster, BAD) == []


def test_a_budget_allowing_nothing_blocks_names_pod_and_budget_and_keeps_the_cordon(
    cluster: Cluster,
) -> None:
    fleet(cluster, 10)
    pod_on(cluster, BAD, "inf-0", labels={"app": "inference"})
    pod_on(cluster, "gpu-node-002", "inf-1", labels={"app": "inference"})
    pod_on(cluster, BAD, "web-0", labels={"app": "web"})
    budget(cluster, "inference", {"app": "inference"}, pods=2, minAvailable=2)

    plan = evict_plan(cluster, timeout_s=1.5)
    blocking = [f for f in plan.findings if f.severity is FindingSeverity.BLOCKING]
    assert [f.objects for f in blocking] == [("default/inf-0", "default/inference")]
    assert "allows 0 disruptions" in blocking[0].message

    result = execute(cluster, plan)

    assert result.status == "blocked" and result.exit_code == 3
    assert result.blocked == ("pod default/inf-0 held by PodDisruptionBudget default/inference",)
    assert_plan_was_run(plan, result)
    evict_step = next(s for s in result.steps if str(s.kind) == "evict")
    assert evict_step.lines[0] == (
        "pod default/inf-0 held by PodDisruptionBudget default/inference: "
        f"{REFUSAL} The disruption budget inference needs 2 healthy pods and has 2 currently"
    )
    assert sum(1 for c in evict_step.made if c.path.endswith("inf-0/eviction")) >= 2  # retried
    assert all(c.status == 429 for c in evict_step.made if c.path.endswith("inf-0/eviction"))
    assert pod_names(cluster, BAD) == ["default/inf-0"]
    after = node_obj(cluster, BAD)
    assert after["spec"]["unschedulable"] is True
    assert any(t["key"] == TAINT_KEY for t in after["spec"]["taints"])
    assert after["metadata"]["annotations"][EVICTED_REASON] == REASON
    drained = [e for e in events_about(cluster, "default", BAD) if e["reason"] == "DrainBlocked"]
    assert drained and drained[0]["type"] == "Warning"
    assert "PodDisruptionBudget default/inference" in drained[0]["message"]


class Interfering(Cluster):
    """The same client, but another client taints the node just before our first PATCH of
    it reaches the server: the PATCH's resourceVersion is then stale (409)."""

    def __init__(self, inner: Cluster) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s)
        self.inner = inner
        self.done = False

    def request(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        if method == "PATCH" and path == f"/api/v1/nodes/{BAD}" and not self.done:
            self.done = True
            update(self.inner, node(BAD), AddTaint("example.com/during", "yes", "NoSchedule"))
        return super().request(what, method, path, **kwargs)


def test_a_taint_another_client_adds_before_or_during_the_action_survives(
    cluster: Cluster,
) -> None:
    fleet(cluster, 10, taints={BAD: [OTHER_TAINT]})
    plan = evict_plan(cluster)
    # after the plan was made, before it runs
    update(cluster, node(BAD), AddTaint("example.com/late", "yes", "NoSchedule"))

    result = execute(Interfering(cluster), plan)

    assert result.status == "done"
    assert_plan_was_run(plan, result)
    assert [c.status for c in result.steps[0].made] == [409, 200]  # re-read, re-applied
    keys = sorted(t["key"] for t in node_obj(cluster, BAD)["spec"]["taints"])
    assert keys == ["example.com/during", "example.com/late", "example.com/maintenance", TAINT_KEY]

    pass_validation(cluster, BAD)
    restore = plan_restore(cluster, [BAD], user="bob")
    ran = execute(cluster, restore)

    assert_plan_was_run(restore, ran)
    after = node_obj(cluster, BAD)
    assert sorted(t["key"] for t in after["spec"]["taints"]) == [
        "example.com/during",
        "example.com/late",
        "example.com/maintenance",
    ]
    assert "unschedulable" not in after["spec"]
    assert not set(after["metadata"].get("annotations") or {}) & {
        EVICTED_AT,
        EVICTED_BY,
        EVICTED_REASON,
    }
    assert [e["reason"] for e in events_about(cluster, "default", BAD)].count("Restored") == 1


def test_restore_leaves_everything_else_and_a_second_restore_writes_nothing(
    cluster: Cluster,
) -> None:
    fleet(cluster, 10)
    update(cluster, node(BAD), AddTaint("example.com/other", None, "NoExecute"))
    cluster.request(
        "label",
        "PATCH",
        f"/api/v1/nodes/{BAD}",
        body={"metadata": {"labels": {"team": "infra"}, "annotations": {"note": "keep"}}},
        content_type="application/merge-patch+json",
    )
    execute(cluster, evict_plan(cluster))
    validated = pass_validation(cluster, BAD)

    execute(cluster, plan_restore(cluster, [BAD], user="bob"))
    settle(cluster, BAD)
    after = node_obj(cluster, BAD)
    version = after["metadata"]["resourceVersion"]
    again = plan_restore(cluster, [BAD], user="bob")
    result = execute(cluster, again)

    assert [t["key"] for t in after["spec"]["taints"]] == ["example.com/other"]
    assert after["metadata"]["labels"]["team"] == "infra"
    # the validation stays too: it is the node's record, not the eviction's
    assert after["metadata"]["annotations"] == {
        "note": "keep",
        RESULT_ANNOTATION: validated.annotation(),
    }
    assert again.steps == () and result.made == ()
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version


def test_restore_refuses_a_node_someone_else_cordoned_unless_forced(cluster: Cluster) -> None:
    fleet(cluster, 10)
    cordon(cluster, BAD)
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]

    with pytest.raises(BadInput, match=f"node {BAD} was not evicted by krea-ops.*--force"):
        plan_restore(cluster, [BAD, "gpu-node-002"], user="bob")
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version

    forced = plan_restore(cluster, [BAD], user="bob", force=True)
    assert any(f.kind == "not-ours" for f in forced.findings)
    execute(cluster, forced)
    assert "unschedulable" not in node_obj(cluster, BAD)["spec"]


def test_unknown_node_or_empty_reason_is_bad_input_before_any_write(cluster: Cluster) -> None:
    fleet(cluster, 10)
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]

    with pytest.raises(BadInput, match=r"no such node: gpu-node-404, nope \(krea-ops nodes list"):
        plan_evict(cluster, [BAD, "gpu-node-404", "nope"], reason=REASON, user="alice")
    with pytest.raises(BadInput, match="--reason must say why"):
        plan_evict(cluster, [BAD], reason="  ", user="alice")
    with pytest.raises(BadInput, match="no such node: gpu-node-404"):
        plan_restore(cluster, ["gpu-node-404"], user="alice")

    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version
    assert events_about(cluster, "default", BAD) == []


def test_beyond_max_share_the_plan_is_refused_and_never_runs(cluster: Cluster) -> None:
    fleet(cluster, 10)
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]

    plan = evict_plan(cluster, BAD, "gpu-node-002")
    assert plan.refused and "more than --max-share 0.1 of the fleet (1 of 10 nodes)" in plan.refused
    with pytest.raises(KreaError) as refused:
        execute(cluster, plan)
    assert refused.value.exit_code == 2
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version

    wider = evict_plan(cluster, BAD, "gpu-node-002", max_share=0.2)
    assert wider.refused is None
    assert len([s for s in wider.steps if str(s.kind) == "update"]) == 2


def test_force_deletes_and_says_so_in_the_plan(cluster: Cluster) -> None:
    fleet(cluster, 10)
    pod_on(cluster, BAD, "inf-0", labels={"app": "inference"})
    budget(cluster, "inference", {"app": "inference"}, pods=1, minAvailable=1)

    plan = evict_plan(cluster, force=True)
    drain = next(s for s in plan.steps if str(s.kind) == "delete")
    assert [c.method for c in drain.calls if "events" not in c.path] == ["DELETE"]
    assert "PodDisruptionBudgets not consulted" in drain.calls[0].why
    result = execute(cluster, plan)

    assert result.status == "done"
    assert_plan_was_run(plan, result)
    assert pod_names(cluster, BAD) == []


def test_the_audit_log_says_who_why_when_what_and_holds_no_token(
    sim: LocalApiServer, cluster: Cluster, tmp_path: Path
) -> None:
    fleet(cluster, 10)
    pod_on(cluster, BAD, "web-0")
    log = tmp_path / "state" / "audit.jsonl"
    audit = AuditLog(log, secrets=[sim.token])

    plan = evict_plan(cluster)
    result = execute(cluster, plan, audit=audit)
    pass_validation(cluster, BAD)
    execute(cluster, plan_restore(cluster, [BAD], user="alice"), audit=audit)

    text = log.read_text()
    assert sim.token not in text and "Bearer" not in text
    records = [json.loads(line) for line in text.splitlines()]
    first = [r for r in records if r["run_id"] == result.run_id]
    assert [r["record"] for r in first] == ["start", "step", "step", "step", "step", "end"]
    start = first[0]
    assert start["user"] == "alice" and start["reason"] == REASON
    assert start["time"].endswith("Z") and start["plan"] == plan.as_dict()
    steps = first[1:-1]
    assert [s["status"] for s in steps] == ["done"] * 4
    assert steps[0]["calls"][0]["method"] == "PATCH" and steps[0]["calls"][0]["http_status"] == 200
    assert first[-1]["status"] == "done"
    assert records[-1]["action"] == "nodes restore" and records[-1]["record"] == "end"
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_audit_records_follow_the_steps_as_they_end(cluster: Cluster, tmp_path: Path) -> None:
    """A record is appended per step, before the next starts: an action killed mid-way
    leaves what it did."""
    fleet(cluster, 10)
    pod_on(cluster, BAD, "web-0")
    log = tmp_path / "audit.jsonl"
    seen: list[int] = []
    audit = AuditLog(log)
    original = audit.append

    def append(record: dict[str, Any]) -> None:
        original(record)
        seen.append(len(log.read_text().splitlines()))

    audit.append = append  # type: ignore[method-assign]
    execute(cluster, evict_plan(cluster), audit=audit)
    assert seen == [1, 2, 3, 4, 5, 6]


def test_evictions_run_in_parallel_up_to_the_cap(cluster: Cluster) -> None:
    fleet(cluster, 10)
    for i in range(6):
        pod_on(cluster, BAD, f"web-{i}", labels={"app": "web"})
    plan = evict_plan(cluster)
    result = execute(cluster, plan, concurrency=3)
    assert_plan_was_run(plan, result)
    assert pod_names(cluster, BAD) == []
    assert threading.active_count() < 50  # the pool is gone


def kubelet_alive(cluster: Cluster, node_name: str) -> None:
    """A fresh heartbeat Lease for the node (a kubelet that posts, so the drain waits for
    its pods to go), its pods left for the test's own kubelet to finish."""
    from krea_ops.kube.times import micro_time
    from tests.kube.conftest import create

    namespaces = cluster.get("namespaces", "/api/v1/namespaces")["items"]
    if not any(n["metadata"]["name"] == "kube-node-lease" for n in namespaces):
        create(cluster, "/api/v1/namespaces", {"metadata": {"name": "kube-node-lease"}})
    create(
        cluster,
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        {
            "metadata": {"name": node_name},
            "spec": {
                "holderIdentity": node_name,
                "leaseDurationSeconds": 3600,
                "renewTime": micro_time(time.time()),
            },
        },
    )


@pytest.mark.kubelets(lost=(BAD,))  # the test plays it, or it is gone
def test_an_evicted_pod_is_waited_for_until_its_kubelet_has_stopped_it(
    cluster: Cluster,
) -> None:
    fleet(cluster, 10)
    kubelet_alive(cluster, BAD)
    pod_on(cluster, BAD, "web-0")
    path = "/api/v1/namespaces/default/pods/web-0"
    seen: list[Any] = []

    def kubelet() -> None:  # stops the pod once it is asked to, as a kubelet would
        def terminating() -> bool:
            answer = cluster.request("get", "GET", path)
            meta = (answer.body or {}).get("metadata") or {}
            if meta.get("deletionTimestamp"):
                seen.append(meta.get("deletionGracePeriodSeconds"))
                return True
            return False

        wait_for(terminating)
        cluster.request("delete", "DELETE", path, body={"gracePeriodSeconds": 0})

    stopper = threading.Thread(target=kubelet)
    stopper.start()
    plan = evict_plan(cluster, grace_period_s=7, timeout_s=60)
    result = execute(cluster, plan)
    stopper.join()

    assert result.status == "done", result.blocked
    assert seen == [7]  # --grace-period reached the pod
    assert_plan_was_run(plan, result)
    assert pod_names(cluster, BAD) == []


@pytest.mark.kubelets(lost=(BAD,))  # the test plays it, or it is gone
def test_a_pod_still_terminating_at_the_timeout_blocks(cluster: Cluster) -> None:
    fleet(cluster, 10)
    kubelet_alive(cluster, BAD)
    pod_on(cluster, BAD, "web-0")

    result = execute(cluster, evict_plan(cluster, timeout_s=1.5))

    assert result.status == "blocked" and result.exit_code == 3
    assert result.blocked == ("pod default/web-0 is still terminating after 1.5s",)
    assert pod_names(cluster, BAD) == ["default/web-0"]


@pytest.mark.kubelets(lost=(BAD,))  # the test plays it, or it is gone
def test_a_pod_terminating_where_the_kubelet_stopped_posting_is_not_waited_for(
    cluster: Cluster,
) -> None:
    """Its node Ready=Unknown (the node lifecycle controller's mark of a kubelet gone): the
    evicted pod stays Terminating, as a real API server keeps it until that kubelet comes
    back or the node is deleted, and the drain does not wait for what nothing will do."""
    from tests.kube.conftest import set_status

    fleet(cluster, 10)
    kubelet_alive(cluster, BAD)
    pod_on(cluster, BAD, "web-0")
    unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
    set_status(cluster, f"/api/v1/nodes/{BAD}", {"conditions": [unknown]})

    started = time.monotonic()
    result = execute(cluster, evict_plan(cluster, timeout_s=60))

    assert result.status == "done", result.blocked
    assert time.monotonic() - started < 30
    (pod,) = cluster.get("pods", "/api/v1/pods", fieldSelector=f"spec.nodeName={BAD}")["items"]
    assert pod["metadata"]["name"] == "web-0" and pod["metadata"].get("deletionTimestamp")
    lines = [line for step in result.steps for line in step.lines]
    assert f"pod default/web-0 evicted (it stays Terminating on {BAD}, whose kubelet " in "\n".join(
        lines
    )


def test_a_cordon_someone_else_set_before_the_eviction_survives_restore(cluster: Cluster) -> None:
    fleet(cluster, 10)
    cordon(cluster, BAD)
    execute(cluster, evict_plan(cluster))
    assert node_obj(cluster, BAD)["metadata"]["annotations"][CORDONED_BEFORE] == "true"
    assert evict_plan(cluster).steps == ()  # a re-run still writes nothing

    pass_validation(cluster, BAD)
    restore = plan_restore(cluster, [BAD], user="bob")
    assert any(f.kind == "cordoned-before" for f in restore.findings)
    execute(cluster, restore)

    after = node_obj(cluster, BAD)
    assert after["spec"]["unschedulable"] is True  # theirs
    assert "taints" not in after["spec"]
    # nothing of the eviction is left; the validation stays (the node's record)
    ours = [k for k in after["metadata"].get("annotations") or {} if k.startswith("krea.ai/")]
    assert ours == [RESULT_ANNOTATION]


def _verdict(severity: HealthSeverity, message: str) -> Verdict:
    return Verdict.of([Reason(severity, "test", message)])


def test_restoring_a_node_that_is_bad_now_is_refused_unless_forced_and_says_why(
    cluster: Cluster,
) -> None:
    """Found: ``nodes restore`` put a BAD node (an uncorrectable ECC error and XID 95)
    back in service with no warning in its plan."""
    fleet(cluster, 10)
    execute(cluster, evict_plan(cluster))
    settle(cluster, BAD)
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]
    bad = {BAD: _verdict(HealthSeverity.BAD, "GPU 3: XID 95 (uncontained ECC error)")}

    with pytest.raises(BadInput) as refused:
        plan_restore(cluster, [BAD], user="bob", verdicts=bad)
    assert str(refused.value) == (
        f"node {BAD} is BAD now (GPU 3: XID 95 (uncontained ECC error)): restoring puts it "
        "back in service; pass --force to restore it anyway; nothing was changed"
    )
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version

    forced = plan_restore(cluster, [BAD], user="bob", verdicts=bad, force=True)
    [health] = [f for f in forced.findings if f.kind == "health"]
    assert health.severity is FindingSeverity.WARNING and health.message == (
        f"node {BAD} is BAD now (GPU 3: XID 95 (uncontained ECC error)): restoring (--force) "
        "puts it back in service"
    )


def test_restoring_a_node_with_no_pass_since_its_eviction_is_refused_unless_forced(
    cluster: Cluster,
) -> None:
    """A node krea-ops evicted earns its way back by a validation that passed since the
    eviction: with none since (a pass from before it does not count), or with a failed
    last one, the restore is refused naming ``krea-ops nodes validate`` and nothing is
    written; ``--force`` restores it with an ``unvalidated`` warning saying why."""
    fleet(cluster, 10)
    pass_validation(cluster, BAD, at=time.time() - 3600)  # before the eviction
    execute(cluster, evict_plan(cluster))
    settle(cluster, BAD)
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]
    out_at = rfc3339(parse_time(node_obj(cluster, BAD)["metadata"]["annotations"][EVICTED_AT]))

    with pytest.raises(BadInput) as refused:
        plan_restore(cluster, [BAD], user="bob")
    assert str(refused.value) == (
        f"node {BAD} has no validation since its eviction at {out_at}: validate it first "
        f"(krea-ops nodes validate {BAD}) or pass --force to restore it anyway; nothing was "
        "changed"
    )
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version
    forced = plan_restore(cluster, [BAD], user="bob", force=True)
    assert [(f.severity, f.message) for f in forced.findings if f.kind == "unvalidated"] == [
        (
            FindingSeverity.WARNING,
            f"node {BAD} has no validation since its eviction at {out_at}: restored anyway",
        )
    ]

    # validated since, and failed: refused too, naming the failed check
    failed = Validation(
        BAD,
        "full",
        time.time(),
        (Check("dcgm", False, "failed Memory (GPU 3)"), Check("nccl", True, "476.0 GB/s")),
        job="krea-ops/test",
    )
    record_validation(cluster, failed)
    version = node_obj(cluster, BAD)["metadata"]["resourceVersion"]
    with pytest.raises(BadInput) as refused:
        plan_restore(cluster, [BAD], user="bob")
    assert str(refused.value) == (
        f"node {BAD} failed its last validation (dcgm): validate it first (krea-ops nodes "
        f"validate {BAD}) or pass --force to restore it anyway; nothing was changed"
    )
    assert node_obj(cluster, BAD)["metadata"]["resourceVersion"] == version
    assert "Restored" not in [e["reason"] for e in events_about(cluster, "default", BAD)]

    forced = plan_restore(cluster, [BAD], user="bob", force=True)
    [warning] = [f for f in forced.findings if f.kind == "unvalidated"]
    assert warning.severity is FindingSeverity.WARNING and warning.message == (
        f"node {BAD} failed its last validation (dcgm): restored anyway"
    )
    assert execute(cluster, forced).status == "done"
    after = node_obj(cluster, BAD)
    assert "unschedulable" not in after["spec"]
    assert not any(t["key"] == TAINT_KEY for t in after["spec"].get("taints") or ())
    assert after["metadata"]["annotations"][RESULT_ANNOTATION] == failed.annotation()


def test_restoring_a_suspect_node_or_one_of_unknown_health_warns_in_the_preflight(
    cluster: Cluster,
) -> None:
    fleet(cluster, 10)
    execute(cluster, evict_plan(cluster))
    pass_validation(cluster, BAD)
    suspect = {BAD: _verdict(HealthSeverity.SUSPECT, "GPU 1 at 81 °C")}

    plan = plan_restore(cluster, [BAD], user="bob", verdicts=suspect)
    assert [(f.kind, f.message) for f in plan.findings if f.kind == "health"] == [
        ("health", f"node {BAD} is SUSPECT now (GPU 1 at 81 °C): restoring puts it back in service")
    ]
    unknown = plan_restore(cluster, [BAD], user="bob", health_error="Prometheus not reachable")
    assert [f.message for f in unknown.findings if f.kind == "health"] == [
        f"node {BAD}'s health is not known (Prometheus not reachable): nothing says it is sound"
    ]
    ok = plan_restore(cluster, [BAD], user="bob", verdicts={BAD: OK_VERDICT})
    assert not [f for f in ok.findings if f.kind == "health"]
    # an OK node's restore runs as before
    assert execute(cluster, ok).status == "done"


def test_evicting_a_node_already_out_keeps_who_took_it_out_first_and_adds_this_reason(
    cluster: Cluster,
) -> None:
    """Found: ``e`` on a node node-health had already quarantined did not say so, replaced
    the controller's reason and recorded only the operator."""
    fleet(cluster, 10)
    first = plan_evict(cluster, [BAD], reason="GPU 3 at 81 °C", user="krea-ops-node-health")
    execute(cluster, first)
    settle(cluster, BAD)

    plan = evict_plan(cluster)  # alice, REASON

    [out] = [f for f in plan.findings if f.kind == "already-out"]
    assert out.severity is FindingSeverity.WARNING
    assert out.message.startswith(
        f"node {BAD} was already taken out by krea-ops-node-health at "
    ) and out.message.endswith(": GPU 3 at 81 °C; that stays the first reason, and this "
                               "one is added to it")  # fmt: skip
    assert execute(cluster, plan).status == "done"
    settle(cluster, BAD)
    notes = node_obj(cluster, BAD)["metadata"]["annotations"]
    assert (notes[EVICTED_BY], notes[EVICTED_REASON]) == ("krea-ops-node-health", "GPU 3 at 81 °C")
    again = json.loads(notes[EVICTED_AGAIN])
    assert [(e["by"], e["reason"]) for e in again] == [("alice", REASON)]
    taint = next(t for t in node_obj(cluster, BAD)["spec"]["taints"] if t["key"] == TAINT_KEY)
    assert taint["value"] == reason_slug("GPU 3 at 81 °C")  # the first reason's
    assert evict_plan(cluster).steps == ()  # a re-run writes nothing

    pass_validation(cluster, BAD)
    execute(cluster, plan_restore(cluster, [BAD], user="bob"))
    settle(cluster, BAD)
    left = node_obj(cluster, BAD)["metadata"].get("annotations") or {}
    assert not set(left) & {EVICTED_BY, EVICTED_REASON, EVICTED_AT, EVICTED_AGAIN}
