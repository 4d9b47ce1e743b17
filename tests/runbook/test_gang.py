"""``nodes evict`` on a node with a rank of a training gang: the gang's pods are evicted
first, in a step of their own; the plan says what the JobSet will do (restart the whole
gang at once from its newest complete checkpoint, named when it can be read; fail; or,
without a disruption policy, leave the other ranks hanging until the NCCL timeout, which
refuses the plan unless --force). Against the simulated API server with JobSets as
clients make them, and once against the simulated world's real Job and JobSet
controllers: the gang of a run launched by ``train launch`` restarts once, at once,
without using up ``maxRestarts``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.execute import execute
from krea_ops.runbook.nodes import gang_fate, plan_evict
from krea_ops.runbook.plan import FindingSeverity, StepKind
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.world import SimWorld
from krea_ops.training.checkpoints import inspect_checkpoint
from krea_ops.training.manifests import TrainingSpec, training_jobset
from tests.conftest import wait_for
from tests.kube.conftest import create
from tests.runbook.conftest import cluster, fleet, pod_names, pod_on, sim
from tests.runbook.test_nodes import assert_plan_was_run
from tests.training.dcp_fixture import write_dcp_checkpoint

__all__ = ["cluster", "sim"]

BAD = "gpu-node-001"
NS = "training"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"


def jobset(cluster: Cluster, name: str, **spec_options: Any) -> dict[str, Any]:
    """A JobSet as ``train launch`` makes it (``spec_options``: TrainingSpec's)."""
    spec = TrainingSpec(name, 2, "krea/dit:1.0", namespace=NS, **spec_options)
    return create(cluster, JOBSETS, training_jobset(spec, launched_by="someone"))


def foreign_jobset_body(
    name: str, *, backoff: int, policy: Any, replicas: int = 1
) -> dict[str, Any]:
    """A JobSet made by someone else: one replicated job of ``replicas`` Jobs,
    ``backoffLimit`` ``backoff``, no podFailurePolicy, ``failurePolicy`` ``policy``
    (None: none)."""
    template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "their/trainer:2"}],
        }
    }
    job = {"parallelism": 2, "completions": 2, "backoffLimit": backoff, "template": template}
    spec: dict[str, Any] = {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                                "template": {"spec": job}}]}  # fmt: skip
    if policy is not None:
        spec["failurePolicy"] = policy
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def foreign_jobset(
    cluster: Cluster, name: str, *, backoff: int, policy: Any, replicas: int = 1
) -> None:
    create(cluster, JOBSETS, foreign_jobset_body(name, backoff=backoff, policy=policy,
                                                 replicas=replicas))  # fmt: skip


def rank(cluster: Cluster, node: str, jobset_name: str, rjob: str = "trainer") -> None:
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset_name,
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
    }
    # its Job is one of ours, not the JobSet controller's (which, where one runs, makes
    # Jobs of its own with pods that wait unscheduled): the plan reads the JobSet
    pod_on(cluster, node, f"{jobset_name}-{rjob}-0-1-abcde", namespace=NS, labels=labels,
           owned_by=("Job", f"{jobset_name}-{rjob}-by-hand"))  # fmt: skip


def gang_messages(plan: Any) -> dict[str, str]:
    return {f.objects[0]: f.message for f in plan.findings if f.kind == "gang" and f.objects}


def test_a_gang_of_ours_is_evicted_first_and_restarts_from_the_checkpoint_named(
    cluster: Cluster, tmp_path: Path
) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    fleet(cluster, 10)
    jobset(cluster, "dit")
    root = tmp_path / "mnt"
    write_dcp_checkpoint(root / NS / "dit" / "step-100")
    write_dcp_checkpoint(root / NS / "dit" / "step-200")
    write_dcp_checkpoint(root / NS / "dit" / "step-300", commit=False)  # the crash's leftover
    pod_on(cluster, BAD, "web-0", labels={"app": "web"})
    rank(cluster, BAD, "dit")

    plan = plan_evict(cluster, [BAD], reason="XID 79", user="op", mount=("/checkpoints", root))

    assert [str(s.kind) for s in plan.steps] == ["update", "event", "evict", "evict", "event"]
    gang_step, rest = plan.steps[2], plan.steps[3]
    assert gang_step.description == (
        f"evict 1 pod from node {BAD} of JobSet training/dit first (the gang restarts at once)"
    )
    assert [c.about for c in gang_step.calls if c.method == "POST" and "eviction" in c.path] == [
        "pod training/dit-trainer-0-1-abcde"
    ]
    assert [c.about for c in rest.calls if "eviction" in c.path] == ["pod default/web-0"]
    message = gang_messages(plan)["training/dit"]
    assert message.startswith(
        "JobSet training/dit restarts its whole gang at once, from its newest complete "
        "checkpoint, /checkpoints/training/dit/step-200 (step 200): its Job fails "
        "(podFailurePolicy FailJob on DisruptionTarget) and its failurePolicy rule "
        "'disruption' restarts the gang without counting towards maxRestarts"
    )
    assert plan.refused is None

    result = execute(cluster, plan)

    assert result.status == "done"
    assert_plan_was_run(plan, result)
    assert pod_names(cluster, BAD) == []

    assert plan_evict(cluster, [BAD], reason="XID 79", user="op").steps == ()  # converged


