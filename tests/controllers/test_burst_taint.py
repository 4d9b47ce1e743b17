"""burst-taint's decision over simulated hours (pure: snapshots in, plans out, the plans'
edits applied to the virtual nodes as the executor would), no API server."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from krea_ops.controllers.base import Decision
from krea_ops.controllers.burst_taint import (
    TAINT_KEY,
    BurstTaint,
    BurstTaintConfig,
    BurstTaintSnapshot,
)
from krea_ops.model import NodeInfo, Severity, Taint
from krea_ops.runbook.plan import StepKind
from tests.controllers.conftest import PROVIDER_TAINT, T0

PAUSE_TAINT = {"key": "krea.ai/burst-paused", "value": "true", "effect": "NoSchedule"}
INTERVAL_S = 30.0
HOLD_S = 300.0
NODES = 4  # x 8 GPUs


def gpu_nodes(count: int = NODES, **kw: Any) -> tuple[NodeInfo, ...]:
    fields: dict[str, Any] = {"ready": True, "gpu_capacity": 8, "gpu_allocatable": 8, **kw}
    return tuple(NodeInfo(name=f"gpu-node-{i:03d}", **fields) for i in range(count))


def virtual_obj(name: str, *taints: dict[str, str], version: int = 1) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}-{version}",
            "resourceVersion": str(version),
            "labels": {"type": "virtual-kubelet"},
        },
        "spec": {"taints": [dict(t) for t in (taints or (PROVIDER_TAINT,))]},
    }


def snapshot(
    used: int,
    virtual: dict[str, dict[str, Any]],
    *,
    nodes: tuple[NodeInfo, ...] | None = None,
    severity: Severity = Severity.OK,
    telemetry_error: str | None = None,
    fresh: int | None = None,
) -> BurstTaintSnapshot:
    """``used`` GPUs taken, filled node by node."""
    nodes = nodes if nodes is not None else gpu_nodes()
    requested: dict[str, int] = {}
    left = used
    for n in nodes:
        take = min(left, n.gpu_allocatable or 0)
        if take:
            requested[n.name] = take
        left -= take
    return BurstTaintSnapshot(
        user="system:serviceaccount:krea-ops:burst-taint",
        nodes=nodes,
        severity={n.name: severity for n in nodes},
        requested=requested,
        virtual=copy.deepcopy(virtual),
        telemetry_error=telemetry_error,
        gpu_nodes=len(nodes),
        fresh_nodes=len(nodes) if fresh is None else fresh,
    )


def controller(hold_s: float = HOLD_S) -> BurstTaint:
    return BurstTaint(BurstTaintConfig(free_gpus_high=16, free_gpus_low=8, hold_s=hold_s))


def tainted(obj: dict[str, Any]) -> bool:
    return any(t["key"] == TAINT_KEY for t in obj["spec"].get("taints") or ())


class Simulation:
    """Passes every INTERVAL_S; each plan's node edits applied to ``virtual``."""

    def __init__(self, ctl: BurstTaint, virtual: dict[str, dict[str, Any]]) -> None:
        self.ctl = ctl
        self.virtual = virtual
        self.state: dict[str, Any] = {}
        self.changes: list[tuple[float, str]] = []  # (t, plan action)
        self.last: Decision | None = None

    def step(self, t: float, snap: BurstTaintSnapshot) -> None:
        decision = self.ctl.decide(snap, T0 + t, self.state)
        self.last = decision
        for plan in decision.plans:
            self.changes.append((t, plan.action))
            for step in plan.steps:
                if step.kind is StepKind.UPDATE:
                    assert step.node is not None
                    obj = self.virtual[step.node]
                    for edit in step.edits:
                        obj = edit.apply(obj) or obj
                    self.virtual[step.node] = obj
        if decision.state is not None:
            self.state = dict(decision.state)

    def run(self, start: float, end: float, used: Callable[[float], int], **kw: Any) -> None:
        t = start
        while t < end:
            self.step(t, snapshot(used(t), self.virtual, **kw))
            t += INTERVAL_S


