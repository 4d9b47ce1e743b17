"""The cluster world: nodes, kubelets, the scheduler and the controllers, through the API."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from krea_ops.kube.quantity import as_float
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.sim.common import objects
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.common.objects import FAILED_ANNOTATION
from krea_ops.sim.machines.kubelet import EXIT_CODE_ANNOTATION, RUN_SECONDS_ANNOTATION
from krea_ops.sim.standins import scheduler
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for

PARTS = ("cluster",)
SPEED = 60.0


class Cluster:
    """A running cluster world and JSON-level helpers over its API."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        self.core = client.CoreV1Api(world.client)
        self.apps = client.AppsV1Api(world.client)
        self.coord = client.CoordinationV1Api(world.client)

    @staticmethod
    def raw(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return json.loads(fn(*args, _preload_content=False, **kwargs).data)

    def sim_time(self) -> float:
        """The world's simulated clock (what its processes take); API stamps are wall time."""
        return self.world.clock.time()

    def pod(self, name: str, ns: str = "training") -> dict[str, Any] | None:
        try:
            return self.raw(self.core.read_namespaced_pod, name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pods(self, ns: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        if ns is None:
            return self.raw(self.core.list_pod_for_all_namespaces, label_selector=selector)["items"]
        return self.raw(self.core.list_namespaced_pod, ns, label_selector=selector)["items"]

    def node(self, name: str) -> dict[str, Any]:
        return self.raw(self.core.read_node, name)

    def create_pod(
        self,
        name: str,
        gpus: int = 0,
        ns: str = "training",
        *,
        spec: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        body = {
            "metadata": {
                "name": name,
                "labels": {"krea.ai/workload": "training", **(labels or {})},
                "annotations": annotations or {},
            },
            "spec": {
                "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}],
                **(spec or {}),
            },
        }
        self.raw(self.core.create_namespaced_pod, ns, body)

    def phase(self, name: str, ns: str = "training") -> str | None:
        pod = self.pod(name, ns)
        return None if pod is None else pod["status"].get("phase")

    def running(self, name: str, ns: str = "training") -> dict[str, Any] | None:
        pod = self.pod(name, ns)
        if pod and pod["status"].get("phase") == "Running" and _ready(pod):
            return pod
        return None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return c
    return {}


def _ready(obj: dict[str, Any]) -> bool:
    return _condition(obj, "Ready").get("status") == "True"


def stamp(text: str) -> float:
    """An API timestamp as epoch seconds (the test fails on one that is not RFC 3339)."""
    t = parse_time(text)
    assert t is not None, f"not an RFC 3339 timestamp: {text!r}"
    return t


@pytest.fixture
def make_cluster(tmp_path) -> Iterator[Callable[..., Cluster]]:  # type: ignore[no-untyped-def]
    worlds: list[SimWorld] = []

    def make(nodes: int = 4, speed: float = SPEED, **extra: Any) -> Cluster:
        world = SimWorld(
            WorldConfig(nodes=nodes, speed=speed, extra=extra),
            tmp_path / f"state{len(worlds)}",
            parts=PARTS,
        )
        worlds.append(world)
        return Cluster(world)

    yield make
    for world in worlds:
        world.close()


# -- pure helpers ---------------------------------------------------------------------------


def test_quantities_and_template_hash() -> None:
    # the quantities the scheduler reads requests and allocatable with
    assert as_float("100m") == pytest.approx(0.1)
    assert as_float("2Ti") == 2 * 2**40
    assert as_float("2147483648Ki") == 2 * 2**40
    assert as_float("1e3") == 1000
    assert as_float("8") == 8
    assert as_float("1.5G") == 1.5e9
    h = objects.template_hash({"spec": {"containers": [{"name": "a", "image": "x"}]}})
    assert h and set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert h == objects.template_hash({"spec": {"containers": [{"image": "x", "name": "a"}]}})


def test_pod_requests_fall_back_to_limits_and_take_init_peaks() -> None:
    pod = {
        "metadata": {"uid": "u-requests"},
        "spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "2"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        },
    }
    assert scheduler.pod_requests(pod) == {"nvidia.com/gpu": 8, "cpu": 4, "memory": 2**30}


def test_tolerations_and_affinity() -> None:
    taint = {"key": "krea.ai/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    assert scheduler.tolerates({"operator": "Exists"}, taint)
    assert scheduler.tolerates({"key": "krea.ai/unhealthy", "operator": "Exists"}, taint)
    assert scheduler.tolerates({"key": "krea.ai/unhealthy", "value": "xid-79"}, taint)
    assert not scheduler.tolerates({"key": "krea.ai/unhealthy", "value": "xid-48"}, taint)
    assert not scheduler.tolerates(
        {"key": "krea.ai/unhealthy", "operator": "Exists", "effect": "NoExecute"}, taint
    )
    node = {"metadata": {"name": "n", "labels": {"krea.ai/rack": "rack-01", "gpus": "8"}}}

    def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
        term = {"matchExpressions": list(exprs)}
        required = {"nodeSelectorTerms": [term]}
        return {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            }
        }

    assert scheduler.node_matches_pod(
        affinity({"key": "krea.ai/rack", "operator": "In", "values": ["rack-01"]}), node
    )
    assert not scheduler.node_matches_pod(
        affinity({"key": "krea.ai/rack", "operator": "NotIn", "values": ["rack-01"]}), node
    )
    assert scheduler.node_matches_pod(
        affinity({"key": "gpus", "operator": "Gt", "values": ["4"]}), node
    )
    assert scheduler.node_matches_pod(affinity({"key": "x", "operator": "DoesNotExist"}), node)
    assert not scheduler.node_matches_pod(affinity({"key": "x", "operator": "Exists"}), node)
    assert not scheduler.node_matches_pod({"nodeSelector": {"krea.ai/rack": "rack-02"}}, node)
    preferred = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": {"matchExpressions": [
                        {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}},
                    {"weight": 5, "preference": {"matchExpressions": [
                        {"key": "krea.ai/rack", "operator": "In", "values": ["rack-02"]}]}},
                ]
            }
        }
    }  # fmt: skip
    assert scheduler.preferred_affinity_score(preferred, node) == 100
    virtual = {"metadata": {"name": "burst-vk", "labels": {"type": "virtual-kubelet"}}}
    assert scheduler.preferred_affinity_score(preferred, virtual) == 0


