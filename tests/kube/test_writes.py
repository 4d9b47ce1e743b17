"""Read-modify-write against the simulated API server, with a real kubectl as the other
writer: nobody's taint, label or annotation is lost, and a re-run writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.writes import (
    AddTaint,
    Cordon,
    Mutate,
    RemoveTaint,
    SetAnnotations,
    SetLabels,
    Uncordon,
    WriteConflict,
    custom_object,
    node,
    update,
)
from tests.conftest import KUBECTL, Kubectl
from tests.kube.conftest import CONTROL_PLANE_TAINTS, create, gpu_node, node_obj, settle

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

OURS = AddTaint("krea.ai/unhealthy", "xid-79", "NoSchedule")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class RacedBy:
    """An edit during which another client (kubectl) writes the same object: the first
    ``times`` reads are stale by the time the patch arrives."""

    def __init__(self, edit: Any, kubectl: Kubectl, *commands: list[str], times: int = 1):
        self.edit, self.kubectl, self.commands, self.left = edit, kubectl, list(commands), times
        self.calls = 0

    def apply(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            self.kubectl(*self.commands[min(self.calls, len(self.commands)) - 1])
        out: dict[str, Any] | None = self.edit.apply(obj)
        return out

    def describe(self) -> str:
        return str(self.edit.describe())


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    """The node as the test wrote it, once the control plane's controllers have added
    what they add to every node (:func:`settle`, :func:`node_obj`)."""
    settle(cluster, name)
    return node_obj(cluster, name)


def _taints(obj: dict[str, Any]) -> set[str]:
    return {
        f"{t['key']}={t.get('value', '')}:{t['effect']}"
        for t in (obj.get("spec") or {}).get("taints") or []
    }


def test_a_concurrent_writers_taint_survives_the_conflict_and_the_retry(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    gpu_node(cluster, "gpu-node-000", [GPU_TAINT])
    raced = RacedBy(
        OURS, kubectl, ["taint", "nodes", "gpu-node-000", "ops.example/maint=true:NoSchedule"]
    )

    result = update(
        cluster,
        node("gpu-node-000"),
        Cordon(),
        raced,
        SetAnnotations({"krea.ai/evicted-reason": "xid-79"}),
    )

    assert result.attempts == 2  # the first patch met kubectl's newer version: 409, re-read
    assert raced.calls == 2
    now = cluster.get("get node", "/api/v1/nodes/gpu-node-000")
    # the write's resourceVersion is the node's, unless the node lifecycle controller
    # has since put its unschedulable taint on the cordoned node
    taken = {t["key"] for t in now["spec"].get("taints") or ()} & CONTROL_PLANE_TAINTS
    rv = int(now["metadata"]["resourceVersion"])
    assert int(result.resource_version) == rv or (taken and int(result.resource_version) < rv)
    after = _node(cluster, "gpu-node-000")
    assert _taints(after) == {
        "nvidia.com/gpu=present:NoSchedule",
        "ops.example/maint=true:NoSchedule",
        "krea.ai/unhealthy=xid-79:NoSchedule",
    }
    assert after["spec"]["unschedulable"] is True
    assert after["metadata"]["annotations"]["krea.ai/evicted-reason"] == "xid-79"
    assert result.changed
    assert result.changes == (
        "cordon",
        "taint krea.ai/unhealthy=xid-79:NoSchedule",
        "annotate krea.ai/evicted-reason=xid-79",
    )
    assert "SchedulingDisabled" in kubectl("get", "node", "gpu-node-000").stdout


def test_a_rerun_writes_nothing(cluster: Cluster) -> None:
    gpu_node(cluster, "gpu-node-000", [GPU_TAINT])
    edits = (Cordon(), OURS, SetLabels({"krea.ai/quarantined": "true"}))
    first = update(cluster, node("gpu-node-000"), *edits)
    version = _node(cluster, "gpu-node-000")["metadata"]["resourceVersion"]

    again = update(cluster, node("gpu-node-000"), *edits)

    assert first.changed and not again.changed
    assert again.patch is None and again.changes == ()
    assert again.already == tuple(e.describe() for e in edits)
    assert again.resource_version == version
    assert _node(cluster, "gpu-node-000")["metadata"]["resourceVersion"] == version
    assert again.summary() == f"node gpu-node-000: unchanged (resourceVersion {version})"


def test_restoring_removes_only_ours(cluster: Cluster, kubectl: Kubectl) -> None:
    gpu_node(cluster, "gpu-node-000", [GPU_TAINT])
    update(cluster, node("gpu-node-000"), Cordon(), OURS, SetAnnotations({"krea.ai/by": "me"}))
    kubectl("taint", "nodes", "gpu-node-000", "krea.ai/unhealthy=theirs:NoExecute")
    kubectl("annotate", "node", "gpu-node-000", "team.example/owner=ml")

    result = update(
        cluster,
        node("gpu-node-000"),
        RemoveTaint("krea.ai/unhealthy", "NoSchedule"),
        SetAnnotations({"krea.ai/by": None}),
        Uncordon(),
    )

    after = _node(cluster, "gpu-node-000")
    assert _taints(after) == {
        "nvidia.com/gpu=present:NoSchedule",
        "krea.ai/unhealthy=theirs:NoExecute",  # same key, another effect: not ours
    }
    assert "unschedulable" not in after["spec"]
    assert after["metadata"]["annotations"] == {"team.example/owner": "ml"}
    assert result.patch is not None and result.patch["spec"]["unschedulable"] is None


def test_our_taint_with_a_new_value_replaces_the_old_one(cluster: Cluster) -> None:
    gpu_node(cluster, "gpu-node-000")
    update(cluster, node("gpu-node-000"), OURS)
    update(cluster, node("gpu-node-000"), AddTaint("krea.ai/unhealthy", "gpu-hot", "NoSchedule"))
    assert _taints(_node(cluster, "gpu-node-000")) == {"krea.ai/unhealthy=gpu-hot:NoSchedule"}


def test_every_write_conflicting_gives_one_line_and_keeps_the_other_writes(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    gpu_node(cluster, "gpu-node-000")
    writes = [["annotate", "--overwrite", "node", "gpu-node-000", f"x/n={i}"] for i in range(3)]
    raced = RacedBy(OURS, kubectl, *writes, times=3)

    with pytest.raises(WriteConflict) as info:
        update(cluster, node("gpu-node-000"), raced, attempts=3)

    assert str(info.value) == (
        "update node gpu-node-000: another client changed it between each read and write "
        "(3 attempts, HTTP 409 each time); run the command again"
    )
    after = _node(cluster, "gpu-node-000")
    assert after["metadata"]["annotations"]["x/n"] == "2"
    assert _taints(after) == set()  # nothing half-applied


def test_an_unknown_object_and_an_invalid_edit_are_bad_input(cluster: Cluster) -> None:
    with pytest.raises(BadInput, match=r"^get node gpu-node-404: not found$"):
        update(cluster, node("gpu-node-404"), Cordon())
    gpu_node(cluster, "gpu-node-000")
    before = _node(cluster, "gpu-node-000")["metadata"]["resourceVersion"]
    with pytest.raises(BadInput, match=r'Unsupported value: "Sometimes"'):
        update(cluster, node("gpu-node-000"), AddTaint("krea.ai/x", "y", "Sometimes"))
    assert _node(cluster, "gpu-node-000")["metadata"]["resourceVersion"] == before


def test_dry_run_asks_the_server_and_stores_nothing(cluster: Cluster) -> None:
    gpu_node(cluster, "gpu-node-000")
    before = _node(cluster, "gpu-node-000")
    result = update(cluster, node("gpu-node-000"), Cordon(), OURS, dry_run=True)
    assert result.dry_run and result.changed
    assert result.object["spec"]["unschedulable"] is True  # what the server would store
    assert _node(cluster, "gpu-node-000") == before
    assert result.summary().startswith("node gpu-node-000: cordon, taint ")
    assert "(dry run)" in result.summary()


def test_a_cluster_queue_quota_edit_through_mutate(cluster: Cluster) -> None:
    base = "/apis/kueue.x-k8s.io/v1beta2"
    version = {"apiVersion": "kueue.x-k8s.io/v1beta2"}  # a custom resource's kind: the body's
    create(
        cluster,
        f"{base}/resourceflavors",
        {**version, "kind": "ResourceFlavor", "metadata": {"name": "h200"}},
    )
    quota = {"name": "nvidia.com/gpu", "nominalQuota": 64}
    create(
        cluster,
        f"{base}/clusterqueues",
        {
            **version,
            "kind": "ClusterQueue",
            "metadata": {"name": "training"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "h200", "resources": [quota]}],
                    }
                ],
            },
        },
    )

    def set_quota(gpus: int) -> Mutate:
        def fn(cq: dict[str, Any]) -> dict[str, Any]:
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = gpus
            return cq

        return Mutate(fn, f"nominalQuota nvidia.com/gpu h200 = {gpus}")

    target = custom_object("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", "training")
    changed = update(cluster, target, set_quota(56))
    same = update(cluster, target, set_quota(56))

    stored = cluster.get("get cq", target.path)
    assert stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 56
    assert changed.changes == ("nominalQuota nvidia.com/gpu h200 = 56",)
    assert not same.changed
    assert target.what == "clusterqueue training"
