"""Kueue, the JobSet/Job controllers and the simulated DiT trainings, through the API.

Each world runs the cluster (nodes, kubelets, scheduler, ReplicaSets) and the Kueue
module on a simulated API server that validates every object against the real CRDs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.training import (
    RESUMED_STEP_ANNOTATION,
    checkpoint_complete,
    commit_checkpoint,
    dit_jobset_manifest,
    latest_complete_checkpoint,
    list_checkpoints,
    submit_training,
    write_shard,
)
from krea_ops.sim.standins.kueue import kueue_objects, quota_split
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for
from tests.training.dcp_fixture import write_dcp_checkpoint

KUEUE = ("kueue.x-k8s.io", "v1beta2")

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PARTS = ("cluster", "kueue")

# -- checkpoints on disk (pure) ---------------------------------------------------------


def _checkpoint(root: Path, step: int, ranks: int = 4, commit: bool = True) -> Path:
    d = root / f"step-{step}"
    d.mkdir(parents=True)
    for rank in range(ranks):
        write_shard(d, rank, step, 64)
    if commit:
        commit_checkpoint(d, step, ranks)
    return d


def test_latest_complete_checkpoint_on_hand_made_dirs(tmp_path: Path) -> None:
    assert latest_complete_checkpoint(tmp_path / "missing") is None
    assert latest_complete_checkpoint(tmp_path) is None  # empty

    done = _checkpoint(tmp_path, 200)
    _checkpoint(tmp_path, 100)
    _checkpoint(tmp_path, 300, commit=False)  # a crash mid-write: no .metadata
    (tmp_path / "step-400").mkdir()  # created, nothing written
    (tmp_path / "step-abc").mkdir()  # garbage names are ignored
    (tmp_path / "step-900.tmp").mkdir()
    (tmp_path / "latest").write_text("step-300")
    (tmp_path / "step-1000").write_text("a file, not a checkpoint directory")
    assert latest_complete_checkpoint(tmp_path) == (200, done)
    assert [(s, ok) for s, _, ok in list_checkpoints(tmp_path)] == [
        (400, False),
        (300, False),
        (200, True),
        (100, True),
    ]

    # .metadata present but a shard it lists is truncated: not complete
    broken = _checkpoint(tmp_path, 500)
    (broken / "__2_0.distcp").write_bytes(b"x")
    assert not checkpoint_complete(broken)
    assert latest_complete_checkpoint(tmp_path) == (200, done)

    # a real DCP .metadata is a pickle: it commits the checkpoint when it reads as DCP
    # Metadata (without torch, by a restricted unpickler) and its shards are all there
    real = write_dcp_checkpoint(tmp_path / "step-600")
    assert latest_complete_checkpoint(tmp_path) == (600, real)
    (real / ".metadata").write_bytes(b"\x80\x04\x95 pickled Metadata")  # garbage
    assert latest_complete_checkpoint(tmp_path) == (200, done)
    (real / ".metadata").write_bytes(b"")  # empty marker: a torn write
    assert latest_complete_checkpoint(tmp_path) == (200, done)


def test_dit_manifest_is_a_suspended_gang_for_kueue() -> None:
    js = dit_jobset_manifest("dit-x", 4, resume_from="/checkpoints/training/old/step-100")
    labels = js["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "training"
    assert labels["kueue.x-k8s.io/priority-class"] == "training"
    assert js["spec"]["suspend"] is True
    assert js["spec"]["failurePolicy"] == {"maxRestarts": 10}
    (rj,) = js["spec"]["replicatedJobs"]
    job = rj["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["backoffLimit"]) == (4, 4, 0)
    pod = job["template"]
    assert pod["metadata"]["labels"]["krea.ai/workload"] == "training"
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert "/checkpoints/training/dit-x" in c["args"]
    assert {"name": "RESUME_FROM", "value": "/checkpoints/training/old/step-100"} in c["env"]
    with pytest.raises(ValueError):
        dit_jobset_manifest("bad", 0)


# -- the world -------------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SimWorld]:
    extra = getattr(request, "param", {})
    config = WorldConfig(
        nodes=8,
        speed=extra.pop("speed", 120),
        checkpoint_interval_s=extra.pop("checkpoint_interval_s", 600.0),
        exporters=False,
        prometheus=False,
        extra=extra,
    )
    with SimWorld(config, tmp_path, parts=PARTS) as w:
        yield w
        mine = [a for a in w.actors if a.name in ("kueue", "training")]
        assert mine and all(a.errors == 0 for a in mine), [(a.name, a.errors) for a in mine]


def _custom(w: SimWorld) -> Any:
    return client.CustomObjectsApi(w.client)


def _core(w: SimWorld) -> Any:
    return client.CoreV1Api(w.client)


def _workloads(w: SimWorld, ns: str) -> list[dict[str, Any]]:
    items = _custom(w).list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]
    return list(items)


def _workload_of(w: SimWorld, ns: str, owner: str) -> dict[str, Any] | None:
    for wl in _workloads(w, ns):
        if any(r.get("name") == owner for r in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def _cond(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def _pods(w: SimWorld, ns: str, selector: str = "") -> list[dict[str, Any]]:
    raw = _core(w).list_namespaced_pod(ns, label_selector=selector, _preload_content=False)
    return list(json.loads(raw.data)["items"])


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _running(w: SimWorld, ns: str, selector: str, count: int) -> list[dict[str, Any]] | None:
    """The live pods if exactly ``count`` of them exist and all run."""
    pods = _live(_pods(w, ns, selector))
    ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def _jobset(w: SimWorld, name: str) -> dict[str, Any]:
    return dict(_custom(w).get_namespaced_custom_object(*JOBSET[:2], "training", JOBSET[2], name))


def _events(w: SimWorld, ns: str, reason: str) -> list[dict[str, Any]]:
    raw = _core(w).list_namespaced_event(ns, _preload_content=False)
    return [e for e in json.loads(raw.data)["items"] if e.get("reason") == reason]


def test_kueue_objects_validate_and_queue_status(world: SimWorld) -> None:
    custom = _custom(world)
    training, inference, burst = quota_split(world.world.config)
    assert (training, inference) == (48, 16) and burst > 0
    plural = {
        "ClusterQueue": "clusterqueues",
        "ResourceFlavor": "resourceflavors",
        "WorkloadPriorityClass": "workloadpriorityclasses",
        "Cohort": "cohorts",
    }

    def installed() -> bool:
        # (every object, the LocalQueues too: the stand-in creates them one at a time,
        # the namespaced ones after the cluster-scoped)
        for obj in kueue_objects(world.world.config):
            meta = obj["metadata"]
            try:
                if obj["kind"] == "LocalQueue":
                    custom.get_namespaced_custom_object(
                        *KUEUE, meta["namespace"], "localqueues", meta["name"]
                    )
                elif obj["kind"] in plural:
                    custom.get_cluster_custom_object(*KUEUE, plural[obj["kind"]], meta["name"])
            except ApiException:
                return False
        return True

    wait_for(installed, timeout=20)
    lq = custom.get_namespaced_custom_object(*KUEUE, "training", "localqueues", "training")
    assert lq["spec"]["clusterQueue"] == "training"

    def cq_status(name: str) -> dict[str, Any] | None:
        cq = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", name)
        return cq.get("status") if _cond(cq, "Active").get("status") == "True" else None

    status = wait_for(lambda: cq_status("inference"), timeout=20)
    assert status["pendingWorkloads"] == 0 and status["admittedWorkloads"] == 0
    assert [f["name"] for f in status["flavorsReservation"]] == ["h200", "burst"]
    assert status["flavorsUsage"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "total": "0", "borrowed": "0"}
    ]
    cq = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", "training")
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "48"

    # The server holds Kueue's rules: an invalid preemption policy is refused with a 422.
    bad = json.loads(json.dumps(cq))
    bad["metadata"] = {"name": "bad"}
    bad.pop("status", None)
    bad["spec"]["preemption"] = {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "LowerPriority"},
    }
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*KUEUE, "clusterqueues", bad)
    assert err.value.status == 422
    assert "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" in str(err.value.body)


def test_gang_is_admitted_all_or_nothing(world: SimWorld) -> None:
    api = world.client
    submit_training(api, "big", nodes=6)  # 48 GPUs: all of training's nominal quota
    wait_for(lambda: _running(world, "training", "krea.ai/training=big", 6), timeout=30)
    submit_training(api, "next", nodes=4)  # 32 more: only 16 left in the cohort

    def pending() -> dict[str, Any] | None:
        wl = _workload_of(world, "training", "next")
        reserved = _cond(wl, "QuotaReserved")
        # scheduler.go: UnsetQuotaReservationWithCondition(wl, "Pending", inadmissibleMsg)
        return wl if reserved.get("reason") == "Pending" else None

    wl = wait_for(pending, timeout=20)
    reserved = _cond(wl, "QuotaReserved")
    assert reserved["status"] == "False"
    assert reserved["message"] == (
        "couldn't assign flavors to pod set trainer: insufficient unused quota for "
        "nvidia.com/gpu in flavor h200, 16 more needed"
    )
    assert _cond(wl, "Admitted")["reason"] == "NoReservation"
    assert "admission" not in wl["status"]
    assert wl["spec"]["podSets"][0]["count"] == 4
    assert wl["spec"]["priorityClassRef"]["name"] == "training"
    assert _jobset(world, "next")["spec"]["suspend"] is True
    assert _pods(world, "training", "krea.ai/training=next") == []  # nothing of it runs
    pending_events = [
        e
        for e in _events(world, "training", "Pending")
        if e["involvedObject"]["name"] == wl["metadata"]["name"]
    ]
    assert pending_events and "16 more needed" in pending_events[0]["message"]

    def queue_counts(kind: str, *where: str) -> tuple[int, int, int] | None:
        if kind == "clusterqueues":
            obj = _custom(world).get_cluster_custom_object(*KUEUE, kind, *where)
        else:
            obj = _custom(world).get_namespaced_custom_object(*KUEUE, *where[:1], kind, *where[1:])
        st = obj.get("status") or {}
        counts = (st.get("pendingWorkloads"), st.get("reservingWorkloads"),
                  st.get("admittedWorkloads"))  # fmt: skip
        return counts if counts == (1, 1, 1) else None

    wait_for(lambda: queue_counts("clusterqueues", "training"), timeout=10)
    wait_for(lambda: queue_counts("localqueues", "training", "training"), timeout=10)
    assert _reservation(world, "training")["h200"] == ("48", "0")
    lq = _custom(world).get_namespaced_custom_object(*KUEUE, "training", "localqueues", "training")
    assert lq["status"]["flavorsUsage"] == [
        {"name": "h200", "resources": [{"name": "nvidia.com/gpu", "total": "48"}]}
    ]

    # capacity frees: the whole gang is admitted and all its pods run
    _custom(world).delete_namespaced_custom_object(*JOBSET[:2], "training", JOBSET[2], "big")

    def admitted() -> dict[str, Any] | None:
        wl = _workload_of(world, "training", "next")
        return wl if _cond(wl, "Admitted").get("status") == "True" else None

    wl = wait_for(admitted, timeout=20)
    (psa,) = wl["status"]["admission"]["podSetAssignments"]
    assert psa == {
        "name": "trainer",
        "flavors": {"nvidia.com/gpu": "h200"},
        "resourceUsage": {"nvidia.com/gpu": "32"},
        "count": 4,
    }
    running = wait_for(lambda: _running(world, "training", "krea.ai/training=next", 4), timeout=40)
    for pod in running:
        assert pod["spec"]["nodeSelector"]["krea.ai/pool"] == "h200"
        assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] in "0123"
    wait_for(
        lambda: _cond(_workload_of(world, "training", "next"), "PodsReady").get("status") == "True",
        timeout=20,
    )


def _inference_rs(replicas: int) -> dict[str, Any]:
    labels = {"app": "flux-serve", "krea.ai/workload": "inference"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "flux-serve", "namespace": "inference"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "flux-serve"}},
            "template": {
                "metadata": {
                    "labels": {
                        **labels,
                        "kueue.x-k8s.io/queue-name": "inference",
                        "kueue.x-k8s.io/priority-class": "inference",
                    }
                },
                "spec": {
                    "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                    "priorityClassName": "inference",
                    "containers": [
                        {
                            "name": "server",
                            "image": "krea/flux-serve:latest",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        },
    }


def _reservation(w: SimWorld, cq: str) -> dict[str, tuple[str, str]]:
    """flavor -> (total, borrowed) of nvidia.com/gpu in the ClusterQueue's status."""
    obj = _custom(w).get_cluster_custom_object(*KUEUE, "clusterqueues", cq)
    out = {}
    for f in (obj.get("status") or {}).get("flavorsReservation") or []:
        (r,) = f["resources"]
        out[f["name"]] = (r["total"], r["borrowed"])
    return out


