"""The bundled controllers under API-server faults, each run by the runner as in a pod:

- a list that fails (500, 503, a stalled answer, a hung-up connection) is never an empty
  cluster: the pass is fail-static ("unavailable") and changes nothing, for every list
  each controller makes, one failing at a time (the lists before it answered: a partial
  view is no view);
- a write refused with 500 (or 409 past its retries) leaves the finding to the next pass,
  which acts once: one cordon, one set of Events, and the audit log shows both attempts.

One cluster serves all four: two free GPU nodes, a third NotReady for ten minutes
(node-health evicts it), a virtual node with burst-taint's taint and two inference pods
offsite under a budget (migrate-back brings them home), and Kueue's h200 flavor with the
training and inference ClusterQueues (quota-sync keeps them in step)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from krea_ops.burst import DISABLED_TAINT_KEY, DISABLED_TAINT_VALUE
from krea_ops.controllers.base import NAMESPACE, Controller, Inputs
from krea_ops.controllers.burst_taint import BurstTaint, BurstTaintConfig
from krea_ops.controllers.loop import JsonLog, Runner
from krea_ops.controllers.migrate_back import MigrateBack
from krea_ops.controllers.node_health import NodeHealth
from krea_ops.controllers.quota_sync import QuotaSync
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import rfc3339
from krea_ops.kube.writes import ATTEMPTS
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.nodes import TAINT_KEY
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.controllers.conftest import PROVIDER_TAINT, T0, Clock, gpu_node, virtual_node
from tests.kube.conftest import create, set_status
from tests.runbook.conftest import budget, events_about, node_obj, owner

SICK = "gpu-node-002"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CONTROLLERS = ("burst-taint", "migrate-back", "node-health", "quota-sync")


def make(name: str) -> Controller[Any]:
    if name == "burst-taint":
        return BurstTaint(BurstTaintConfig(free_gpus_high=8, free_gpus_low=4, hold_s=0))
    return {"migrate-back": MigrateBack, "node-health": NodeHealth, "quota-sync": QuotaSync}[name]()


def inference_pod(cluster: Cluster, name: str) -> None:
    path = "/api/v1/namespaces/serving/pods"
    create(
        cluster,
        path,
        {
            "metadata": {
                "name": name,
                "labels": {"app": "serve", "krea.ai/workload": "inference"},
                "ownerReferences": [owner(cluster, "ReplicaSet", "serve-h", "serving")[0]],
            },
            "spec": {
                "nodeName": "vk-0",
                "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}],
                "containers": [
                    {
                        "name": "server",
                        "image": "img:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    set_status(
        cluster,
        f"{path}/{name}",
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    )


def kueue(cluster: Cluster) -> None:
    # each says its kind: an API server takes a custom resource's from the body only
    kind = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor"}
    create(cluster, f"{KUEUE}/resourceflavors", {**kind, "metadata": {"name": "h200"}, "spec": {}})
    kind = {**kind, "kind": "ClusterQueue"}
    for name, quota in (("training", 12), ("inference", 4)):
        group = {
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [
                {"name": "h200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": quota}]}
            ],
        }
        create(
            cluster,
            f"{KUEUE}/clusterqueues",
            {**kind, "metadata": {"name": name}, "spec": {"resourceGroups": [group]}},
        )


@pytest.fixture
def world(product: Cluster) -> Cluster:
    cluster = product
    for ns in (NAMESPACE, "serving"):
        create(cluster, "/api/v1/namespaces", {"metadata": {"name": ns}})
    gpu_node(cluster, "gpu-node-000")
    gpu_node(cluster, "gpu-node-001")
    gpu_node(cluster, SICK)
    not_ready = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastTransitionTime": rfc3339(T0 - 600),
    }
    set_status(cluster, f"/api/v1/nodes/{SICK}", {"conditions": [not_ready]})
    ours = {"key": DISABLED_TAINT_KEY, "value": DISABLED_TAINT_VALUE, "effect": "NoSchedule"}
    virtual_node(cluster, "vk-0", [PROVIDER_TAINT, ours])
    for i in range(2):
        inference_pod(cluster, f"serve-{i}")
    budget(cluster, "serve", {"app": "serve"}, pods=2, namespace="serving", maxUnavailable=1)
    kueue(cluster)
    return cluster


class Replica:
    """One controller's process: the runner, its JSON log and audit log, simulated time."""

    def __init__(self, cluster: Cluster, name: str, tmp: Path, *, dry_run: bool = False):
        self.clock = Clock()
        self.out = io.StringIO()
        self.audit_path = tmp / f"audit-{name}.jsonl"
        self.controller = make(name)
        user = f"system:serviceaccount:krea-ops:{name}"
        self.runner = Runner(
            cluster,
            [self.controller],
            lambda _: Inputs(cluster, None, HealthPolicy(), user),
            identity="replica-a",
            dry_run=dry_run,
            audit=AuditLog(self.audit_path),
            log=JsonLog(self.out, self.clock.wall),
            clock=self.clock.mono,
            wall=self.clock.wall,
        )

    def pass_once(self, t: float) -> Any:
        self.clock.t = t
        if not self.runner.dry_run:
            assert self.runner.electors[self.controller.name].try_acquire_or_renew(t)
        return self.runner.pass_once(self.controller)

    def lines(self, event: str) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in self.out.getvalue().splitlines()]
        return [r for r in records if r["event"] == event]

    def audit(self) -> list[dict[str, Any]]:
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines()]


def lists_of(sim: LocalApiServer, replica: Replica) -> dict[str, int]:
    """The resources one pass lists, in the order it first lists them, and how often (a
    dry-run pass, with the switch armed to count and never fire)."""
    sim.api.faults.set([{"verbs": ["list"], "status": 500, "after": 10**9}], source="count")
    replica.pass_once(0.0)
    seen = {res: n for (verb, res), n in sim.api.faults.requests().items() if verb == "list"}
    sim.api.faults.clear("count")
    return seen