def test_free_gpus_taint_every_virtual_node_within_one_interval_of_the_hold() -> None:
    virtual = {"vk-a": virtual_obj("vk-a"), "vk-b": virtual_obj("vk-b")}
    sim = Simulation(controller(), virtual)
    # an hour with everything taken (0 free), then a training ends: 32 free
    sim.run(0, 7200, lambda t: 32 if t < 3600 else 0)
    assert len(sim.changes) == 1
    at, action = sim.changes[0]
    assert action == "burst-taint add"
    assert 3600 + HOLD_S <= at <= 3600 + HOLD_S + INTERVAL_S
    assert all(tainted(o) for o in sim.virtual.values())
    # the provider's own taint stays
    assert all(PROVIDER_TAINT in o["spec"]["taints"] for o in sim.virtual.values())


def test_trainings_taking_the_gpus_remove_the_taint_after_the_hold() -> None:
    sim = Simulation(controller(), {"vk-a": virtual_obj("vk-a")})
    sim.run(0, 3 * 3600, lambda t: 0 if t < 3600 else 30)  # 2 free from the second hour
    assert [a for _, a in sim.changes] == ["burst-taint add", "burst-taint remove"]
    removed_at = sim.changes[1][0]
    assert 3600 + HOLD_S <= removed_at <= 3600 + HOLD_S + INTERVAL_S
    assert not tainted(sim.virtual["vk-a"])
    assert sim.virtual["vk-a"]["spec"]["taints"] == [PROVIDER_TAINT]


