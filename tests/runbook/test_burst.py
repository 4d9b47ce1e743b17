"""burst pause / unpause as plans run by the one executor, against the simulated API server:
the plan is the calls then made; our taint goes on every virtual node with who, why and
since, and comes off alone; the provider's taints and anyone else's stay; a second run
writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from krea_ops.burst import (
    PAUSE_TAINT_KEY,
    PAUSED_AT,
    PAUSED_BY,
    PAUSED_REASON,
    VK_TAINT_KEY,
)
from krea_ops.burst.status import burst_status, find_virtual_nodes
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.model import Severity as HealthSeverity
from krea_ops.runbook.burst import (
    build_migrate,
    plan_migrate,
    plan_pause,
    plan_unpause,
    read_migrate,
)
from krea_ops.runbook.execute import execute
from krea_ops.runbook.plan import StepKind
from tests.kube.conftest import create, report_ready
from tests.runbook.conftest import events_about, fleet, node_obj, pod_on
from tests.runbook.test_nodes import assert_plan_was_run

VKS = ("vk-runpod", "vk-salad")
PROVIDER_TAINT = {"key": VK_TAINT_KEY, "value": "runpod", "effect": "NoSchedule"}
# another client's NoExecute taint (not one the node lifecycle controller manages: it
# would take an ``unreachable`` taint off a node whose kubelet answers)
UNREACHABLE = {"key": "example.com/provider-outage", "value": "runpod", "effect": "NoExecute"}
OTHER = {"key": "example.com/maintenance", "value": "bios", "effect": "NoSchedule"}
OURS = {"key": PAUSE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
REASON = "provider outage: runpod 5xx on placement"


def virtual_nodes(cluster: Cluster) -> None:
    create(
        cluster,
        "/api/v1/nodes",
        {
            "metadata": {"name": VKS[0], "labels": {"type": "virtual-kubelet"}},
            "spec": {"taints": [PROVIDER_TAINT, UNREACHABLE]},
        },
    )
    create(
        cluster,
        "/api/v1/nodes",
        {
            "metadata": {"name": VKS[1], "labels": {"type": "virtual-kubelet"}},
            "spec": {"taints": [{**PROVIDER_TAINT, "value": "salad"}, OTHER]},
        },
    )
    for name in VKS:  # their kubelets report Ready, as a virtual kubelet does
        report_ready(cluster, name)


def taints(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return list(node_obj(cluster, name)["spec"].get("taints") or [])


def test_pause_runs_its_plan_keeps_other_taints_and_is_idempotent(cluster: Cluster) -> None:
    fleet(cluster, 2)
    virtual_nodes(cluster)

    assert [n.name for n, _ in find_virtual_nodes(cluster)] == list(VKS)
    plan = plan_pause(cluster, VKS, reason=REASON, user="alice")

    assert plan.nodes == VKS
    assert [str(s.kind) for s in plan.steps] == ["update", "event"] * 2
    assert {s.node for s in plan.steps} == set(VKS)  # never the in-cluster nodes
    result = execute(cluster, plan)
    assert result.status == "done"
    assert_plan_was_run(plan, result)

    assert taints(cluster, VKS[0]) == [PROVIDER_TAINT, UNREACHABLE, OURS]
    assert taints(cluster, VKS[1]) == [{**PROVIDER_TAINT, "value": "salad"}, OTHER, OURS]
    annotations = node_obj(cluster, VKS[0])["metadata"]["annotations"]
    assert annotations[PAUSED_BY] == "alice"
    assert annotations[PAUSED_REASON] == REASON
    assert annotations[PAUSED_AT].endswith("Z")
    assert [e["reason"] for e in events_about(cluster, "default", VKS[0])] == ["BurstPaused"]
    assert "taints" not in node_obj(cluster, "gpu-node-000")["spec"]

    status = burst_status(cluster)
    node = next(n for n in status.nodes if n.name == VKS[0])
    assert node.paused and node.paused_by == "alice" and node.pause_reason == REASON
    assert node.paused_at is not None

    again = plan_pause(cluster, VKS, reason=REASON, user="alice")
    assert again.writes_nothing
    assert execute(cluster, again).made == ()
    # another operator's pause with another reason updates who and why, not since when
    since = annotations[PAUSED_AT]
    execute(cluster, plan_pause(cluster, VKS, reason="cost cap", user="bob"))
    annotations = node_obj(cluster, VKS[0])["metadata"]["annotations"]
    assert (annotations[PAUSED_BY], annotations[PAUSED_REASON]) == ("bob", "cost cap")
    assert annotations[PAUSED_AT] == since
    assert taints(cluster, VKS[0]).count(OURS) == 1


def test_unpause_removes_only_ours_and_is_idempotent(cluster: Cluster) -> None:
    virtual_nodes(cluster)
    execute(cluster, plan_pause(cluster, VKS, reason=REASON, user="alice"))

    plan = plan_unpause(cluster, VKS, user="bob")
    result = execute(cluster, plan)
    assert result.status == "done"
    assert_plan_was_run(plan, result)
    assert taints(cluster, VKS[0]) == [PROVIDER_TAINT, UNREACHABLE]
    assert taints(cluster, VKS[1]) == [{**PROVIDER_TAINT, "value": "salad"}, OTHER]
    annotations = node_obj(cluster, VKS[0])["metadata"].get("annotations") or {}
    assert not {PAUSED_BY, PAUSED_REASON, PAUSED_AT} & set(annotations)
    assert not any(n.paused for n in burst_status(cluster).nodes)

    again = plan_unpause(cluster, VKS, user="bob")
    assert again.writes_nothing
    assert execute(cluster, again).made == ()


def test_pause_refuses_without_reason_or_virtual_nodes(cluster: Cluster) -> None:
    fleet(cluster, 2)
    assert find_virtual_nodes(cluster) == []
    with pytest.raises(BadInput, match="no virtual-kubelet nodes"):
        plan_pause(cluster, [], reason=REASON, user="alice")
    virtual_nodes(cluster)
    with pytest.raises(BadInput, match="--reason"):
        plan_pause(cluster, VKS, reason="  ", user="alice")


SERVE = {"krea.ai/workload": "inference", "app": "serve"}
# the provider's taint, and the other client's NoExecute one on vk-runpod (the taint
# eviction controller would otherwise delete the pod)
TOLERATE_VK = [
    {"key": VK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    {"key": UNREACHABLE["key"], "operator": "Exists", "effect": "NoExecute"},
]


def gpu_nodes(cluster: Cluster, used: dict[str, int]) -> None:
    """gpu-node-000 ... with 8 GPUs each, ``used`` of them taken by a running pod."""
    fleet(cluster, len(used))
    gpus = {"nvidia.com/gpu": "8"}
    for name, taken in used.items():
        report_ready(cluster, name, capacity=gpus, allocatable=gpus)
        if taken:
            pod_on(cluster, name, f"train-{name[-3:]}", gpus=taken, owned_by=None)


def test_migrate_back_says_why_no_node_takes_a_pod_when_gpus_are_free(cluster: Cluster) -> None:
    """Found: "no in-cluster GPU is free (49 free on 63 healthy nodes)". GPUs are free,
    but no node has as many free as the pod asks for: say that."""
    gpu_nodes(cluster, {"gpu-node-000": 4, "gpu-node-001": 6})
    virtual_nodes(cluster)
    pod_on(cluster, VKS[0], "serve-0", labels=SERVE, gpus=8, tolerations=TOLERATE_VK)

    with pytest.raises(BadInput) as refused:
        plan_migrate(cluster, VKS, direction="back", user="alice")

    assert str(refused.value).startswith(
        "no in-cluster node has room for any of the 1 pod to move: 6 GPUs free on 2 healthy "
        "nodes, at most 4 on one node and the smallest pod asks for 8"
    )


def test_migrate_back_sends_no_pod_to_a_node_queue_list_calls_unhealthy(
    cluster: Cluster,
) -> None:
    """Found: ``burst migrate --back --dry-run`` counted 16 healthy nodes while ``queue
    list`` counted 15. Both count by the nodes' health verdicts now: a BAD node, or one
    whose health is not known, takes no pod home and is said to be left out."""
    gpu_nodes(cluster, {"gpu-node-000": 0, "gpu-node-001": 0, "gpu-node-002": 0})
    virtual_nodes(cluster)
    pod_on(cluster, VKS[0], "serve-0", labels=SERVE, gpus=8, tolerations=TOLERATE_VK)
    verdicts = {"gpu-node-000": HealthSeverity.BAD, "gpu-node-001": HealthSeverity.OK}

    plan = plan_migrate(cluster, VKS, direction="back", user="alice", node_severity=verdicts)

    [move] = [s for s in plan.steps if s.kind is StepKind.MIGRATE]
    assert "gpu-node-001" in move.description
    found = {f.kind: f.message for f in plan.findings}
    assert found["capacity"].startswith(
        "8 in-cluster GPUs free on 1 healthy node; 2 more left out: 1 BAD, 1 of unknown "
        "health; moves 1 of 1 pod"
    )
    every = {name: HealthSeverity.BAD for name in ("gpu-node-000", "gpu-node-001", "gpu-node-002")}
    with pytest.raises(BadInput, match=r"0 free on 0 healthy nodes; 3 more left out: 3 BAD\)"):
        plan_migrate(cluster, VKS, direction="back", user="alice", node_severity=every)


def test_migrate_is_a_read_then_a_pure_build(cluster: Cluster) -> None:
    """``read_migrate`` does every call; ``build_migrate`` makes none, places pods on
    copies of the sides it was given (built twice, it plans the same), and plans what
    ``plan_migrate`` plans."""
    gpu_nodes(cluster, {"gpu-node-000": 0, "gpu-node-001": 4})
    virtual_nodes(cluster)
    for i in range(3):
        pod_on(cluster, VKS[i % 2], f"serve-{i}", labels=SERVE, gpus=4, tolerations=TOLERATE_VK)

    inputs = read_migrate(cluster, VKS, direction="back", user="alice", max_pods=2)
    calls: list[str] = []
    real = cluster.request

    def counted(what: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(what)
        return real(what, *args, **kwargs)

    cluster.request = counted  # type: ignore[method-assign]
    try:
        first = build_migrate(inputs, now=1_700_000_000.0)
        again = build_migrate(inputs, now=1_700_000_000.0)
    finally:
        cluster.request = real  # type: ignore[method-assign]

    assert calls == []
    assert first == again
    assert inputs.there.total_free == 12  # the snapshot's room is not taken by a build
    assert [s.kind for s in first.steps].count(StepKind.MIGRATE) == 2
    whole = plan_migrate(
        cluster, VKS, direction="back", user="alice", max_pods=2, now=lambda: 1_700_000_000.0
    )
    assert whole == first
