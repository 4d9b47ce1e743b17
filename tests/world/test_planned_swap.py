"""A planned swap end to end in the simulated world: a gang of 2 runs (a garbled request
on its JobSet is ignored with a Warning Event), one GPU of one of
its nodes creeps to 76 °C (warm, under the 78 °C hot threshold: SUSPECT), node-health
(its read and decide, the runbook's executor) asks the gang for a checkpoint, the
simulated trainers write it and answer on the JobSet, node-health evicts the node right
after, and the gang resumes on the spare node from exactly that checkpoint: no work lost
beyond the write and one pass."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.controllers.base import Inputs
from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.execute import execute
from krea_ops.settings import Settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.machines.training import RESUMED_STEP_ANNOTATION, submit_training
from krea_ops.sim.world import SimWorld
from krea_ops.telemetry.scrape import ScrapeSource
from krea_ops.training.swaps import (
    CHECKPOINT_COMPLETED_STEP,
    request_state,
)
from tests.conftest import wait_for

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "training", "jobsets", "dit")
USER = "system:serviceaccount:krea-ops:node-health"


@pytest.fixture
def world(tmp_path: Path, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=3,  # a gang of 2 and a spare for the swapped node's rank
        speed=120,
        failure_multiplier=0.0,
        # no periodic checkpoint during the test: the one the swap asks for is the only one
        checkpoint_interval_s=4 * 3600.0,
        prometheus=False,
        extra={
            "slow_burners": False,
            "training_quota_fraction": 1.0,
            "scrape_interval_s": 2,
            # 2 wall seconds: several passes see the request pending
            "checkpoint_write_s": 240.0,
        },
    )
    with SimWorld(config, tmp_path / "world", parts=("devices", "cluster", "kueue")) as w:
        yield w


def _jobset(w: SimWorld) -> dict[str, Any]:
    return dict(client.CustomObjectsApi(w.client).get_namespaced_custom_object(*JOBSET))


def _gang(w: SimWorld, attempt: int) -> list[str] | None:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        "training",
        label_selector=f"jobset.sigs.k8s.io/jobset-name=dit,"
        f"jobset.sigs.k8s.io/restart-attempt={attempt}",
        _preload_content=False,
    )
    pods = [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]
    if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
        return sorted(p["spec"]["nodeName"] for p in pods)
    return None


def _events(w: SimWorld) -> dict[str, str]:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_event("training", _preload_content=False)
    return {e["reason"]: e["message"] for e in json.loads(raw.data)["items"]}


def test_a_warm_gpu_is_swapped_out_right_after_the_checkpoint_it_asked_for(
    world: SimWorld,
) -> None:
    submit_training(world.client, "dit", nodes=2, max_restarts=3)
    gang = wait_for(lambda: _gang(world, 0), timeout=60)
    warm = gang[1]
    # a request that is not a time is ignored, and said so
    client.CustomObjectsApi(world.client).patch_namespaced_custom_object(
        *JOBSET, {"metadata": {"annotations": {"krea.ai/checkpoint-requested-at": "now please"}}}
    )
    ignored = wait_for(lambda: _events(world).get("CheckpointRequestIgnored"), timeout=20)
    assert "'now please' is not an RFC 3339 time: ignored" in ignored
    assert "CheckpointRequested" not in _events(world)
    inject_fault(world.client, "hot-gpu", warm, gpu=3, value="76")

    cluster = Cluster(world.client, timeout_s=30)
    urls = world.world.services["devices"].exporter_urls()
    source = ScrapeSource(urls, Settings())
    inputs = Inputs(cluster, source, HealthPolicy(), USER)
    controller = NodeHealth(NodeHealthConfig(swap_after_s=3.0))  # a few passes of it
    state: dict[str, Any] = {}
    actions: list[str] = []

    def one_pass() -> str | None:
        """One node-health pass; the node it evicted, if it did."""
        nonlocal state
        now = time.time()
        decision = controller.decide(controller.read(inputs, now), now, state)
        for plan in decision.plans:
            assert execute(cluster, plan).status == "done", plan.lines()
            actions.append(plan.action)
        state = json.loads(json.dumps(decision.state))
        evicted = [n for p in decision.plans if p.action == "nodes evict" for n in p.nodes]
        assert evicted in ([], [warm]), decision.plans
        return evicted[0] if evicted else None

    try:
        assert wait_for(one_pass, timeout=90, interval=0.5) == warm
    finally:
        source.close()

    assert actions == ["train checkpoint-request", "nodes evict"]  # asked once, then evicted
    notes = _jobset(world)["metadata"]["annotations"]
    requested, completed, step = request_state(notes)
    assert requested is not None and completed is not None and completed >= requested
    assert step is not None and step > 0 and notes[CHECKPOINT_COMPLETED_STEP] == str(step)
    assert "planned swap of " + warm in notes["krea.ai/checkpoint-requested-reason"]
    events = _events(world)
    assert f"writing step-{step} now" in events["CheckpointRequested"]
    assert f"checkpoint step-{step} requested at" in events["CheckpointCompleted"]
    node = client.CoreV1Api(world.client).read_node(warm)
    assert node.spec.unschedulable is True
    reason = node.metadata.annotations["krea.ai/evicted-reason"]
    assert reason.startswith("planned swap: GPU 3 at 76 °C")
    assert reason.endswith(f"checkpoint step {step} of training/dit is complete")

    # the gang comes back on the other two nodes, from the checkpoint the swap asked for
    new_gang = wait_for(lambda: _gang(world, 1), timeout=60)
    assert warm not in new_gang
    resumed = wait_for(
        lambda: (
            _jobset(world)["metadata"]["annotations"].get(RESUMED_STEP_ANNOTATION) != "0"
            and _jobset(world)["metadata"]["annotations"].get(RESUMED_STEP_ANNOTATION)
        ),
        timeout=30,
    )
    assert int(resumed) == step
