"""burst pause and burst migrate against the simulated world: the virtual kubelet keeps our
pause taint when it restarts, and ``migrate --back`` brings inference pods home one at a
time, never taking a workload below its Ready count minus one, only as far as ``--max`` and
the free in-cluster GPUs allow, and refuses when no in-cluster GPU is free."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krea_ops.burst import PAUSE_TAINT_KEY, PAUSED_REASON
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.burst import plan_migrate, plan_pause
from krea_ops.runbook.execute import execute
from krea_ops.runbook.plan import StepKind
from krea_ops.sim.common.actor import Provider, WorldConfig
from krea_ops.sim.machines import burst
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for
from tests.runbook.test_nodes import assert_plan_was_run

NS = "serving"
CHEAP = Provider("cheap", 1.0, 2, 0.0)
MID = Provider("mid", 2.0, 4, 0.0)
NO_DEPLOYMENTS = {"inference_services": ()}
SELECTOR = "app=serve"


def request(cluster: Cluster, method: str, path: str, body: Any, merge: bool = False) -> Any:
    answer = cluster.request(
        f"{method} {path}",
        method,
        path,
        body=body,
        content_type="application/merge-patch+json" if merge else "application/json",
    )
    assert answer.ok, (answer.status, answer.body)
    return answer.body


def vk_node(cluster: Cluster) -> dict[str, Any] | None:
    answer = cluster.request("node", "GET", f"/api/v1/nodes/{burst.VK_NODE}")
    return answer.body if answer.ok else None


# -- the pause and the virtual kubelet ------------------------------------------------------


def test_pause_survives_an_unpause_less_restart_of_the_virtual_node(
    tmp_path: Path, control_plane: str
) -> None:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=2,
        speed=600,
        providers=(CHEAP, MID),
        extra=NO_DEPLOYMENTS,
    )
    with SimWorld(config, tmp_path, parts=("burst",)) as world:
        cluster = Cluster(world.client, timeout_s=30)
        wait_for(lambda: vk_node(cluster))
        execute(
            cluster, plan_pause(cluster, [burst.VK_NODE], reason="provider outage", user="alice")
        )
        ours = {"key": PAUSE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
        assert ours in (vk_node(cluster) or {})["spec"]["taints"]

        # A new virtual kubelet process (the pod restarted) registers the node it finds and
        # runs its loop: it patches status and labels, never spec.taints.
        version = (vk_node(cluster) or {})["metadata"]["resourceVersion"]
        # Its status heartbeat is stamped to the second, and a write that changes nothing
        # keeps the resourceVersion (as on a real server): start it in a later second than
        # the last status the running one wrote, so its registration is a real write.
        time.sleep(1.1)
        restarted = burst.VirtualKubelet(world.world, (CHEAP, MID))
        restarted.setup()
        restarted.tick()
        assert (vk_node(cluster) or {})["metadata"]["resourceVersion"] != version  # it wrote

        node = vk_node(cluster) or {}
        assert node["spec"]["taints"] == [
            {"key": burst.VK_TAINT_KEY, "value": burst.VK_PROVIDER, "effect": "NoSchedule"},
            ours,
        ]
        assert node["metadata"]["annotations"][PAUSED_REASON] == "provider outage"
        # the simulated VK gives the operator's reason to pods it does not place
        assert burst.pause_reason(node) == "provider outage"


# -- migrate --back ---------------------------------------------------------------------------


def deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": "serve", "krea.ai/workload": "inference"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": NS, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "tolerations": burst.inference_tolerations(),
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "preference": {
                                        "matchExpressions": [
                                            {
                                                "key": "type",
                                                "operator": "NotIn",
                                                "values": ["virtual-kubelet"],
                                            }
                                        ]
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "server",
                            "image": "ghcr.io/krea-ai/dit-serve:test",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", burst.GPU: "1"},
                                "limits": {burst.GPU: "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


def serve_pods(cluster: Cluster) -> list[dict[str, Any]]:
    body = cluster.get("pods", f"/api/v1/namespaces/{NS}/pods", labelSelector=SELECTOR)
    return [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def ready_where(cluster: Cluster) -> tuple[int, int]:
    """(Ready pods of the Deployment in-cluster, Ready on the virtual node)."""
    pods = [p for p in serve_pods(cluster) if ready(p)]
    offsite = sum(1 for p in pods if p["spec"].get("nodeName") == burst.VK_NODE)
    return len(pods) - offsite, offsite


def cordon(cluster: Cluster, names: list[str], on: bool) -> None:
    for name in names:
        request(cluster, "PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": on}}, True)


@pytest.fixture
def offsite(tmp_path: Path, control_plane: str) -> Iterator[tuple[SimWorld, Cluster, list[str]]]:
    """Three Ready replicas of ``serve`` on the virtual node (the in-cluster nodes were
    cordoned while they were placed) and a budget of maxUnavailable 1; in-cluster nodes
    still cordoned."""
    config = WorldConfig(
        control_plane=control_plane,
        nodes=2,
        speed=120,
        providers=(CHEAP, MID),
        extra=NO_DEPLOYMENTS,
    )
    with SimWorld(config, tmp_path, parts=("cluster", "burst")) as world:
        cluster = Cluster(world.client, timeout_s=30)
        wait_for(lambda: vk_node(cluster), timeout=30)
        nodes = [
            n["metadata"]["name"]
            for n in cluster.get("nodes", "/api/v1/nodes", labelSelector="type!=virtual-kubelet")[
                "items"
            ]
        ]
        cordon(cluster, nodes, True)
        request(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        request(
            cluster,
            "POST",
            f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets",
            {
                "metadata": {"name": "serve"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "serve"}}},
            },
        )
        request(cluster, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(3))
        wait_for(lambda: ready_where(cluster) == (0, 3), timeout=60)
        yield world, cluster, nodes


def test_migrate_back_refuses_when_no_in_cluster_gpu_is_free(
    offsite: tuple[SimWorld, Cluster, list[str]],
) -> None:
    _, cluster, _ = offsite
    with pytest.raises(BadInput) as refused:
        plan_migrate(cluster, [burst.VK_NODE], direction="back", user="alice")
    assert str(refused.value).startswith("no in-cluster GPU is free (0 free")
    assert "nothing was changed" in str(refused.value)
    assert PAUSE_TAINT_KEY not in str((vk_node(cluster) or {})["spec"]["taints"])


def test_migrate_back_keeps_ready_count_and_respects_max(
    offsite: tuple[SimWorld, Cluster, list[str]],
) -> None:
    _, cluster, nodes = offsite
    cordon(cluster, nodes, False)

    plan = plan_migrate(
        cluster, [burst.VK_NODE], direction="back", user="alice", max_pods=2, timeout_s=120
    )

    assert [str(s.kind) for s in plan.steps] == [
        "update",
        "event",
        "migrate",
        "migrate",
        "update",
        "event",
    ]
    pause, unpause = plan.steps[0], plan.steps[4]
    assert "taint krea.ai/burst-paused=true:NoSchedule" in pause.description
    assert "remove taint krea.ai/burst-paused" in unpause.description
    moves = [s for s in plan.steps if s.kind is StepKind.MIGRATE]
    assert all(s.node == burst.VK_NODE for s in moves)
    found = {f.kind: f.message for f in plan.findings}
    assert found["capacity"].startswith("16 in-cluster GPUs free on 2 healthy nodes")
    assert "moves 2 of 3 pods" in found["capacity"]
    assert "Deployment serving/serve: 3 Ready; drops to 2 Ready" in found["drops"]
    assert "(--max 2)" in found["stays"]

    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(ready_where(cluster))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = execute(cluster, plan)
    finally:
        done.set()
        sampler.join()

    assert result.status == "done", result.as_dict()
    assert_plan_was_run(plan, result)
    assert samples and min(a + b for a, b in samples) >= 3 - 1
    assert max(a for a, _ in samples) <= 2  # --max 2: the third stays offsite
    assert wait_for(lambda: ready_where(cluster) == (2, 1), timeout=30)
    taints = (vk_node(cluster) or {})["spec"]["taints"]
    assert [t["key"] for t in taints] == [burst.VK_TAINT_KEY]  # the pause is lifted


# -- migrate --out --------------------------------------------------------------------------


@pytest.fixture
def in_cluster(tmp_path: Path, control_plane: str) -> Iterator[tuple[SimWorld, Cluster]]:
    """Three Ready replicas of ``serve`` in-cluster (they prefer it), a budget of
    maxUnavailable 1, room for six GPUs at the providers."""
    config = WorldConfig(
        control_plane=control_plane,
        nodes=2,
        speed=120,
        providers=(CHEAP, MID),
        extra=NO_DEPLOYMENTS,
    )
    with SimWorld(config, tmp_path, parts=("cluster", "burst")) as world:
        cluster = Cluster(world.client, timeout_s=30)
        wait_for(lambda: vk_node(cluster), timeout=30)
        request(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        request(cluster, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(3))
        wait_for(lambda: ready_where(cluster) == (3, 0), timeout=60)
        yield world, cluster


def test_migrate_out_moves_pods_offsite_one_at_a_time_and_lifts_its_taint(
    in_cluster: tuple[SimWorld, Cluster],
) -> None:
    _, cluster = in_cluster
    # The API server gave each pod its node's zone as it bound it (the PodTopologyLabels
    # admission plugin): a label the replacements offsite will not have.
    pods = serve_pods(cluster)
    assert {p["metadata"]["labels"].get("topology.kubernetes.io/zone") for p in pods} == {
        "us-east-1a"
    }
    # Ready, with no reason left from before (the kubelet's patch clears it)
    assert all(
        c.get("reason") is None
        for p in pods
        for c in p["status"]["conditions"]
        if c["type"] == "Ready"
    )
    plan = plan_migrate(
        cluster, [burst.VK_NODE], direction="out", user="alice", max_pods=2, timeout_s=120
    )
    kinds = [str(s.kind) for s in plan.steps]
    assert kinds.count("migrate") == 2
    assert kinds[0] == "update" and kinds[-1] == "update"
    assert "taint krea.ai/burst-out=true:NoSchedule" in plan.steps[0].description
    sources = {s.node for s in plan.steps if s.kind is StepKind.MIGRATE}

    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(ready_where(cluster))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = execute(cluster, plan)
    finally:
        done.set()
        sampler.join()

    assert result.status == "done", result.as_dict()
    assert_plan_was_run(plan, result)
    assert min(a + b for a, b in samples) >= 3 - 1
    assert wait_for(lambda: ready_where(cluster) == (1, 2), timeout=30)
    offsite = [p for p in serve_pods(cluster) if p["spec"].get("nodeName") == burst.VK_NODE]
    assert all(c.get("reason") is None for p in offsite for c in p["status"]["conditions"])
    for name in sources:
        node = cluster.get("node", f"/api/v1/nodes/{name}")
        assert "krea.ai/burst-out" not in str(node["spec"].get("taints"))