# -- the world ------------------------------------------------------------------------------


def test_nodes_leases_and_daemonsets(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=10)
    nodes = c.raw(c.core.list_node)["items"]
    assert [n["metadata"]["name"] for n in nodes] == [f"gpu-node-{i:03d}" for i in range(10)]
    node = nodes[9]
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["krea.ai/pool"] == "h200"
    assert labels["krea.ai/rack"] == "rack-01"  # 8 nodes a rack
    assert labels["krea.ai/spine"] == "spine-0"  # 4 racks a spine
    assert labels["kubernetes.io/hostname"] == "gpu-node-009"
    assert "topology.kubernetes.io/zone" in labels
    status = node["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "8"
    assert status["allocatable"]["nvidia.com/gpu"] == "8"
    assert status["capacity"]["cpu"] == "224"
    assert status["nodeInfo"]["kubeletVersion"] == "v1.32.0"
    assert {a["type"] for a in status["addresses"]} == {"InternalIP", "Hostname"}
    assert {c_["type"] for c_ in status["conditions"]} == {
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
    }
    assert _ready(node)
    for ns in ("training", "inference", "krea-sim", "krea-ops"):
        c.raw(c.core.read_namespace, ns)

    def leases_fresh() -> bool:
        leases = c.raw(c.coord.list_namespaced_lease, "kube-node-lease")["items"]
        if len(leases) != 10:
            return False
        for lease in leases:
            spec = lease["spec"]
            age = time.time() - stamp(spec["renewTime"])
            assert spec["leaseDurationSeconds"] >= 40
            if not 0 <= age < spec["leaseDurationSeconds"]:
                return False
        return True

    # Renewed, not just created: wait past one renewal period (10 wall seconds, as a real
    # kubelet's, whatever the speed) and check again.
    assert leases_fresh()
    first = c.raw(c.coord.read_namespaced_lease, "gpu-node-005", "kube-node-lease")
    assert first["spec"]["leaseDurationSeconds"] == 40
    wait_for(
        lambda: (
            c.raw(c.coord.read_namespaced_lease, "gpu-node-005", "kube-node-lease")["spec"][
                "renewTime"
            ]
            != first["spec"]["renewTime"]
        ),
        timeout=20,
    )
    assert leases_fresh()

    def daemon_pods_running() -> bool:
        pods = c.pods("kube-system")
        for ds in ("krea-ops-exporter", "nvidia-device-plugin"):
            mine = [p for p in pods if p["metadata"]["name"].startswith(ds + "-")]
            nodes_ = {p["spec"]["nodeName"] for p in mine if p["status"].get("phase") == "Running"}
            if nodes_ != {f"gpu-node-{i:03d}" for i in range(10)} or len(mine) != 10:
                return False
        return True

    wait_for(daemon_pods_running, timeout=15)
    pod = c.pods("kube-system", "app.kubernetes.io/name=krea-ops-exporter")[0]
    assert pod["metadata"]["labels"]["krea.ai/workload"] == "system"
    ref = pod["metadata"]["ownerReferences"][0]
    assert ref["kind"] == "DaemonSet" and ref["controller"] is True
    assert len(pod["metadata"]["name"]) == len("krea-ops-exporter-") + 5
    ds = wait_for(
        lambda: (
            d
            if (d := c.raw(c.apps.read_namespaced_daemon_set, "krea-ops-exporter", "kube-system"))[
                "status"
            ].get("numberReady")
            == 10
            else None
        ),
        timeout=10,
    )
    assert ds["status"]["desiredNumberScheduled"] == 10


def test_scheduling_resources_and_running_pod(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=2)
    c.create_pod("big-a", gpus=8)
    pod = wait_for(lambda: c.running("big-a"), timeout=15)
    node = pod["spec"]["nodeName"]
    assert node in ("gpu-node-000", "gpu-node-001")
    assert _condition(pod, "PodScheduled")["status"] == "True"
    assert _condition(pod, "Initialized")["status"] == "True"
    assert _condition(pod, "ContainersReady")["status"] == "True"
    status = pod["status"]
    assert status["podIP"].startswith("10.64.") and status["hostIP"].startswith("10.1.")
    assert status["startTime"]
    cs = status["containerStatuses"][0]
    assert cs["ready"] and cs["started"] and cs["restartCount"] == 0
    assert cs["state"]["running"]["startedAt"]
    assert cs["containerID"].startswith("containerd://") and "@sha256:" in cs["imageID"]

    c.create_pod("big-b", gpus=8)
    pod_b = wait_for(lambda: c.running("big-b"), timeout=15)
    assert pod_b["spec"]["nodeName"] != node  # packed: 8 GPUs a node

    c.create_pod("big-c", gpus=4)

    def unschedulable() -> dict[str, Any] | None:
        pod = c.pod("big-c")
        cond = _condition(pod, "PodScheduled") if pod else {}
        return cond if cond.get("reason") == "Unschedulable" else None

    cond = wait_for(unschedulable, timeout=10)
    assert cond["status"] == "False"
    assert cond["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
        "available: 2 No preemption victims found for incoming pod."
    )
    assert c.pod("big-c")["spec"].get("nodeName") is None  # type: ignore[index]

    # kube-scheduler's events go out through its broadcaster, apart from the pod's
    # status: the condition may be seen before the FailedScheduling event is written
    def recorded() -> list[dict[str, Any]] | None:
        events = c.raw(c.core.list_namespaced_event, "training")["items"]
        reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
        return events if ("big-c", "FailedScheduling") in reasons else None

    events = wait_for(recorded, timeout=10)
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
    assert ("big-a", "Scheduled") in reasons
    scheduled = next(
        e for e in events if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "big-a"
    )
    assert scheduled["message"] == f"Successfully assigned training/big-a to {node}"
    # kube-scheduler writes through the events API: an action, the reporting controller,
    # eventTime (MicroTime), no legacy source/count
    assert scheduled["action"] == "Binding"
    assert scheduled["reportingComponent"] == "default-scheduler"
    assert scheduled["eventTime"] and not scheduled.get("source", {}).get("component")
    failed = next(e for e in events if e["reason"] == "FailedScheduling")
    assert failed["action"] == "Scheduling" and failed["type"] == "Warning"

    # Freeing a node lets the waiting pod in.
    c.core.delete_namespaced_pod("big-a", "training", grace_period_seconds=0)
    pod_c = wait_for(lambda: c.running("big-c"), timeout=15)
    assert pod_c["spec"]["nodeName"] == node


def test_cordon_taints_selectors_and_affinity(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=4)
    c.core.patch_node("gpu-node-000", {"spec": {"unschedulable": True}})
    taint = {"key": "krea.ai/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    c.core.patch_node("gpu-node-001", {"spec": {"taints": [taint]}})
    for i in range(4):
        c.create_pod(f"job-{i}", gpus=8)

    def placed() -> dict[str, str] | None:
        pods = {p["metadata"]["name"]: p for p in c.pods("training")}
        nodes = {n: p["spec"].get("nodeName") for n, p in pods.items()}
        bound = [n for n in nodes.values() if n]
        if len(bound) == 2 and all(
            _condition(p, "PodScheduled").get("reason") == "Unschedulable"
            for p in pods.values()
            if not p["spec"].get("nodeName")
        ):
            return nodes
        return None

    nodes = wait_for(placed, timeout=15)
    assert sorted(n for n in nodes.values() if n) == ["gpu-node-002", "gpu-node-003"]
    waiting = next(n for n, node in nodes.items() if not node)
    message = _condition(c.pod(waiting) or {}, "PodScheduled")["message"]
    assert message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {krea.ai/unhealthy: xid-79}, "
        "1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu. preemption: 0/4 nodes "
        "are available: 2 No preemption victims found for incoming pod, 2 Preemption is not "
        "helpful for scheduling."
    )

    # A toleration and a nodeSelector put a pod on the tainted node.
    c.create_pod(
        "tolerant",
        gpus=8,
        spec={
            "nodeSelector": {"kubernetes.io/hostname": "gpu-node-001"},
            "tolerations": [{"key": "krea.ai/unhealthy", "operator": "Exists"}],
        },
    )
    # Required node affinity: the rack and the hostname.
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "krea.ai/rack", "operator": "In", "values": ["rack-00"]},
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": ["gpu-node-002"],
                            },
                        ]
                    }
                ]
            }
        }
    }
    c.create_pod("affine", spec={"affinity": affinity})
    c.create_pod("nowhere", spec={"nodeSelector": {"krea.ai/pool": "b200"}})
    tolerant = wait_for(lambda: c.running("tolerant"), timeout=15)
    assert tolerant["spec"]["nodeName"] == "gpu-node-001"
    affine = wait_for(lambda: c.running("affine"), timeout=15)
    # Not the cordoned node, not the excluded one, not the tainted one.
    assert affine["spec"]["nodeName"] == "gpu-node-003"
    nowhere = wait_for(
        lambda: (p := c.pod("nowhere")) and _condition(p, "PodScheduled").get("message") and p,
        timeout=10,
    )
    assert _condition(nowhere, "PodScheduled")["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {krea.ai/unhealthy: xid-79}, "
        "1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )
    assert c.phase(waiting) == "Pending"

    # Uncordon: the waiting GPU pod lands on the node that was cordoned.
    c.core.patch_node("gpu-node-000", {"spec": {"unschedulable": False}})
    pod = wait_for(lambda: c.running(waiting), timeout=15)
    assert pod["spec"]["nodeName"] == "gpu-node-000"


def test_gang_prefers_one_rack(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=16)
    # Half a GPU node busy in rack-00 so a GPU-packing scheduler would start there.
    c.create_pod("filler", gpus=4)
    wait_for(lambda: c.running("filler"), timeout=15)
    for i in range(6):
        c.create_pod(f"gang-{i}", gpus=8, labels={"jobset.sigs.k8s.io/jobset-name": "llm"})

    def racks() -> set[str] | None:
        pods = c.pods("training", "jobset.sigs.k8s.io/jobset-name=llm")
        nodes = [p["spec"].get("nodeName") for p in pods]
        if len(nodes) != 6 or not all(nodes):
            return None
        return {c.node(n)["metadata"]["labels"]["krea.ai/rack"] for n in nodes}

    assert len(wait_for(racks, timeout=15)) == 1


def test_deployment_replicasets_and_scaling(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=2)
    labels = {"app": "flux", "krea.ai/workload": "inference"}
    deployment: dict[str, Any] = {
        "metadata": {"name": "flux"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "flux"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": "krea/flux:1"}]},
            },
        },
    }
    c.raw(c.apps.create_namespaced_deployment, "inference", deployment)

    def running_pods() -> list[dict[str, Any]]:
        return [
            p
            for p in c.pods("inference", "app=flux")
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    wait_for(lambda: len(running_pods()) == 3, timeout=15)
    sets = c.raw(c.apps.list_namespaced_replica_set, "inference")["items"]
    assert len(sets) == 1
    rs = sets[0]
    h = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"flux-{h}"
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    for pod in running_pods():
        assert pod["metadata"]["labels"]["pod-template-hash"] == h
        assert pod["metadata"]["labels"]["krea.ai/workload"] == "inference"
        assert pod["metadata"]["name"].startswith(f"flux-{h}-")
        assert pod["metadata"]["ownerReferences"][0]["name"] == rs["metadata"]["name"]

    def deployment_available() -> dict[str, Any] | None:
        d = c.raw(c.apps.read_namespaced_deployment, "flux", "inference")
        ok = (
            d["status"].get("readyReplicas") == 3
            and d["status"].get("availableReplicas") == 3
            and _condition(d, "Available").get("status") == "True"
            and _condition(d, "Progressing").get("reason") == "NewReplicaSetAvailable"
            and d["status"].get("observedGeneration") == d["metadata"]["generation"]
        )
        return d if ok else None

    wait_for(deployment_available, timeout=15)

    c.apps.patch_namespaced_deployment("flux", "inference", {"spec": {"replicas": 1}})
    wait_for(lambda: len(c.pods("inference", "app=flux")) == 1, timeout=15)
    events = c.raw(c.core.list_namespaced_event, "inference")["items"]
    deleted = [e for e in events if e["reason"] == "SuccessfulDelete"]
    assert len(deleted) == 2
    scaled = [e["message"] for e in events if e["reason"] == "ScalingReplicaSet"]
    assert f"Scaled down replica set flux-{h} from 3 to 1" in scaled

    # A new template rolls out through a new ReplicaSet; the old one is scaled to zero.
    c.apps.patch_namespaced_deployment(
        "flux",
        "inference",
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "server", "image": "krea/flux:2"}]}}
            }
        },
    )

    def rolled() -> bool:
        pods = running_pods()
        return (
            len(pods) == 1
            and pods[0]["spec"]["containers"][0]["image"] == "krea/flux:2"
            and len(c.pods("inference", "app=flux")) == 1
        )

    wait_for(rolled, timeout=20)
    sets = {
        r["metadata"]["name"]: r
        for r in c.raw(c.apps.list_namespaced_replica_set, "inference")["items"]
    }
    assert len(sets) == 2 and sets[f"flux-{h}"]["spec"]["replicas"] == 0
    new = next(r for n, r in sets.items() if n != f"flux-{h}")
    assert new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