def _admitted(wl: dict[str, Any] | None) -> bool:
    return _cond(wl, "Admitted").get("status") == "True"


def _flavor(wl: dict[str, Any]) -> str:
    return str(wl["status"]["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"])


class _WorkloadWatch:
    """Every version of every Workload in a namespace (evicted pod workloads are gone
    soon after: their pods are deleted and the garbage collector follows)."""

    def __init__(self, w: SimWorld, ns: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(w, ns), daemon=True)
        self._thread.start()

    def _run(self, w: SimWorld, ns: str) -> None:
        try:
            for event in self._watch.stream(
                _custom(w).list_namespaced_custom_object,
                *KUEUE,
                ns,
                "workloads",
                timeout_seconds=120,
            ):
                self.seen.append(event["object"])
        except Exception:
            pass  # the world closed under us

    def stop(self) -> None:
        self._watch.stop()


def test_training_preempts_borrowing_inference_which_moves_to_burst(world: SimWorld) -> None:
    apps: Any = client.AppsV1Api(world.client)
    seen = _WorkloadWatch(world, "inference")
    try:
        apps.create_namespaced_replica_set("inference", _inference_rs(4))

        def inference_admitted() -> list[dict[str, Any]] | None:
            wls = [w for w in _workloads(world, "inference") if _admitted(w)]
            return wls if len(wls) == 4 else None

        wls = wait_for(inference_admitted, timeout=30)
        assert all(w["spec"]["priority"] == 100 for w in wls)
        assert all(w["metadata"]["name"].startswith("pod-flux-serve-") for w in wls)
        # 16 GPUs within inference's nominal quota, 16 borrowed from idle training quota
        assert {_flavor(w) for w in wls} == {"h200"}
        wait_for(lambda: _reservation(world, "inference")["h200"] == ("32", "16"), timeout=10)
        wait_for(lambda: _running(world, "inference", "app=flux-serve", 4), timeout=30)

        submit_training(world.client, "dit", nodes=6)  # 48: its nominal, 16 lent to inference

        def evicted() -> list[dict[str, Any]]:
            return [w for w in list(seen.seen) if _cond(w, "Preempted").get("status") == "True"]

        wait_for(lambda: len({w["metadata"]["name"] for w in evicted()}) >= 2, timeout=30)
        victims = evicted()
        names = {v["metadata"]["name"] for v in victims}
        assert len(names) == 2  # the minimal set: two 8-GPU pods free the 16 borrowed GPUs
        for v in victims:
            ev, pre = _cond(v, "Evicted"), _cond(v, "Preempted")
            assert (ev["status"], ev["reason"]) == ("True", "Preempted")
            assert pre["reason"] == "InCohortReclamation"
            assert pre["message"].startswith("Preempted to accommodate a workload (UID: ")
            assert "due to reclamation within the cohort" in pre["message"]
            assert "preemptor path: /gpu/training; preemptee path: /gpu/inference" in pre["message"]
        for v in {v["metadata"]["name"]: v for v in victims}.values():  # latest versions
            assert (_cond(v, "Requeued")["status"], _cond(v, "Requeued")["reason"]) == (
                "True",
                "Preempted",
            )
            assert _cond(v, "QuotaReserved")["status"] == "False"
            assert _cond(v, "Admitted")["reason"] == "NoReservation"
            assert "admission" not in v["status"]
            assert v["status"]["schedulingStats"]["evictions"] == [
                {"reason": "Preempted", "underlyingCause": "", "count": 1}
            ]
        preempted = [
            e
            for e in _events(world, "inference", "Preempted")
            if e["involvedObject"]["kind"] == "Workload"
        ]
        assert len(preempted) >= 2

        # the training gang runs
        wait_for(lambda: _admitted(_workload_of(world, "training", "dit")), timeout=30)
        wait_for(lambda: _running(world, "training", "krea.ai/training=dit", 6), timeout=40)

        # the ReplicaSet replaced the evicted pods; Kueue admits them on the burst flavor
        def on_burst() -> list[dict[str, Any]] | None:
            wls = [
                w for w in _workloads(world, "inference") if _admitted(w) and _flavor(w) == "burst"
            ]
            return wls if len(wls) == 2 else None

        burst = wait_for(on_burst, timeout=30)
        for wl in burst:
            owner = wl["metadata"]["ownerReferences"][0]["name"]

            def ungated(owner: str = owner) -> dict[str, Any] | None:
                pod = _core(world).read_namespaced_pod(owner, "inference", _preload_content=False)
                spec: dict[str, Any] = json.loads(pod.data)["spec"]
                return None if spec.get("schedulingGates") else spec

            spec = wait_for(ungated, timeout=20)
            assert {
                "key": "virtual-kubelet.io/provider",
                "operator": "Exists",
                "effect": "NoSchedule",
            } in spec["tolerations"]
            assert spec["nodeSelector"]["type"] == "virtual-kubelet"
        wait_for(lambda: _reservation(world, "inference")["burst"] == ("16", "0"), timeout=10)
        assert _reservation(world, "inference")["h200"] == ("16", "0")
    finally:
        seen.stop()


