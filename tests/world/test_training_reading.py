"""The simulated trainers read the world through the API only: with no Kueue actor (nor
its JobSet and Job controllers) running, as on the real control plane, a gang whose pods
run is started, checkpointed and stopped from the trainers' own reading: one list of the
training JobSets a tick, their pods from the shared cluster view or one list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.actor import World, WorldConfig
from krea_ops.sim.common.api import Api, ClusterView
from krea_ops.sim.common.clock import SimClock
from krea_ops.sim.machines.training import (
    RESUMED_STEP_ANNOTATION,
    TrainingActor,
    dit_jobset_manifest,
    latest_complete_checkpoint,
)

NS = "training"
JS = ("jobset.x-k8s.io", "v1alpha2", NS, "jobsets")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[LocalApiServer]:
    with LocalApiServer(tmp_path / "api") as server:
        yield server


def _pod(name: str, index: int, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "dit",
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
                "krea.ai/workload": "training",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "krea/dit:latest",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


def _setup(sim: LocalApiServer) -> tuple[Any, Any, Any]:
    """A running gang of two one-GPU pods of JobSet ``dit``, as the controllers and the
    kubelets would have left it (none of them runs here)."""
    api = sim.api_client()
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": NS}})
    custom.create_namespaced_custom_object(
        *JS, dit_jobset_manifest("dit", nodes=2, gpus_per_node=1, namespace=NS)
    )
    custom.patch_namespaced_custom_object(
        *JS, "dit", {"spec": {"suspend": False}}, _content_type="application/merge-patch+json"
    )
    for i in range(2):
        core.create_namespaced_pod(NS, _pod(f"dit-node-0-{i}", i, 1))
        core.patch_namespaced_pod_status(
            f"dit-node-0-{i}",
            NS,
            {"status": {"phase": "Running"}},
            _content_type="application/merge-patch+json",
        )
    return api, core, custom


def _reasons(core: Any) -> list[str]:
    raw = core.list_namespaced_event(NS, _preload_content=False)
    items = json.loads(raw.data).get("items") or []
    return [e["reason"] for e in sorted(items, key=lambda e: e["metadata"]["name"])]


@pytest.mark.parametrize("shared_view", [True, False], ids=["cluster-view", "own-list"])
def test_the_trainers_need_no_kueue_actor(sim: LocalApiServer, shared_view: bool) -> None:
    api, core, custom = _setup(sim)
    config = WorldConfig(
        nodes=2,
        gpus_per_node=1,
        checkpoint_interval_s=3600.0,
        exporters=False,
        prometheus=False,
        extra={"checkpoint_write_s": 0.0},
    )
    world = World(config, SimClock(1.0), api, sim.state_dir)
    if shared_view:
        world.services["cluster-view"] = ClusterView(Api(api))
    trainer = TrainingActor(world)
    assert "kueue.snapshot" not in world.services

    trainer.tick()  # the gang is up: it starts from step 0
    js = custom.get_namespaced_custom_object(*JS, "dit")
    assert js["metadata"]["annotations"][RESUMED_STEP_ANNOTATION] == "0"
    assert len(trainer.runs) == 1
    assert _reasons(core) == ["Started"]

    # a checkpoint request: written and answered at once (checkpoint_write_s 0)
    custom.patch_namespaced_custom_object(
        *JS,
        "dit",
        {"metadata": {"annotations": {"krea.ai/checkpoint-requested-at": "2030-01-01T00:00:00Z"}}},
        _content_type="application/merge-patch+json",
    )
    trainer.tick()
    notes = custom.get_namespaced_custom_object(*JS, "dit")["metadata"]["annotations"]
    assert "krea.ai/checkpoint-completed-at" in notes
    found = latest_complete_checkpoint(sim.state_dir / "checkpoints" / NS / "dit")
    assert found is not None and notes["krea.ai/checkpoint-completed-step"] == str(found[0])
    assert _reasons(core)[1:] == ["CheckpointRequested", "CheckpointSaved", "CheckpointCompleted"]

    # the gang breaks (a pod failed): the run ends; the JobSet gone, the trainer forgets it
    core.patch_namespaced_pod_status(
        "dit-node-0-1", NS, {"status": {"phase": "Failed"}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    if shared_view:
        world.services["cluster-view"].pods(fresh_after=float("inf"))  # relist now
    trainer.tick()
    assert trainer.runs == {}
    custom.delete_namespaced_custom_object(*JS, "dit")
    trainer.tick()
    assert trainer.runs == {} and trainer._answered == {}
