"""The simulated trainers' logs, read with kubectl as an operator would.

The lines are torchtitan's (``Training starts at step N.``, ``Loading the checkpoint at
step N.``, the metrics line, ``Finished saving the checkpoint (or staging if async is
enabled)in X seconds.``) and PyTorch's on a crash (``ProcessGroupNCCL.cpp``'s watchdog
timeout, c10's ``CUDA error: an illegal memory access was encountered``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.sim.common import podlogs
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.logs import TrainerLogs
from krea_ops.sim.machines.training import RESUMED_STEP_ANNOTATION, submit_training
from krea_ops.sim.world import SimWorld
from tests.conftest import KUBECTL, Kubectl, wait_for

STEP = re.compile(r"^\[rank0\]:\[titan\] \S+ \S+ - root - INFO - step: +(\d+)  loss: +[\d.]+  ")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z \[rank0\]:")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SimWorld]:
    config = WorldConfig(
        nodes=4,
        speed=240,
        checkpoint_interval_s=240.0,
        exporters=False,
        prometheus=False,
        extra={"checkpoint_write_s": 30.0},
    )
    with SimWorld(config, tmp_path, parts=("cluster", "kueue")) as w:
        yield w
        training = [a for a in w.actors if a.name == "training"]
        assert training and training[0].errors == 0


def _pods(w: SimWorld, selector: str) -> list[dict[str, Any]]:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        "training", label_selector=selector, _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(raw.data)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _rank0(w: SimWorld, attempt: str) -> str | None:
    pods = _pods(
        w,
        "krea.ai/training=dit,batch.kubernetes.io/job-completion-index=0,"
        f"jobset.sigs.k8s.io/restart-attempt={attempt}",
    )
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return running[0]["metadata"]["name"] if running else None


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_trainer_logs_with_kubectl(world: SimWorld, tmp_path: Path) -> None:
    kubectl = Kubectl(world.kubeconfig, tmp_path / "home")
    submit_training(world.client, "dit", nodes=2)
    first = wait_for(lambda: _rank0(world, "0"), timeout=60)

    def logs(*args: str) -> str:
        return kubectl("logs", "-n", "training", *args).stdout

    def saved() -> str | None:
        out = logs(first)
        return out if "Finished saving the checkpoint" in out else None

    out = wait_for(saved, timeout=60)
    assert "torch/distributed/run.py:792] Setting OMP_NUM_THREADS" in out
    assert "[rank0]:[titan] " in out and "Training starts at step 1." in out
    steps = [int(m.group(1)) for line in out.splitlines() if (m := STEP.match(line))]
    assert steps and steps == sorted(steps) and all(s % 10 == 0 for s in steps)
    assert "Saving the checkpoint (or staging if async is enabled)." in out
    assert "(or staging if async is enabled)in 30.00 seconds." in out

    assert len(logs(first, "--tail=2").splitlines()) == 2
    stamped = logs(first, "--timestamps", "--tail=5").splitlines()
    assert len(stamped) == 5 and all(STAMP.match(x) for x in stamped)
    since = stamped[-1].split(" ", 1)[0]
    later = logs(first, f"--since-time={since}").splitlines()
    assert later and len(later) < len(logs(first).splitlines())
    assert logs(first, "-c", "trainer", "--tail=1").strip()
    assert logs(first, "--since=1h").splitlines()[0] == out.splitlines()[0]
    gone = kubectl("logs", "-n", "training", first, "--previous", check=False)
    assert f'previous terminated container "trainer" in pod "{first}" not found' in gone.stderr

    # -f streams new step lines as the trainer prints them.
    proc = kubectl.popen("logs", "-n", "training", "-f", "--tail=1", first)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        wait_for(lambda: sum(1 for x in got if STEP.match(x)) >= 2, timeout=60)
    finally:
        proc.kill()
        proc.wait()

    # Rank 1 crashes; the gang restarts and loads the newest complete checkpoint.
    (victim,) = _pods(world, "krea.ai/training=dit,batch.kubernetes.io/job-completion-index=1")
    client.CoreV1Api(world.client).patch_namespaced_pod_status(
        victim["metadata"]["name"],
        "training",
        {"status": {"phase": "Failed", "reason": "Error", "message": "exit code 1"}},
    )

    def resumed() -> str | None:
        custom: Any = client.CustomObjectsApi(world.client)
        js = custom.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "training", "jobsets", "dit"
        )
        value = js["metadata"]["annotations"].get(RESUMED_STEP_ANNOTATION)
        return value if value not in (None, "0") else None

    step = wait_for(resumed, timeout=60)
    second = wait_for(lambda: _rank0(world, "1"), timeout=60)
    wait_for(lambda: f"Loading the checkpoint at step {step}." in logs(second), timeout=60)
    assert f"Training starts at step {int(step) + 1}." in logs(second)


class _FakeWorld:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.clock = type("C", (), {"wall": staticmethod(lambda: 1_800_000_000.0)})()


def _trainer_pod(uid: str, index: int, phase: str, message: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"dit-trainer-0-{index}",
            "labels": {
                "batch.kubernetes.io/job-completion-index": str(index),
                "jobset.sigs.k8s.io/restart-attempt": "0",
            },
        },
        "spec": {
            "containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
        },
        "status": {
            "phase": phase,
            "message": message,
            "containerStatuses": [
                {
                    "name": "trainer",
                    "image": "krea/dit:latest",
                    "containerID": f"containerd://{uid}",
                    "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}},
                }
            ],
        },
    }


def test_a_gpu_fault_prints_the_cuda_error_and_the_peers_time_out(tmp_path: Path) -> None:
    logs = TrainerLogs(_FakeWorld(tmp_path), rate=1.0, write_s=60.0)  # type: ignore[arg-type]
    js = {"metadata": {"uid": "js1", "name": "dit"}}
    failed = _trainer_pod(
        "p1", 1, "Failed", "Node gpu-03 failed (gpu-hbm): the kubelet stopped and the pod's "
        "containers were lost",
    )
    peer = _trainer_pod("p0", 0, "Running")
    logs.observe(js, [peer, failed], None, 0.0)
    store = podlogs.for_state(tmp_path)
    mine = [x.text for x in store.read("containerd://p1")]
    assert any(x.endswith(" RuntimeError: CUDA error: an illegal memory access was encountered")
               for x in mine)
    assert any("ProcessGroupNCCL.cpp" in x and x.startswith("[rank") for x in mine)
    theirs = [x.text for x in store.read("containerd://p0")]
    watchdog = [x for x in theirs if "Watchdog caught collective operation timeout" in x]
    assert len(watchdog) == 8  # one per local rank
    assert re.match(
        r"^\[rank3\]:\[E\d{4} [\d:.]+ \d+ ProcessGroupNCCL\.cpp:616\] \[Rank 3\] Watchdog caught "
        r"collective operation timeout: WorkNCCL\(SeqNum=\d+, OpType=ALLREDUCE, NumelIn=1, "
        r"NumelOut=1, Timeout\(ms\)=600000\) ran for 6000\d\d milliseconds before timing out\.$",
        watchdog[3],
    )
    assert any("To avoid data inconsistency, we are taking the entire process down." in x
               for x in theirs)
    # Seen once: the next tick does not print it again.
    logs.observe(js, [peer, failed], None, 1.0)
    assert len([x for x in store.read("containerd://p0") if "Watchdog" in x.text]) == 8
    podlogs.forget(tmp_path)