@pytest.mark.parametrize(
    "world",
    [{"speed": 240, "checkpoint_interval_s": 240.0, "checkpoint_write_s": 480.0}],
    indirect=True,
)
def test_pod_failure_restarts_jobset_resuming_from_newest_complete_checkpoint(
    world: SimWorld,
) -> None:
    submit_training(world.client, "dit", nodes=2)
    root = world.world.state_dir / "checkpoints" / "training" / "dit"
    complete = wait_for(lambda: latest_complete_checkpoint(root), timeout=40)

    def writing() -> tuple[int, Path] | None:
        latest = latest_complete_checkpoint(root)
        for step, d, ok in list_checkpoints(root):
            if not ok and latest and step > latest[0]:
                return step, d
        return None

    incomplete_step, incomplete_dir = wait_for(writing, timeout=40)
    complete = latest_complete_checkpoint(root)
    assert complete is not None and complete[0] < incomplete_step
    assert _jobset(world, "dit")["metadata"]["annotations"][RESUMED_STEP_ANNOTATION] == "0"

    # rank 1's process crashes mid-write
    (victim,) = _live(
        _pods(world, "training", "krea.ai/training=dit,batch.kubernetes.io/job-completion-index=1")
    )
    _core(world).patch_namespaced_pod_status(
        victim["metadata"]["name"],
        "training",
        {"status": {"phase": "Failed", "reason": "Error", "message": "exit code 1"}},
    )

    def restarted() -> dict[str, Any] | None:
        js = _jobset(world, "dit")
        return js if (js.get("status") or {}).get("restarts") == 1 else None

    js = wait_for(restarted, timeout=30)
    assert js["status"]["restartsCountTowardsMax"] == 1

    def resumed() -> str | None:
        value = _jobset(world, "dit")["metadata"]["annotations"].get(RESUMED_STEP_ANNOTATION)
        return value if value not in (None, "0") else None

    step = wait_for(resumed, timeout=40)
    assert int(step) == complete[0] != incomplete_step  # the newest COMPLETE one
    assert not (incomplete_dir / ".metadata").exists() or int(step) != incomplete_step
    pods = _live(_pods(world, "training", "krea.ai/training=dit"))
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in pods} == {"1"}
    batch: Any = client.BatchV1Api(world.client)
    raw = batch.list_namespaced_job("training", _preload_content=False)
    jobs = json.loads(raw.data)["items"]
    assert [j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for j in jobs] == ["1"]
    messages = [e["message"] for e in _events(world, "training", "CheckpointIncomplete")]
    assert any(f"step-{incomplete_step} left incomplete" in m for m in messages)
    assert any(f"step-{step}" in e["message"] for e in _events(world, "training", "Resumed"))
    # the workload kept its quota through the restart
    wl = _workload_of(world, "training", "dit")
    assert _cond(wl, "Admitted")["status"] == "True" and not _cond(wl, "Evicted")


