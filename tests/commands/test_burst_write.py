"""``krea-ops burst pause|unpause|migrate`` end to end against a simulated API server: the
dry-run plan is what then runs, the pause shows in ``burst status`` (who, why, since), a
re-run writes nothing, the audit log has the run, and ``migrate`` with no free GPU on the
other side exits 2 with one line and nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands.main import invoke
from krea_ops.burst import ANN_PRICE, PAUSE_TAINT_KEY, VK_TAINT_KEY
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import sim_on_control_plane
from tests.kube.conftest import create, report_ready, set_status
from tests.runbook.conftest import fleet, node_obj, pod_on

VK = "vk-runpod"
PROVIDER_TAINT = {"key": VK_TAINT_KEY, "value": "runpod", "effect": "NoSchedule"}


sim = sim_on_control_plane  # an API server per test, on each control plane


@pytest.fixture
def cluster(sim: LocalApiServer) -> Iterator[Cluster]:
    with sim.api_client() as api:
        c = Cluster(api, timeout_s=30)
        fleet(c, 2)  # in-cluster nodes with no GPU allocatable: no GPU free there
        create(
            c,
            "/api/v1/nodes",
            {
                "metadata": {"name": VK, "labels": {"type": "virtual-kubelet"}},
                "spec": {"taints": [PROVIDER_TAINT]},
            },
        )
        report_ready(c, VK)
        yield c


def run(
    sim: LocalApiServer, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(["burst", *args, "--kubeconfig", str(sim.kubeconfig)])
    out, err = capsys.readouterr()
    return code, out, err


def version(cluster: Cluster) -> str:
    return str(node_obj(cluster, VK)["metadata"]["resourceVersion"])


def test_pause_dry_run_is_the_plan_that_runs_and_status_shows_it(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = version(cluster)
    code, out, _ = run(sim, capsys, "pause", "--reason", "runpod 5xx", "--dry-run", "-o", "json")
    assert code == 0 and version(cluster) == before and not audit.exists()
    [plan] = json.loads(out)
    assert plan["action"] == "burst pause" and plan["nodes"] == [VK]
    planned = [[(c["method"], c["path"]) for c in s["calls"]] for s in plan["steps"]]
    assert planned[0] == [("PATCH", f"/api/v1/nodes/{VK}")]

    code, out, err = run(sim, capsys, "pause", "--reason", "runpod 5xx", "--yes", "-o", "json")
    assert code == 0, err
    [ran] = json.loads(out)
    made = [sorted({(c["method"], c["path"]) for c in s["calls"]}) for s in ran["result"]["steps"]]
    assert made == [sorted(set(p)) for p in planned]
    taints = node_obj(cluster, VK)["spec"]["taints"]
    assert taints == [
        PROVIDER_TAINT,
        {"key": PAUSE_TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    ]
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["record"] for r in records] == ["start", "step", "step", "end"]
    assert records[0]["action"] == "burst pause" and records[0]["reason"] == "runpod 5xx"

    code, out, err = run(sim, capsys, "status")
    assert code == 0, err
    assert f"bursting is PAUSED on {VK} by krea-sim-admin since 20" in out
    assert ": runpod 5xx (no new placements" in out
    code, out, _ = run(sim, capsys, "status", "-o", "json")
    [row] = json.loads(out)
    assert (row["paused"], row["paused_by"], row["pause_reason"]) == (
        True,
        "krea-sim-admin",
        "runpod 5xx",
    )

    code, out, err = run(sim, capsys, "pause", "--reason", "runpod 5xx", "--yes")
    assert code == 0 and "nothing to do" in out and "Result: done" in out


def test_unpause_lifts_only_ours(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(sim, capsys, "pause", "--reason", "cost cap", "--yes")[0] == 0
    code, out, err = run(sim, capsys, "unpause", "--yes")
    assert code == 0, err
    assert node_obj(cluster, VK)["spec"]["taints"] == [PROVIDER_TAINT]
    code, out, _ = run(sim, capsys, "unpause", "--yes")
    assert code == 0 and "nothing to do" in out


def test_pause_without_yes_and_no_terminal_refuses(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = version(cluster)
    code, out, err = run(sim, capsys, "pause", "--reason", "x")
    assert code == 2 and "--yes" in err and len(err.strip().splitlines()) == 1
    assert "Plan: burst pause vk-runpod" in out
    assert version(cluster) == before


def test_migrate_back_with_no_free_in_cluster_gpu_exits_2_with_one_line(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod_on(cluster, VK, "serve-1", labels={"krea.ai/workload": "inference", "app": "serve"})
    before = version(cluster)
    code, _, err = run(sim, capsys, "migrate", "--back", "--yes")
    assert code == 2
    assert err.strip() == (
        "error: no in-cluster GPU is free (0 free on 0 healthy nodes) for the 1 pod to move; "
        "nothing was changed"
    )
    assert version(cluster) == before and not audit.exists()

    code, _, err = run(sim, capsys, "migrate", "--yes")
    assert code == 2 and "--back or --out" in err


def test_migrate_back_dry_run_lists_the_pods_in_order_with_the_preflight(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = {"nvidia.com/gpu": "8"}
    set_status(
        cluster,
        "/api/v1/nodes/gpu-node-000",
        {
            "allocatable": gpus,
            "capacity": gpus,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    )
    labels = {"krea.ai/workload": "inference", "app": "serve"}
    for name, price in (("serve-a", "1.10"), ("serve-b", "3.40"), ("serve-c", "2.00")):
        pod_on(cluster, VK, name, labels=labels, annotations={ANN_PRICE: price})
    before = version(cluster)

    code, out, err = run(sim, capsys, "migrate", "--back", "--max", "2", "--dry-run", "-o", "json")

    assert code == 0, err
    assert version(cluster) == before and not audit.exists()
    [plan] = json.loads(out)
    assert plan["action"] == "burst migrate --back" and plan["options"]["max"] == 2
    assert [s["kind"] for s in plan["steps"]] == [
        "update",
        "event",
        "migrate",
        "migrate",
        "update",
        "event",
    ]
    moved = [s["calls"][0]["about"] for s in plan["steps"] if s["kind"] == "migrate"]
    assert moved == ["pod default/serve-b", "pod default/serve-c"]  # the dearest first
    assert plan["steps"][2]["calls"][0]["path"].endswith("/pods/serve-b/eviction")
    findings = {f["kind"]: f["message"] for f in plan["findings"]}
    assert findings["capacity"].startswith("8 in-cluster GPUs free on 1 healthy node")
    assert "ReplicaSet default/web: 3 Ready; drops to 2 Ready" in findings["drops"]
    assert "default/serve-a (--max 2)" in findings["stays"]
    assert "paused (krea.ai/burst-paused) while pods move" in findings["steer"]
