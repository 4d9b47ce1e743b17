"""The simulated API server, driven through the official Python client as krea-ops uses it."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import wait_for


def _pod(
    name: str, labels: dict[str, str] | None = None, node: str | None = None, **spec: object
) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


# -- discovery ---------------------------------------------------------------------------


def test_discovery_lists_core_kueue_and_jobset_resources(api: client.ApiClient) -> None:
    core = client.CoreApi(api).get_api_versions()
    assert core.versions == ["v1"]
    resources = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert resources["pods"].namespaced and "watch" in resources["pods"].verbs
    assert resources["pods/eviction"].kind == "Eviction"
    assert resources["nodes"].short_names == ["no"]
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups["kueue.x-k8s.io"].preferred_version.version == "v1beta2"
    assert {v.version for v in groups["kueue.x-k8s.io"].versions} == {"v1beta1", "v1beta2"}
    assert "jobset.x-k8s.io" in groups and "apps" in groups and "policy" in groups
    kueue = client.CustomObjectsApi(api).get_api_resources("kueue.x-k8s.io", "v1beta2")
    cq = next(r for r in kueue.resources if r.name == "clusterqueues")
    assert cq.short_names == ["cq"] and not cq.namespaced
    assert any(r.name == "clusterqueues/status" for r in kueue.resources)
    assert client.VersionApi(api).get_code().minor == "32"


# -- create / get / list -------------------------------------------------------------------


def test_create_defaults_and_generate_name(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod(
        "default", {**_pod(""), "metadata": {"generateName": "train-"}}
    )
    assert pod.metadata.name.startswith("train-") and len(pod.metadata.name) == 11
    assert pod.metadata.uid and pod.metadata.creation_timestamp
    assert int(pod.metadata.resource_version) > 0
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.status.phase == "Pending"
    assert pod.status.qos_class == "BestEffort"
    got = core.read_namespaced_pod(pod.metadata.name, "default")
    assert got.metadata.uid == pod.metadata.uid
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", _pod(pod.metadata.name))
    assert exc.value.status == 409 and _status(exc.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("missing", "default")
    assert exc.value.status == 404
    assert _status(exc.value)["message"] == 'pods "missing" not found'
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("nope", _pod("p"))
    assert exc.value.status == 404
    assert _status(exc.value)["message"] == 'namespaces "nope" not found'


def test_label_and_field_selectors(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("a", {"app": "dit", "tier": "train"}, "n1"))
    core.create_namespaced_pod("default", _pod("b", {"app": "dit", "tier": "serve"}, "n2"))
    core.create_namespaced_pod("kube-system", _pod("c", {"app": "dns"}, "n1"))

    def names(**kw: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(**kw).items)

    assert names(label_selector="app=dit") == ["a", "b"]
    assert names(label_selector="app=dit,tier!=train") == ["b"]
    assert names(label_selector="tier in (train,serve)") == ["a", "b"]
    assert names(label_selector="tier notin (train)") == ["b", "c"]
    assert names(label_selector="tier") == ["a", "b"]
    assert names(label_selector="!tier") == ["c"]
    assert names(field_selector="spec.nodeName=n1") == ["a", "c"]
    assert names(field_selector="metadata.namespace!=default") == ["c"]
    assert names(field_selector="status.phase=Pending,spec.nodeName=n2") == ["b"]
    with pytest.raises(ApiException) as exc:
        core.list_pod_for_all_namespaces(field_selector="spec.colour=red")
    assert exc.value.status == 400


def test_pagination_with_limit_and_continue(core: client.CoreV1Api) -> None:
    for i in range(7):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        pages += 1
        seen += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3 and seen == [f"cm-{i}" for i in range(7)]


# -- update and conflicts ----------------------------------------------------------------


def test_stale_update_gets_409_and_concurrent_writers_do_not_both_win(
    core: client.CoreV1Api,
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"n": "0"}})
    stale = core.read_namespaced_config_map("cfg", "default")
    fresh = core.read_namespaced_config_map("cfg", "default")
    fresh.data = {"n": "1"}
    core.replace_namespaced_config_map("cfg", "default", fresh)
    stale.data = {"n": "2"}
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_config_map("cfg", "default", stale)
    assert exc.value.status == 409 and _status(exc.value)["reason"] == "Conflict"
    assert "the object has been modified" in _status(exc.value)["message"]

    # Many writers doing read-modify-write: every success is counted exactly once.
    successes, lock = [0], threading.Lock()

    def increment() -> None:
        for _ in range(20):
            while True:
                cm = core.read_namespaced_config_map("cfg", "default")
                cm.data = {"n": str(int(cm.data["n"]) + 1)}
                try:
                    core.replace_namespaced_config_map("cfg", "default", cm)
                except ApiException as e:
                    assert e.status == 409
                    continue
                with lock:
                    successes[0] += 1
                break

    threads = [threading.Thread(target=increment) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.read_namespaced_config_map("cfg", "default").data["n"] == str(1 + successes[0])
    assert successes[0] == 80


# -- patch types -------------------------------------------------------------------------


def test_each_patch_type(core: client.CoreV1Api) -> None:
    core.create_node(
        {
            "metadata": {"name": "gpu-1", "labels": {"pool": "h200"}},
            "spec": {
                "taints": [
                    {"key": "a", "value": "1", "effect": "NoSchedule"},
                    {"key": "b", "effect": "NoSchedule"},
                ]
            },
        }
    )
    # Strategic merge: node taints have no merge key, so the list is replaced.
    node = core.patch_node(
        "gpu-1",
        {
            "spec": {
                "taints": [{"key": "krea.ai/unhealthy", "value": "xid-79", "effect": "NoSchedule"}]
            }
        },
    )
    assert [t.key for t in node.spec.taints] == ["krea.ai/unhealthy"]
    # JSON merge patch: labels merge, null deletes.
    node = core.patch_node(
        "gpu-1",
        {"metadata": {"labels": {"pool": None, "rack": "r7"}}},
        _content_type="application/merge-patch+json",
    )
    assert node.metadata.labels == {"rack": "r7"}
    # JSON patch, including a failed test that changes nothing.
    node = core.patch_node(
        "gpu-1",
        [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        _content_type="application/json-patch+json",
    )
    assert node.spec.unschedulable is True
    before = core.read_node("gpu-1").metadata.resource_version
    with pytest.raises(ApiException) as exc:
        core.patch_node(
            "gpu-1",
            [
                {"op": "test", "path": "/spec/unschedulable", "value": False},
                {"op": "remove", "path": "/spec/taints"},
            ],
            _content_type="application/json-patch+json",
        )
    assert exc.value.status == 422
    after = core.read_node("gpu-1")
    assert after.metadata.resource_version == before and after.spec.taints

    # Strategic merge on a pod template's containers merges by name, env by name.
    apps = client.AppsV1Api(core.api_client)
    apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "img:1",
                                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            },
                            {"name": "side", "image": "img:1"},
                        ]
                    },
                },
            },
        },
    )
    deploy = apps.patch_namespaced_deployment(
        "d",
        "default",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "main", "image": "img:2", "env": [{"name": "B", "value": "3"}]}
                        ]
                    }
                }
            }
        },
    )
    containers = deploy.spec.template.spec.containers
    main = next(c for c in containers if c.name == "main")
    assert [c.name for c in containers] == ["main", "side"]
    assert main.image == "img:2" and {e.name: e.value for e in main.env} == {"A": "1", "B": "3"}
    assert deploy.metadata.generation == 2
    # A running pod's spec is immutable except images, as on a real server.
    core.create_namespaced_pod("default", _pod("p"))
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", "default", {"spec": {"restartPolicy": "Never"}})
    assert exc.value.status == 422 and "pod updates may not change fields" in exc.value.body


# -- watch -------------------------------------------------------------------------------


def test_watch_streams_changes_and_resumes_from_a_version(core: client.CoreV1Api) -> None:
    listed = core.list_namespaced_config_map("default")
    rv = listed.metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "w"}, "data": {"x": "1"}})
    core.patch_namespaced_config_map("w", "default", {"data": {"x": "2"}})
    core.delete_namespaced_config_map("w", "default")
    events = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=2
    ):
        events.append(
            (event["type"], event["object"].metadata.name, (event["object"].data or {}).get("x"))
        )
        if len(events) == 3:
            break
    assert events == [("ADDED", "w", "1"), ("MODIFIED", "w", "2"), ("DELETED", "w", "2")]


def test_watch_sees_live_changes_and_label_transitions(core: client.CoreV1Api) -> None:
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for event in w.stream(
            core.list_namespaced_pod, "default", label_selector="role=gpu", timeout_seconds=10
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
        done.set()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    core.create_namespaced_pod("default", _pod("x", {"role": "gpu"}))
    core.create_namespaced_pod("default", _pod("y", {"role": "cpu"}))
    core.patch_namespaced_pod("y", "default", {"metadata": {"labels": {"role": "gpu"}}})
    core.patch_namespaced_pod("x", "default", {"metadata": {"labels": {"role": "cpu"}}})
    assert done.wait(10)
    t.join()
    assert seen == [("ADDED", "x"), ("ADDED", "y"), ("DELETED", "x")]


def test_watch_from_a_compacted_version_gets_410(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with LocalApiServer(tmp_path / "s", history=5) as sim, sim.api_client() as api:
        core = client.CoreV1Api(api)
        old = core.list_namespaced_config_map("default").metadata.resource_version
        for i in range(10):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as exc:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2
            ):
                pass
        assert exc.value.status == 410


def test_watch_bookmarks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with LocalApiServer(tmp_path / "s", bookmark_interval_s=0.2) as sim, sim.api_client() as api:
        core = client.CoreV1Api(api)
        rv = core.list_namespaced_config_map("default").metadata.resource_version
        resp = core.list_namespaced_config_map(
            "default",
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
        )
        lines = [json.loads(line) for line in resp.read().decode().splitlines() if line]
        assert lines and all(e["type"] == "BOOKMARK" for e in lines)
        assert lines[-1]["object"]["metadata"]["resourceVersion"] == rv


# -- evictions and budgets ---------------------------------------------------------------


def _ready_pod(core: client.CoreV1Api, name: str, labels: dict[str, str]) -> None:
    core.create_namespaced_pod("default", _pod(name, labels))
    core.patch_namespaced_pod_status(
        name,
        "default",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    )


def test_eviction_respects_disruption_budgets(
    core: client.CoreV1Api, api: client.ApiClient
) -> None:
    policy = client.PolicyV1Api(api)
    for i in range(3):
        _ready_pod(core, f"inf-{i}", {"app": "inference"})
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "inference"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "inference"}}},
        },
    )
    pdb = wait_for(
        lambda: (
            (
                p := policy.read_namespaced_pod_disruption_budget("inference", "default")
            ).status.expected_pods
            == 3
            and p
        )
    )
    assert pdb.status.current_healthy == 3 and pdb.status.disruptions_allowed == 1

    def evict(name: str) -> None:
        core.create_namespaced_pod_eviction(
            name,
            "default",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": "default"},
            },
        )

    evict("inf-0")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == [
        "inf-1",
        "inf-2",
    ]
    with pytest.raises(ApiException) as exc:
        evict("inf-1")
    assert exc.value.status == 429
    body = _status(exc.value)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 2 healthy pods and has 2 currently" in body["details"]["causes"][0]["message"]
    assert core.read_namespaced_pod("inf-1", "default")

    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "second"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "inference"}}},
        },
    )
    with pytest.raises(ApiException) as exc:
        evict("inf-2")
    assert exc.value.status == 500 and "more than one PodDisruptionBudget" in exc.value.body


def test_a_budget_the_controller_has_not_seen_asks_for_a_retry_in_10s(
    sim: LocalApiServer, core: client.CoreV1Api, api: client.ApiClient
) -> None:
    _ready_pod(core, "inf-0", {"app": "inference"})
    sim.api.controllers.stop()  # status.observedGeneration stays behind metadata.generation
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "inference"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "inference"}}},
        },
    )
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction(
            "inf-0", "default", {"metadata": {"name": "inf-0", "namespace": "default"}}
        )
    assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "10"
    details = _status(exc.value)["details"]
    assert details["retryAfterSeconds"] == 10
    assert details["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget inference is still being processed by the server.",
        }
    ]


def test_an_eviction_names_its_pod_or_is_refused(core: client.CoreV1Api) -> None:
    _ready_pod(core, "inf-0", {"app": "inference"})
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction(
            "inf-0", "default", {"metadata": {"name": "inf-1", "namespace": "default"}}
        )
    assert exc.value.status == 400
    assert _status(exc.value)["message"] == "name in URL does not match name in Eviction object"


def test_a_delete_precondition_that_fails_says_which(core: client.CoreV1Api) -> None:
    _ready_pod(core, "inf-0", {"app": "inference"})
    uid = core.read_namespaced_pod("inf-0", "default").metadata.uid
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_pod("inf-0", "default", body={"preconditions": {"uid": "other"}})
    assert exc.value.status == 409
    assert _status(exc.value)["message"] == (
        'Operation cannot be fulfilled on pods "inf-0": StorageError: invalid object, Code: 4, '
        "Key: /registry/pods/default/inf-0, ResourceVersion: 0, AdditionalErrorMsg: "
        f"Precondition failed: UID in precondition: other, UID in object meta: {uid}"
    )


# -- events --------------------------------------------------------------------------------


def test_events_with_an_event_time_are_validated_as_the_new_api_requires(
    core: client.CoreV1Api,
) -> None:
    new_style = {
        "metadata": {"name": "gpu-node-000.1"},
        "involvedObject": {"kind": "Node", "name": "gpu-node-000"},
        "reason": "GpuHot",
        "message": "GPU 3 at 91 C",
        "type": "Warning",
        "eventTime": "2026-11-29T21:00:00.250000Z",
        "reportingComponent": "krea.ai/krea-ops",
        "reportingInstance": "krea.ai/krea-ops-host",
    }
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_event("default", new_style)
    assert exc.value.status == 422
    assert _status(exc.value)["message"] == (
        'Event "gpu-node-000.1" is invalid: action: Required value'
    )
    core.create_namespace({"metadata": {"name": "ml"}})
    with pytest.raises(ApiException) as exc:  # a node's event belongs in default
        core.create_namespaced_event("ml", {**new_style, "action": "Cordon"})
    assert (
        'involvedObject.namespace: Invalid value: "": does not match event.namespace'
        in (_status(exc.value)["message"])
    )
    core.create_namespaced_event("default", {**new_style, "action": "Cordon"})
    # the old style (no eventTime, as kubelets write) needs none of it
    old_style = {k: v for k, v in new_style.items() if k not in ("eventTime",)}
    old_style["metadata"] = {"name": "gpu-node-000.2"}
    core.create_namespaced_event("default", old_style)


# -- custom resources --------------------------------------------------------------------


def test_kueue_objects_validate_against_the_crd_schema(custom: client.CustomObjectsApi) -> None:
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h200"},
    }
    custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors", flavor)
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h200",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 512}],
                        }
                    ],
                }
            ],
            "preemption": {"withinClusterQueue": "Sometimes"},
        },
    }
    with pytest.raises(ApiException) as exc:
        custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq)
    assert exc.value.status == 422
    body = _status(exc.value)
    assert body["reason"] == "Invalid"
    causes = body["details"]["causes"]
    assert any(
        c["field"] == "spec.preemption.withinClusterQueue"
        and c["reason"] == "FieldValueNotSupported"
        for c in causes
    )
    with pytest.raises(ApiException):
        custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "training")
    cq["spec"]["preemption"]["withinClusterQueue"] = "LowerPriority"
    created = custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq)
    assert created["metadata"]["generation"] == 1
    # The same object is served in v1beta1 too (None conversion).
    old = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "training")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"


def test_status_subresource_is_honoured(custom: client.CustomObjectsApi) -> None:
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": "default"},
        "spec": {"clusterQueue": "training"},
        "status": {"pendingWorkloads": 9},
    }
    created = custom.create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "default", "localqueues", lq
    )
    assert "pendingWorkloads" not in (created.get("status") or {})
    patched = custom.patch_namespaced_custom_object_status(
        "kueue.x-k8s.io",
        "v1beta2",
        "default",
        "localqueues",
        "team",
        {"status": {"pendingWorkloads": 3}, "spec": {"clusterQueue": "other"}},
    )
    assert patched["status"]["pendingWorkloads"] == 3
    assert patched["spec"]["clusterQueue"] == "training"
    assert patched["metadata"]["generation"] == 1
    patched = custom.patch_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "default",
        "localqueues",
        "team",
        {"status": {"pendingWorkloads": 0}, "spec": {"stopPolicy": "Hold"}},
    )
    assert patched["status"]["pendingWorkloads"] == 3
    assert patched["spec"]["stopPolicy"] == "Hold"
    assert patched["metadata"]["generation"] == 2
    # Kueue's own CEL rule: a LocalQueue's clusterQueue is immutable.
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "default",
            "localqueues",
            "team",
            {"spec": {"clusterQueue": "other"}},
        )
    assert exc.value.status == 422 and "field is immutable" in _status(exc.value)["message"]


# -- delete ------------------------------------------------------------------------------


def test_finalizers_hold_deletion_until_removed(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "held", "finalizers": ["krea.ai/audit"]}}
    )
    core.delete_namespaced_config_map("held", "default")
    held = core.read_namespaced_config_map("held", "default")
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("held", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_config_map("held", "default")
    assert exc.value.status == 404


def _owned(core: client.CoreV1Api, api: client.ApiClient) -> tuple[str, list[str]]:
    apps = client.AppsV1Api(api)
    rs = apps.create_namespaced_replica_set(
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1"}]},
                },
            },
        },
    )
    owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": rs.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    names = []
    for i in range(2):
        pod = _pod(f"web-{i}", {"app": "web"})
        pod["metadata"]["ownerReferences"] = owner
        names.append(core.create_namespaced_pod("default", pod).metadata.name)
    return rs.metadata.uid, names


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_deleting_an_owner_deletes_its_dependents(
    core: client.CoreV1Api, api: client.ApiClient, policy: str
) -> None:
    _owned(core, api)
    client.AppsV1Api(api).delete_namespaced_replica_set("web", "default", propagation_policy=policy)
    wait_for(lambda: not core.list_namespaced_pod("default").items)
    wait_for(lambda: not client.AppsV1Api(api).list_namespaced_replica_set("default").items)


def test_orphan_propagation_keeps_dependents(core: client.CoreV1Api, api: client.ApiClient) -> None:
    _owned(core, api)
    client.AppsV1Api(api).delete_namespaced_replica_set(
        "web", "default", propagation_policy="Orphan"
    )
    wait_for(lambda: not client.AppsV1Api(api).list_namespaced_replica_set("default").items)
    pods = core.list_namespaced_pod("default").items
    assert len(pods) == 2 and all(not p.metadata.owner_references for p in pods)


def test_a_pod_on_a_node_waits_for_its_kubelet_and_the_pod_gc_ends_it_out_of_service(
    core: client.CoreV1Api,
) -> None:
    """As the pod strategy's CheckGracefulDelete: a pod bound to a node is deleted
    gracefully whether or not that node's kubelet still posts (only the kubelet, the pod
    GC or a forced delete ends it); one never scheduled, or already terminated, goes at
    once. The pod GC's gcTerminating ends a terminating pod on a NotReady node tainted
    ``node.kubernetes.io/out-of-service``."""
    core.create_node({"metadata": {"name": "n1"}})
    core.create_namespaced_pod("default", _pod("bound", node="n1"))
    core.create_namespaced_pod("default", _pod("unbound"))
    core.create_namespaced_pod("default", _pod("done", node="n1"))
    core.patch_namespaced_pod_status("done", "default", {"status": {"phase": "Succeeded"}})
    for name in ("bound", "unbound", "done"):
        core.delete_namespaced_pod(name, "default")
    bound = core.read_namespaced_pod("bound", "default")  # n1 has no kubelet: it stays
    assert bound.metadata.deletion_timestamp and bound.metadata.deletion_grace_period_seconds == 30
    for name in ("unbound", "done"):
        with pytest.raises(ApiException) as exc:
            core.read_namespaced_pod(name, "default")
        assert exc.value.status == 404
    time.sleep(2.5)  # the pod GC's sweeps leave it: nothing says the node is out of service
    assert core.read_namespaced_pod("bound", "default").metadata.deletion_timestamp

    out_of_service = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                      "effect": "NoExecute"}  # fmt: skip
    core.patch_node("n1", {"spec": {"taints": [out_of_service]}})

    def gone() -> bool:
        try:
            core.read_namespaced_pod("bound", "default")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=15)


def test_namespace_deletion_empties_it(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    core.create_namespaced_config_map("team-a", {"metadata": {"name": "c"}})
    core.delete_namespace("team-a")
    wait_for(lambda: "team-a" not in [n.metadata.name for n in core.list_namespace().items])
    core.create_namespace({"metadata": {"name": "team-a"}})
    assert core.list_namespaced_config_map("team-a").items == []


def test_delete_collection_by_label(core: client.CoreV1Api) -> None:
    for i, app in enumerate(["a", "a", "b"]):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"c{i}", "labels": {"app": app}}}
        )
    core.delete_collection_namespaced_config_map("default", label_selector="app=a")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == ["c2"]


# -- bad input ---------------------------------------------------------------------------


def _raw(
    api: client.ApiClient,
    method: str,
    path: str,
    body: bytes,
    content_type: str = "application/json",
) -> tuple[int, dict]:
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=api.configuration.ssl_ca_cert)
    req = urllib.request.Request(
        api.configuration.host + path,
        data=body,
        method=method,
        headers={"Content-Type": content_type, **api.configuration.api_key},
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize(
    ("path", "body", "code", "reason"),
    [
        ("/api/v1/namespaces/default/configmaps", b"{not json", 400, "BadRequest"),
        ("/api/v1/namespaces/default/configmaps", b"[1, 2]", 400, "BadRequest"),
        ("/api/v1/namespaces/default/widgets", b"{}", 404, "NotFound"),
        (
            "/api/v1/namespaces/default/configmaps",
            b'{"metadata": {"name": "Not_A_DNS_Name"}}',
            422,
            "Invalid",
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            b'{"kind": "Secret", "metadata": {"name": "x"}}',
            400,
            "BadRequest",
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            b'{"metadata": {"name": "big"}, "data": {"x": "' + b"a" * (3 * 1024 * 1024) + b'"}}',
            413,
            "RequestEntityTooLarge",
        ),
    ],
)
def test_bad_input_gets_a_status_and_writes_nothing(
    api: client.ApiClient, path: str, body: bytes, code: int, reason: str
) -> None:
    before = client.CoreV1Api(api).list_namespaced_config_map("default")
    status, payload = _raw(api, "POST", path, body)
    assert (status, payload["kind"], payload["reason"], payload["code"]) == (
        code,
        "Status",
        reason,
        code,
    )
    after = client.CoreV1Api(api).list_namespaced_config_map("default")
    assert after.metadata.resource_version == before.metadata.resource_version


def test_name_errors_use_the_real_wording(api: client.ApiClient) -> None:
    status, payload = _raw(
        api, "POST", "/api/v1/namespaces/default/configmaps", b'{"metadata": {"name": "Bad_Name"}}'
    )
    assert status == 422
    assert payload["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: '
        'Invalid value: "Bad_Name": a lowercase RFC 1123 '
        "subdomain must consist of"
    )
    assert payload["details"]["causes"][0]["field"] == "metadata.name"


def test_a_custom_resource_says_its_kind_and_a_taint_value_is_a_label_value(
    api: client.ApiClient,
) -> None:
    """As kube-apiserver 1.36 reads them (these messages are its own, byte for byte): a
    custom resource is decoded unstructured, taking neither its kind nor its apiVersion
    from the URL as a built-in kind does (apimachinery's json Serializer.Decode, worded
    by apiserver's transformDecodeError; create.go's AcceptsGroupVersion); a taint's
    value must be a label value (validateNodeTaints, under ``metadata.taints``)."""
    path = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
    body = b'{"metadata": {"name": "h200"}, "spec": {"nodeLabels": {"krea.ai/pool": "h200"}}}'
    status, payload = _raw(api, "POST", path, body)
    assert (status, payload["reason"]) == (400, "BadRequest")
    assert payload["message"] == (
        "the object provided is unrecognized (must be of type ResourceFlavor): Object 'Kind' "
        f"is missing in '{body.decode()}' ({body[:30].decode()} ...)"
    )
    status, payload = _raw(api, "POST", path, b'{"kind": "ResourceFlavor", "metadata": {}}')
    assert (status, payload["message"]) == (
        400,
        "the API version in the data () does not match the expected API version "
        "(kueue.x-k8s.io/v1beta2)",
    )
    taint = {"key": "krea.ai/burst-paused", "value": "an outage", "effect": "NoSchedule"}
    node = {"metadata": {"name": "n"}, "spec": {"taints": [taint]}}
    status, payload = _raw(api, "POST", "/api/v1/nodes", json.dumps(node).encode())
    assert (status, payload["reason"]) == (422, "Invalid")
    assert payload["message"].startswith(
        'Node "n" is invalid: metadata.taints[0].value: Invalid value: "an outage": a valid '
        "label must be an empty string or consist of alphanumeric characters"
    )
    assert [c["field"] for c in payload["details"]["causes"]] == ["metadata.taints[0].value"]
    flavors = client.CustomObjectsApi(api).list_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "resourceflavors"
    )
    assert flavors["items"] == []
    assert client.CoreV1Api(api).list_node().items == []


def test_wrong_token_gets_401(sim: LocalApiServer) -> None:
    config = client.Configuration()
    config.host = sim.url
    config.api_key = {"authorization": "Bearer wrong"}
    config.ssl_ca_cert = str(sim.ca_cert)
    with client.ApiClient(config) as bad, pytest.raises(ApiException) as exc:
        client.CoreV1Api(bad).list_namespace()
    assert exc.value.status == 401


def test_binding_assigns_a_node_once(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", _pod("unbound"))
    core.create_namespaced_pod_binding(
        "unbound",
        "default",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "unbound"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-7"},
        },
        _preload_content=False,
    )
    pod = core.read_namespaced_pod("unbound", "default")
    assert pod.spec.node_name == "gpu-7"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_binding(
            "unbound",
            "default",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "unbound"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-8"},
            },
        )
    assert exc.value.status == 409 and "already assigned" in _status(exc.value)["message"]
    assert core.read_namespaced_pod("unbound", "default").spec.node_name == "gpu-7"


def test_yaml_bodies_are_accepted_and_malformed_yaml_is_400(api: client.ApiClient) -> None:
    status, payload = _raw(
        api,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        b"metadata:\n  name: from-yaml\ndata:\n  k: v\n",
        "application/yaml",
    )
    assert status == 201 and payload["data"] == {"k": "v"}
    status, payload = _raw(
        api,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        b"metadata: [unclosed\n",
        "application/yaml",
    )
    assert (status, payload["reason"]) == (400, "BadRequest")


def test_server_side_dry_run_writes_nothing(core: client.CoreV1Api) -> None:
    before = core.list_namespaced_config_map("default").metadata.resource_version
    made = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "dry"}}, dry_run="All"
    )
    assert made.metadata.name == "dry" and made.metadata.uid
    assert core.list_namespaced_config_map("default").items == []
    assert core.list_namespaced_config_map("default").metadata.resource_version == before


def test_gated_pods_may_gain_node_selectors_but_running_ones_may_not(
    core: client.CoreV1Api,
) -> None:
    gated = _pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    gated["spec"]["nodeSelector"] = {"zone": "a"}
    core.create_namespaced_pod("default", gated)
    pod = core.patch_namespaced_pod(
        "gated",
        "default",
        {"spec": {"nodeSelector": {"krea.ai/pool": "h200"}, "schedulingGates": None}},
    )
    assert pod.spec.node_selector == {"zone": "a", "krea.ai/pool": "h200"}
    assert not pod.spec.scheduling_gates
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("gated", "default", {"spec": {"nodeSelector": {"x": "y"}}})
    assert exc.value.status == 422
