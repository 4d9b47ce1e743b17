"""Job and JobSet failure handling through the official client, against the simulated
kube-controller-manager Job controller and JobSet controller.

What the real controllers do, and where it is written:

- pkg/controller/job/job_controller.go: failed pods count against ``backoffLimit``; the
  Job gets ``FailureTarget`` at once and ``Failed`` (same reason and message) once none of
  its pods is terminating; ``BackoffLimitExceeded``: "Job has reached the specified
  backoff limit".
- pkg/controller/job/pod_failure_policy.go: the first matching rule wins; ``FailJob``:
  reason ``PodFailurePolicy``, "Container <c> for pod <ns>/<pod> failed with exit code <n>
  matching FailJob rule at index <i>" or "Pod <ns>/<pod> has condition <type> matching
  FailJob rule at index <i>"; ``Ignore``: the pod is not counted in ``status.failed``;
  ``Count``: counted as by default.
- kubernetes-sigs/jobset pkg/controllers/failure_policy.go and pkg/constants: a failed
  child Job restarts the JobSet (``RestartJobSet``) until ``restartsCountTowardsMax``
  reaches ``maxRestarts``, then ``Failed``/``ReachedMaxRestarts`` "jobset failed due to
  reaching max number of restarts (first failed job: <job>)"; ``FailJobSet``:
  ``FailJobSetFailurePolicyAction``; ``RestartJobSetAndIgnoreMaxRestarts`` restarts
  without counting towards the maximum.
- Suspending a JobSet (what Kueue does when it preempts one) suspends its child Jobs, and
  the Job controller deletes their pods after removing their tracking finalizer: the pods
  end without ``DisruptionTarget`` and are not counted as failed, no Job fails, and the
  JobSet counts no restart (jobset ``suspendJobs``; job controller ``deleteJobPods``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.kubelet import EXIT_CODE_ANNOTATION, RUN_SECONDS_ANNOTATION
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for

NS = "default"
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    config = WorldConfig(
        nodes=2,
        speed=240,
        failure_multiplier=0.0,
        exporters=False,
        prometheus=False,
    )
    with SimWorld(config, tmp_path_factory.mktemp("world"), parts=("cluster", "kueue")) as w:
        yield w


def _batch(w: SimWorld) -> Any:
    return client.BatchV1Api(w.client)


def _core(w: SimWorld) -> Any:
    return client.CoreV1Api(w.client)


def _template(run_s: int, exit_code: int = 0) -> dict[str, Any]:
    return {
        "metadata": {
            "annotations": {
                RUN_SECONDS_ANNOTATION: str(run_s),
                EXIT_CODE_ANNOTATION: str(exit_code),
            }
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        },
    }


def _job(name: str, backoff: int, template: dict[str, Any], policy: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"backoffLimit": backoff, "template": template}
    if policy is not None:
        spec["podFailurePolicy"] = {"rules": policy}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _read_job(w: SimWorld, name: str) -> dict[str, Any]:
    raw = _batch(w).read_namespaced_job(name, NS, _preload_content=False)
    return dict(json.loads(raw.data))


def _cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def _failed_job(w: SimWorld, name: str) -> dict[str, Any] | None:
    job = _read_job(w, name)
    return job if _cond(job, "Failed").get("status") == "True" else None


def _pods(w: SimWorld, selector: str) -> list[dict[str, Any]]:
    raw = _core(w).list_namespaced_pod(NS, label_selector=selector, _preload_content=False)
    return list(json.loads(raw.data)["items"])


def _job_pods(w: SimWorld, job: str) -> list[dict[str, Any]]:
    return _pods(w, f"batch.kubernetes.io/job-name={job}")


def _events(w: SimWorld, name: str, reason: str) -> list[dict[str, Any]]:
    raw = _core(w).list_namespaced_event(NS, _preload_content=False)
    return [
        e
        for e in json.loads(raw.data)["items"]
        if e.get("reason") == reason and e["involvedObject"]["name"] == name
    ]


def _running(w: SimWorld, job: str) -> dict[str, Any] | None:
    live = [p for p in _job_pods(w, job) if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 and live[0]["status"].get("phase") == "Running" else None


def _evict(w: SimWorld, pod: dict[str, Any]) -> None:
    name = pod["metadata"]["name"]
    _core(w).create_namespaced_pod_eviction(
        name, NS, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    )


# -- Jobs ------------------------------------------------------------------------------


def test_failed_pods_count_against_the_backoff_limit(world: SimWorld) -> None:
    _batch(world).create_namespaced_job(NS, _job("flaky", 1, _template(20, exit_code=3)))
    job = wait_for(lambda: _failed_job(world, "flaky"), timeout=60)
    message = "Job has reached the specified backoff limit"
    failed = _cond(job, "Failed")
    assert (failed["reason"], failed["message"]) == ("BackoffLimitExceeded", message)
    target = _cond(job, "FailureTarget")
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "BackoffLimitExceeded",
        message,
    )
    st = job["status"]
    assert st["failed"] == 2  # one retry allowed: the second failure fails the Job
    assert st.get("uncountedTerminatedPods") in (None, {})
    assert st["active"] == 0 and st.get("terminating", 0) == 0
    pods = _job_pods(world, "flaky")
    assert len(pods) == 2 and all(p["status"]["phase"] == "Failed" for p in pods)
    # counted: the Job controller let them go
    assert all(not p["metadata"].get("finalizers") for p in pods)
    assert [e["message"] for e in _events(world, "flaky", "BackoffLimitExceeded")] == [message]


def test_pod_failure_policy_fail_job_count_and_ignore(world: SimWorld) -> None:
    batch = _batch(world)
    ignore_disruption = {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    fatal = {
        "action": "FailJob",
        "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
    }
    batch.create_namespaced_job(
        NS, _job("fatal", 6, _template(20, exit_code=42), [ignore_disruption, fatal])
    )
    counted = {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [42]}}
    batch.create_namespaced_job(NS, _job("counted", 0, _template(20, exit_code=3), [counted]))
    batch.create_namespaced_job(NS, _job("ignored", 0, _template(100000), [ignore_disruption]))
    on_condition = {
        "action": "FailJob",
        "onPodConditions": [{"type": "DisruptionTarget"}],  # status defaults to True
    }
    batch.create_namespaced_job(NS, _job("evicted", 6, _template(100000), [on_condition]))
    assert _read_job(world, "evicted")["spec"]["podFailurePolicy"]["rules"][0][
        "onPodConditions"
    ] == [{"type": "DisruptionTarget", "status": "True"}]
    assert _read_job(world, "evicted")["spec"]["podReplacementPolicy"] == "Failed"

    # FailJob on an exit code, at the rule's index, whatever the backoff limit
    job = wait_for(lambda: _failed_job(world, "fatal"), timeout=60)
    (pod,) = _job_pods(world, "fatal")
    assert _cond(job, "Failed")["reason"] == "PodFailurePolicy"
    assert _cond(job, "Failed")["message"] == (
        f"Container main for pod {NS}/{pod['metadata']['name']} failed with exit code 42 "
        "matching FailJob rule at index 1"
    )
    assert _cond(job, "FailureTarget")["message"] == _cond(job, "Failed")["message"]
    assert job["status"]["failed"] == 1

    # Count: counted, so backoffLimit 0 fails the Job on the first failure
    job = wait_for(lambda: _failed_job(world, "counted"), timeout=60)
    assert _cond(job, "Failed")["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 1

    # Ignore: an evicted pod is replaced and not counted, though backoffLimit is 0
    first = wait_for(lambda: _running(world, "ignored"), timeout=60)
    _evict(world, first)
    second = wait_for(
        lambda: (p := _running(world, "ignored")) and p["metadata"]["uid"] != first["metadata"][
            "uid"
        ] and p,
        timeout=60,
    )  # fmt: skip
    assert second["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    job = _read_job(world, "ignored")
    assert not _cond(job, "Failed") and not _cond(job, "FailureTarget")
    assert job["status"].get("failed", 0) == 0
    assert job["status"]["active"] == 1

    # FailJob on the condition the Eviction API sets
    pod = wait_for(lambda: _running(world, "evicted"), timeout=60)
    _evict(world, pod)
    job = wait_for(lambda: _failed_job(world, "evicted"), timeout=60)
    assert (_cond(job, "Failed")["reason"], _cond(job, "Failed")["message"]) == (
        "PodFailurePolicy",
        f"Pod {NS}/{pod['metadata']['name']} has condition DisruptionTarget matching FailJob "
        "rule at index 0",
    )
    assert job["status"]["failed"] == 1


# -- JobSets ---------------------------------------------------------------------------


def _jobset(
    name: str, template: dict[str, Any], failure_policy: Any, job_policy: Any = None
) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"parallelism": 1, "completions": 1, "backoffLimit": 0}
    job_spec["template"] = template
    if job_policy is not None:
        job_spec["podFailurePolicy"] = {"rules": job_policy}
    spec: dict[str, Any] = {
        "replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": job_spec}}]
    }
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    return {
        "apiVersion": "/".join(JOBSET),
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": spec,
    }


def _custom(w: SimWorld) -> Any:
    return client.CustomObjectsApi(w.client)


def _create_jobset(w: SimWorld, body: dict[str, Any]) -> None:
    _custom(w).create_namespaced_custom_object(*JOBSET, NS, "jobsets", body)


def _read_jobset(w: SimWorld, name: str) -> dict[str, Any]:
    return dict(_custom(w).get_namespaced_custom_object(*JOBSET, NS, "jobsets", name))


def _failed_jobset(w: SimWorld, name: str) -> dict[str, Any] | None:
    js = _read_jobset(w, name)
    return js if _cond(js, "Failed").get("status") == "True" else None


def test_jobset_failure_policy(world: SimWorld) -> None:
    crash = _template(10, exit_code=1)
    _create_jobset(world, _jobset("capped", crash, {"maxRestarts": 1}))
    fatal_exit = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
    fatal = {
        "maxRestarts": 5,
        "rules": [{"name": "fatal", "action": "FailJobSet", "onJobFailureReasons": [
            "PodFailurePolicy"]}],
    }  # fmt: skip
    _create_jobset(world, _jobset("fatal-js", _template(10, 42), fatal, fatal_exit))
    free = {
        "maxRestarts": 0,
        "rules": [{"name": "disruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
                   "onJobFailureReasons": ["PodFailurePolicy"]}],
    }  # fmt: skip
    _create_jobset(world, _jobset("free", _template(10, 42), free, fatal_exit))

    # RestartJobSet until restartsCountTowardsMax reaches maxRestarts, then Failed
    js = wait_for(lambda: _failed_jobset(world, "capped"), timeout=90)
    failed = _cond(js, "Failed")
    assert (failed["reason"], failed["message"]) == (
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: capped-worker-0)",
    )
    st = js["status"]
    assert (st["restarts"], st["restartsCountTowardsMax"], st["terminalState"]) == (1, 1, "Failed")
    restarting = _cond(js, "RestartingJobSet")
    assert (restarting["status"], restarting["reason"]) == ("False", "JobSetFailed")
    (restart,) = _events(world, "capped", "RestartJobSetFailurePolicyAction")
    assert restart["message"] == (
        "applying RestartJobSet failure policy action (first failed job: capped-worker-0)"
    )
    assert [e["type"] for e in _events(world, "capped", "ReachedMaxRestarts")] == ["Warning"]
    job = _read_job(world, "capped-worker-0")  # the second attempt's Job, failed
    assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    assert _cond(job, "Failed")["reason"] == "BackoffLimitExceeded"

    # FailJobSet on the child Job's failure reason: no restart at all
    js = wait_for(lambda: _failed_jobset(world, "fatal-js"), timeout=60)
    assert (_cond(js, "Failed")["reason"], _cond(js, "Failed")["message"]) == (
        "FailJobSetFailurePolicyAction",
        "applying FailJobSet failure policy action (first failed job: fatal-js-worker-0)",
    )
    assert js["status"]["restarts"] == 0

    # RestartJobSetAndIgnoreMaxRestarts: restarts past maxRestarts 0, none counted
    js = wait_for(
        lambda: (j := _read_jobset(world, "free"))["status"].get("restarts", 0) >= 2 and j,
        timeout=90,
    )
    assert js["status"].get("restartsCountTowardsMax", 0) == 0
    assert not _cond(js, "Failed")
    assert _cond(js, "RestartingJobSet")["reason"] == "FailurePolicy_disruption"
    _custom(world).delete_namespaced_custom_object(*JOBSET, NS, "jobsets", "free")


def test_suspending_a_jobset_stops_its_pods_without_a_restart(world: SimWorld) -> None:
    # no failure policy: a single failed child Job would fail this JobSet outright
    _create_jobset(world, _jobset("preempted", _template(100000), None))
    selector = "jobset.sigs.k8s.io/jobset-name=preempted"

    def running() -> dict[str, Any] | None:
        pods = [p for p in _pods(world, selector) if not p["metadata"].get("deletionTimestamp")]
        ok = len(pods) == 1 and pods[0]["status"].get("phase") == "Running"
        return pods[0] if ok else None

    first = wait_for(running, timeout=60)
    # what Kueue does when it preempts the JobSet's workload
    _custom(world).patch_namespaced_custom_object(
        *JOBSET, NS, "jobsets", "preempted", {"spec": {"suspend": True}}
    )
    wait_for(lambda: not _pods(world, selector), timeout=60)
    js = wait_for(
        lambda: (j := _read_jobset(world, "preempted")) and _cond(j, "Suspended").get("status")
        == "True" and j,
        timeout=30,
    )  # fmt: skip
    assert _cond(js, "Suspended")["reason"] == "SuspendedJobs"
    assert js["status"]["restarts"] == 0 and not _cond(js, "Failed")
    job = _read_job(world, "preempted-worker-0")
    assert job["spec"]["suspend"] is True
    assert _cond(job, "Suspended")["reason"] == "JobSuspended"
    assert job["status"].get("failed", 0) == 0 and not _cond(job, "Failed")

    _custom(world).patch_namespaced_custom_object(
        *JOBSET, NS, "jobsets", "preempted", {"spec": {"suspend": False}}
    )
    second = wait_for(running, timeout=60)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"
    js = _read_jobset(world, "preempted")
    assert js["status"]["restarts"] == 0 and not _cond(js, "Failed")
