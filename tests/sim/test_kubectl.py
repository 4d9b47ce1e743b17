"""A real kubectl, as an outside client, proves the simulator speaks Kubernetes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import FIXTURES, KUBECTL, Kubectl, wait_for
from tests.kube.conftest import kubelets

__all__ = ["kubelets"]  # it ends the pods kubectl deletes or drains, as on a node


pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.kubeconfig, tmp_path)


def _node(core: client.CoreV1Api, name: str, gpus: int = 8) -> None:
    core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-H200"},
            }
        }
    )
    core.patch_node_status(
        name,
        {
            "status": {
                "capacity": {
                    "cpu": "96",
                    "memory": "2Ti",
                    "nvidia.com/gpu": str(gpus),
                    "pods": "110",
                },
                "allocatable": {
                    "cpu": "96",
                    "memory": "2Ti",
                    "nvidia.com/gpu": str(gpus),
                    "pods": "110",
                },
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
                "nodeInfo": {
                    "kubeletVersion": "v1.32.0",
                    "osImage": "Ubuntu 22.04",
                    "kernelVersion": "5.15",
                    "containerRuntimeVersion": "containerd://1.7",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "machineID": "m",
                    "systemUUID": "s",
                    "bootID": "b",
                    "kubeProxyVersion": "v1.32.0",
                },
            }
        },
    )


def _running_pod(
    core: client.CoreV1Api,
    name: str,
    node: str,
    labels: dict[str, str],
    owner: list[dict] | None = None,
) -> None:
    meta: dict = {"name": name, "labels": labels}
    if owner:
        meta["ownerReferences"] = owner
    core.create_namespaced_pod(
        "default",
        {
            "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "img:1"}]},
        },
    )
    core.patch_namespaced_pod_status(
        name,
        "default",
        {
            "status": {
                "phase": "Running",
                "podIP": "10.1.0.9",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "c",
                        "ready": True,
                        "restartCount": 0,
                        "image": "img:1",
                        "imageID": "",
                        "started": True,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        },
    )


def test_api_resources_and_short_names(kubectl: Kubectl) -> None:
    out = kubectl("api-resources").stdout
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "cq" in lines["clusterqueues"] and "kueue.x-k8s.io/v1beta2" in lines["clusterqueues"]
    assert "jobsets" in lines and "poddisruptionbudgets" in lines
    assert kubectl("get", "cq").stderr.strip() == "No resources found"


def test_get_nodes_and_pods_wide(kubectl: Kubectl, core: client.CoreV1Api) -> None:
    _node(core, "gpu-001")
    _running_pod(core, "train-0", "gpu-001", {"app": "dit"})
    out = kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert out[1].split()[:3] == ["gpu-001", "Ready", "<none>"]
    assert out[1].split()[-1] == "v1.32.0"
    wide = kubectl("get", "pods", "-A", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[:7] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
    row = wide[1].split()
    assert row[:5] == ["default", "train-0", "1/1", "Running", "0"] and "gpu-001" in row
    as_json = json.loads(kubectl("get", "pods", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in as_json["items"]] == ["train-0"]


def test_apply_every_kueue_sample_and_jobset_example(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(FIXTURES / "kueue-samples" / "single-clusterqueue-setup.yaml"))
    for path in sorted((FIXTURES / "kueue-samples").glob("*.yaml")):
        if path.name == "single-clusterqueue-setup.yaml":
            continue
        verb = "create" if "generateName" in path.read_text() else "apply"
        kubectl(verb, "-f", str(path))
    rejected = "example-restartjobset-action.yaml"
    for path in sorted((FIXTURES / "jobset").glob("example-*.yaml")):
        if path.name != rejected:
            kubectl("apply", "-f", str(path))
    # Upstream's example omits failurePolicy.rules[].name, which its own CRD requires: a
    # real API server refuses it, and so does the simulator, with the same words.
    refused = kubectl("apply", "-f", str(FIXTURES / "jobset" / rejected), check=False)
    assert refused.returncode == 1
    assert "spec.failurePolicy.rules[0].name: Required value" in refused.stderr
    # Applying again is idempotent ("unchanged"), through the last-applied annotation.
    again = kubectl(
        "apply", "-f", str(FIXTURES / "kueue-samples" / "single-clusterqueue-setup.yaml")
    ).stdout
    assert "unchanged" in again
    cqs = kubectl("get", "clusterqueues").stdout.splitlines()
    assert cqs[0].split()[0] == "NAME"
    assert "cluster-queue" in [line.split()[0] for line in cqs[1:]]
    by_short_name = kubectl("get", "cq", "-o", "name").stdout.split()
    assert "clusterqueue.kueue.x-k8s.io/cluster-queue" in by_short_name
    assert len(by_short_name) == len(cqs) - 1
    jobsets = kubectl("get", "jobsets", "-o", "name").stdout.split()
    assert len(jobsets) == len(list((FIXTURES / "jobset").glob("example-*.yaml")))


def test_invalid_object_is_rejected_by_kubectl_apply(kubectl: Kubectl) -> None:
    bad = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: broken}
spec:
  queueingStrategy: Sometimes
"""
    result = kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    assert "spec.queueingStrategy" in result.stderr and "Unsupported value" in result.stderr
    assert "broken" not in kubectl("get", "cq", "-o", "name").stdout