LISTS = {
    "burst-taint": ["nodes", "pods"],
    "migrate-back": ["nodes", "pods", "poddisruptionbudgets"],
    "node-health": ["nodes", "jobsets", "pods", "jobs"],  # jobs: the validation Jobs
    "quota-sync": ["clusterqueues", "resourceflavors", "cohorts", "nodes"],
}
FAILURES: dict[str, dict[str, Any]] = {
    "500": {"status": 500},
    "503": {"status": 503, "retryAfter": 0},
    "hang-up": {"drop": True},
}


@pytest.mark.parametrize("name", CONTROLLERS)
def test_a_failed_list_is_fail_static_never_an_empty_cluster(
    name: str, sim: LocalApiServer, world: Cluster, tmp_path: Path
) -> None:
    lists = lists_of(sim, Replica(world, name, tmp_path / "dry", dry_run=True))
    assert list(lists) == LISTS[name]
    replica = Replica(world, name, tmp_path)
    assert replica.runner.electors[name].try_acquire_or_renew(0.0)  # its Lease, first
    store_rv = sim.api.store.rv
    # each list failing in turn, the first of its kind and the last (the lists before it
    # answered: a partial view), with a 500, a 503 or a hang-up
    failing = [(res, after) for res, n in lists.items() for after in sorted({0, n - 1})]
    for i, (resource, after) in enumerate(failing):
        how = list(FAILURES)[i % len(FAILURES)]
        rule = {"verbs": ["list"], "resources": [resource], "after": after, **FAILURES[how]}
        sim.api.faults.set([rule])
        result = replica.runner.pass_once(replica.controller)
        assert result.outcome == "unavailable", (resource, after, how, result)
        assert sim.api.faults.injected("list", resource), (resource, after)
        # nothing written: not a taint, a cordon, a quota, an eviction, an Event, the state
        assert sim.api.store.rv == store_rv, (resource, after, how)
    assert replica.audit() == []
    fail_static = replica.lines("fail-static")
    assert len(fail_static) == len(failing)
    assert all("\n" not in line["why"] for line in fail_static)
    # the API answers again: the pass reads it all and plans (what it plans is what the
    # faulted passes held back from; a dry run, so no move waits for a replacement)
    sim.api.faults.clear()
    after = Replica(world, name, tmp_path / "after", dry_run=True).pass_once(1.0)
    assert after.outcome == "ok"
    if name in ("migrate-back", "node-health"):
        assert after.decision is not None and after.decision.acts


def test_a_stalled_list_is_fail_static_within_the_timeout(
    sim: LocalApiServer, world: Cluster, tmp_path: Path
) -> None:
    impatient = Cluster(world.api, timeout_s=1)
    replica = Replica(impatient, "burst-taint", tmp_path)
    replica.pass_once(0.0)
    store_rv = sim.api.store.rv
    sim.api.faults.set([{"verbs": ["list"], "resources": ["pods"], "latency": 3}])
    result = replica.runner.pass_once(replica.controller)
    assert result.outcome == "unavailable" and "no answer within 1 s" in (result.detail or "")
    assert sim.api.faults.seen("list", "pods") == 1 and sim.api.store.rv == store_rv
    assert (DISABLED_TAINT_KEY, "NoSchedule") in {
        (t["key"], t["effect"]) for t in node_obj(world, "vk-0")["spec"]["taints"]
    }


def cordons(sim: LocalApiServer, since: int) -> int:
    """Writes to the sick node since ``since`` that set spec.unschedulable (from the
    store's history)."""
    changes = sim.api.store.changes_since(since)
    count, before = 0, False
    for change in changes:
        if change.rkey == "/nodes" and change.name == SICK:
            now = bool((change.obj.get("spec") or {}).get("unschedulable"))
            count += now and not before
            before = now
    return count


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 500, "times": 1},
        {"status": 409, "times": ATTEMPTS},  # a storm outlasting update's retries
        {"drop": True, "times": 1},  # hung up on: the PATCH is not sent again
    ],
    ids=["500", "409-storm", "hang-up"],
)
def test_node_health_a_refused_cordon_is_made_once_by_the_next_pass_and_audited_twice(
    fault: dict[str, Any], sim: LocalApiServer, world: Cluster, tmp_path: Path
) -> None:
    replica = Replica(world, "node-health", tmp_path)
    start = sim.api.store.rv
    sim.api.faults.set([{"verbs": ["patch"], "resources": ["nodes"], "name": SICK, **fault}])
    first = replica.pass_once(0.0)
    assert first.outcome == "ok" and [r.status for r in first.runs] == ["failed"]
    assert (node_obj(world, SICK).get("spec") or {}).get("unschedulable") is None
    assert events_about(world, "default", SICK) == []
    second = replica.pass_once(30.0)
    assert [r.status for r in second.runs] == ["done"]
    third = replica.pass_once(60.0)
    assert third.outcome == "ok" and third.runs == []  # acted once, not again
    sick = node_obj(world, SICK)
    assert sick["spec"]["unschedulable"] is True
    assert [t["key"] for t in sick["spec"]["taints"]].count(TAINT_KEY) == 1
    assert cordons(sim, start) == 1
    reasons = sorted(e["reason"] for e in events_about(world, "default", SICK))
    assert len(reasons) == len(set(reasons)) > 0  # one set of Events, none twice
    runs = [r for r in replica.audit() if r["record"] == "end"]
    assert [r["status"] for r in runs] == ["failed", "done"]  # both attempts on record
    assert len(sim.api.faults.injected("patch", "nodes")) == fault["times"]
