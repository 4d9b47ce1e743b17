"""Watch caches (krea_ops/kube/watch.py): lists answered from memory, kept by one
list-and-watch per collection, on both control planes; resumed from the last
resourceVersion when a watch ends, relisted on 410 Gone, resynced, and honest when it
cannot say (fail-static rather than a stale answer)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krea_ops.errors import BadInput, Unavailable
from krea_ops.kube.cluster import ApiAnswer, Cluster
from krea_ops.kube.watch import Collection, WatchedCluster, field_matcher, label_matcher
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import wait_for
from tests.kube.conftest import create, registered

GPU_LABEL = "krea.ai/watch-test"


class Counting(Cluster):
    """``inner``, counting the requests it sends: (verb, path) -> count, the verb as
    RBAC reads it (a GET of a collection: list, with watch=true: watch)."""

    def __init__(self, inner: Cluster) -> None:
        super().__init__(inner.api, timeout_s=inner.timeout_s)
        self.calls: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def _note(self, verb: str, path: str) -> None:
        with self._lock:
            self.calls[(verb, path)] = self.calls.get((verb, path), 0) + 1

    def request(self, what: str, method: str, path: str, **kw: Any) -> ApiAnswer:
        collection = Collection.of(path) is not None
        self._note("list" if method == "GET" and collection else method.lower(), path)
        return super().request(what, method, path, **kw)

    def watch(self, what: str, path: str, *, query: dict[str, Any]) -> Any:
        self._note("watch", path)
        return super().watch(what, path, query=query)

    def count(self, verb: str, path: str | None = None) -> int:
        with self._lock:
            return sum(n for (v, p), n in self.calls.items() if v == verb and path in (None, p))


@pytest.fixture
def counting(cluster: Cluster) -> Counting:
    return Counting(cluster)


@pytest.fixture
def watched(counting: Counting) -> Iterator[WatchedCluster]:
    w = WatchedCluster(counting, watch_timeout_s=None)
    yield w
    w.close()


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {GPU_LABEL: "yes", **labels}},
        "spec": {},
    }


def _pod(name: str, node: str | None, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {GPU_LABEL: "yes", **labels}},
        "spec": spec,
    }


def _names(items: list[Any]) -> list[str]:
    return sorted(getattr(i, "name", None) or i["metadata"]["name"] for i in items)


def _namespace(cluster: Cluster, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    answer = cluster.request("ns", "POST", "/api/v1/namespaces", body=body)
    assert answer.ok or answer.status == 409, answer.body


def test_lists_are_answered_from_the_cache_as_the_api_server_answers_them(
    cluster: Cluster, counting: Counting, watched: WatchedCluster
) -> None:
    for i in range(3):
        create(cluster, "/api/v1/nodes", _node(f"w-{i}", pool="a" if i < 2 else "b"))
    _namespace(cluster, "wt")
    create(cluster, "/api/v1/namespaces/wt/pods", _pod("p-0", "w-0", app="x"))
    create(cluster, "/api/v1/namespaces/wt/pods", _pod("p-1", "w-1", app="y"))
    create(cluster, "/api/v1/namespaces/wt/pods", _pod("p-2", None, app="x"))

    selectors = [
        f"{GPU_LABEL}=yes",
        f"{GPU_LABEL}=yes,pool=a",
        f"{GPU_LABEL},pool!=a",
        f"{GPU_LABEL}==yes,pool in (b,c)",
        f"{GPU_LABEL},pool notin (a),!nope",
    ]
    for selector in selectors:
        assert _names(watched.nodes(selector)) == _names(cluster.nodes(selector)), selector
    pod_queries: list[dict[str, Any]] = [
        {"namespace": "wt"},
        {"namespace": "wt", "label_selector": "app=x"},
        {"field_selector": "spec.nodeName=w-1"},
        {"field_selector": "spec.nodeName="},
        {"label_selector": GPU_LABEL, "field_selector": "status.phase!=Failed"},
    ]
    for query in pod_queries:
        want = [p for p in cluster.pods(**query) if p.labels.get(GPU_LABEL)]
        got = [p for p in watched.pods(**query) if p.labels.get(GPU_LABEL)]
        assert _names(got) == _names(want), query

    # synced: the same reads again make no list call at all
    lists = counting.count("list")
    for _ in range(5):
        watched.nodes(f"{GPU_LABEL}=yes")
        watched.pods(namespace="wt", label_selector="app=x")
        watched.active_pods()
    assert counting.count("list") == lists

    # what changes on the server shows in the cache (the watch), and no list is made
    patch = {"metadata": {"labels": {"pool": "b"}}}
    answer = cluster.request(
        "label", "PATCH", "/api/v1/nodes/w-0", body=patch,
        content_type="application/merge-patch+json",
    )  # fmt: skip
    assert answer.ok
    cluster.request("delete", "DELETE", "/api/v1/namespaces/wt/pods/p-1",
                    body={"gracePeriodSeconds": 0})  # fmt: skip
    wait_for(lambda: _names(watched.nodes(f"{GPU_LABEL},pool=b")) == ["w-0", "w-2"])
    wait_for(lambda: "p-1" not in _names(watched.pods(namespace="wt")))
    assert counting.count("list") == lists
    # nothing it keeps carries managed fields
    for reflector in watched.reflectors.values():
        for obj in reflector.items():
            assert "managedFields" not in obj["metadata"]


def test_a_watch_that_ends_is_resumed_from_its_resource_version_without_a_list(
    cluster: Cluster, counting: Counting
) -> None:
    # the API server ends each watch after a second (timeoutSeconds=1)
    watched = WatchedCluster(counting, watch_timeout_s=1)
    try:
        create(cluster, "/api/v1/nodes", _node("r-0"))
        assert "r-0" in _names(watched.nodes(GPU_LABEL))
        reflector = watched.reflector("/api/v1/nodes")
        assert reflector is not None
        wait_for(lambda: reflector.counts.resumes >= 2, timeout=20)
        create(cluster, "/api/v1/nodes", _node("r-1"))
        wait_for(lambda: "r-1" in _names(watched.nodes(GPU_LABEL)))
        # one list (two pages at most), however often the watch was made again
        assert reflector.counts.lists == 1 and reflector.counts.relists == 0
        assert counting.count("list", "/api/v1/nodes") == 1
        assert counting.count("watch", "/api/v1/nodes") >= 3
    finally:
        watched.close()


def test_a_write_of_this_process_is_in_the_next_read(
    cluster: Cluster, watched: WatchedCluster
) -> None:
    """A pass that cordoned a node reads it cordoned: the read waits for the watch to
    deliver what this process wrote (its resourceVersion)."""
    create(cluster, "/api/v1/nodes", _node("c-0"))
    registered(cluster, "c-0")
    assert not [n for n in watched.nodes(GPU_LABEL) if n.unschedulable]
    for attempt in range(5):
        answer = watched.request(
            "cordon", "PATCH", "/api/v1/nodes/c-0",
            body={"spec": {"unschedulable": attempt % 2 == 0}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert answer.ok
        (node,) = [n for n in watched.nodes(GPU_LABEL) if n.name == "c-0"]
        assert node.unschedulable is (attempt % 2 == 0)


def test_resync_relists_on_its_period(cluster: Cluster, counting: Counting) -> None:
    watched = WatchedCluster(counting, resync_s=1.0, watch_timeout_s=1)
    try:
        create(cluster, "/api/v1/nodes", _node("s-0"))
        watched.nodes(GPU_LABEL)
        reflector = watched.reflector("/api/v1/nodes")
        assert reflector is not None
        # a resync is counted when it is due, its list when that list is answered
        wait_for(lambda: reflector.counts.resyncs >= 1 and reflector.counts.relists >= 1, 20)
        assert "s-0" in _names(watched.nodes(GPU_LABEL))
    finally:
        watched.close()


# -- the embedded server only: its fault switch and its short watch history ------------


@pytest.fixture
def small(tmp_path: Path) -> Iterator[LocalApiServer]:
    """An embedded API server that keeps only 20 changes for watches."""
    with LocalApiServer(tmp_path / "small", history=20, bookmark_interval_s=0.5) as server:
        yield server


def test_410_gone_relists_and_the_cache_is_whole_again(small: LocalApiServer) -> None:
    with small.api_client() as api:
        counting = Counting(Cluster(api, timeout_s=10))
        watched = WatchedCluster(counting, watch_timeout_s=1)
        try:
            create(counting, "/api/v1/nodes", _node("g-0"))
            assert _names(watched.nodes(GPU_LABEL)) == ["g-0"]
            # the watch is refused while 40 changes go by: more than the server keeps
            small.api.faults.set([{"verbs": ["watch"], "resources": ["nodes"], "status": 503}])
            time.sleep(1.5)
            for i in range(1, 41):
                create(counting, "/api/v1/nodes", _node(f"g-{i}"))
            small.api.faults.set([])
            reflector = watched.reflector("/api/v1/nodes")
            assert reflector is not None
            wait_for(lambda: reflector.counts.gone >= 1, timeout=30)
            wait_for(lambda: len(watched.nodes(GPU_LABEL)) == 41, timeout=30)
            assert reflector.counts.relists >= 1
        finally:
            watched.close()


def test_a_cache_whose_watch_is_down_says_so_instead_of_answering(
    small: LocalApiServer,
) -> None:
    with small.api_client() as api:
        watched = WatchedCluster(Cluster(api, timeout_s=5), stale_s=1.0, watch_timeout_s=1)
        try:
            create(watched, "/api/v1/nodes", _node("d-0"))
            assert _names(watched.nodes(GPU_LABEL)) == ["d-0"]
            small.api.faults.set(
                [{"verbs": ["watch", "list"], "resources": ["nodes"], "status": 503}]
            )

            def refused() -> str | None:
                try:
                    watched.nodes(GPU_LABEL)
                except Unavailable as exc:
                    return str(exc)
                return None

            said = wait_for(refused, timeout=30)
            assert "watch nodes: the watch has been down for" in said
            assert "the cache may be behind" in said
            small.api.faults.set([])
            wait_for(lambda: refused() is None, timeout=60)
        finally:
            watched.close()


def test_a_cache_that_never_synced_fails_with_the_reason(small: LocalApiServer) -> None:
    small.api.faults.set([{"verbs": ["list"], "resources": ["nodes"], "status": 503}])
    with small.api_client() as api:
        watched = WatchedCluster(Cluster(api, timeout_s=5), sync_timeout_s=1.0)
        try:
            with pytest.raises(Unavailable) as raised:
                watched.nodes()
            assert "watch nodes: the watch cache has not been listed yet after 1 s" in str(
                raised.value
            )
            assert "HTTP 503" in str(raised.value)
        finally:
            watched.close()


def test_a_list_refused_fails_a_read_at_once_and_is_tried_again(tmp_path: Path) -> None:
    """A 403 is not a slow server: a read of a collection whose list RBAC refuses says so
    now, not after the sync timeout (a controller's pass is then fail-static at once),
    and the cache keeps trying: once the role is granted, it reads."""
    from krea_ops.sim.common.kubeconfig import bearer_client

    users = {"carol-token": ("carol", ["devs"])}
    with (
        LocalApiServer(tmp_path / "rbac", crds=False, users=users) as server,
        server.api_client() as api,
        bearer_client(server.url, "carol-token", server.ca_cert) as carols,
    ):
        admin = Cluster(api, timeout_s=5)
        create(admin, "/api/v1/nodes", _node("g-0"))
        watched = WatchedCluster(Cluster(carols, timeout_s=5), sync_timeout_s=600.0)
        try:
            with pytest.raises(Unavailable) as raised:
                watched.nodes()
            text = str(raised.value)
            assert "watch nodes: the watch cache cannot list: forbidden" in text, text
            assert "after 600 s" not in text
            rbac = "/apis/rbac.authorization.k8s.io/v1"
            rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
            role = {"metadata": {"name": "node-reader"}, "rules": [rule]}
            create(admin, f"{rbac}/clusterroles", role)
            binding = {
                "metadata": {"name": "carol-reads-nodes"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "node-reader",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}
                ],
            }
            create(admin, f"{rbac}/clusterrolebindings", binding)

            def listed() -> bool:
                try:
                    return _names(watched.nodes(GPU_LABEL)) == ["g-0"]
                except Unavailable:
                    return False

            wait_for(listed, timeout=60)
        finally:
            watched.close()


# -- selectors, as the API server reads them ----------------------------------------------


def test_label_selectors_match_as_the_api_servers_do() -> None:
    labels = {"a": "1", "b": "2"}
    cases = {
        "a=1": True,
        "a==1": True,
        "a=2": False,
        "a!=2": True,
        "c!=2": True,
        "a in (1,3)": True,
        "a in (3)": False,
        "c in (1)": False,
        "a notin (1)": False,
        "c notin (1)": True,
        "a": True,
        "c": False,
        "!c": True,
        "!a": False,
        "a=1,b=2": True,
        "a=1,b in (3, 4)": False,
        "": True,
    }
    for selector, want in cases.items():
        assert label_matcher(selector)(labels) is want, selector
    with pytest.raises(BadInput):
        label_matcher("a in 1")
    with pytest.raises(BadInput):
        label_matcher("a=1,,b=2")


def test_field_selectors_match_as_the_api_servers_do() -> None:
    pod = {"metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": "x"},
           "status": {"phase": "Running"}}  # fmt: skip
    assert field_matcher("spec.nodeName=x,status.phase!=Failed")(pod)
    assert not field_matcher("status.phase!=Running")(pod)
    assert field_matcher("metadata.namespace==n")(pod)
    assert field_matcher("spec.nodeName=")({"spec": {}})
    assert not field_matcher("spec.nodeName=")(pod)


def test_collections_are_read_from_paths_as_rbac_reads_them() -> None:
    assert Collection.of("/api/v1/nodes") == Collection("", "nodes", None, "/api/v1/nodes")
    pods = Collection.of("/api/v1/namespaces/a/pods")
    assert pods == Collection("", "pods", "a", "/api/v1/namespaces/a/pods")
    js = Collection.of("/apis/jobset.x-k8s.io/v1alpha2/jobsets")
    assert js is not None and (js.group, js.resource) == ("jobset.x-k8s.io", "jobsets")
    assert Collection.of("/api/v1/nodes/n1") is None
    assert Collection.of("/api/v1/namespaces/a/pods/p/log") is None
    assert Collection.of("/apis/kueue.x-k8s.io/v1beta2") is None
