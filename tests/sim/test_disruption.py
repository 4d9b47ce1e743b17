"""The Eviction API marks the pod it evicts, as the real API server does.

pkg/registry/core/pod/storage/eviction.go (``addConditionAndDeletePod``): unless the
request is a dry run, the pod's status gets the condition ``DisruptionTarget`` (status
True, reason ``EvictionByEvictionAPI``, message ``Eviction API: evicting``) and then the
pod is deleted with the request's delete options, so a pod with a long grace period is
seen Terminating with the condition until its kubelet has stopped it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import wait_for


def _kubelet_lease(api: client.ApiClient, node: str) -> None:
    """A Lease renewed now: the node's kubelet posts, as it does on a real node (the
    server deletes a bound pod gracefully either way)."""
    client.CoordinationV1Api(api).create_namespaced_lease(
        "kube-node-lease",
        {
            "metadata": {"name": node},
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": 3600,
                "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        },
    )


def _running_pod(core: client.CoreV1Api, name: str, node: str, grace: int) -> None:
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name, "labels": {"app": "trainer"}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "main", "image": "busybox:1.36"}],
            },
        },
    )
    core.patch_namespaced_pod_status(
        name,
        "default",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    )


def _raw_pod(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    raw = core.read_namespaced_pod(name, "default", _preload_content=False)
    return dict(json.loads(raw.data))


def _evict(core: client.CoreV1Api, name: str, **options: Any) -> None:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "default"},
    }
    if options:
        body["deleteOptions"] = options
    core.create_namespaced_pod_eviction(name, "default", body)


def _disruption(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cond in pod["status"].get("conditions") or []:
        if cond["type"] == "DisruptionTarget":
            return dict(cond)
    return None


def test_an_evicted_pod_stays_terminating_with_the_disruption_target_condition(
    core: client.CoreV1Api, api: client.ApiClient
) -> None:
    _kubelet_lease(api, "gpu-1")
    _running_pod(core, "trainer-0", "gpu-1", grace=600)
    before = _raw_pod(core, "trainer-0")
    assert _disruption(before) is None

    _evict(core, "trainer-0")

    pod = _raw_pod(core, "trainer-0")  # still there: its kubelet has 600 s to stop it
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 600
    cond = _disruption(pod)
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    assert cond["lastTransitionTime"]
    # the other conditions are kept
    assert {c["type"] for c in pod["status"]["conditions"]} == {"Ready", "DisruptionTarget"}
    # the typed client reads it too
    typed = core.read_namespaced_pod("trainer-0", "default")
    assert [c.reason for c in typed.status.conditions if c.type == "DisruptionTarget"] == [
        "EvictionByEvictionAPI"
    ]


def test_a_dry_run_eviction_marks_nothing(core: client.CoreV1Api, api: client.ApiClient) -> None:
    _kubelet_lease(api, "gpu-1")
    _running_pod(core, "trainer-0", "gpu-1", grace=600)
    _evict(core, "trainer-0", dryRun=["All"])
    pod = _raw_pod(core, "trainer-0")
    assert not pod["metadata"].get("deletionTimestamp")
    assert _disruption(pod) is None


def test_an_evicted_pod_whose_kubelet_is_gone_stays_terminating_until_forced(
    core: client.CoreV1Api,
) -> None:
    """As upstream: nothing but its kubelet, the pod GC or a forced delete ends it."""
    _running_pod(core, "trainer-0", "gone-node", grace=600)
    _evict(core, "trainer-0")
    pod = _raw_pod(core, "trainer-0")
    assert pod["metadata"]["deletionTimestamp"] and _disruption(pod) is not None
    core.delete_namespaced_pod("trainer-0", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("trainer-0", "default")
    assert exc.value.status == 404


def test_an_eviction_with_a_stale_resource_version_is_a_conflict(
    core: client.CoreV1Api, api: client.ApiClient
) -> None:
    _kubelet_lease(api, "gpu-1")
    _running_pod(core, "trainer-0", "gpu-1", grace=600)
    rv = _raw_pod(core, "trainer-0")["metadata"]["resourceVersion"]
    core.patch_namespaced_pod("trainer-0", "default", {"metadata": {"labels": {"x": "y"}}})
    with pytest.raises(ApiException) as exc:
        _evict(core, "trainer-0", preconditions={"resourceVersion": rv})
    assert exc.value.status == 409
    message = json.loads(exc.value.body)["message"]
    assert f"the ResourceVersion in the precondition ({rv}) does not match" in message
    assert _disruption(_raw_pod(core, "trainer-0")) is None

    # with the current version the eviction goes through: the condition's update moves
    # the version on, and the delete is checked against that new one
    current = _raw_pod(core, "trainer-0")["metadata"]["resourceVersion"]
    _evict(core, "trainer-0", preconditions={"resourceVersion": current})
    pod = _raw_pod(core, "trainer-0")
    assert pod["metadata"]["deletionTimestamp"] and _disruption(pod) is not None


def test_an_unscheduled_pod_held_by_a_finalizer_is_marked_failed_when_deleted(
    core: client.CoreV1Api,
) -> None:
    """PodGC's gcUnscheduledTerminating (pkg/controller/podgc/gc_controller.go): no kubelet
    will ever end a pod that never got a node, so the pod GC marks it Failed; the Job
    controller's finalizer then lets it be counted and go."""
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "never-bound", "finalizers": ["batch.kubernetes.io/job-tracking"]},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
        },
    )
    _evict(core, "never-bound")
    pod = wait_for(
        lambda: (p := _raw_pod(core, "never-bound"))["status"].get("phase") == "Failed" and p,
        timeout=15,
    )
    assert pod["metadata"]["deletionTimestamp"]
    assert _disruption(pod) is not None  # the eviction's condition is kept
    core.patch_namespaced_pod("never-bound", "default", {"metadata": {"finalizers": None}})
    wait_for(lambda: not core.list_namespaced_pod("default").items, timeout=10)
