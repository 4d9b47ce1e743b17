"""One upstream control plane shared by a worker's tests, put back to how it started
between them.

Starting kube-apiserver, etcd, the controller-manager, the scheduler, Kueue and JobSet
costs seconds per test, most of what a test on the upstream control plane spends. A
:class:`Baseline` remembers every object the control plane holds once it is up (its own
namespaces, RBAC, leader Leases, CRDs, webhook configurations), and :meth:`Baseline.reset`
deletes everything made since, in every resource the API server lists: finalizers taken
off first, pods and the rest with grace period 0, namespaces finalized once empty, and
repeated until a full listing shows nothing new (a controller still acting on the last
test's objects may make one more); then kube-controller-manager is restarted, so that
none of its controllers remembers the last test (the node lifecycle controller keeps a
deleted node's last heartbeat under its name). Objects of the baseline that a test changed are not
put back; a reset that cannot reach a clean listing in time fails, and the fixture then
starts a fresh control plane instead.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from krea_ops.kube.cluster import Cluster

# Namespaces whose content is the control plane's own, left alone whatever a test did.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kueue-system", "jobset-system"})


class Baseline:
    def __init__(self, server: Any) -> None:
        self.server = server
        with server.api_client() as api:
            cluster = Cluster(api, timeout_s=30)
            self.resources = _resources(cluster)
            self.uids = {_uid(o) for _, o in self._objects(cluster)}

    def _objects(self, cluster: Cluster) -> list[tuple[str, dict[str, Any]]]:
        """Every object the API server lists, with the collection path it lives under."""
        found = []
        # (listed side by side: some 70 lists, most of a reset's time one after another)
        with ThreadPoolExecutor(8) as pool:
            listed = pool.map(lambda r: cluster.list_all(r[0], r[0]), self.resources)
            for (path, namespaced), objects in zip(self.resources, listed, strict=True):
                for obj in objects:
                    meta = obj.get("metadata") or {}
                    if namespaced and meta.get("namespace") in SYSTEM_NAMESPACES:
                        continue
                    found.append((path, obj))
        return found

    def _new(self, cluster: Cluster) -> list[tuple[str, dict[str, Any]]]:
        return [(p, o) for p, o in self._objects(cluster) if _uid(o) not in self.uids]

    def reset(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.server.api_client() as api:
            cluster = Cluster(api, timeout_s=30)
            first = True
            while True:
                left = self._new(cluster)
                if not left:
                    if not first:
                        # the node lifecycle controller keeps each node name's health
                        # record after the node is gone: a node of the next test with a
                        # name of this one's would start from this one's last heartbeat
                        self.server.restart_controller_manager()
                    return
                first = False
                if time.monotonic() > deadline:
                    names = sorted({_ref(p, o) for p, o in left})[:10]
                    raise TimeoutError(f"control plane not back to its baseline: {names}")
                for path, obj in sorted(left, key=lambda po: po[0].endswith("/namespaces")):
                    _delete(cluster, path, obj)
                time.sleep(0.05)


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid"))


def _ref(path: str, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{path.rsplit('/', 1)[-1]}:{where}{meta.get('name')}"


def _object_path(path: str, obj: dict[str, Any]) -> str:
    """``/api/v1/pods`` and a pod in ``default`` -> ``/api/v1/namespaces/default/pods/NAME``."""
    meta = obj["metadata"]
    base, plural = path.rsplit("/", 1)
    if meta.get("namespace"):
        base = f"{base}/namespaces/{meta['namespace']}"
    return f"{base}/{plural}/{meta['name']}"


def _delete(cluster: Cluster, path: str, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    at = _object_path(path, obj)
    if meta.get("finalizers"):
        cluster.request(
            "unfinalize", "PATCH", at, body={"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
    if path == "/api/v1/namespaces" and meta.get("deletionTimestamp"):
        # empty by now: finalize it, as the namespace controller would
        finalized = {**obj, "spec": {"finalizers": []}}
        cluster.request("finalize", "PUT", f"{at}/finalize", body=finalized)
        return
    cluster.request(
        "reset", "DELETE", at,
        body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"},
    )  # fmt: skip


def _resources(cluster: Cluster) -> list[tuple[str, bool]]:
    """(collection path, namespaced) of every top-level resource that can be listed and
    deleted, from discovery."""
    versions = ["/api/v1"]
    for group in cluster.get("discovery", "/apis").get("groups") or ():
        if group["name"] == "events.k8s.io":  # the core v1 events again
            continue
        versions.append(f"/apis/{group['preferredVersion']['groupVersion']}")
    found: dict[str, tuple[str, bool]] = {}
    for version in versions:
        body = cluster.get("discovery", version)
        group = version.rsplit("/", 1)[0]
        for res in body.get("resources") or ():
            verbs = set(res.get("verbs") or ())
            if "/" in res["name"] or not {"list", "delete"} <= verbs:
                continue
            # one version of a resource that several groups serve (events) is enough
            key = f"{group.split('/')[-1] if group != '/api' else ''}/{res['name']}"
            found.setdefault(key, (f"{version}/{res['name']}", bool(res.get("namespaced"))))
    return sorted(found.values())
