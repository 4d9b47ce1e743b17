"""SVG snapshots of the node and queue screens at a fixed size, seed and clock.

The node screen draws the seeded synthetic fleet (``krea_ops.sim.fixtures``). The queue
screen draws real Kueue objects written to a bundled API server whose clock is frozen,
read through the product's own queue reader, so the snapshot is of real parsing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.console import QueueReading
from krea_ops.kube.cluster import Cluster
from krea_ops.queue import read_queues, read_workloads, why
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.fixtures import EPOCH, FixedConsole, synthetic_fleet
from screens.app import KreaOpsApp
from tests.queue.test_queue_objects import (
    V2,
    WAITING,
    _admission,
    _cond,
    _cq,
    _cq_status,
    _node,
    _workload,
)
from tests.screens.conftest import wait_until

FROZEN = dt.datetime.fromtimestamp(EPOCH - 3600, dt.UTC)


@pytest.fixture(scope="module")
def kueue_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixedConsole]:
    state: Path = tmp_path_factory.mktemp("snap")
    with LocalApiServer(state, clock=lambda: FROZEN) as sim:
        api = sim.api_client()
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        for i in range(4):
            core.create_node(_node(f"gpu-node-00{i}", "h200", ready=i != 3))
        core.create_namespace({"metadata": {"name": "training"}})
        custom.create_cluster_custom_object(*V2, "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": "h200"}, "spec": {"nodeLabels": {"krea.ai/pool": "h200"}},
        })  # fmt: skip
        custom.create_cluster_custom_object(
            *V2, "clusterqueues", _cq("training", [("h200", 24, None)])
        )
        custom.create_cluster_custom_object(
            *V2, "clusterqueues", _cq("inference", [("h200", 8, 8)])
        )
        custom.patch_cluster_custom_object_status(
            *V2, "clusterqueues", "training", _cq_status([("h200", 16, 0)], pending=1, admitted=1)
        )
        custom.patch_cluster_custom_object_status(
            *V2, "clusterqueues", "inference", _cq_status([("h200", 8, 0)], pending=0, admitted=1)
        )
        custom.create_namespaced_custom_object(*V2, "training", "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "training"},
            "spec": {"clusterQueue": "training"},
        })  # fmt: skip
        running = _workload("training", "dit-xl-pretrain", count=2, priority=100)
        custom.create_namespaced_custom_object(*V2, "training", "workloads", running)
        wl = (*V2, "training", "workloads")
        custom.patch_namespaced_custom_object_status(*wl, "dit-xl-pretrain", {
            "status": {"admission": _admission("training", 2, 8), "conditions": [
                _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in training"),
                _cond("Admitted", "True", "Admitted", "The workload is admitted"),
            ]},
        })  # fmt: skip
        waiting = _workload("training", "dit-b-ablation", count=3, priority=100)
        custom.create_namespaced_custom_object(*V2, "training", "workloads", waiting)
        custom.patch_namespaced_custom_object_status(*wl, "dit-b-ablation", {
            "status": {"conditions": [_cond("QuotaReserved", "False", "WaitingForQuota", WAITING)]},
        })  # fmt: skip
        cluster = Cluster(api)
        hub = FixedConsole(
            synthetic_fleet(4),
            queue_data=QueueReading(read_queues(cluster), tuple(read_workloads(cluster))),
            why_fn=lambda name, ns: why(cluster, name, ns),
        )
        yield hub
        api.close()


def test_node_snapshot(snap_compare: Any) -> None:
    app = KreaOpsApp(FixedConsole(synthetic_fleet(16)), refresh_s=60.0, clock=lambda: EPOCH + 1.0)

    async def open_node(pilot: Any) -> None:
        await wait_until(pilot, lambda: "fleet" in app.data)
        app.open_node("gpu-node-002")
        await wait_until(pilot, lambda: "node:gpu-node-002" in app.data)
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(130, 48), run_before=open_node)


def test_queue_snapshot(snap_compare: Any, kueue_hub: FixedConsole) -> None:
    app = KreaOpsApp(kueue_hub, refresh_s=60.0, clock=lambda: EPOCH + 1.0)

    async def open_queue(pilot: Any) -> None:
        await wait_until(pilot, lambda: "fleet" in app.data)
        app.go("queue")
        await wait_until(pilot, lambda: "queue" in app.data)
        await pilot.pause(0.3)
        await wait_until(pilot, lambda: kueue_hub.calls.get("why", 0) >= 1, timeout=10)
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(130, 48), run_before=open_queue)