def test_the_checkpoint_directory_is_named_when_it_is_not_mounted_here(cluster: Cluster) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    fleet(cluster, 10)
    jobset(cluster, "dit")
    rank(cluster, BAD, "dit")
    plan = plan_evict(cluster, [BAD], reason="XID 79", user="op")
    assert (
        "from its newest complete checkpoint under /checkpoints/training/dit:"
        in (gang_messages(plan)["training/dit"])
    )
    # a pod deleted (--force) carries no DisruptionTarget: the restart then counts
    forced = plan_evict(cluster, [BAD], reason="XID 79", user="op", force=True)
    assert gang_messages(forced)["training/dit"].startswith(
        "JobSet training/dit restarts its whole gang at once, from its newest complete "
        "checkpoint under /checkpoints/training/dit: its Job fails (backoffLimit 0) and its "
        "failurePolicy restarts the gang, using 1 of its 10 restarts left"
    )


def test_a_gang_without_a_disruption_policy_would_hang_and_is_refused_unless_forced(
    cluster: Cluster,
) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    fleet(cluster, 10)
    foreign_jobset(cluster, "theirs", backoff=3, policy={"maxRestarts": 2})
    rank(cluster, BAD, "theirs", rjob="workers")

    plan = plan_evict(cluster, [BAD], reason="NVLink errors", user="op")

    warning = gang_messages(plan)["training/theirs"]
    assert warning.startswith(
        "JobSet training/theirs does not restart its whole gang on a disruption: its Job's "
        "backoffLimit is 3 and no podFailurePolicy rule fails the Job on DisruptionTarget: the "
        "Job replaces only the pod that went, and its other pods would hang in their "
        "collective until the NCCL timeout"
    )
    assert plan.refused is not None and plan.refused.startswith(
        "JobSet training/theirs would hang until the NCCL timeout"
    )
    assert any(f.severity is FindingSeverity.BLOCKING and f.kind == "gang" for f in plan.findings)
    with pytest.raises(BadInput, match=r"would hang until the NCCL timeout.*nothing was changed"):
        execute(cluster, plan)
    assert "unschedulable" not in cluster.get("node", f"/api/v1/nodes/{BAD}")["spec"]

    forced = plan_evict(cluster, [BAD], reason="NVLink errors", user="op", force=True)
    assert forced.refused is None
    assert gang_messages(forced)["training/theirs"].endswith("--force deletes its pods anyway")
    assert [s.kind for s in forced.steps][2] is StepKind.DELETE
    assert execute(cluster, forced).status == "done"
    assert pod_names(cluster, BAD) == []


def test_a_gang_whose_job_fails_without_a_restart_policy_will_fail(cluster: Cluster) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    fleet(cluster, 10)
    foreign_jobset(cluster, "once", backoff=0, policy=None)
    rank(cluster, BAD, "once", rjob="workers")
    foreign_jobset(cluster, "counted", backoff=0, policy={"maxRestarts": 3})
    rank(cluster, BAD, "counted", rjob="workers")

    plan = plan_evict(cluster, [BAD], reason="IB flapping", user="op")

    messages = gang_messages(plan)
    assert messages["training/once"].startswith(
        "JobSet training/once will fail: its Job fails (backoffLimit 0) and it has no failurePolicy"
    )
    assert messages["training/counted"].startswith(
        "JobSet training/counted restarts its whole gang at once, from its newest complete "
        "checkpoint (if its trainer resumes from one): its Job fails (backoffLimit 0) and its "
        "failurePolicy restarts the gang, using 1 of its 3 restarts left"
    )
    assert plan.refused is None
    gang_step = plan.steps[2]
    assert gang_step.description.endswith(
        "of JobSet training/counted, training/once first (the gang restarts at once)"
    )


def test_failure_policy_rules_are_read_as_the_jobset_controller_reads_them(
    cluster: Cluster,
) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    fleet(cluster, 10)
    # a rule whose message pattern does not match the failure is passed over
    rule = {"name": "oom", "action": "FailJobSet", "onJobFailureMessagePatterns": ["OOMKilled"]}
    oom = {"maxRestarts": 3, "rules": [rule]}
    foreign_jobset(cluster, "oom", backoff=0, policy=oom)
    rank(cluster, "gpu-node-001", "oom", rjob="workers")

    plan = plan_evict(cluster, [BAD], reason="XID 48", user="op")

    assert plan.refused is None
    assert (
        "its failurePolicy rule 'oom' restarts the gang" not in gang_messages(plan)["training/oom"]
    )
    assert (
        "its failurePolicy restarts the gang, using 1 of its 3 restarts left"
        in (gang_messages(plan)["training/oom"])
    )


