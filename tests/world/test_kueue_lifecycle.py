"""Kueue's resource-in-use finalizer, its pending message and the Workload field
selectors, seen with kubectl.

Upstream: the finalizer name is ``kueue.ResourceInUseFinalizerName``; a ClusterQueue
being deleted keeps it while workloads hold quota in it (clusterqueue_controller.go) and
says so in ``Active``: "Can't admit new workloads; clusterQueue is terminating"
(``inactiveReason`` in pkg/cache); a ResourceFlavor keeps it while a ClusterQueue names it
(resourceflavor_controller.go). The scheduler's pending condition is
``UnsetQuotaReservationWithCondition(wl, "Pending", "couldn't assign flavors to pod set
...")`` (scheduler.go, flavorassigner.go). A field selector on a label the CRD does not
declare in ``selectableFields`` is refused with the apiextensions apiserver's "field label
not supported: ...".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from tests.conftest import KUBECTL, Kubectl, wait_for

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
FINALIZER = "kueue.x-k8s.io/resource-in-use"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    config = WorldConfig(nodes=4, speed=120, exporters=False, prometheus=False)
    with SimWorld(config, tmp_path, parts=("cluster", "kueue")) as w:
        yield w
        kueue = [a for a in w.actors if a.name == "kueue"]
        assert kueue and kueue[0].errors == 0


def _get(kubectl: Kubectl, *what: str) -> dict[str, Any] | None:
    out = kubectl("get", *what, "-o", "json", check=False)
    if out.returncode != 0:
        assert "NotFound" in out.stderr, out.stderr
        return None
    return dict(json.loads(out.stdout))


def _workload(kubectl: Kubectl, owner: str) -> dict[str, Any] | None:
    items = json.loads(kubectl("get", "workloads", "-n", "training", "-o", "json").stdout)
    for wl in items["items"]:
        if wl["metadata"]["ownerReferences"][0]["name"] == owner:
            return dict(wl)
    return None


def _cond(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def test_in_use_finalizers_pending_message_and_field_selectors(
    world: SimWorld, tmp_path: Path
) -> None:
    kubectl = Kubectl(world.kubeconfig, tmp_path / "home")
    for what in (("clusterqueue", "training"), ("resourceflavor", "h200")):
        obj = wait_for(lambda what=what: _get(kubectl, *what), timeout=30)
        assert FINALIZER in obj["metadata"]["finalizers"]

    submit_training(world.client, "dit", nodes=2)  # 16 of the 32 GPUs
    submit_training(world.client, "next", nodes=3)  # 24 more: 16 left in the cohort

    def admitted() -> dict[str, Any] | None:
        wl = _workload(kubectl, "dit")
        return wl if _cond(wl, "Admitted").get("status") == "True" else None

    wl = wait_for(admitted, timeout=40)
    assert wl["metadata"]["finalizers"] == [FINALIZER]

    def pending() -> dict[str, Any] | None:
        wl = _workload(kubectl, "next")
        return wl if _cond(wl, "QuotaReserved").get("reason") == "Pending" else None

    reserved = _cond(wait_for(pending, timeout=40), "QuotaReserved")
    assert reserved["status"] == "False"
    assert reserved["message"] == (
        "couldn't assign flavors to pod set trainer: insufficient unused quota for "
        "nvidia.com/gpu in flavor h200, 8 more needed"
    )

    # The CRD's selectableFields (status.admission.clusterQueue) and metadata.name select;
    # a field it does not declare is refused.
    names = kubectl(
        "get", "workloads", "-n", "training", "-o", "name",
        "--field-selector", "status.admission.clusterQueue=training",
    ).stdout.split()
    assert names == [f"workload.kueue.x-k8s.io/{wl['metadata']['name']}"]
    none = kubectl(
        "get", "workloads", "-n", "training", "-o", "name",
        "--field-selector", "status.admission.clusterQueue=inference",
    )
    assert none.stdout == ""
    refused = kubectl(
        "get", "workloads", "-n", "training", "--field-selector", "spec.queueName=training",
        check=False,
    )
    assert refused.returncode != 0
    assert "field label not supported: spec.queueName" in refused.stderr

    # A ClusterQueue in use stays, Terminating, until no workload holds quota in it.
    kubectl("delete", "clusterqueue", "training", "--wait=false")
    kubectl("delete", "resourceflavor", "h200", "--wait=false")

    def terminating() -> dict[str, Any] | None:
        cq = _get(kubectl, "clusterqueue", "training")
        return cq if _cond(cq, "Active").get("reason") == "Terminating" else None

    cq = wait_for(terminating, timeout=40)
    assert cq["metadata"]["deletionTimestamp"] and cq["metadata"]["finalizers"] == [FINALIZER]
    active = _cond(cq, "Active")
    assert (active["status"], active["message"]) == (
        "False",
        "Can't admit new workloads; clusterQueue is terminating",
    )
    wait_for(
        lambda: _cond(_workload(kubectl, "next"), "QuotaReserved").get("message")
        == "ClusterQueue training is inactive",
        timeout=40,
    )
    rf = _get(kubectl, "resourceflavor", "h200")
    assert rf is not None and rf["metadata"]["deletionTimestamp"]

    # The trainings go: their workloads release the finalizer, then the ClusterQueue goes.
    custom: Any = client.CustomObjectsApi(world.client)
    for name in ("dit", "next"):
        custom.delete_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "training", "jobsets", name
        )
    wait_for(lambda: _get(kubectl, "clusterqueue", "training") is None, timeout=60)
    # h200 stays while the inference ClusterQueue names it.
    rf = _get(kubectl, "resourceflavor", "h200")
    assert rf is not None and rf["metadata"]["finalizers"] == [FINALIZER]
    kubectl("delete", "clusterqueue", "inference", "--wait=false")
    wait_for(lambda: _get(kubectl, "resourceflavor", "h200") is None, timeout=60)