@pytest.mark.usefixtures("kubelets")
def test_describe_cordon_taint_label_annotate_delete(
    kubectl: Kubectl, core: client.CoreV1Api
) -> None:
    _node(core, "gpu-002")
    _running_pod(core, "inf-0", "gpu-002", {"app": "inference"})
    described = kubectl("describe", "node", "gpu-002").stdout
    assert "Name:               gpu-002" in described and "inf-0" in described
    assert "nvidia.com/gpu" in described
    assert "cordoned" in kubectl("cordon", "gpu-002").stdout
    assert core.read_node("gpu-002").spec.unschedulable is True
    assert "SchedulingDisabled" in kubectl("get", "node", "gpu-002").stdout
    kubectl("uncordon", "gpu-002")
    assert not core.read_node("gpu-002").spec.unschedulable
    kubectl("taint", "nodes", "gpu-002", "krea.ai/unhealthy=xid-79:NoSchedule")
    taints = core.read_node("gpu-002").spec.taints
    assert [(t.key, t.value, t.effect) for t in taints] == [
        ("krea.ai/unhealthy", "xid-79", "NoSchedule")
    ]
    kubectl("taint", "nodes", "gpu-002", "krea.ai/unhealthy:NoSchedule-")
    assert not core.read_node("gpu-002").spec.taints
    kubectl("label", "node", "gpu-002", "pool=h200")
    kubectl("annotate", "node", "gpu-002", "krea.ai/reason=testing")
    node = core.read_node("gpu-002")
    assert node.metadata.labels["pool"] == "h200"
    assert node.metadata.annotations["krea.ai/reason"] == "testing"
    kubectl("delete", "pod", "inf-0", "--wait=false")
    wait_for(lambda: not core.list_namespaced_pod("default").items)


@pytest.mark.usefixtures("kubelets")
def test_drain_is_blocked_by_a_budget_then_allowed(
    kubectl: Kubectl, core: client.CoreV1Api, api: client.ApiClient
) -> None:
    _node(core, "gpu-003")
    apps = client.AppsV1Api(api)
    ds = apps.create_namespaced_daemon_set(
        "default",
        {
            "metadata": {"name": "exporter"},
            "spec": {
                "selector": {"matchLabels": {"app": "exporter"}},
                "template": {
                    "metadata": {"labels": {"app": "exporter"}},
                    "spec": {"containers": [{"name": "e", "image": "krea-ops:1"}]},
                },
            },
        },
    )
    owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "exporter",
            "uid": ds.metadata.uid,
            "controller": True,
        }
    ]
    _running_pod(core, "exporter-abcde", "gpu-003", {"app": "exporter"}, owner)
    rs = apps.create_namespaced_replica_set(
        "default",
        {
            "metadata": {"name": "inf"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "inference"}},
                "template": {
                    "metadata": {"labels": {"app": "inference"}},
                    "spec": {"containers": [{"name": "c", "image": "img:1"}]},
                },
            },
        },
    )
    rs_owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "inf",
            "uid": rs.metadata.uid,
            "controller": True,
        }
    ]
    _running_pod(core, "inf-1", "gpu-003", {"app": "inference"}, rs_owner)
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "inference"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "inference"}}},
        },
    )
    blocked = kubectl(
        "drain",
        "gpu-003",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=4s",
        check=False,
        timeout=60,
    )
    assert blocked.returncode != 0
    assert "disruption budget" in blocked.stderr
    assert core.read_node("gpu-003").spec.unschedulable is True
    assert {p.metadata.name for p in core.list_namespaced_pod("default").items} == {
        "exporter-abcde",
        "inf-1",
    }
    # A second healthy replica elsewhere makes one disruption allowed.
    _node(core, "gpu-004")
    _running_pod(core, "inf-2", "gpu-004", {"app": "inference"}, rs_owner)
    wait_for(
        lambda: (
            client.PolicyV1Api(api)
            .read_namespaced_pod_disruption_budget("inference", "default")
            .status.disruptions_allowed
            == 1
        )
    )
    drained = kubectl(
        "drain",
        "gpu-003",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=20s",
        timeout=60,
    )
    assert "drained" in drained.stdout
    names = {p.metadata.name for p in core.list_namespaced_pod("default").items}
    assert names == {"exporter-abcde", "inf-2"}


def test_get_watch_sees_a_change(kubectl: Kubectl, core: client.CoreV1Api) -> None:
    _node(core, "gpu-005")
    proc = kubectl.popen("get", "nodes", "-w", "--request-timeout=0")
    try:
        assert proc.stdout is not None

        def read_until(text: str) -> list[str]:
            lines: list[str] = []
            while not any(text in line for line in lines):
                line = proc.stdout.readline()  # type: ignore[union-attr]
                assert line, f"kubectl get -w ended before showing {text!r}: {lines}"
                lines.append(line)
            return lines

        first = read_until("gpu-005")  # the initial list is out; the watch is open
        assert [ln.split()[1] for ln in first if ln.startswith("gpu-005")] == ["Ready"]
        core.patch_node("gpu-005", {"spec": {"unschedulable": True}})
        later = read_until("SchedulingDisabled")
        assert later[-1].split()[:2] == ["gpu-005", "Ready,SchedulingDisabled"]
    finally:
        proc.kill()
        proc.wait()
