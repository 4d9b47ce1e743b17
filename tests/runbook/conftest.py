"""A simulated API server per test (no world: the tests make the nodes, pods and budgets a
drain meets), reached through the product's Cluster."""

from __future__ import annotations

from typing import Any

import pytest

from krea_ops.kube.cluster import Cluster
from tests.conftest import wait_for
from tests.kube.conftest import Kubelets, cluster, create, kubelets, set_status, sim

__all__ = ["_kubelets", "cluster", "kubelets", "sim"]


@pytest.fixture(autouse=True)
def _kubelets(request: pytest.FixtureRequest) -> Kubelets | None:
    """A kubelet on every node a test with an API server makes (``kubelets``, with its
    ``@pytest.mark.kubelets(lost=...)``); tests without one get none."""
    if "sim" not in request.fixturenames:
        return None
    running: Kubelets = request.getfixturevalue("kubelets")
    return running


PDBS = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"


def fleet(
    cluster: Cluster, count: int, taints: dict[str, list[dict[str, str]]] | None = None
) -> None:
    """``count`` nodes gpu-node-000 ...; ``taints``: node -> taints it starts with."""
    for i in range(count):
        name = f"gpu-node-{i:03d}"
        spec = {"taints": (taints or {})[name]} if name in (taints or {}) else {}
        create(
            cluster,
            "/api/v1/nodes",
            {"metadata": {"name": name, "labels": {"krea.ai/pool": "h200"}}, "spec": spec},
        )


def owner(kind: str, name: str) -> dict[str, Any]:
    api = "apps/v1" if kind in ("ReplicaSet", "DaemonSet", "StatefulSet") else "batch/v1"
    return {
        "apiVersion": api,
        "kind": kind,
        "name": name,
        "uid": f"uid-{kind.lower()}-{name}",
        "controller": True,
    }


def pod_on(
    cluster: Cluster,
    node: str,
    name: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    owned_by: tuple[str, str] | None = ("ReplicaSet", "web"),
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Running, Ready pod bound to ``node``."""
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owned_by:
        meta["ownerReferences"] = [owner(*owned_by)]
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "img:1"}]}
    if volumes:
        spec["volumes"] = volumes
    path = f"/api/v1/namespaces/{namespace}/pods"
    pod = create(cluster, path, {"metadata": meta, "spec": spec})
    set_status(
        cluster,
        f"{path}/{name}",
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    )
    return pod


def daemon_pod(cluster: Cluster, node: str, name: str, control_plane: str) -> str:
    """A pod of DaemonSet ``name`` (in ``default``, made here, scheduled to ``node`` only,
    tolerating every taint as a node agent does) on ``node``; returns the pod's name.

    On the upstream control plane the DaemonSet controller makes the pod (a pod naming an
    owner that does not exist is refused by Kueue's pod webhook, and the garbage collector
    would delete it); the embedded server runs no DaemonSet controller, so the pod is made
    here as that controller makes it, its controller reference the DaemonSet's uid."""
    labels = {"app": name}
    pin = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [pin]}}},
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "img:1"}],
    }  # fmt: skip
    ds = create(
        cluster,
        "/apis/apps/v1/namespaces/default/daemonsets",
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "OnDelete"},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        },
    )
    path = "/api/v1/namespaces/default/pods"
    if control_plane == "upstream":

        def made() -> str | None:
            body = cluster.get("pods", path, labelSelector=f"app={name}")
            pods = [p for p in body["items"] if p["spec"].get("nodeName") == node]
            return str(pods[0]["metadata"]["name"]) if pods else None

        made_name: str = wait_for(made, timeout=30)
        return made_name
    ref = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": name,
        "uid": ds["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pod_name = f"{name}-{node[-3:]}"
    meta = {"name": pod_name, "labels": labels, "ownerReferences": [ref]}
    create(cluster, path, {"metadata": meta, "spec": {**spec, "nodeName": node}})
    set_status(
        cluster,
        f"{path}/{pod_name}",
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    )
    return pod_name


def budget(
    cluster: Cluster,
    name: str,
    labels: dict[str, str],
    *,
    pods: int,
    namespace: str = "default",
    **spec: object,
) -> None:
    """A PodDisruptionBudget, waited for until the disruption controller has counted its
    ``pods``."""
    path = PDBS.format(ns=namespace)
    create(
        cluster,
        path,
        {"metadata": {"name": name}, "spec": {**spec, "selector": {"matchLabels": labels}}},
    )
    wait_for(
        lambda: (
            (cluster.get("pdb", f"{path}/{name}").get("status") or {}).get("expectedPods") == pods
        )
    )


def node_obj(cluster: Cluster, name: str) -> dict[str, Any]:
    body: dict[str, Any] = cluster.get("node", f"/api/v1/nodes/{name}")
    return body


def pod_names(cluster: Cluster, node: str) -> list[str]:
    body = cluster.get("pods", "/api/v1/pods", fieldSelector=f"spec.nodeName={node}")
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in body["items"])


def events_about(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    body = cluster.get("events", f"/api/v1/namespaces/{namespace}/events")
    return [e for e in body["items"] if e["involvedObject"].get("name") == name]
