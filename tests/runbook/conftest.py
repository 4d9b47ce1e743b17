"""A simulated API server per test (no world: the tests make the nodes, pods and budgets a
drain meets), reached through the product's Cluster."""

from __future__ import annotations

import time
from typing import Any

import pytest

from krea_ops.kube.cluster import Cluster
from krea_ops.kube.events import CONTROLLER
from tests.conftest import sim_on_control_plane, wait_for
from tests.kube.conftest import (
    CONTROL_PLANE_ANNOTATIONS,
    CONTROL_PLANE_TAINTS,
    Kubelets,
    cluster,
    cordon,
    create,
    kubelets,
    node_obj,
    registered,
    report_ready,
    runs_upstream,
    set_status,
    settle,
)

sim = sim_on_control_plane  # an API server per test, on each control plane

__all__ = [
    "CONTROL_PLANE_ANNOTATIONS",
    "CONTROL_PLANE_TAINTS",
    "_kubelets",
    "cluster",
    "cordon",
    "kubelets",
    "node_obj",
    "settle",
    "sim",
]


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
    """``count`` Ready nodes gpu-node-000 ... (registered: the ``not-ready`` taint a new
    node gets is lifted); ``taints``: node -> taints it starts with."""
    names = [f"gpu-node-{i:03d}" for i in range(count)]
    for name in names:
        spec = {"taints": (taints or {})[name]} if name in (taints or {}) else {}
        create(
            cluster,
            "/api/v1/nodes",
            {"metadata": {"name": name, "labels": {"krea.ai/pool": "h200"}}, "spec": spec},
        )
        report_ready(cluster, name, wait=False)
    for name in names:
        registered(cluster, name)


OWNER_LABEL = "krea.ai/test-owner"
HOLD = "krea.ai/test-hold"
OWNER_API = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1",
             "Job": "batch/v1"}  # fmt: skip


def owner(
    cluster: Cluster, kind: str, name: str, namespace: str = "default"
) -> tuple[dict[str, Any], dict[str, str]]:
    """A controller reference to a real ``kind`` ``name`` for pods the test makes, and the
    labels such a pod needs to stay its owner's.

    An owner that exists already (a JobSet's Job, made by the JobSet controller) is taken
    as it is: its pods carry its selector's labels, or its controller would release them.
    Else one is made here that makes no pods of its own: made and at once deleted, held by
    a finalizer of ours. An owner being deleted neither creates, deletes nor releases pods
    (the ReplicaSet, DaemonSet and Job controllers skip one with a ``deletionTimestamp``)
    and the garbage collector leaves its dependents alone until it is gone, while the pods
    still name an owner that exists: Kueue's pod webhook refuses a pod whose owner is
    missing, and the garbage collector deletes one."""
    api = OWNER_API[kind]
    path = f"/apis/{api}/namespaces/{namespace}/{kind.lower()}s"
    found = cluster.request("owner", "GET", f"{path}/{name}")
    if not found.ok or found.body is None:
        labels = {OWNER_LABEL: name}
        template = {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "img:1"}],
                     **({"restartPolicy": "Never"} if kind == "Job" else {})},
        }  # fmt: skip
        spec: dict[str, Any] = {"template": template}
        if kind == "Job":
            spec["suspend"] = True
        else:
            spec["selector"] = {"matchLabels": labels}
        if kind in ("ReplicaSet", "StatefulSet"):
            spec["replicas"] = 0
        body = {"metadata": {"name": name, "finalizers": [HOLD]}, "spec": spec}
        made = cluster.request("owner", "POST", path, body=body)
        if made.status == 409:  # made meanwhile by its own controller
            return owner(cluster, kind, name, namespace)
        assert made.ok and made.body is not None, (made.status, made.body)
        held = cluster.request(
            "hold", "DELETE", f"{path}/{name}", body={"propagationPolicy": "Background"}
        )
        assert held.ok, (held.status, held.body)
        found = held
    obj = found.body or {}
    meta = obj.get("metadata") or {}
    live = not meta.get("deletionTimestamp")
    selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    ref = {"apiVersion": api, "kind": kind, "name": name, "uid": meta["uid"],
           "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    return ref, dict(selector) if live else {}


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
    gpus: int = 0,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Running, Ready pod bound to ``node``, of a real owner (:func:`owner`), with a
    limit of ``gpus`` GPUs."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    ref = None
    if owned_by:
        ref, owner_labels = owner(cluster, *owned_by, namespace=namespace)
        meta["labels"].update(owner_labels)
        meta["ownerReferences"] = [ref]
    if annotations:
        meta["annotations"] = annotations
    container: dict[str, Any] = {"name": "c", "image": "img:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"nodeName": node, "containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    if tolerations:
        spec["tolerations"] = tolerations
    path = f"/api/v1/namespaces/{namespace}/pods"
    pod = create(cluster, path, {"metadata": meta, "spec": spec})
    set_status(
        cluster,
        f"{path}/{name}",
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    )
    if ref is not None and runs_upstream(cluster):
        _keep_owner(cluster, f"{path}/{name}", ref)
    return pod


def _keep_owner(cluster: Cluster, path: str, ref: dict[str, Any]) -> None:
    """The owner's controller may not have seen its owner held yet when the pod comes
    (its owners and its pods are separate watches) and release the pod, taking its
    controller reference away; put back, that reference stays once the controller knows.
    Waits until the pod has kept it for 0.6 s."""
    deadline = time.monotonic() + 30
    kept_since = time.monotonic()
    while time.monotonic() - kept_since < 0.6:
        assert time.monotonic() < deadline, f"{path}: its owner {ref['name']} keeps releasing it"
        time.sleep(0.2)
        pod = cluster.get("pod", path)
        refs = pod["metadata"].get("ownerReferences") or []
        if not any(r.get("uid") == ref["uid"] for r in refs):
            version = pod["metadata"]["resourceVersion"]
            body = {"metadata": {"ownerReferences": [ref], "resourceVersion": version}}
            cluster.request("own", "PATCH", path, body=body,
                            content_type="application/merge-patch+json")  # fmt: skip
            kept_since = time.monotonic()


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


def pod_names(cluster: Cluster, node: str) -> list[str]:
    body = cluster.get("pods", "/api/v1/pods", fieldSelector=f"spec.nodeName={node}")
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in body["items"])


def events_about(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The events krea-ops reported about ``name`` (the control plane's components report
    their own: the node controller's ``RegisteredNode``, the scheduler's, ...)."""
    body = cluster.get("events", f"/api/v1/namespaces/{namespace}/events")
    return [
        e
        for e in body["items"]
        if e["involvedObject"].get("name") == name and e.get("reportingComponent") == CONTROLLER
    ]
