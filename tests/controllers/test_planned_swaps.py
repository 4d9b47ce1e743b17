"""node-health's planned swaps over constructed fleets in simulated time (the decision
only; tests/world/test_planned_swap.py runs one against the simulated trainers): the
checkpoint request is a plan on the JobSet, the eviction follows the trainer's answer
with the runbook's plan, and the blast cap, opt-out, veto and the setting hold."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from krea_ops.controllers.base import Decision
from krea_ops.controllers.node_health import NodeHealthConfig, NodeHealthSnapshot, evictable
from krea_ops.controllers.planned_swaps import swap_evictable
from krea_ops.controllers.restarts import RestartInputs
from krea_ops.kube.times import rfc3339
from krea_ops.model import Reason, Severity, Verdict
from krea_ops.runbook.nodes import EvictInputs
from krea_ops.runbook.plan import Plan
from krea_ops.training.gangs import Gang
from krea_ops.training.swaps import (
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_COMPLETED_STEP,
    CHECKPOINT_REQUESTED_AT,
)
from tests.controllers.test_node_health import (
    MINUTE,
    T0,
    USER,
    Fleet,
    evicted,
    name_of,
    skips,
)

WARM_TEXT = "GPU 5 at 76 °C, warm (at or above 75 °C)"


def warm(gpu: int = 5) -> Verdict:
    return Verdict.of([Reason(Severity.SUSPECT, "gpu_warm", WARM_TEXT, gpu=gpu)])


def gang(name: str, nodes: range, **notes: str) -> Gang:
    return Gang(
        namespace="training",
        name=name,
        uid=f"uid-{name}",
        restarts=0,
        resource_version="41",
        nodes=tuple(name_of(i) for i in nodes),
        running=True,
        expected=len(nodes),
        gpus=8 * len(nodes),
        annotations=dict(notes),
        pods=(),
    )


class SwapFleet(Fleet):
    """A fleet with training gangs whose JobSets take the requests' annotations, as the
    executor's merge patch would, and a trainer that answers when told to."""

    def __init__(self, count: int, config: NodeHealthConfig | None = None) -> None:
        # (the swap waits no pass: tests/training/test_swaps.py has the slow burn's wait)
        super().__init__(count, config or NodeHealthConfig(swap_after_s=0.0))
        self.gangs: dict[str, Gang] = {}

    def snapshot(self) -> NodeHealthSnapshot:
        """As ``read`` takes it: the gangs, and the eviction inputs of the nodes a swap
        may evict too."""
        gangs = tuple(self.gangs.values())
        names = evictable(self.objs, self.verdicts, USER, swap_evictable(gangs, self.verdicts))
        evict = EvictInputs(
            nodes=tuple(names),
            objs={n: copy.deepcopy(self.objs[n]) for n in names},
            fleet=len(self.objs),
            pods={n: () for n in names},
        )
        return replace(super().snapshot(), restarts=RestartInputs(gangs), evict=evict)

    def apply(self, plan: Plan) -> None:
        if plan.action != "train checkpoint-request":
            return super().apply(plan)
        assert plan.subject is not None
        name = plan.subject.split("/")[1]
        update = plan.steps[0]
        g = self.gangs[name]
        obj = {"metadata": {"annotations": dict(g.annotations)}}
        for edit in update.edits:
            obj = edit.apply(obj) or obj
        self.gangs[name] = replace(g, annotations=obj["metadata"]["annotations"])
        return None

    def answer(self, name: str, at: float, step: int) -> None:
        g = self.gangs[name]
        notes = {CHECKPOINT_COMPLETED_AT: rfc3339(at), CHECKPOINT_COMPLETED_STEP: str(step)}
        self.gangs[name] = replace(g, annotations={**g.annotations, **notes})


def requests(decision: Decision) -> list[str]:
    return [p.subject or "" for p in decision.plans if p.action == "train checkpoint-request"]


def test_a_warm_gpu_in_a_gang_asks_for_a_checkpoint_then_evicts_right_after_it() -> None:
    fleet = SwapFleet(64)
    fleet.gangs["dit"] = gang("dit", range(8))
    fleet.verdicts[name_of(3)] = warm()

    first = fleet.step(T0)

    assert requests(first) == ["training/dit"] and evicted(first) == []
    (plan,) = first.plans
    assert plan.user == fleet.snapshot().user and "planned swap of gpu-node-003" in (
        plan.reason or ""
    )
    assert fleet.gangs["dit"].annotations[CHECKPOINT_REQUESTED_AT] == rfc3339(T0)
    assert first.gauges["swaps_pending"] == 1
    waiting = fleet.run(T0 + MINUTE, T0 + 3 * MINUTE)
    assert all(not d.plans for d in waiting)  # asked once, nothing evicted yet

    fleet.answer("dit", T0 + 3.5 * MINUTE, step=9000)
    decision = fleet.step(T0 + 4 * MINUTE)

    assert evicted(decision) == [name_of(3)]
    (plan,) = decision.plans
    assert plan.reason == (
        f"planned swap: {WARM_TEXT}; checkpoint step 9000 of training/dit is complete"
    )
    assert fleet.quarantined() == [name_of(3)]
    assert decision.gauges["quarantined_unacked"] == 1
    # the gang restarts without it: nothing more
    fleet.gangs["dit"] = replace(fleet.gangs["dit"], nodes=(*fleet.gangs["dit"].nodes[:3],))
    assert not fleet.step(T0 + 5 * MINUTE).plans