def test_queued_batch_job_runs_when_admitted_and_its_workload_finishes(world: SimWorld) -> None:
    batch: Any = client.BatchV1Api(world.client)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "eval",
            "namespace": "training",
            "labels": {"kueue.x-k8s.io/queue-name": "training"},
        },
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {"sim.krea.ai/run-seconds": "60"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "eval",
                            "image": "krea/dit-eval:latest",
                            "resources": {"limits": {"nvidia.com/gpu": "4"}},
                        }
                    ],
                },
            },
        },
    }
    batch.create_namespaced_job("training", job)

    def finished() -> dict[str, Any] | None:
        wl = _workload_of(world, "training", "eval")
        return wl if _cond(wl, "Finished").get("status") == "True" else None

    wl = wait_for(finished, timeout=40)
    assert wl["metadata"]["name"].startswith("job-eval-")
    assert _cond(wl, "Finished")["reason"] == "Succeeded"
    assert wl["spec"]["priority"] == 0 and "priorityClassRef" not in wl["spec"]
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {
        "nvidia.com/gpu": "8"
    }
    done = json.loads(batch.read_namespaced_job("eval", "training", _preload_content=False).data)
    st = done["status"]
    assert (st["succeeded"], st["completedIndexes"]) == (2, "0-1")
    assert _cond(done, "Complete")["reason"] == "CompletionsReached"
    assert _cond(done, "Suspended").get("status") != "True"
    assert done["spec"]["template"]["spec"]["nodeSelector"] == {"krea.ai/pool": "h200"}
    pods = _pods(world, "training", "batch.kubernetes.io/job-name=eval")
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                  for p in pods) == ["0", "1"]  # fmt: skip
    # a finished workload holds no quota
    wait_for(lambda: _reservation(world, "training")["h200"] == ("0", "0"), timeout=10)