def test_graceful_deletion_takes_the_grace_period(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=1, speed=120)
    c.create_pod("slow-stop", spec={"terminationGracePeriodSeconds": 180})
    wait_for(lambda: c.running("slow-stop"), timeout=15)
    c.core.delete_namespaced_pod("slow-stop", "training")
    deleted_at = c.sim_time()
    pod = c.pod("slow-stop")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 180
    # Still terminating a simulated minute later (kubectl shows Terminating) ...
    wait_for(lambda: c.sim_time() - deleted_at > 90, timeout=5)
    assert c.pod("slow-stop") is not None
    # ... and gone once the grace period is over.
    wait_for(lambda: c.pod("slow-stop") is None, timeout=15)
    assert c.sim_time() - deleted_at >= 180
    events = c.raw(c.core.list_namespaced_event, "training")["items"]
    assert any(e["reason"] == "Killing" for e in events)

    # A finalizer (the Job controller's) holds a deleted pod: it is reported terminal.
    c.raw(
        c.core.create_namespaced_pod,
        "training",
        {
            "metadata": {"name": "tracked", "finalizers": ["batch.kubernetes.io/job-tracking"]},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
        },
    )
    wait_for(lambda: c.running("tracked"), timeout=15)
    c.core.delete_namespaced_pod("tracked", "training", grace_period_seconds=0)
    tracked = wait_for(
        lambda: (p := c.pod("tracked")) and p["status"]["phase"] == "Failed" and p, timeout=15
    )
    assert tracked["metadata"]["deletionTimestamp"]
    state = tracked["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 143
    c.core.patch_namespaced_pod("tracked", "training", {"metadata": {"finalizers": None}})
    wait_for(lambda: c.pod("tracked") is None, timeout=10)


def test_completions_by_annotation(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=1, speed=120)
    c.create_pod(
        "done",
        spec={"restartPolicy": "Never"},
        annotations={RUN_SECONDS_ANNOTATION: "120"},
    )
    c.create_pod(
        "crashes",
        spec={"restartPolicy": "OnFailure"},
        annotations={RUN_SECONDS_ANNOTATION: "60", EXIT_CODE_ANNOTATION: "3"},
    )
    c.create_pod("forever", annotations={RUN_SECONDS_ANNOTATION: "60"})  # Always
    wait_for(lambda: c.phase("done") == "Succeeded", timeout=15)
    done = c.pod("done")
    assert done is not None
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    # 120 simulated seconds between the wall-clock stamps: 1 s at speed 120
    assert stamp(term["finishedAt"]) - stamp(term["startedAt"]) >= c.world.clock.to_wall(120)
    wait_for(lambda: c.phase("crashes") == "Failed", timeout=15)
    crashed = c.pod("crashes")
    assert crashed is not None
    assert crashed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert c.phase("forever") == "Running"


def test_node_failure_and_repair(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(nodes=2, lease_renew_s=0.5)  # so that a missed renewal shows soon
    c.create_pod(
        "victim", gpus=8, spec={"nodeSelector": {"kubernetes.io/hostname": "gpu-node-000"}}
    )
    c.create_pod(
        "bystander", gpus=8, spec={"nodeSelector": {"kubernetes.io/hostname": "gpu-node-001"}}
    )
    wait_for(lambda: c.running("victim") and c.running("bystander"), timeout=15)
    wait_for(lambda: len([p for p in c.pods("kube-system") if _ready(p)]) == 4, timeout=15)
    c.core.patch_node("gpu-node-000", {"metadata": {"annotations": {FAILED_ANNOTATION: "gpu"}}})

    def not_ready() -> dict[str, Any] | None:
        node = c.node("gpu-node-000")
        ready = _condition(node, "Ready")
        taints = {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}
        if ready.get("status") == "Unknown" and len(taints) == 2:
            return node
        return None

    node = wait_for(not_ready, timeout=15)
    ready = _condition(node, "Ready")
    assert ready["reason"] == "NodeStatusUnknown"
    assert ready["message"] == "Kubelet stopped posting node status."
    assert {t["key"] for t in node["spec"]["taints"]} == {"node.kubernetes.io/unreachable"}

    victim = wait_for(
        lambda: (p := c.pod("victim")) and p["status"]["phase"] == "Failed" and p, timeout=15
    )
    assert victim["status"]["reason"] == "NodeFailure"
    assert "gpu-node-000" in victim["status"]["message"]
    assert _condition(victim, "DisruptionTarget")["status"] == "True"
    term = victim["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "ContainerStatusUnknown" and term["exitCode"] == 137
    assert c.phase("bystander") == "Running"  # the other node is fine

    # Its Lease is no longer renewed.
    lease = c.raw(c.coord.read_namespaced_lease, "gpu-node-000", "kube-node-lease")
    renewed = lease["spec"]["renewTime"]
    wait_for(lambda: time.time() - stamp(renewed) > 4 * 0.5, timeout=5)
    lease = c.raw(c.coord.read_namespaced_lease, "gpu-node-000", "kube-node-lease")
    assert lease["spec"]["renewTime"] == renewed
    # Nothing new is scheduled there.
    c.create_pod("newcomer", spec={"nodeSelector": {"kubernetes.io/hostname": "gpu-node-000"}})
    wait_for(
        lambda: (
            "untolerated taint {node.kubernetes.io/unreachable: }"
            in _condition(c.pod("newcomer") or {}, "PodScheduled").get("message", "")
        ),
        timeout=10,
    )

    # Repair.
    c.core.patch_node("gpu-node-000", {"metadata": {"annotations": {FAILED_ANNOTATION: None}}})
    wait_for(
        lambda: _ready(c.node("gpu-node-000")) and not c.node("gpu-node-000")["spec"].get("taints"),
        timeout=15,
    )
    wait_for(lambda: c.running("newcomer"), timeout=15)
    lease = c.raw(c.coord.read_namespaced_lease, "gpu-node-000", "kube-node-lease")
    assert lease["spec"]["renewTime"] != renewed
    # The system DaemonSets replaced their failed pods and run there again.
    wait_for(
        lambda: (
            len(
                [
                    p
                    for p in c.pods("kube-system")
                    if p["spec"]["nodeName"] == "gpu-node-000"
                    and c.running(p["metadata"]["name"], "kube-system")
                ]
            )
            == 2
        ),
        timeout=15,
    )


def test_taint_manager_evicts_after_toleration_seconds(
    make_cluster: Callable[..., Cluster],
) -> None:
    c = make_cluster(nodes=1, speed=120)
    c.create_pod("intolerant")
    c.create_pod(
        "patient",
        spec={
            "tolerations": [
                {
                    "key": "krea.ai/drain",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    # the control plane's timer: wall seconds, whatever the speed
                    "tolerationSeconds": 8,
                }
            ]
        },
    )
    wait_for(lambda: c.running("intolerant") and c.running("patient"), timeout=15)
    wait_for(lambda: len([p for p in c.pods("kube-system") if _ready(p)]) == 2, timeout=15)
    tainted_at = math.floor(time.time())  # timeAdded has whole seconds
    c.core.patch_node(
        "gpu-node-000",
        {
            "spec": {
                "taints": [
                    {
                        "key": "krea.ai/drain",
                        "effect": "NoExecute",
                        "timeAdded": rfc3339(tainted_at),
                    }
                ]
            }
        },
    )
    wait_for(lambda: c.pod("intolerant") is None, timeout=15)
    assert c.pod("patient") is not None
    wait_for(lambda: c.pod("patient") is None, timeout=20)
    assert time.time() - tainted_at >= 8
    # The DaemonSet pods tolerate everything and stay.
    assert len([p for p in c.pods("kube-system") if _ready(p)]) == 2


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_get_nodes_and_pods(make_cluster: Callable[..., Cluster], tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(nodes=3)
    c.create_pod("trainer", gpus=8)
    c.create_pod("waiting", gpus=16)
    wait_for(lambda: c.running("trainer"), timeout=15)
    wait_for(lambda: len([p for p in c.pods("kube-system") if _ready(p)]) == 6, timeout=15)
    c.core.patch_node("gpu-node-002", {"spec": {"unschedulable": True}})
    assert KUBECTL is not None
    env = {**os.environ, "KUBECONFIG": str(c.world.kubeconfig), "HOME": str(tmp_path)}
    out = subprocess.run(
        [KUBECTL, "get", "nodes,pods", "-A", "-o", "wide"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    node_rows = {r[0]: r for r in rows if r[0].startswith("node/")}
    assert node_rows["node/gpu-node-000"][1] == "Ready"
    assert node_rows["node/gpu-node-002"][1] == "Ready,SchedulingDisabled"
    assert "v1.32.0" in node_rows["node/gpu-node-000"]
    assert "containerd://1.7.24" in node_rows["node/gpu-node-000"]
    pod_rows = {r[1]: r for r in rows if r[1].startswith("pod/")}
    trainer = pod_rows["pod/trainer"]
    assert trainer[0] == "training" and trainer[2:5] == ["1/1", "Running", "0"]
    assert trainer[7].startswith("gpu-node-")
    assert pod_rows["pod/waiting"][2:4] == ["0/1", "Pending"]
    system = [r for name, r in pod_rows.items() if name.startswith("pod/krea-ops-exporter-")]
    assert len(system) == 3 and all(r[0] == "kube-system" and r[3] == "Running" for r in system)