def test_swaps_count_against_the_blast_cap() -> None:
    fleet = SwapFleet(64)  # cap: 1 node
    fleet.gangs["a"] = gang("a", range(0, 4))
    fleet.gangs["b"] = gang("b", range(4, 8))
    fleet.verdicts[name_of(1)] = warm()
    assert requests(fleet.step(T0)) == ["training/a"]

    fleet.verdicts[name_of(5)] = warm()  # (minutes apart: not a wave)
    second = fleet.step(T0 + 2 * MINUTE)

    # the swap under way holds the one place: the other gang is not asked
    assert requests(second) == [] and skips(second, "cap") == [name_of(5)]
    fleet.answer("a", T0 + 150, step=10)
    third = fleet.step(T0 + 3 * MINUTE)
    assert evicted(third) == [name_of(1)] and skips(third, "cap") == [name_of(5)]
    assert requests(third) == [] and fleet.quarantined() == [name_of(1)]


def test_a_swap_is_never_asked_while_the_cap_is_taken_by_a_bad_node() -> None:
    fleet = SwapFleet(64)
    fleet.gangs["dit"] = gang("dit", range(8))
    fleet.verdicts[name_of(20)] = Verdict.of(
        [Reason(Severity.BAD, "gpu_hot", "GPU 3 at 84 °C, at or above 78 °C", gpu=3)]
    )
    fleet.verdicts[name_of(2)] = warm()

    decision = fleet.step(T0)

    assert evicted(decision) == [name_of(20)] and requests(decision) == []
    assert skips(decision, "cap") == [name_of(2)]


def test_opt_out_veto_and_the_setting_hold_a_swap() -> None:
    off = SwapFleet(64, NodeHealthConfig(planned_swaps=False, swap_after_s=0.0))
    off.gangs["dit"] = gang("dit", range(8))
    off.verdicts[name_of(2)] = warm()
    assert not off.step(T0).plans

    opted = SwapFleet(64)
    opted.gangs["dit"] = gang("dit", range(8))
    labels: dict[str, Any] = opted.objs[name_of(2)]["metadata"]["labels"]
    labels["krea.ai/auto-remediate"] = "false"
    opted.verdicts[name_of(2)] = warm()
    decision = opted.step(T0)
    assert not decision.plans and skips(decision, "opt-out") == [name_of(2)]

    room = SwapFleet(64, NodeHealthConfig(cap_min_nodes=4, swap_after_s=0.0))
    room.gangs["dit"] = gang("dit", range(8))
    for i in (2, 30, 40):  # three nodes warm at once (threshold: 2 of 64): the room
        room.verdicts[name_of(i)] = warm()
    decision = room.step(T0)
    assert not decision.plans and skips(decision, "veto") == [name_of(2)]


def test_an_unanswered_request_gives_up_and_leaves_the_suspect_node() -> None:
    fleet = SwapFleet(64, NodeHealthConfig(swap_timeout_s=300.0, swap_after_s=0.0))
    fleet.gangs["dit"] = gang("dit", range(8))
    fleet.verdicts[name_of(3)] = warm()
    fleet.step(T0)

    decisions = fleet.run(T0 + MINUTE, T0 + 60 * MINUTE)

    assert all(evicted(d) == [] and requests(d) == [] for d in decisions)
    assert [n for d in decisions for n in skips(d, "swap-timeout")] == [name_of(3)]
    assert fleet.quarantined() == []


def test_a_bad_node_whose_swap_was_given_up_is_evicted_as_any_bad_node() -> None:
    """A power brake (BAD) is swapped at once; unanswered, the swap is given up and the
    node is node-health's ordinary eviction's, not held for a swap no one will ask for."""
    fleet = SwapFleet(64, NodeHealthConfig(swap_timeout_s=300.0, swap_after_s=0.0))
    fleet.gangs["dit"] = gang("dit", range(8))
    brake = Reason(Severity.BAD, "gpu_hw_power_brake", "GPU 2 held by a power brake", gpu=2)
    fleet.verdicts[name_of(3)] = Verdict.of([brake])

    first = fleet.step(T0)
    assert requests(first) == ["training/dit"] and evicted(first) == []

    decisions = fleet.run(T0 + MINUTE, T0 + 30 * MINUTE)

    assert [n for d in decisions for n in skips(d, "swap-timeout")] == [name_of(3)]
    assert [n for d in decisions for n in evicted(d)] == [name_of(3)]
    assert fleet.quarantined() == [name_of(3)]
