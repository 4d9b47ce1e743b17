"""A disrupted gang restarts as a whole, as on a real cluster.

``kubectl drain`` evicts a node's pods through the Eviction API, which marks each with the
``DisruptionTarget`` condition (pkg/registry/core/pod/storage/eviction.go). The Job
controller (pkg/controller/job/job_controller.go) counts a pod being deleted as failed
when its Job has no pod failure policy; a training's Job has ``backoffLimit: 0``, so it
fails (``BackoffLimitExceeded``), and the JobSet controller (kubernetes-sigs/jobset
pkg/controllers/failure_policy.go) restarts the JobSet: every child Job deleted and
created again with ``jobset.sigs.k8s.io/restart-attempt`` + 1, ``status.restarts`` + 1.
The new pods cannot go to the cordoned node, and the trainer resumes from its newest
complete checkpoint.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.training import (
    RESUMED_STEP_ANNOTATION,
    latest_complete_checkpoint,
    list_checkpoints,
    submit_training,
)
from krea_ops.sim.world import SimWorld
from tests.conftest import KUBECTL, Kubectl, wait_for

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    config = WorldConfig(
        nodes=5,  # a gang of 4 and one node to take the drained pod's place
        speed=120,
        failure_multiplier=0.0,
        checkpoint_interval_s=240.0,
        exporters=False,
        prometheus=False,
        # a checkpoint takes 8 wall seconds to write: the drain lands in one
        extra={"checkpoint_write_s": 960.0, "training_quota_fraction": 0.8},
    )
    with SimWorld(config, tmp_path / "world", parts=("cluster", "kueue")) as w:
        yield w


class PodRecorder:
    """Every version of the training's pods a watch delivered, last one kept per pod."""

    def __init__(self, w: SimWorld, selector: str) -> None:
        self.last: dict[str, dict[str, Any]] = {}
        self._stopped = threading.Event()
        self._watch = watch.Watch()
        core = client.CoreV1Api(w.client)
        self._thread = threading.Thread(
            target=self._run, args=(core, selector), name="pod-recorder", daemon=True
        )
        self._thread.start()

    def _run(self, core: Any, selector: str) -> None:
        try:
            for event in self._watch.stream(
                core.list_namespaced_pod, "training", label_selector=selector, timeout_seconds=120
            ):
                obj = event["raw_object"]
                self.last[obj["metadata"]["name"]] = obj
        except Exception:  # the world going away under an open watch
            if not self._stopped.is_set():
                raise

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()


def _jobset(w: SimWorld, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(w.client)
    return dict(custom.get_namespaced_custom_object(*JOBSET[:2], "training", JOBSET[2], name))


def _pods(w: SimWorld, selector: str) -> list[dict[str, Any]]:
    raw = client.CoreV1Api(w.client).list_namespaced_pod(
        "training", label_selector=selector, _preload_content=False
    )
    return list(json.loads(raw.data)["items"])


def _running_gang(w: SimWorld, attempt: str) -> list[dict[str, Any]] | None:
    pods = [
        p
        for p in _pods(w, f"krea.ai/training=dit,jobset.sigs.k8s.io/restart-attempt={attempt}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    ok = len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def _events(w: SimWorld, reason: str) -> list[dict[str, Any]]:
    raw = client.CoreV1Api(w.client).list_namespaced_event("training", _preload_content=False)
    return [e for e in json.loads(raw.data)["items"] if e.get("reason") == reason]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_draining_a_node_restarts_the_gang_once_from_the_newest_checkpoint(
    world: SimWorld, tmp_path: Path
) -> None:
    kubectl = Kubectl(world.kubeconfig, tmp_path / "home")
    recorder = PodRecorder(world, "krea.ai/training=dit")
    try:
        submit_training(world.client, "dit", nodes=4, max_restarts=3)
        gang = wait_for(lambda: _running_gang(world, "0"), timeout=40)
        kubectl("get", "nodes")  # discovery cached: the drain below starts at once
        root = world.world.state_dir / "checkpoints" / "training" / "dit"
        complete = wait_for(lambda: latest_complete_checkpoint(root), timeout=40)

        def writing() -> int | None:
            newest = latest_complete_checkpoint(root)
            for step, _, ok in list_checkpoints(root):
                if not ok and newest and step > newest[0]:
                    return step
            return None

        incomplete = wait_for(writing, timeout=20)
        complete = latest_complete_checkpoint(root)
        assert complete is not None

        (victim,) = [
            p
            for p in gang
            if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
        ]
        node = victim["spec"]["nodeName"]
        out = kubectl(
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
            timeout=150,
        )
        assert f"evicting pod training/{victim['metadata']['name']}" in out.stdout + out.stderr
        assert f"node/{node} drained" in out.stdout

        # the whole gang comes back, elsewhere than the cordoned node
        new_gang = wait_for(lambda: _running_gang(world, "1"), timeout=60)
        assert node not in {p["spec"]["nodeName"] for p in new_gang}
        js = _jobset(world, "dit")
        assert js["status"]["restarts"] == 1
        assert js["status"]["restartsCountTowardsMax"] == 1
        assert not any(c["type"] == "Failed" for c in js["status"].get("conditions") or [])
        # the old attempt is gone: all four pods were replaced, not just the evicted one
        assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
                for p in _pods(world, "krea.ai/training=dit")} == {"1"}  # fmt: skip
        old_names = {p["metadata"]["name"] for p in gang}
        assert not old_names & {p["metadata"]["name"] for p in new_gang}

        # the evicted pod carried the Eviction API's condition
        evicted = recorder.last[victim["metadata"]["name"]]
        (cond,) = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "True",
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
        )
        # the others were deleted by their Job controller, without that condition
        others = [recorder.last[n] for n in old_names - {victim["metadata"]["name"]}]
        assert others and all(
            not any(c["type"] == "DisruptionTarget" for c in p["status"].get("conditions") or [])
            for p in others
        )

        # why: the Job failed, and the JobSet restarted on it
        (failed,) = _events(world, "BackoffLimitExceeded")
        assert failed["message"] == "Job has reached the specified backoff limit"
        assert failed["involvedObject"]["name"] == "dit-trainer-0"
        (restart,) = _events(world, "RestartJobSetFailurePolicyAction")
        assert restart["message"] == (
            "applying RestartJobSet failure policy action (first failed job: dit-trainer-0)"
        )

        # the trainer resumed from the newest COMPLETE checkpoint, not the one the drain cut
        def resumed() -> int | None:
            value = _jobset(world, "dit")["metadata"]["annotations"].get(RESUMED_STEP_ANNOTATION)
            return int(value) if value not in (None, "0") else None

        step = wait_for(resumed, timeout=30)
        # nothing is written between the gang's break and its resume, and the new run's
        # first checkpoint is seconds away: what is newest on disk now is what it found
        newest = latest_complete_checkpoint(root)
        assert newest is not None and step == newest[0] >= complete[0]
        # the drain cut the checkpoint being written: left without .metadata, not used
        (cut,) = _events(world, "CheckpointIncomplete")
        assert f"step-{incomplete} left incomplete" in cut["message"]
        assert step == complete[0] < incomplete
        assert not (root / f"step-{incomplete}" / ".metadata").exists()
        assert any(f"step-{step}" in e["message"] for e in _events(world, "Resumed"))
        assert _jobset(world, "dit")["status"]["restarts"] == 1  # once, not once per pod
    finally:
        recorder.stop()