def test_no_flapping_inside_the_hold_or_between_the_thresholds() -> None:
    sim = Simulation(controller(), {"vk-a": virtual_obj("vk-a")})
    # free swings 32 <-> 2 every two minutes for six hours: never held 5 minutes
    sim.run(0, 6 * 3600, lambda t: 0 if int(t // 120) % 2 else 30)
    assert sim.changes == []
    assert sim.last is not None and {s.why for s in sim.last.skipped} <= {"hold"}
    # once tainted, free wandering between the thresholds (8..16) changes nothing
    sim.run(6 * 3600, 7 * 3600, lambda t: 0)
    assert [a for _, a in sim.changes] == ["burst-taint add"]
    sim.run(7 * 3600, 12 * 3600, lambda t: 16 + int(t // 60) % 9)  # 16..24 used: 8..16 free
    assert [a for _, a in sim.changes] == ["burst-taint add"]
    assert tainted(sim.virtual["vk-a"])


def test_a_condition_met_during_the_hold_is_reported_as_a_hold_skip() -> None:
    sim = Simulation(controller(), {"vk-a": virtual_obj("vk-a")})
    sim.step(0, snapshot(0, sim.virtual))
    assert sim.last is not None and sim.last.plans == ()
    (skip,) = sim.last.skipped
    assert skip.why == "hold" and "32 GPUs free > 16" in skip.detail


def test_stale_or_missing_telemetry_changes_nothing_and_says_why() -> None:
    sim = Simulation(controller(), {"vk-a": virtual_obj("vk-a")})
    sim.run(0, 3600, lambda t: 0)
    assert tainted(sim.virtual["vk-a"])
    # Prometheus down for two hours while the GPUs are taken: the taint stays
    down = "cannot reach Prometheus at http://prometheus:9090"
    sim.run(3600, 3 * 3600, lambda t: 32, telemetry_error=down)
    assert [a for _, a in sim.changes] == ["burst-taint add"]
    decision = sim.last
    assert decision is not None and decision.plans == ()
    assert [s.why for s in decision.skipped] == ["stale"]
    assert down in decision.skipped[0].detail
    assert [a.kind for a in decision.alerts] == ["stale-input"]
    # readings stale on 3 of 4 nodes (Prometheus stopped scraping): the same
    sim.run(3 * 3600, 4 * 3600, lambda t: 32, fresh=1)
    assert [a for _, a in sim.changes] == ["burst-taint add"]
    assert sim.last is not None and "1 of 4 GPU nodes" in sim.last.skipped[0].detail
    # telemetry back: the hold starts again from its return, not from before the outage
    sim.run(4 * 3600, 5 * 3600, lambda t: 32)
    removed_at = sim.changes[-1][0]
    assert sim.changes[-1][1] == "burst-taint remove"
    assert 4 * 3600 + HOLD_S <= removed_at <= 4 * 3600 + HOLD_S + INTERVAL_S


def test_a_recreated_virtual_node_is_tainted_again_at_the_next_pass() -> None:
    sim = Simulation(controller(), {"vk-a": virtual_obj("vk-a"), "vk-b": virtual_obj("vk-b")})
    sim.run(0, 3600, lambda t: 0)
    assert all(tainted(o) for o in sim.virtual.values())
    sim.virtual["vk-b"] = virtual_obj("vk-b", version=7)  # the provider re-registered it
    sim.step(3600, snapshot(0, sim.virtual))
    assert sim.last is not None
    (plan,) = sim.last.plans
    assert plan.nodes == ("vk-b",)
    assert all(tainted(o) for o in sim.virtual.values())


def test_the_pause_switch_and_provider_taints_are_never_touched() -> None:
    paused = virtual_obj("vk-a", PROVIDER_TAINT, PAUSE_TAINT)
    sim = Simulation(controller(), {"vk-a": paused})
    sim.run(0, 3600, lambda t: 0)
    assert sim.virtual["vk-a"]["spec"]["taints"][:2] == [PROVIDER_TAINT, PAUSE_TAINT]
    assert tainted(sim.virtual["vk-a"])
    sim.run(3600, 7200, lambda t: 32)
    assert sim.virtual["vk-a"]["spec"]["taints"] == [PROVIDER_TAINT, PAUSE_TAINT]
    for _, action in sim.changes:
        assert action in ("burst-taint add", "burst-taint remove")


@pytest.mark.parametrize(
    ("nodes", "severity"),
    [
        (gpu_nodes(ready=False), Severity.OK),  # NotReady
        (gpu_nodes(unschedulable=True), Severity.OK),  # cordoned
        (gpu_nodes(taints=(Taint("krea.ai/unhealthy", "hot", "NoSchedule"),)), Severity.OK),
        (gpu_nodes(), Severity.BAD),
        (gpu_nodes(), Severity.UNKNOWN),
    ],
    ids=["not-ready", "cordoned", "tainted", "bad", "unknown"],
)
def test_only_schedulable_healthy_gpus_count_as_free(
    nodes: tuple[NodeInfo, ...], severity: Severity
) -> None:
    snap = snapshot(0, {"vk-a": virtual_obj("vk-a")}, nodes=nodes, severity=severity)
    assert snap.free_gpus() == (0, 0)
    assert snapshot(0, {}, severity=Severity.SUSPECT).free_gpus() == (32, 32)
    # GPU node pools' own taint is tolerated by every GPU pod: those GPUs count
    gke = gpu_nodes(taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))
    assert snapshot(0, {}, nodes=gke).free_gpus() == (32, 32)
    assert snapshot(12, {}).free_gpus() == (20, 32)


def test_without_stored_state_it_keeps_what_the_nodes_show() -> None:
    """A new leader with no state, free GPUs between the thresholds: the taint already on
    one node is what is wanted, so the other (re-created) node gets it too."""
    virtual = {
        "vk-a": virtual_obj("vk-a", PROVIDER_TAINT, {"key": TAINT_KEY, "value": "true",
                                                     "effect": "NoSchedule"}),
        "vk-b": virtual_obj("vk-b"),
    }  # fmt: skip
    decision = controller().decide(snapshot(20, virtual), T0, {})
    (plan,) = decision.plans
    assert plan.action == "burst-taint add" and plan.nodes == ("vk-b",)


def test_thresholds_are_checked() -> None:
    from krea_ops.errors import BadInput

    with pytest.raises(BadInput, match="low threshold"):
        BurstTaintConfig(free_gpus_high=4, free_gpus_low=8)


def test_read_prices_the_gpus_offsite_and_counts_those_without_a_price(ops: Any) -> None:
    """What inference offsite costs now is each Running pod's GPUs times its
    burst.krea.ai/usd-per-gpu-hour; a pod without a price is counted, not costed as 0."""
    from krea_ops.burst import ANN_PRICE
    from krea_ops.controllers.base import Inputs
    from krea_ops.health import HealthPolicy
    from tests.controllers.conftest import gpu_node, gpu_pod, virtual_node
    from tests.kube.conftest import set_status

    gpu_node(ops, "gpu-node-000")
    virtual_node(ops, "vk-runpod")
    gpu_pod(ops, "vk-runpod", "serve-a", 2)
    gpu_pod(ops, "vk-runpod", "serve-b", 1)
    gpu_pod(ops, "vk-runpod", "serve-c", 4)
    gpu_pod(ops, "gpu-node-000", "home", 8)  # in-cluster: no burst cost
    for name, price in (("serve-a", "2.5"), ("serve-b", "3")):
        path = f"/api/v1/namespaces/default/pods/{name}"
        ops.request(
            "price",
            "PATCH",
            path,
            body={"metadata": {"annotations": {ANN_PRICE: price}}},
            content_type="application/merge-patch+json",
        )
    set_status(ops, "/api/v1/namespaces/default/pods/serve-c", {"phase": "Running"})
    inputs = Inputs(cluster=ops, source=None, policy=HealthPolicy(), user="test")
    snap = controller().read(inputs, T0)
    assert snap.offsite_usd_per_hour == 2 * 2.5 + 1 * 3.0
    assert snap.offsite_gpus_unpriced == 4
    gauges = controller().decide(snap, T0, {}).gauges
    assert gauges["offsite_usd_per_hour"] == 8.0 and gauges["offsite_gpus_unpriced"] == 4.0


def test_a_telemetry_read_with_failed_queries_is_no_read(ops: Any) -> None:
    """A query that failed leaves its readings missing on every node, so every node would
    pass for healthy: burst-taint takes the read as no read and changes nothing."""
    import dataclasses

    from krea_ops.controllers.base import Inputs
    from krea_ops.health import HealthPolicy
    from tests.controllers.conftest import RecordedSource, gpu_node, healthy_telemetry
    from tests.controllers.conftest import virtual_node as make_virtual

    for name in ("gpu-node-000", "gpu-node-001"):
        gpu_node(ops, name)
    make_virtual(ops, "vk-0")
    full = healthy_telemetry(("gpu-node-000", "gpu-node-001"), T0)
    partial = dataclasses.replace(full, errors=("krea_gpu_temperature_celsius: HTTP 500",))
    ctl = controller(hold_s=0)
    inputs = Inputs(ops, RecordedSource(partial), HealthPolicy(), "test")
    snap = ctl.read(inputs, T0)
    assert snap.telemetry_error == (
        "telemetry read incomplete: krea_gpu_temperature_celsius: HTTP 500"
    )
    decision = ctl.decide(snap, T0, {})
    assert not decision.acts and [s.why for s in decision.skipped] == ["stale"]
    # the same fleet read whole: judged, its 16 GPUs free
    whole = ctl.read(Inputs(ops, RecordedSource(full), HealthPolicy(), "test"), T0)
    assert whole.telemetry_error is None
    judged = ctl.decide(whole, T0, {})
    assert not judged.skipped and judged.gauges["free_gpus"] == 16
