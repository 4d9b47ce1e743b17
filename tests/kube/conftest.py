"""A simulated API server per test, reached through the product's Cluster and a real kubectl."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import Kubectl, sim_on_control_plane
from tests.conftest import wait_for as _wait_for

sim = sim_on_control_plane  # an API server per test, on each control plane


@pytest.fixture
def cluster(sim: LocalApiServer) -> Iterator[Cluster]:
    with sim.api_client() as api:
        yield Cluster(api, timeout_s=30)


@pytest.fixture
def kubectl(sim: LocalApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.kubeconfig, tmp_path / "home")


def create(cluster: Cluster, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    answer = cluster.request(f"create {path}", "POST", path, body=obj)
    assert answer.ok and answer.body is not None, (answer.status, answer.body)
    return answer.body


def set_status(cluster: Cluster, path: str, status: dict[str, Any]) -> dict[str, Any]:
    answer = cluster.request(
        f"status {path}",
        "PATCH",
        f"{path}/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )
    assert answer.ok and answer.body is not None, (answer.status, answer.body)
    return answer.body


NOT_READY_TAINT = "node.kubernetes.io/not-ready"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"


def runs_upstream(cluster: Cluster) -> bool:
    """Whether the cluster is the upstream control plane, whose controllers act on
    whatever a test makes (the embedded server says ``-krea-sim`` in its version)."""
    version = cluster.get("version", "/version")
    return not str(version.get("gitVersion", "")).endswith("-krea-sim")


def registered(cluster: Cluster, name: str) -> dict[str, Any]:
    """Node ``name``, once its Ready status has lifted the ``not-ready`` taint every new
    node gets: kube-apiserver's TaintNodesByCondition admission puts
    ``node.kubernetes.io/not-ready:NoSchedule`` on each node created ("Node controller will
    remove the taint when the node becomes ready", plugin/pkg/admission/nodetaint), and the
    node lifecycle controller lifts it once it sees ``Ready=True``; the TTL controller
    annotates it (``node.alpha.kubernetes.io/ttl``) soon after it is made. The embedded
    server does neither, so there this returns at once."""
    from tests.conftest import wait_for

    upstream = runs_upstream(cluster)

    def settled() -> dict[str, Any] | None:
        node = cluster.get("node", f"/api/v1/nodes/{name}")
        taints = (node.get("spec") or {}).get("taints") or ()
        if any(t.get("key") == NOT_READY_TAINT for t in taints):
            return None
        notes = node["metadata"].get("annotations") or {}
        return None if upstream and TTL_ANNOTATION not in notes else node

    result: dict[str, Any] = wait_for(settled, timeout=30)
    return result


class Kubelets:
    """The kubelets of the nodes a test made, as far as the control plane sees them: while
    open, each node's Lease in ``kube-node-lease`` is renewed every ``renew_s`` (a kubelet
    renews every 10 s), and a pod being deleted from a node is removed, with the pod's
    UID as precondition (the kubelet's final delete once the pod's containers stopped,
    which they do at once on SIGTERM here). Nodes named in ``lost`` have none: their
    Leases are not renewed and their pods stay Terminating.

    The upstream control plane's node lifecycle controller reads a node whose Lease is not
    renewed as a kubelet gone (past ``--node-monitor-grace-period`` it sets
    ``Ready=Unknown``, now, and taints the node ``unreachable``), and nothing there but
    the kubelet ends a pod's graceful deletion (the pod GC only removes pods of nodes that
    are gone or carry the out-of-service taint). ``with Kubelets(sim): ...``"""

    def __init__(
        self, server: Any, lost: tuple[str, ...] = (), renew_s: float = 5.0, poll_s: float = 0.2
    ) -> None:
        import threading

        self.server = server
        self.lost = set(lost)
        self.renew_s = renew_s
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="kubelets", daemon=True)

    def __enter__(self) -> Kubelets:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _loop(self) -> None:
        import time

        renewed = 0.0
        with self.server.api_client() as api:
            cluster = Cluster(api, timeout_s=10)
            while not self.stop.is_set():
                if time.monotonic() - renewed >= self.renew_s:
                    renewed = time.monotonic()
                    self._renew(cluster)
                self._finish(cluster)
                self.stop.wait(self.poll_s)

    def _renew(self, cluster: Cluster) -> None:
        import time

        from krea_ops.kube.times import micro_time

        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        renew = {"renewTime": micro_time(time.time())}
        for node in cluster.get("nodes", "/api/v1/nodes").get("items") or ():
            name = node["metadata"]["name"]
            if name in self.lost:
                continue
            answer = cluster.request(
                "renew", "PATCH", f"{path}/{name}", body={"spec": renew},
                content_type="application/merge-patch+json",
            )  # fmt: skip
            if answer.status == 404:
                spec = {"holderIdentity": name, "leaseDurationSeconds": 40, **renew}
                cluster.request("lease", "POST", path, body={"metadata": {"name": name},
                                                             "spec": spec})  # fmt: skip

    def _finish(self, cluster: Cluster) -> None:
        for pod in cluster.get("pods", "/api/v1/pods").get("items") or ():
            meta, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
            if not node or node in self.lost or not meta.get("deletionTimestamp"):
                continue
            cluster.request(
                "finish", "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )  # fmt: skip


@pytest.fixture
def kubelets(request: pytest.FixtureRequest, sim: Any) -> Iterator[Kubelets]:
    """:class:`Kubelets` for the test's nodes while it runs: a pod evicted or deleted
    gracefully is gone once its kubelet has stopped it, as on a real node.
    ``@pytest.mark.kubelets(lost=(NODE, ...))`` leaves those nodes without one (their pods
    stay Terminating), as a test that plays the kubelet itself needs."""
    marker = request.node.get_closest_marker("kubelets")
    lost = tuple(marker.kwargs.get("lost", ())) if marker else ()
    with Kubelets(sim, lost=lost) as running:
        yield running


READY = {"type": "Ready", "status": "True", "reason": "KubeletReady"}


def report_ready(cluster: Cluster, name: str, *, wait: bool = True, **status: Any) -> None:
    """Node ``name``'s kubelet reports it Ready (with ``status``: capacity...); ``wait``:
    and it is :func:`registered`."""
    set_status(cluster, f"/api/v1/nodes/{name}", {**status, "conditions": [READY]})
    if wait:
        registered(cluster, name)


def gpu_node(cluster: Cluster, name: str, taints: list[dict[str, str]] | None = None) -> None:
    """Node ``name`` with ``taints``, Ready and :func:`registered`."""
    spec = {"taints": taints} if taints else {}
    create(cluster, "/api/v1/nodes", {"metadata": {"name": name}, "spec": spec})
    report_ready(cluster, name)


def running_pod(
    cluster: Cluster, name: str, labels: dict[str, str], *, ready: bool = True
) -> dict[str, Any]:
    path = "/api/v1/namespaces/default/pods"
    pod = create(
        cluster,
        path,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "img:1"}]},
        },
    )
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    set_status(cluster, f"{path}/{name}", {"phase": "Running", "conditions": [condition]})
    return pod


# What the control plane's own controllers put on every node by themselves: the node
# lifecycle controller's ``node.kubernetes.io/unschedulable`` taint while the node is
# cordoned (TaintNodesByCondition: it follows ``spec.unschedulable``, put on and lifted
# a moment after it) and the TTL controller's annotation. Nobody else's, and nothing a
# runbook action writes or must keep.
CONTROL_PLANE_TAINTS = frozenset({"node.kubernetes.io/unschedulable"})
CONTROL_PLANE_ANNOTATIONS = frozenset({"node.alpha.kubernetes.io/ttl"})


def cordon(cluster: Cluster, name: str) -> None:
    """Cordon ``name`` as ``kubectl cordon`` does (another operator, not krea-ops), then
    :func:`settle` it."""
    answer = cluster.request(
        "cordon", "PATCH", f"/api/v1/nodes/{name}", body={"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    assert answer.ok, (answer.status, answer.body)
    settle(cluster, name)


def settle(cluster: Cluster, name: str) -> None:
    """Wait until the node lifecycle controller, where one runs, has put its
    ``unschedulable`` taint on a cordoned ``name`` or taken it off an uncordoned one:
    after that, nothing but the test changes the node."""
    if not runs_upstream(cluster):
        return

    def settled() -> bool:
        spec = cluster.get("node", f"/api/v1/nodes/{name}")["spec"]
        tainted = any(t["key"] in CONTROL_PLANE_TAINTS for t in spec.get("taints") or ())
        return tainted == bool(spec.get("unschedulable"))

    _wait_for(settled, timeout=30)


def node_obj(cluster: Cluster, name: str) -> dict[str, Any]:
    """Node ``name`` without what the control plane's controllers add to every node on
    their own (``CONTROL_PLANE_TAINTS``, ``CONTROL_PLANE_ANNOTATIONS``)."""
    body: dict[str, Any] = cluster.get("node", f"/api/v1/nodes/{name}")
    spec, meta = body.get("spec") or {}, body["metadata"]
    if "taints" in spec:
        spec["taints"] = [t for t in spec["taints"] if t["key"] not in CONTROL_PLANE_TAINTS]
        if not spec["taints"]:
            del spec["taints"]
    if "annotations" in meta:
        meta["annotations"] = {
            k: v for k, v in meta["annotations"].items() if k not in CONTROL_PLANE_ANNOTATIONS
        }
    return body
