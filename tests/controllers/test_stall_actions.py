"""node-health acting on hung and straggling runs, over constructed fleets in simulated
time (the decision only; tests/world/test_stalls_handled.py runs them against the
simulated trainers): a HUNG gang is restarted once, through its likely node's eviction
under the blast cap or rank 0's pod through the JobSet's failure policy; a STRAGGLER's
node and a GPU whose clocks are held down go through a planned swap, not an eviction now;
the restart that ends a hang is attributed with cause ``hang``."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

from krea_ops.controllers.node_health import (
    NodeHealthConfig,
    NodeHealthSnapshot,
    also_prepared,
    evictable,
)
from krea_ops.controllers.restarts import RestartInputs, record, run_restarts
from krea_ops.gangstatus import GangStatus
from krea_ops.model import Reason, Severity, Verdict
from krea_ops.runbook.nodes import EvictInputs
from krea_ops.runbook.plan import StepKind
from krea_ops.training.gangs import Gang, gangs_of
from krea_ops.training.manifests import TrainingSpec, training_jobset
from krea_ops.training.progress import Progress
from krea_ops.training.stalls import HUNG, RUNNING, STRAGGLER, RunJudgement, StallConfig
from tests.controllers.test_node_health import MINUTE, T0, USER, evicted, name_of, skips
from tests.controllers.test_planned_swaps import SwapFleet, requests

SPEC = training_jobset(TrainingSpec(name="dit", nodes=4, image="reg/dit:7"))["spec"]
CONFIG = NodeHealthConfig(swap_after_s=0.0, stalls=StallConfig(hang_restart_after_s=120.0))


def rank(i: int, node: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "training",
            "name": f"dit-trainer-0-{i}-x",
            "uid": f"pod-uid-{i}",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "dit",
                "jobset.sigs.k8s.io/replicatedjob-name": "trainer",
                "jobset.sigs.k8s.io/job-index": "0",
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "batch.kubernetes.io/job-completion-index": str(i),
            },
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def dit(nodes: range) -> Gang:
    return Gang(
        namespace="training",
        name="dit",
        uid="uid-dit",
        restarts=0,
        resource_version="41",
        nodes=tuple(name_of(i) for i in nodes),
        running=True,
        expected=len(nodes),
        gpus=8 * len(nodes),
        annotations={},
        pods=tuple(rank(k, name_of(i)) for k, i in enumerate(nodes)),
        spec=SPEC,
    )


def status(gang: Gang, state: str, node: str | None = None, gpu: int | None = None) -> GangStatus:
    reasons = {
        HUNG: ("no step since 900 for 4 min", "every GPU busy (100%) with tensor activity 0.01"),
        STRAGGLER: ("step time 1.50 s, 1.50x the run's baseline 1.00 s", "GPU 5 SM clock"),
        RUNNING: ("step 900, 1 s ago",),
    }[state]
    judgement = RunJudgement(state, reasons, node=node, gpu=gpu)
    prog = Progress(900, T0, T0 - 3600, 1.0, 1.0, 90)
    return GangStatus("training", "dit", gang.restarts, gang.nodes, prog, judgement)


class StallFleet(SwapFleet):
    def __init__(self, count: int, config: NodeHealthConfig = CONFIG) -> None:
        super().__init__(count, config)
        self.stalls: dict[str, GangStatus] = {}

    def snapshot(self) -> NodeHealthSnapshot:
        """As ``read`` takes it: the eviction inputs of what the stalls make evictable too."""
        gangs = tuple(self.gangs.values())
        extra = also_prepared(gangs, self.verdicts, self.stalls, self.controller.config)
        names = evictable(self.objs, self.verdicts, USER, extra)
        evict = EvictInputs(
            nodes=tuple(names),
            objs={n: copy.deepcopy(self.objs[n]) for n in names},
            fleet=len(self.objs),
            pods={n: () for n in names},
        )
        return replace(super().snapshot(), evict=evict, stalls=dict(self.stalls))


def restarts(decision: Any) -> list[Any]:
    return [p for p in decision.plans if p.action == "train restart"]


def test_a_hung_gang_without_a_likely_node_is_restarted_once_through_rank_0s_pod() -> None:
    fleet = StallFleet(16)
    fleet.gangs["dit"] = g = dit(range(4))
    fleet.stalls = {"training/dit": status(g, HUNG)}
    first = fleet.step(T0)
    assert restarts(first) == [] and evicted(first) == []
    assert first.state is not None and first.state["stalls"]["training/dit"]["state"] == HUNG
    assert first.gauges["runs_hung"] == 1.0
    second = fleet.step(T0 + 2 * MINUTE)
    (plan,) = restarts(second)
    assert plan.subject == "training/dit" and evicted(second) == []
    evict = plan.steps[0]
    assert evict.kind is StepKind.EVICT
    assert [p.name for p in evict.pods] == ["dit-trainer-0-0-x"]  # rank 0
    assert evict.calls[0].path.endswith("/pods/dit-trainer-0-0-x/eviction")
    assert evict.calls[0].precondition == "uid pod-uid-0"
    assert "restarts" in plan.findings[0].message and plan.refused is None
    assert plan.reason is not None and plan.reason.startswith("training/dit HUNG: no step")
    # once per attempt: the next pass, still hung, plans nothing more
    assert restarts(fleet.step(T0 + 3 * MINUTE)) == []


def test_a_hung_gang_with_a_likely_node_evicts_that_node_under_the_cap() -> None:
    fleet = StallFleet(16)  # cap: 1 node
    fleet.gangs["dit"] = g = dit(range(4))
    flap = Reason(Severity.SUSPECT, "ib_link_downed", "mlx5_3/1 went down 1 time", port="mlx5_3/1")
    fleet.verdicts[name_of(2)] = Verdict.of([flap])
    fleet.stalls = {"training/dit": status(g, HUNG, node=name_of(2))}
    fleet.step(T0)
    second = fleet.step(T0 + 2 * MINUTE)
    assert evicted(second) == [name_of(2)] and restarts(second) == []
    (plan,) = second.plans
    assert plan.reason is not None and "HUNG" in plan.reason

    # at the cap, the node is held back and the gang is restarted without it
    fleet = StallFleet(16)
    fleet.gangs["dit"] = g = dit(range(4))
    fleet.verdicts[name_of(2)] = Verdict.of([flap])
    fleet.verdicts[name_of(9)] = Verdict.of([Reason(Severity.BAD, "gpu_hot", "GPU 1 hot", gpu=1)])
    fleet.step(T0)
    assert evicted(fleet.decisions[-1]) == [name_of(9)]
    fleet.stalls = {"training/dit": status(g, HUNG, node=name_of(2))}
    fleet.step(T0 + MINUTE)
    third = fleet.step(T0 + 3 * MINUTE)
    assert name_of(2) in skips(third, "cap") and len(restarts(third)) == 1


def test_a_jobset_that_would_only_replace_the_pod_is_not_restarted_that_way() -> None:
    fleet = StallFleet(16)
    spec = json.loads(json.dumps(SPEC))
    job = spec["replicatedJobs"][0]["template"]["spec"]
    job["backoffLimit"] = 3
    job.pop("podFailurePolicy")
    fleet.gangs["dit"] = g = replace(dit(range(4)), spec=spec)
    fleet.stalls = {"training/dit": status(g, HUNG)}
    fleet.step(T0)
    second = fleet.step(T0 + 2 * MINUTE)
    assert restarts(second) == []
    (skip,) = skips(second, "refused")
    assert skip == "training/dit"


def test_a_straggler_node_goes_through_a_planned_swap() -> None:
    fleet = StallFleet(16)
    fleet.gangs["dit"] = g = dit(range(4))
    fleet.stalls = {"training/dit": status(g, STRAGGLER, node=name_of(1), gpu=5)}
    first = fleet.step(T0)
    assert requests(first) == ["training/dit"] and evicted(first) == []
    assert first.gauges["runs_straggler"] == 1.0
    fleet.answer("dit", T0 + 30, 950)
    second = fleet.step(T0 + MINUTE)
    assert evicted(second) == [name_of(1)]
    assert "slows training/dit" in (second.plans[0].reason or "")


def test_a_gpu_held_down_by_a_power_brake_in_a_running_gang_is_swapped_not_evicted_now() -> None:
    brake = Verdict.of(
        [
            Reason(
                Severity.BAD, "gpu_hw_power_brake", "GPU 5 clocks held down by a power brake", gpu=5
            )
        ]
    )
    fleet = StallFleet(16)
    fleet.gangs["dit"] = dit(range(4))
    fleet.verdicts[name_of(1)] = brake
    first = fleet.step(T0)
    assert evicted(first) == [] and requests(first) == ["training/dit"]
    assert skips(first, "planned-swap") == [name_of(1)]
    fleet.answer("dit", T0 + 30, 950)
    assert evicted(fleet.step(T0 + MINUTE)) == [name_of(1)]
    # outside any gang: evicted at once, as ever
    fleet = StallFleet(16)
    fleet.verdicts[name_of(1)] = brake
    assert evicted(fleet.step(T0)) == [name_of(1)]


def test_the_restart_that_ends_a_hang_is_attributed_to_the_hang() -> None:
    js = {
        "metadata": {"namespace": "training", "name": "dit", "uid": "u1", "resourceVersion": "7"},
        "spec": SPEC,
        "status": {"restarts": 0},
    }
    pods = [rank(0, "n1"), rank(1, "n2")]
    state: dict[str, Any] = {}
    hung = {"training/dit": {"since": T0, "node": "n2", "gpu": None, "reasons": ["no step"]}}
    for t, restarts_, hang in ((T0, 0, hung), (T0 + 60, 1, {}), (T0 + 400, 1, {})):
        js["status"]["restarts"] = restarts_
        for p in pods:
            p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] = str(restarts_)
        inputs = RestartInputs(tuple(gangs_of([js], pods)), {}, {}, {})
        state, _ = record(inputs, {}, [], t, state, hung=hang)
        state = json.loads(json.dumps(state))
    (row,) = run_restarts(state, "training", "dit", 1).rows
    assert row.attribution is not None
    assert (row.attribution.node, row.attribution.cause) == ("n2", "hang")
    assert row.attribution.evidence[1] == "no step"