def test_a_restartjob_rule_is_refused_by_jobsets_webhook_while_its_gate_is_off(
    cluster: Cluster,
) -> None:
    """``RestartJob`` (recreate only the failed Job) is behind JobSet's alpha feature gate
    of that name, off by default: its webhook refuses such a JobSet, in these words."""
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    rule = {"name": "per-job", "action": "RestartJob"}
    answer = cluster.request("create", "POST", JOBSETS, body=foreign_jobset_body(
        "split", backoff=0, policy={"maxRestarts": 3, "rules": [rule]}))  # fmt: skip
    assert (answer.status, answer.reason) == (422, "Unprocessable Entity")
    assert answer.message == (
        'admission webhook "vjobset.kb.io" denied the request: JobSet.jobset.x-k8s.io "split" '
        "is invalid: <nil>: Internal error: RestartJob and RestartJobAndIgnoreMaxRestarts "
        "failure policy actions are not allowed when RestartJob feature gate is disabled"
    )


def test_a_restartjob_rule_restarts_only_the_failed_job_where_its_gate_is_on() -> None:
    """Where a cluster turned the gate on, the other Jobs' ranks are left waiting: read
    from the JobSet as its controller reads it (a JobSet this server refuses, read here)."""
    rule = {"name": "per-job", "action": "RestartJob",
            "onJobFailureReasons": ["BackoffLimitExceeded"]}  # fmt: skip
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "i"}]}}
    job = {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}
    jobset = {"metadata": {"name": "split", "namespace": NS}, "spec": {
        "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}],
        "failurePolicy": {"maxRestarts": 3, "rules": [rule]}}}  # fmt: skip
    fate, why = gang_fate(jobset, "workers")
    assert fate == "hangs"
    assert why == (
        "its Job fails (backoffLimit 0) and its failurePolicy rule 'per-job' restarts only "
        "that Job (RestartJob), not the other 1"
    )


# -- against the world's Job and JobSet controllers --------------------------------------


@pytest.fixture
def world(tmp_path: Path, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=3,  # a gang of 2 and one node to take the evicted rank's place
        speed=120,
        failure_multiplier=0.0,
        checkpoint_interval_s=240.0,
        exporters=False,
        prometheus=False,
        extra={"training_quota_fraction": 1.0},
    )
    with SimWorld(config, tmp_path / "world", parts=("cluster", "kueue")) as w:
        yield w


def _pods(w: SimWorld, attempt: str) -> list[dict[str, Any]] | None:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        NS,
        label_selector=f"krea.ai/training=dit,jobset.sigs.k8s.io/restart-attempt={attempt}",
        _preload_content=False,
    )
    pods = [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]
    ok = len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def test_the_gang_of_a_launched_run_restarts_once_at_once_without_using_a_restart(
    world: SimWorld,
) -> None:
    spec = TrainingSpec("dit", 2, "krea/dit:1.0", namespace=NS, max_restarts=1)
    manifest = training_jobset(spec, launched_by="op")
    pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["priorityClassName"] = "training"  # what the world's scheduler reads
    custom = client.CustomObjectsApi(world.client)
    custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", manifest)
    gang = wait_for(lambda: _pods(world, "0"), timeout=60)
    checkpoints = world.world.state_dir / "checkpoints"
    wait_for(lambda: list((checkpoints / NS / "dit").glob("step-*/.metadata")), timeout=60)
    node = gang[1]["spec"]["nodeName"]

    cluster = Cluster(world.client, timeout_s=30)
    plan = plan_evict(cluster, [node], reason="XID 79", user="op", max_share=0.5,
                      mount=("/checkpoints", checkpoints))  # fmt: skip
    message = gang_messages(plan)["training/dit"]
    named = re.search(r"checkpoint, (/checkpoints/training/dit/step-(\d+)) \(step \2\)", message)
    assert named, message
    local = checkpoints / named.group(1).removeprefix("/checkpoints/")
    assert inspect_checkpoint(local).complete
    assert plan.steps[2].description.endswith(
        "of JobSet training/dit first (the gang restarts at once)"
    )

    result = execute(cluster, plan)
    assert result.status == "done", result.as_dict()
    assert_plan_was_run(plan, result)

    new_gang = wait_for(lambda: _pods(world, "1"), timeout=60)
    assert node not in {p["spec"]["nodeName"] for p in new_gang}
    js: Any = custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", "dit"
    )
    assert js["status"]["restarts"] == 1
    assert js["status"].get("restartsCountTowardsMax", 0) == 0  # a disruption is free
    assert not any(c["type"] == "Failed" for c in js["status"].get("conditions") or ())
