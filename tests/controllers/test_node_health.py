"""node-health: the decision over constructed fleets in simulated time (plans applied to the
node objects with the plans' own edits, the state carried from pass to pass as the runner
persists it, JSON), and one pass against the simulated API server, run by the executor."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from krea_ops.controllers.base import (
    ACK_AT,
    ACK_BY,
    NAMESPACE,
    STATE_CONFIGMAP,
    Decision,
    Inputs,
)
from krea_ops.controllers.node_health import (
    LEMON_LABEL,
    OPT_OUT_LABEL,
    NodeHealth,
    NodeHealthConfig,
    NodeHealthSnapshot,
    evictable,
)
from krea_ops.errors import BadInput
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.model import OK_VERDICT, Reason, Severity, Verdict
from krea_ops.runbook.execute import execute
from krea_ops.runbook.nodes import (
    EVICTED_AT,
    EVICTED_BY,
    EVICTED_REASON,
    TAINT_KEY,
    EvictInputs,
    build_evict,
    build_restore,
    reason_slug,
)
from krea_ops.runbook.plan import Plan, StepKind
from krea_ops.sim.standins.scheduler import node_matches_pod
from krea_ops.training.manifests import TrainingSpec, training_jobset
from tests.kube.conftest import create, registered, set_status
from tests.runbook.conftest import daemon_pod, node_obj, pod_on
from tests.runbook.test_nodes import assert_plan_was_run

USER = "system:serviceaccount:krea-ops:node-health"
T0 = 1_800_000_000.0  # a simulated clock: 2027-01-15
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0

HOT_TEXT = "GPU 3 at 84 °C, at or above 78 °C for the last 5 min"


def hot(gpu: int = 3) -> Verdict:
    text = f"GPU {gpu} at 84 °C, at or above 78 °C for the last 5 min"
    return Verdict.of([Reason(Severity.BAD, "gpu_hot", text, gpu=gpu)])


def warm() -> Verdict:
    return Verdict.of([Reason(Severity.SUSPECT, "gpu_warm", "GPU 1 at 76 °C, warm", gpu=1)])


def exporter_down() -> Verdict:
    return Verdict.of([Reason(Severity.UNKNOWN, "exporter_down", "exporter down: no answer")])


def not_ready() -> Verdict:
    return Verdict.of([Reason(Severity.BAD, "node_not_ready", "NotReady (kubelet stopped)")])


def name_of(i: int) -> str:
    return f"gpu-node-{i:03d}"


class Fleet:
    """GPU nodes as the API would hold them, a verdict per node, and the controller's
    state between passes. ``step`` makes one pass: the snapshot ``read`` would take
    (the same nodes prepared for eviction), ``decide``, then every plan's node edits
    applied with the edits the executor applies (each write a new resourceVersion)."""

    def __init__(self, count: int, config: NodeHealthConfig | None = None) -> None:
        self.objs: dict[str, dict[str, Any]] = {}
        for i in range(count):
            name = name_of(i)
            self.objs[name] = {
                "metadata": {"name": name, "resourceVersion": "1", "labels": {}},
                "spec": {},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        self.verdicts: dict[str, Verdict] = dict.fromkeys(self.objs, OK_VERDICT)
        self.controller = NodeHealth(config)
        self.state: dict[str, Any] = {}
        self.ack_at: float | None = None
        self.version = 1
        self.decisions: list[Decision] = []

    def snapshot(self) -> NodeHealthSnapshot:
        names = evictable(self.objs, self.verdicts, USER)
        evict = EvictInputs(
            nodes=tuple(names),
            objs={n: copy.deepcopy(self.objs[n]) for n in names},
            fleet=len(self.objs),
            pods={n: () for n in names},
        )
        return NodeHealthSnapshot(
            nodes=copy.deepcopy(self.objs),
            verdicts=dict(self.verdicts),
            evict=evict,
            user=USER,
            ack_at=self.ack_at,
            ack_by="alice" if self.ack_at else None,
        )

    def step(self, now: float, *, run: bool = True) -> Decision:
        """One pass; ``run=False``: its plans fail before their first write."""
        decision = self.controller.decide(self.snapshot(), now, self.state)
        for plan in decision.plans if run else ():
            self.apply(plan)
        self.state = json.loads(json.dumps(decision.state))  # as the runner stores it
        self.decisions.append(decision)
        return decision

    def apply(self, plan: Plan) -> None:
        for step in plan.steps:
            if step.kind is not StepKind.UPDATE:
                continue
            assert step.node is not None
            obj = self.objs[step.node]
            for edit in step.edits:
                obj = edit.apply(obj) or obj
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objs[step.node] = obj

    def run(self, start: float, end: float, every: float = MINUTE) -> list[Decision]:
        out: list[Decision] = []
        now = start
        while now <= end:
            out.append(self.step(now))
            now += every
        return out

    def quarantined(self) -> list[str]:
        """Nodes carrying our marks, evicted by the controller."""
        return sorted(
            n
            for n, o in self.objs.items()
            if o["metadata"].get("annotations", {}).get(EVICTED_BY) == USER
        )

    def restore_by_hand(self, name: str, user: str = "alice") -> None:
        # unvalidated: the operator passes --force
        self.apply(build_restore({name: self.objs[name]}, [name], user=user, force=True))


def evicted(decision: Decision) -> list[str]:
    return [n for p in decision.plans if p.action == "nodes evict" for n in p.nodes]


def restored(decision: Decision) -> list[str]:
    return [n for p in decision.plans if p.action == "nodes restore" for n in p.nodes]


def skips(decision: Decision, why: str) -> list[str]:
    return sorted(s.target for s in decision.skipped if s.why == why)


def alerts(decision: Decision, kind: str) -> list[tuple[str, ...]]:
    return [a.objects for a in decision.alerts if a.kind == kind]


def all_of(decisions: Iterable[Decision], pick: Any) -> list[str]:
    return [n for d in decisions for n in pick(d)]


# -- evict ----------------------------------------------------------------------------


def test_a_hot_gpus_node_is_evicted_with_the_runbooks_plan_and_nothing_else() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(7)] = hot()
    fleet.verdicts[name_of(8)] = warm()  # suspect is never grounds for an eviction
    snapshot = fleet.snapshot()
    before = copy.deepcopy(snapshot.nodes)
    # pure: the same snapshot, time and state decide the same, and nothing read changes
    same = fleet.controller.decide(snapshot, T0, {})
    assert fleet.controller.decide(snapshot, T0, {}) == same and snapshot.nodes == before

    decision = fleet.step(T0)

    (plan,) = decision.plans
    assert (plan.action, plan.nodes, plan.user, plan.reason) == (
        "nodes evict",
        (name_of(7),),
        USER,
        HOT_TEXT,
    )
    assert [str(s.kind) for s in plan.steps] == ["update", "event"]
    node = fleet.objs[name_of(7)]
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        {"key": TAINT_KEY, "value": reason_slug(HOT_TEXT), "effect": "NoSchedule"}
    ]
    notes = node["metadata"]["annotations"]
    assert notes[EVICTED_BY] == USER and notes[EVICTED_REASON] == HOT_TEXT
    assert notes[EVICTED_AT] == rfc3339(T0)
    assert fleet.quarantined() == [name_of(7)]
    assert decision.gauges["quarantined"] == 1 and decision.gauges["bad_nodes"] == 1

    later = fleet.run(T0 + MINUTE, T0 + HOUR)  # still hot: already done, nothing more

    assert all(not d.plans for d in later)
    assert fleet.quarantined() == [name_of(7)]


def test_a_node_is_evicted_only_once_bad_for_longer_than_its_findings_window() -> None:
    fleet = Fleet(64)
    # NotReady now: 300 s by default (the policy's window is part of a hot verdict, so
    # a thermal window of 0 acts at once; a configured one waits)
    fleet.verdicts[name_of(3)] = not_ready()
    slow = Fleet(64, NodeHealthConfig.from_mapping({"bad_for_s": {"thermal": 600}}))
    slow.verdicts[name_of(4)] = hot()

    early = fleet.run(T0, T0 + 4 * MINUTE) + slow.run(T0, T0 + 9 * MINUTE)

    assert all(not d.plans for d in early)
    assert evicted(fleet.step(T0 + 5 * MINUTE)) == [name_of(3)]
    assert evicted(slow.step(T0 + 10 * MINUTE)) == [name_of(4)]


def test_a_finding_that_clears_before_its_window_starts_its_window_again() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(3)] = not_ready()
    fleet.run(T0, T0 + 4 * MINUTE)
    fleet.verdicts[name_of(3)] = OK_VERDICT
    fleet.step(T0 + 4.5 * MINUTE)
    fleet.verdicts[name_of(3)] = not_ready()

    assert all(not d.plans for d in fleet.run(T0 + 5 * MINUTE, T0 + 9 * MINUTE))
    assert evicted(fleet.step(T0 + 10 * MINUTE)) == [name_of(3)]


def test_an_exporter_that_stops_answering_is_never_grounds_for_a_cordon() -> None:
    fleet = Fleet(64)
    for name in fleet.objs:
        fleet.verdicts[name] = exporter_down()

    decisions = fleet.run(T0, T0 + 2 * HOUR)

    assert all(not d.plans and not d.skipped and not d.alerts for d in decisions)
    assert decisions[-1].gauges["unknown_nodes"] == 64
    assert fleet.quarantined() == []


def test_a_node_hot_before_its_exporter_died_keeps_its_window_while_blind() -> None:
    fleet = Fleet(64, NodeHealthConfig(bad_for_s={"thermal": 30 * MINUTE}))
    fleet.verdicts[name_of(5)] = hot()
    fleet.run(T0, T0 + 20 * MINUTE)
    fleet.verdicts[name_of(5)] = exporter_down()
    assert all(not d.plans for d in fleet.run(T0 + 21 * MINUTE, T0 + 40 * MINUTE))
    fleet.verdicts[name_of(5)] = hot()

    # hot since T0, blind in between: due as soon as it is seen hot again
    assert evicted(fleet.step(T0 + 41 * MINUTE)) == [name_of(5)]


# -- veto -----------------------------------------------------------------------------


def test_every_node_reporting_heat_at_once_is_vetoed_nothing_cordoned_one_alert() -> None:
    fleet = Fleet(64)
    for name in fleet.objs:
        fleet.verdicts[name] = hot()

    decisions = fleet.run(T0, T0 + 6 * HOUR)

    assert fleet.quarantined() == [] and all(not d.plans for d in decisions)
    last = decisions[-1]
    assert alerts(last, "veto") == [tuple(sorted(fleet.objs))]
    assert len(skips(last, "veto")) == 64 and not skips(last, "cap")
    assert last.gauges["veto_active"] == 1


def test_a_veto_holds_one_finding_class_only_and_an_ack_lifts_it_under_the_cap() -> None:
    fleet = Fleet(200)  # cap: 2 % of 200 = 4; veto: 3 nodes
    for i in range(3):
        fleet.verdicts[name_of(i)] = hot()
    fleet.verdicts[name_of(10)] = Verdict.of(
        [Reason(Severity.BAD, "gpu_lost", "GPU 2 is not answering NVML (XID 79)", gpu=2)]
    )

    first = fleet.step(T0)

    assert evicted(first) == [name_of(10)]
    assert skips(first, "veto") == [name_of(i) for i in range(3)]
    fleet.ack_at = T0 + 10 * MINUTE
    after = fleet.run(T0 + 11 * MINUTE, T0 + 12 * MINUTE)
    # acknowledged: judged one by one, and the cap (4) counts from the acknowledgement
    assert all_of(after, evicted) == [name_of(i) for i in range(3)]
    assert after[-1].gauges["veto_active"] == 0


def test_nodes_turning_hot_minutes_apart_are_not_a_veto() -> None:
    fleet = Fleet(200)
    decisions = []
    for i in range(3):
        fleet.verdicts[name_of(i)] = hot()
        decisions.append(fleet.step(T0 + i * 5 * MINUTE))

    assert all_of(decisions, evicted) == [name_of(i) for i in range(3)]
    assert not any(alerts(d, "veto") for d in decisions)


# -- the blast cap --------------------------------------------------------------------


def test_findings_dripping_in_over_24_hours_never_exceed_the_cap() -> None:
    fleet = Fleet(200)  # cap 4
    most = 0
    passes: list[Decision] = []
    for minute in range(0, 24 * 60, 5):  # a pass every 5 minutes
        now = T0 + minute * MINUTE
        if minute % 20 == 0:  # a new hot node every 20 minutes: 72 in the day
            fleet.verdicts[name_of(minute // 20)] = hot()
        passes.append(fleet.step(now))
        most = max(most, len(fleet.quarantined()))

    assert most == 4 and len(fleet.quarantined()) == 4
    assert fleet.quarantined() == [name_of(i) for i in range(4)]  # the first to arrive
    last = passes[-1]
    assert last.gauges["cap"] == 4 and last.gauges["cap_reached"] == 1
    assert len(skips(last, "cap")) == 72 - 4
    (held,) = alerts(last, "cap")
    assert len(held) == 68
    assert not any(alerts(d, "veto") for d in passes)


def test_while_capped_a_restore_still_goes_through_and_then_the_next_node_is_evicted() -> None:
    fleet = Fleet(64)  # cap 1
    fleet.verdicts[name_of(1)] = hot()
    fleet.step(T0)
    fleet.verdicts[name_of(2)] = hot()
    capped = fleet.step(T0 + 5 * MINUTE)
    assert skips(capped, "cap") == [name_of(2)] and fleet.quarantined() == [name_of(1)]

    fleet.verdicts[name_of(1)] = OK_VERDICT  # replaced, and healthy since
    during = fleet.run(T0 + 6 * MINUTE, T0 + 6 * MINUTE + HOUR)

    assert all(skips(d, "cap") == [name_of(2)] for d in during[:-1])
    assert restored(during[-1]) == [name_of(1)]  # OK for an hour, capped or not
    assert fleet.quarantined() == []
    assert evicted(fleet.step(T0 + 7 * MINUTE + HOUR)) == [name_of(2)]


def test_a_restore_goes_through_while_a_veto_holds() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(1)] = hot()
    fleet.step(T0)
    fleet.verdicts[name_of(1)] = OK_VERDICT
    for i in range(10, 20):
        fleet.verdicts[name_of(i)] = hot()
    decisions = fleet.run(T0 + MINUTE, T0 + 2 * HOUR)

    assert all(d.gauges["veto_active"] == 1 for d in decisions)
    assert all_of(decisions, restored) == [name_of(1)]
    assert all_of(decisions, evicted) == []


def test_an_ack_lifts_the_cap() -> None:
    fleet = Fleet(64)  # cap 1
    fleet.verdicts[name_of(1)] = hot()
    fleet.step(T0)
    fleet.verdicts[name_of(2)] = hot(5)
    assert skips(fleet.step(T0 + 5 * MINUTE), "cap") == [name_of(2)]

    fleet.ack_at = T0 + 6 * MINUTE
    decision = fleet.step(T0 + 7 * MINUTE)

    assert evicted(decision) == [name_of(2)]
    assert not alerts(decision, "cap")
    assert decision.gauges["quarantined"] == 2 and decision.gauges["quarantined_unacked"] == 1
    fleet.verdicts[name_of(3)] = hot()
    assert skips(fleet.step(T0 + 12 * MINUTE), "cap") == [name_of(3)]  # counting again


# -- what is only reported ------------------------------------------------------------


def test_a_node_opted_out_is_only_reported() -> None:
    fleet = Fleet(64)
    fleet.objs[name_of(9)]["metadata"]["labels"][OPT_OUT_LABEL] = "false"
    fleet.verdicts[name_of(9)] = hot()

    decisions = fleet.run(T0, T0 + HOUR)

    assert all(not d.plans for d in decisions) and fleet.quarantined() == []
    assert skips(decisions[-1], "opt-out") == [name_of(9)]
    assert HOT_TEXT in decisions[-1].skipped[0].detail


def test_a_node_someone_else_cordoned_is_left_to_them() -> None:
    fleet = Fleet(64)
    fleet.objs[name_of(9)]["spec"]["unschedulable"] = True
    fleet.verdicts[name_of(9)] = hot()

    decision = fleet.step(T0)

    assert not decision.plans and skips(decision, "cordoned") == [name_of(9)]


def test_a_manual_restore_is_respected_for_the_cooldown() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(4)] = hot()
    fleet.step(T0)
    fleet.restore_by_hand(name_of(4))  # the operator wants it back, still hot

    during = fleet.run(T0 + MINUTE, T0 + 6 * HOUR)

    assert all(not d.plans for d in during) and fleet.quarantined() == []
    assert skips(during[-1], "cooldown") == [name_of(4)]
    assert evicted(fleet.step(T0 + 6 * HOUR + 2 * MINUTE)) == [name_of(4)]
    # the eviction the operator undid at once still counts: twice in 28 days
    lemon = fleet.step(T0 + 6 * HOUR + 3 * MINUTE)
    assert [p.action for p in lemon.plans] == ["nodes label-lemon"]


def test_an_eviction_that_never_ran_is_no_manual_restore() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(4)] = hot()
    assert evicted(fleet.step(T0, run=False)) == [name_of(4)]  # its plan failed

    assert evicted(fleet.step(T0 + MINUTE)) == [name_of(4)]  # planned again, no cool-down


def test_the_controllers_own_restore_is_no_manual_restore() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(4)] = hot()
    fleet.step(T0)
    fleet.verdicts[name_of(4)] = OK_VERDICT
    assert restored(fleet.run(T0 + MINUTE, T0 + MINUTE + HOUR)[-1]) == [name_of(4)]
    fleet.verdicts[name_of(4)] = hot()

    assert evicted(fleet.step(T0 + 2 * HOUR)) == [name_of(4)]


# -- lemons ---------------------------------------------------------------------------


def test_a_node_remediated_twice_in_28_days_is_labelled_a_lemon_until_cleared() -> None:
    fleet = Fleet(64)
    lemon = name_of(6)
    fleet.verdicts[lemon] = hot()
    fleet.step(T0)  # evicted once
    fleet.verdicts[lemon] = OK_VERDICT
    fleet.run(T0 + MINUTE, T0 + 2 * HOUR)  # restored after an hour healthy
    assert fleet.quarantined() == []
    fleet.verdicts[lemon] = hot()
    then = T0 + 10 * DAY
    assert evicted(fleet.step(then)) == [lemon]  # evicted twice within 28 days

    decision = fleet.step(then + MINUTE)

    (plan,) = decision.plans
    assert plan.action == "nodes label-lemon" and plan.nodes == (lemon,)
    assert [str(s.kind) for s in plan.steps] == ["update", "event"]
    assert fleet.objs[lemon]["metadata"]["labels"][LEMON_LABEL] == "true"
    assert "remediated 2 times within 28 days" in (plan.reason or "")
    assert fleet.step(then + 2 * MINUTE).gauges["lemons"] == 1

    del fleet.objs[lemon]["metadata"]["labels"][LEMON_LABEL]  # an operator clears it
    assert all(not d.plans for d in fleet.run(then + 3 * MINUTE, then + HOUR))
    assert LEMON_LABEL not in fleet.objs[lemon]["metadata"]["labels"]


def test_two_remediations_more_than_28_days_apart_make_no_lemon() -> None:
    fleet = Fleet(64)
    fleet.verdicts[name_of(6)] = hot()
    fleet.step(T0)
    fleet.verdicts[name_of(6)] = OK_VERDICT
    fleet.run(T0 + MINUTE, T0 + 2 * HOUR, every=10 * MINUTE)
    fleet.verdicts[name_of(6)] = hot()
    fleet.step(T0 + 29 * DAY)

    later = fleet.run(T0 + 29 * DAY + MINUTE, T0 + 29 * DAY + HOUR)

    assert all(not d.plans for d in later)
    assert LEMON_LABEL not in fleet.objs[name_of(6)]["metadata"]["labels"]


def test_training_pods_are_kept_off_a_lemon_and_inference_is_not() -> None:
    jobset = training_jobset(TrainingSpec(name="dit-xl", nodes=4, image="reg/dit:7"))
    trainer = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    lemon, fine = Fleet(2).objs.values()
    lemon["metadata"]["labels"][LEMON_LABEL] = "true"

    # the scheduler's node-affinity filter, as the simulator's scheduler applies it
    assert node_matches_pod(trainer, fine) and not node_matches_pod(trainer, lemon)
    assert node_matches_pod({"containers": [{"name": "serve", "image": "img:1"}]}, lemon)


# -- settings -------------------------------------------------------------------------


def test_settings_from_a_mapping_and_bad_ones_are_named() -> None:
    config = NodeHealthConfig.from_mapping(
        {"cap-share": 0.05, "veto_nodes": 5, "bad_for_s": {"not-ready": 60}, "cooldown_s": 0}
    )
    assert (config.cap_share, config.veto_nodes, config.cooldown_s) == (0.05, 5, 0.0)
    assert config.bad_for_s["not-ready"] == 60 and config.bad_for_s["thermal"] == 0
    assert NodeHealthConfig().cap(64) == 1 and NodeHealthConfig().cap(1500) == 30
    assert NodeHealthConfig().veto_threshold(64) == 2
    assert NodeHealthConfig().veto_threshold(1500) == 3
    for bad, words in (
        ({"cap_shares": 1}, "cap_shares: unknown"),
        ({"cap_share": "lots"}, "cap_share: expected a number"),
        ({"veto_nodes": 2.5}, "veto_nodes: expected a whole number"),
        ({"bad_for_s": {"cosmic": 1}}, "unknown finding class 'cosmic'"),
        ({"cooldown_s": -1}, "cooldown_s: must be 0 or more"),
    ):
        with pytest.raises(BadInput, match=words):
            NodeHealthConfig.from_mapping(bad)


# -- against the simulated API server -------------------------------------------------


def running_on(cluster: Cluster, node: str) -> list[str]:
    """The pods on ``node`` not being deleted, ``namespace/name``."""
    body = cluster.get("pods", "/api/v1/pods", fieldSelector=f"spec.nodeName={node}")
    return sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in body["items"]
        if not p["metadata"].get("deletionTimestamp")
    )


def gpu_nodes(cluster: Cluster, count: int, not_ready_since: Mapping[str, float]) -> None:
    """``count`` GPU nodes, Ready, 8 GPUs each; ``not_ready_since``: node -> since when it
    is NotReady (the kubelet stopped posting status)."""
    for i in range(count):
        name = name_of(i)
        create(cluster, "/api/v1/nodes", {"metadata": {"name": name}})
        since = not_ready_since.get(name)
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        if since is not None:
            ready = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": rfc3339(since),
            }
        set_status(
            cluster,
            f"/api/v1/nodes/{name}",
            {
                # "pods" as every kubelet reports it (the scheduler fits pods to it)
                "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "pods": "110"},
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "pods": "110"},
                "conditions": [ready],
            },
        )
        if since is None:
            registered(cluster, name)


def test_one_pass_on_the_simulator_plans_the_eviction_the_executor_then_runs(
    cluster: Cluster, control_plane: str
) -> None:
    dead = name_of(2)
    gpu_nodes(cluster, 8, {dead: time.time() - 10 * MINUTE})
    # bare pods (only a DaemonSet owner matters to a drain), and a real DaemonSet's pod
    pod_on(cluster, dead, "web-0", labels={"app": "web"}, owned_by=None)
    exporter = daemon_pod(cluster, dead, "exporter", control_plane)
    pod_on(cluster, name_of(3), "web-1", labels={"app": "web"}, owned_by=None)
    acked = rfc3339(time.time() - HOUR)
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    create(
        cluster,
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {"metadata": {"name": STATE_CONFIGMAP, "annotations": {ACK_AT: acked, ACK_BY: "alice"}}},
    )
    controller = NodeHealth()
    # no telemetry source: every GPU node is UNKNOWN for it, never grounds for a cordon
    inputs = Inputs(cluster=cluster, source=None, policy=HealthPolicy(), user=USER)

    snapshot = controller.read(inputs, time.time())
    decision = controller.decide(snapshot, time.time(), {})

    assert snapshot.evict.nodes == (dead,)
    assert (snapshot.ack_at, snapshot.ack_by) == (parse_time(acked), "alice")
    assert {n for n, v in snapshot.verdicts.items() if v.severity is Severity.UNKNOWN} == {
        name_of(i) for i in range(8) if i != 2
    }
    (plan,) = decision.plans
    assert plan.nodes == (dead,) and plan.reason is not None
    assert plan.reason.startswith("NotReady for 10 min")
    result = execute(cluster, plan)
    assert result.status == "done"
    assert_plan_was_run(plan, result)
    node = node_obj(cluster, dead)
    assert node["spec"]["unschedulable"] is True
    assert any(t["key"] == TAINT_KEY for t in node["spec"]["taints"])
    assert node["metadata"]["annotations"][EVICTED_BY] == USER
    # drained, the DaemonSet's pod stays (upstream, the evicted pod stays Terminating: no
    # kubelet answers for the dead node to finish it; pod GC leaves it on a node that exists)
    assert running_on(cluster, dead) == [f"default/{exporter}"]
    assert running_on(cluster, name_of(3)) == ["default/web-1"]

    again = controller.read(inputs, time.time())
    second = controller.decide(again, time.time(), decision.state or {})
    assert second.plans == () and second.gauges["quarantined"] == 1


def test_nodes_attributed_two_restarts_are_labelled_lemons_no_more_than_the_cap() -> None:
    """The restart recorder's attributed restarts (its state, as persisted) make lemon
    candidates; at 64 nodes the cap is 1: one is labelled, the other waits for an ack.
    With 3 restarts on the other node, 2 would be chance for 0.03 of 64 nodes, more
    than node_health_lemon_chance (0.01): it takes 3."""
    fleet = Fleet(64)
    a, b, c = name_of(3), name_of(9), name_of(20)
    fleet.state = {
        "recorder": {
            "attributed": [
                [a, T0 - 5 * DAY, "training/dit", 1, "thermal"],
                [a, T0 - 3 * DAY, "training/dit", 2, "thermal"],
                [b, T0 - 2 * DAY, "training/dit", 3, "nvlink"],
                [c, T0 - 2 * DAY + HOUR, "training/dit", 4, "memory"],
                [c, T0 - DAY, "training/dit", 5, "memory"],
                [a, T0 - DAY + HOUR, "training/dit", 6, "thermal"],
                [b, T0 - 2 * HOUR, "training/dit", 7, "nvlink"],
                [b, T0 - HOUR, "training/dit", 8, "nvlink"],
                [b, T0 - HOUR + MINUTE, "training/dit", 9, "nvlink"],  # the same fault
            ]
        }
    }
    decision = fleet.step(T0)
    (plan,) = decision.plans
    assert plan.action == "nodes label-lemon" and plan.nodes == (a,)
    assert "3 training restarts attributed to it within 28 days" in (plan.reason or "")
    assert "training/dit #1 (thermal)" in (plan.reason or "")
    assert skips(decision, "cap") == [b]
    assert fleet.objs[a]["metadata"]["labels"][LEMON_LABEL] == "true"
    # the next pass: nothing more while the cap holds; an acknowledgement lets b through
    assert not fleet.step(T0 + MINUTE).plans
    fleet.ack_at = T0 + 2 * MINUTE
    (plan,) = fleet.step(T0 + 3 * MINUTE).plans
    assert plan.nodes == (b,)


def test_a_node_an_operator_evicted_again_is_the_operators_not_restored_and_not_capped() -> None:
    """Found: ``e`` on a node node-health had quarantined replaced its reason and owner.
    Now the operator's evict is added to the controller's: the node stays out until an
    operator restores it, and the header shows it apart from the cap."""
    fleet = Fleet(64)
    fleet.verdicts[name_of(7)] = hot()
    fleet.run(T0, T0 + 10 * MINUTE)
    assert fleet.quarantined() == [name_of(7)]
    obj = fleet.objs[name_of(7)]
    inputs = EvictInputs(nodes=(name_of(7),), objs={name_of(7): obj}, fleet=64,
                         pods={name_of(7): ()})  # fmt: skip
    fleet.apply(build_evict(inputs, reason="RMA ticket 4411", user="alice", now=T0 + 11 * MINUTE))
    notes = fleet.objs[name_of(7)]["metadata"]["annotations"]
    assert notes[EVICTED_BY] == USER  # who took it out first stays
    fleet.verdicts[name_of(7)] = OK_VERDICT

    decisions = fleet.run(T0 + 12 * MINUTE, T0 + 4 * 60 * MINUTE)

    assert all_of(decisions, restored) == []  # an operator holds it now
    cap = decisions[-1].state["cap"]
    assert (cap["quarantined_unacked"], cap["operators"]) == (0, 1)
