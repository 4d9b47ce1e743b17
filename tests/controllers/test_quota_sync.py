"""quota-sync: each ClusterQueue's GPU quota follows the GPUs schedulable on the
flavor's healthy nodes (split, floor, ceiling, headroom, what others promise), lowers at
once and raises once the capacity has held, recommends without writing; then against the
simulated Kueue, a node cordoned and restored moves the quota and the server accepts it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from krea_ops.controllers.base import Decision, Inputs
from krea_ops.controllers.quota_sync import (
    FlavorSplit,
    QuotaSync,
    QuotaSyncConfig,
    QuotaSyncSnapshot,
)
from krea_ops.errors import BadInput
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.model import NodeInfo, Severity, Taint
from krea_ops.runbook.execute import execute
from krea_ops.runbook.plan import StepKind
from krea_ops.runbook.quota import SetNominalQuota, nominal_quota
from krea_ops.settings import Settings, load_settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for
from tests.runbook.test_nodes import assert_plan_was_run

GPU = "nvidia.com/gpu"
H200 = {"metadata": {"name": "h200"}, "spec": {"nodeLabels": {"krea.ai/pool": "h200"}}}
SPLIT = {"training": 0.75, "inference": 0.25}


def qs_node(i: int, gpus: int = 8, **kw: Any) -> NodeInfo:
    return NodeInfo(
        name=f"gpu-node-{i:03d}",
        labels={"krea.ai/pool": "h200"},
        ready=kw.pop("ready", True),
        gpu_allocatable=gpus,
        **kw,
    )


def qs_cq(name: str, quotas: Mapping[str, int], cohort: str | None = "gpu", **res: Any) -> Any:
    return {
        "metadata": {"name": name, "resourceVersion": "7"},
        "spec": {
            **({"cohortName": cohort} if cohort else {}),
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": f, "resources": [{"name": GPU, "nominalQuota": str(q), **res}]}
                        for f, q in quotas.items()
                    ],
                }
            ],
        },
    }


def qs_snapshot(
    nodes: list[NodeInfo],
    cqs: list[Any],
    *,
    severity: Mapping[str, Severity] | None = None,
    cohorts: Mapping[str, Any] | None = None,
) -> QuotaSyncSnapshot:
    return QuotaSyncSnapshot(
        user="system:serviceaccount:krea-ops:quota-sync",
        api_version="v1beta2",
        cluster_queues={c["metadata"]["name"]: c for c in cqs},
        cohorts=dict(cohorts or {}),
        flavors={"h200": H200},
        nodes=tuple(nodes),
        severity=severity,
    )


def sync(**kw: Any) -> QuotaSync:
    split = kw.pop("split", SPLIT)
    flavor = FlavorSplit(
        "h200",
        split,
        kw.pop("headroom", 0),
        kw.pop("floor", 0),
        kw.pop("ceiling", None),
    )
    return QuotaSync(QuotaSyncConfig(flavors=(flavor,), **kw))


def written(decision: Decision) -> dict[str, int]:
    """ClusterQueue -> the h200 GPU quota its planned patch sets."""
    out = {}
    for plan in decision.plans:
        # each write, then the audit Event about it
        kinds = [s.kind for s in plan.steps]
        assert kinds == [StepKind.UPDATE, StepKind.EVENT] * (len(kinds) // 2)
        for step in plan.steps[::2]:
            (call,) = step.calls
            assert call.method == "PATCH" and call.precondition == "resourceVersion 7"
            name = call.path.rsplit("/", 1)[1]
            quota = nominal_quota(call.body or {}, "h200")
            assert quota is not None
            out[name] = int(quota)
    return out


def whys(decision: Decision) -> dict[str, str]:
    return {s.target: s.why for s in decision.skipped}


FOUR = [qs_node(i) for i in range(4)]
IN_STEP = [qs_cq("training", {"h200": 24}), qs_cq("inference", {"h200": 8, "burst": 8})]


def test_in_step_nothing_is_written() -> None:
    decision = sync().decide(qs_snapshot(FOUR, IN_STEP), 0.0, {})
    assert not decision.acts and decision.skipped == ()
    assert decision.gauges['schedulable_gpus{flavor="h200"}'] == 32
    assert decision.gauges['target_gpus{cluster_queue="training",flavor="h200"}'] == 24


def test_a_cordoned_node_lowers_the_quota_at_once_and_only_that_quota() -> None:
    nodes = [qs_node(0, unschedulable=True), *FOUR[1:]]
    decision = sync().decide(qs_snapshot(nodes, IN_STEP), 0.0, {})

    assert written(decision) == {"inference": 6, "training": 18}
    (plan,) = decision.plans
    assert plan.action == "quota-sync"
    inference = next(s for s in plan.steps if "inference" in s.description)
    assert "h200 nvidia.com/gpu nominalQuota 8 -> 6" in inference.description
    body = inference.calls[0].body or {}
    # the burst flavor's quota goes along unchanged (a merge patch replaces lists whole)
    assert nominal_quota(body, "burst") == 8
    assert body["metadata"]["resourceVersion"] == "7"
    assert "24 schedulable GPUs on 3 nodes" in inference.calls[0].why


def test_a_restored_node_raises_the_quota_once_it_has_held() -> None:
    lowered = [qs_cq("training", {"h200": 18}), qs_cq("inference", {"h200": 6})]
    qs = sync(raise_after_s=120.0)
    state: Mapping[str, Any] = {}
    for now in (0.0, 60.0):
        decision = qs.decide(qs_snapshot(FOUR, lowered), now, state)
        assert not decision.acts
        assert set(whys(decision).values()) == {"hold"}
        state = json.loads(json.dumps(decision.state))  # a restart in between changes nothing
    decision = qs.decide(qs_snapshot(FOUR, lowered), 120.0, state)
    assert written(decision) == {"training": 24, "inference": 8}


def test_a_flapping_node_restarts_the_wait_and_never_raises_the_quota() -> None:
    lowered = [qs_cq("training", {"h200": 18}), qs_cq("inference", {"h200": 6})]
    flapping = [qs_node(0, ready=False), *FOUR[1:]]
    qs = sync(raise_after_s=120.0)
    state: Mapping[str, Any] = {}
    for minute in range(30):
        nodes = FOUR if minute % 2 else flapping  # Ready one minute, not the next
        decision = qs.decide(qs_snapshot(nodes, lowered), minute * 60.0, state)
        assert not decision.acts
        state = decision.state or {}


def test_whole_gpus_by_largest_remainder_within_floor_and_ceiling() -> None:
    nodes = [*FOUR[:3], qs_node(3, gpus=3)]  # 27 GPUs: 20.25 and 6.75
    assert written(sync().decide(qs_snapshot(nodes, IN_STEP), 0.0, {})) == {
        "training": 20,
        "inference": 7,
    }
    gone = [qs_node(i, ready=False) for i in range(4)]
    decision = sync(floor=4).decide(qs_snapshot(gone, IN_STEP), 0.0, {})
    assert written(decision) == {"training": 4, "inference": 4}
    capped = sync(ceiling=10).decide(qs_snapshot(FOUR, IN_STEP), 0.0, {})
    assert written(capped) == {"training": 10}


def test_headroom_and_quota_promised_elsewhere_come_off_first() -> None:
    cqs = [*IN_STEP, qs_cq("research", {"h200": 8}, cohort="lab")]
    cohorts = {"gpu": {"metadata": {"name": "gpu"}, "spec": qs_cq("x", {"h200": 4})["spec"]}}
    decision = sync(headroom=4).decide(qs_snapshot(FOUR, cqs, cohorts=cohorts), 0.0, {})
    # 32 - 4 headroom - 8 research's - 4 the cohort's own = 16
    assert written(decision) == {"training": 12, "inference": 4}
    assert "research" not in written(decision)


def test_bad_nodes_are_not_capacity_unknown_ones_are_unless_told_otherwise() -> None:
    severity = {
        "gpu-node-000": Severity.BAD,
        "gpu-node-001": Severity.UNKNOWN,
        "gpu-node-002": Severity.OK,
        "gpu-node-003": Severity.SUSPECT,
    }
    snap = qs_snapshot(FOUR, IN_STEP, severity=severity)
    assert written(sync().decide(snap, 0.0, {})) == {"training": 18, "inference": 6}
    strict = sync(count_unknown=False).decide(snap, 0.0, {})
    assert written(strict) == {"training": 12, "inference": 4}
    # our quarantine taint takes a node out too
    tainted = [qs_node(0, taints=(Taint("krea.ai/unhealthy", "xid-79", "NoSchedule"),)), *FOUR[1:]]
    assert written(sync().decide(qs_snapshot(tainted, IN_STEP), 0.0, {}))["training"] == 18
    # but not the taint burst migrate --out steers inference with: those GPUs are being
    # cleared for a training, which needs the quota
    steering = [qs_node(0, taints=(Taint("krea.ai/burst-out", "true", "NoSchedule"),)), *FOUR[1:]]
    assert not sync().decide(qs_snapshot(steering, IN_STEP), 0.0, {}).acts
    assert sync(ignore_taints=()).decide(qs_snapshot(steering, IN_STEP), 0.0, {}).acts


def test_recommend_mode_writes_nothing_and_says_what_it_would_set() -> None:
    nodes = [qs_node(0, unschedulable=True), *FOUR[1:]]
    decision = sync(mode="recommend").decide(qs_snapshot(nodes, IN_STEP), 0.0, {})
    assert decision.plans == ()
    skips = {s.target: s for s in decision.skipped}
    assert skips["clusterqueue training"].why == "recommend"
    assert skips["clusterqueue training"].detail.startswith("nominalQuota 24 -> 18 on h200")
    assert decision.gauges['target_gpus{cluster_queue="inference",flavor="h200"}'] == 6


def test_a_lending_limit_above_the_new_quota_comes_down_with_it() -> None:
    cqs = [qs_cq("training", {"h200": 24}), qs_cq("inference", {"h200": 8}, lendingLimit="8")]
    nodes = [qs_node(0, unschedulable=True), *FOUR[1:]]
    decision = sync().decide(qs_snapshot(nodes, cqs), 0.0, {})
    step = next(s for p in decision.plans for s in p.steps if "inference" in s.description)
    assert "(lendingLimit 8 -> 6)" in step.description
    resource = (step.calls[0].body or {})["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resource[0]["lendingLimit"] == "6"


def test_what_is_missing_is_left_alone_with_the_reason() -> None:
    cqs = [qs_cq("training", {"h200": 24}), qs_cq("inference", {"burst": 8})]
    decision = sync().decide(qs_snapshot(FOUR, cqs), 0.0, {})
    assert whys(decision) == {"clusterqueue inference": "missing"}
    assert written(decision) == {}  # training's 24 is already right
    # a flavor whose labels select no node: a typo must not zero the queues
    snap = qs_snapshot([], IN_STEP)
    nothing = sync().decide(snap, 0.0, {})
    assert whys(nothing) == {"flavor h200": "no-nodes"} and not nothing.acts


def test_the_edit_is_a_no_op_when_the_quota_is_already_there() -> None:
    cq = qs_cq("training", {"h200": 24})
    assert SetNominalQuota("h200", 24).apply(cq) is None
    assert SetNominalQuota("b200", 8).apply(cq) is None  # never adds a flavor
    changed = SetNominalQuota("h200", 16).apply(cq)
    assert changed is not None and nominal_quota(changed, "h200") == 16
    assert nominal_quota(cq, "h200") == 24  # the object read is not touched


def test_settings_from_a_mapping_and_one_line_errors() -> None:
    config = QuotaSyncConfig.from_mapping(
        {
            "mode": "recommend",
            "headroom": 2,
            "flavors": {
                "h200": {"training": 0.75, "inference": 0.25},
                "b200": {"split": {"training": 1}, "floor": 8, "ceiling": 64},
            },
        }
    )
    h200, b200 = config.flavors
    assert config.mode == "recommend"
    assert h200 == FlavorSplit("h200", {"training": 0.75, "inference": 0.25}, 2, 0, None)
    assert b200 == FlavorSplit("b200", {"training": 1.0}, 2, 8, 64)
    assert [f.flavor for f in QuotaSyncConfig.from_mapping(None).flavors] == ["h200"]
    for bad, words in (
        ({"mode": "yolo"}, "mode must be apply or recommend"),
        ({"flavors": {"h200": {"training": 0.8, "inference": 0.4}}}, "add up to 1.2, over 1"),
        ({"flavors": {"h200": {"training": -1}}}, "must be in (0, 1]"),
        ({"flavors": {"h200": {"split": {"t": 1}, "floor": 9, "ceiling": 3}}}, "below floor"),
        ({"floor": 1.5}, "whole number of GPUs"),
        ({"raise-after-s": "soon"}, "raise_after_s must be seconds"),
        ({"flavour": {}}, "unknown setting 'flavour'"),
    ):
        with pytest.raises(BadInput) as error:
            QuotaSyncConfig.from_mapping(bad)
        assert words in str(error.value) and "\n" not in str(error.value)


def test_settings_from_the_krea_ops_settings() -> None:
    def settings(**values: object) -> Settings:
        return load_settings(values, env={"KREA_OPS_CONFIG": "/nonexistent"})

    config = QuotaSync.from_settings(
        settings(
            quota_sync_mode="recommend",
            quota_sync_training_share=0.75,
            quota_sync_headroom_gpus=0,
            quota_sync_floor_gpus=8,
            quota_sync_ceiling_gpus=4096,
        )
    ).config
    assert config.mode == "recommend"
    assert config.flavors == (
        FlavorSplit("h200", {"training": 0.75, "inference": 0.25}, 0, 8, 4096),
    )
    # a training share of 1: the inference queue's quota is not managed (it borrows)
    alone = QuotaSyncConfig.from_settings(settings(quota_sync_training_share=1))
    assert alone.flavors == (FlavorSplit("h200", {"training": 1.0}),)
    assert QuotaSyncConfig.from_settings(settings()) == QuotaSyncConfig()
    with pytest.raises(BadInput, match="quota_sync_training_share must be in"):
        QuotaSyncConfig.from_settings(settings(quota_sync_training_share=1.5))
    with pytest.raises(BadInput, match="mode must be apply or recommend"):
        QuotaSyncConfig.from_settings(settings(quota_sync_mode="yolo"))


# -- against the simulated Kueue ---------------------------------------------------------------


@pytest.fixture
def qs_kueue_world(tmp_path: Path, control_plane: str) -> Iterator[tuple[SimWorld, Cluster]]:
    """Two 8-GPU nodes and the simulated Kueue: training 12 and inference 4 on h200."""
    config = WorldConfig(
        control_plane=control_plane, nodes=2, speed=60, exporters=False, prometheus=False
    )
    with SimWorld(config, tmp_path, parts=("cluster", "kueue")) as world:
        cluster = Cluster(world.client, timeout_s=30)
        wait_for(lambda: len(qs_quotas(cluster)) == 2 and qs_ready_nodes(cluster) == 2)
        yield world, cluster


def qs_quotas(cluster: Cluster) -> dict[str, float | None]:
    answer = cluster.request(
        "cqs", "GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", query={"limit": 50}
    )
    assert answer.ok, answer.body
    items = (answer.body or {}).get("items") or []
    return {c["metadata"]["name"]: nominal_quota(c, "h200") for c in items}


def qs_ready_nodes(cluster: Cluster) -> int:
    nodes = cluster.nodes(label_selector="krea.ai/pool=h200")
    return sum(1 for n in nodes if n.ready and (n.gpu_allocatable or 0) > 0)


def qs_cordon(cluster: Cluster, name: str, on: bool) -> None:
    answer = cluster.request(
        "cordon",
        "PATCH",
        f"/api/v1/nodes/{name}",
        body={"spec": {"unschedulable": on}},
        content_type="application/merge-patch+json",
    )
    assert answer.ok, answer.body


def test_against_the_simulator_quota_follows_a_node_cordoned_and_restored(
    qs_kueue_world: tuple[SimWorld, Cluster],
) -> None:
    _, cluster = qs_kueue_world
    qs = QuotaSync(QuotaSyncConfig.from_mapping({"flavors": {"h200": SPLIT}, "raise_after_s": 0}))
    inputs = Inputs(cluster, None, HealthPolicy(), "system:serviceaccount:krea-ops:quota-sync")
    assert qs_quotas(cluster) == {"training": 12, "inference": 4}

    def one_pass(now: float) -> Decision:
        decision = qs.decide(qs.read(inputs, now), now, {})
        for plan in decision.plans:
            result = execute(cluster, plan)
            assert result.status == "done", result.as_dict()
            assert_plan_was_run(plan, result)
        return decision

    assert set(qs.read(inputs, 0.0).read_at) == {"kueue", "nodes"}  # no telemetry here
    first = one_pass(0.0)
    assert not first.acts  # 16 GPUs: already in step
    assert [a.kind for a in first.alerts] == ["stale-input"]  # no telemetry here

    qs_cordon(cluster, "gpu-node-000", True)
    assert one_pass(60.0).acts
    assert qs_quotas(cluster) == {"training": 6, "inference": 2}
    events = cluster.get("events", "/api/v1/namespaces/default/events")["items"]
    synced = [e for e in events if e["reason"] == "QuotaSynced"]
    assert {e["involvedObject"]["name"] for e in synced} == {"training", "inference"}
    training = next(e for e in synced if e["involvedObject"]["name"] == "training")
    assert training["involvedObject"]["kind"] == "ClusterQueue"
    assert "h200 nvidia.com/gpu nominalQuota 12 -> 6" in training["message"]

    qs_cordon(cluster, "gpu-node-000", False)
    assert one_pass(120.0).acts
    assert qs_quotas(cluster) == {"training": 12, "inference": 4}
    assert not one_pass(180.0).acts  # and it stays put
