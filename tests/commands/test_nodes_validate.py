"""``krea-ops nodes validate`` against a simulated API server on each control plane: the
plan ``--dry-run`` prints (the Job's POST pinned to the node, the Event) writes nothing;
bad input and every refusal is one line, exit 2, nothing created. (The Job running on a
simulated machine and its result are tests/world/test_repair_ladder.py's.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands.main import invoke
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import sim_on_control_plane
from tests.kube.conftest import create, set_status
from tests.runbook.conftest import _kubelets, fleet, kubelets, pod_on

__all__ = ["_kubelets", "kubelets"]  # a kubelet on every node the tests make

sim = sim_on_control_plane
NODE = "gpu-node-001"
PRIORITY = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "krea-ops-validation"},
    "value": -900,
    "preemptionPolicy": "Never",
}


@pytest.fixture
def cluster(sim: LocalApiServer) -> Iterator[Cluster]:
    with sim.api_client() as api:
        c = Cluster(api, timeout_s=30)
        fleet(c, 4)
        for i in range(4):
            set_status(
                c,
                f"/api/v1/nodes/gpu-node-{i:03d}",
                {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
            )
        yield c


def run(
    sim: LocalApiServer, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(["nodes", "validate", *args, "--kubeconfig", str(sim.kubeconfig)])
    out, err = capsys.readouterr()
    return code, out, err


def jobs(cluster: Cluster) -> list[str]:
    answer = cluster.request("list jobs", "GET", "/apis/batch/v1/namespaces/krea-ops/jobs")
    if answer.status == 404:
        return []
    assert answer.ok, answer.status
    return [j["metadata"]["name"] for j in (answer.body or {}).get("items") or []]


def test_dry_run_prints_the_pinned_job_and_the_event_and_writes_nothing(
    sim: LocalApiServer, cluster: Cluster, capsys: pytest.CaptureFixture[str], audit: Path
) -> None:
    create(cluster, "/apis/scheduling.k8s.io/v1/priorityclasses", PRIORITY)
    code, out, err = run(sim, capsys, NODE, "--level", "full", "--dry-run")
    assert code == 0, err
    assert "POST /apis/batch/v1/namespaces/krea-ops/jobs" in out
    assert "InfiniBand bandwidth" in out and "ValidationStarted" in out
    code, out, _ = run(sim, capsys, NODE, "--dry-run", "-o", "json")
    plan = json.loads(out)[0]
    body = plan["steps"][0]["calls"][0]["body"]
    pod = body["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [NODE]
    assert "dcgmi diag -r 2" in pod["containers"][0]["command"][2]
    assert jobs(cluster) == [] and not audit.exists()


def test_bad_input_and_refusals_are_one_line_exit_2_and_nothing_is_created(
    sim: LocalApiServer, cluster: Cluster, capsys: pytest.CaptureFixture[str], audit: Path
) -> None:
    # before any cluster read
    code, _, err = run(sim, capsys, NODE, "--level", "thorough")
    assert code == 2 and err.strip() == "error: --level 'thorough': use quick or full"
    code, _, err = run(sim, capsys, NODE, "--timeout", "0")
    assert code == 2 and "--timeout 0" in err and len(err.strip().splitlines()) == 1
    # the PriorityClass missing: the Job's pod would be refused at admission
    code, _, err = run(sim, capsys, NODE, "--yes")
    assert code == 2 and "PriorityClass krea-ops-validation does not exist" in err
    create(cluster, "/apis/scheduling.k8s.io/v1/priorityclasses", PRIORITY)
    code, _, err = run(sim, capsys, "gpu-node-999", "--yes")
    assert code == 2 and "gpu-node-999" in err and len(err.strip().splitlines()) == 1
    # a training's rank on the node: never beside a gang
    pod_on(cluster, NODE, "dit-0", labels={"jobset.sigs.k8s.io/jobset-name": "dit"}, gpus=8)
    code, _, err = run(sim, capsys, NODE, "--yes")
    assert code == 2 and "holds pods of training default/dit" in err
    # inference on another node's GPUs: the validation needs them all
    pod_on(cluster, "gpu-node-002", "web-0", gpus=2, owned_by=("ReplicaSet", "web2"))
    code, _, err = run(sim, capsys, "gpu-node-002", "--yes")
    assert code == 2 and "has pods using its GPUs (default/web-0)" in err
    # no terminal and no --yes
    code, _, err = run(sim, capsys, "gpu-node-003")
    assert code == 2 and "pass --yes" in err
    assert jobs(cluster) == [] and not audit.exists()
