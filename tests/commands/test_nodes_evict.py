"""``krea-ops nodes evict|restore`` end to end against a simulated API server: the dry-run
plan is what then runs, refusals exit 2 with nothing written, a budget that holds exits 3
naming the pod and the budget, and the audit log names the kubeconfig's user, never its
token."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import KUBECTL, Kubectl, sim_on_control_plane
from tests.runbook.conftest import (
    CONTROL_PLANE_TAINTS,
    _kubelets,
    budget,
    cordon,
    fleet,
    kubelets,
    node_obj,
    pod_names,
    pod_on,
)
from tests.validated import pass_validation

__all__ = ["_kubelets", "kubelets"]  # a kubelet on every node the tests make

BAD = "gpu-node-001"


sim = sim_on_control_plane  # an API server per test, on each control plane


@pytest.fixture
def cluster(sim: LocalApiServer) -> Iterator[Cluster]:
    with sim.api_client() as api:
        c = Cluster(api, timeout_s=30)
        fleet(c, 10)
        yield c


def run(
    sim: LocalApiServer, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(["nodes", *args, "--kubeconfig", str(sim.kubeconfig)])
    out, err = capsys.readouterr()
    return code, out, err


def version(cluster: Cluster) -> str:
    return str(node_obj(cluster, BAD)["metadata"]["resourceVersion"])


def test_dry_run_prints_the_plan_that_then_runs(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod_on(cluster, BAD, "web-0", labels={"app": "web"})
    pod_on(cluster, BAD, "exporter-1", owned_by=("DaemonSet", "exporter"))
    before = version(cluster)

    code, out, _ = run(sim, capsys, "evict", BAD, "--reason", "XID 79", "--dry-run", "-o", "json")
    assert code == 0 and version(cluster) == before and not audit.exists()
    [plan] = json.loads(out)
    assert plan["action"] == "nodes evict" and plan["user"] == "krea-sim-admin"
    assert plan["reason"] == "XID 79" and plan["nodes"] == [BAD] and plan["refused"] is None
    planned = [[(c["method"], c["path"]) for c in s["calls"]] for s in plan["steps"]]
    assert planned[0] == [("PATCH", f"/api/v1/nodes/{BAD}")]

    code, out, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79", "--yes", "-o", "json")

    assert code == 0, err
    [ran] = json.loads(out)
    made = [sorted({(c["method"], c["path"]) for c in s["calls"]}) for s in ran["result"]["steps"]]
    assert made == [sorted(set(p)) for p in planned]
    assert pod_names(cluster, BAD) == ["default/exporter-1"]
    assert node_obj(cluster, BAD)["spec"]["unschedulable"] is True

    code, out, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79", "--yes")
    assert code == 0, err
    assert "nothing to do" in out and "Result: done" in out


def test_without_yes_and_no_terminal_it_refuses_and_writes_nothing(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = version(cluster)
    code, out, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79")
    assert code == 2
    assert err.startswith("error: nodes evict writes to the cluster and stdin is not a terminal")
    assert len(err.strip().splitlines()) == 1 and "--yes" in err
    assert "Plan: nodes evict gpu-node-001" in out  # the operator sees what was asked
    assert version(cluster) == before and not audit.exists()


def test_more_than_max_share_is_refused_unless_raised(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = version(cluster)
    code, _, err = run(sim, capsys, "evict", BAD, "gpu-node-002", "--reason", "rack 3", "--yes")
    assert code == 2
    assert "2 nodes is more than --max-share 0.1 of the fleet (1 of 10 nodes)" in err
    assert version(cluster) == before

    code, _, err = run(
        sim, capsys, "evict", BAD, "gpu-node-002", "--reason", "rack 3", "--yes",
        "--max-share", "20%",
    )  # fmt: skip
    assert code == 0, err
    assert node_obj(cluster, "gpu-node-002")["spec"]["unschedulable"] is True

    code, _, err = run(sim, capsys, "evict", BAD, "--reason", "x", "--max-share", "2")
    assert code == 2 and "at most 1" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["evict", BAD, "gpu-node-777", "--reason", "XID 79", "--yes"],
            "error: no such node: gpu-node-777 (krea-ops nodes list shows the nodes); "
            "nothing was changed",
        ),
        (["evict", BAD, "--reason", "", "--yes"], "error: --reason must say why"),
        (["restore", "gpu-node-777", "--yes"], "error: no such node: gpu-node-777"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    sim: LocalApiServer,
    cluster: Cluster,
    audit: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    before = version(cluster)
    code, _, err = run(sim, capsys, *args)
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1
    assert version(cluster) == before and not audit.exists()


def test_a_budget_that_holds_exits_3_naming_pod_and_budget(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod_on(cluster, BAD, "inf-0", labels={"app": "inference"})
    budget(cluster, "inference", {"app": "inference"}, pods=1, minAvailable=1)

    code, out, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79", "--timeout", "1", "--yes")

    assert code == 3
    assert err.strip() == (
        "error: nodes evict blocked after --timeout 1s: pod default/inf-0 held by "
        "PodDisruptionBudget default/inference; node gpu-node-001 left cordoned and tainted "
        "with the reason (run the command again to retry, krea-ops nodes restore to undo)"
    )
    assert "PodDisruptionBudget default/inference allows 0 disruptions" in out
    assert pod_names(cluster, BAD) == ["default/inf-0"]
    assert node_obj(cluster, BAD)["spec"]["unschedulable"] is True
    end = json.loads(audit.read_text().splitlines()[-1])
    assert end["record"] == "end" and end["status"] == "blocked"


def test_restore_refuses_a_node_we_did_not_evict_and_the_audit_holds_no_token(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cordon(cluster, "gpu-node-003")
    code, _, err = run(sim, capsys, "restore", "gpu-node-003", "--yes")
    assert code == 2 and "was not evicted by krea-ops" in err and "--force" in err
    assert node_obj(cluster, "gpu-node-003")["spec"]["unschedulable"] is True

    assert run(sim, capsys, "evict", BAD, "--reason", "XID 79", "--yes")[0] == 0
    # no validation since the eviction: refused too, naming how to validate it
    code, _, err = run(sim, capsys, "restore", BAD, "--reason", "replaced GPU", "--yes")
    assert code == 2 and "has no validation since its eviction" in err, err
    assert f"(krea-ops nodes validate {BAD})" in err and "--force" in err
    assert node_obj(cluster, BAD)["spec"]["unschedulable"] is True
    pass_validation(cluster, BAD)
    code, _, err = run(sim, capsys, "restore", BAD, "--reason", "replaced GPU", "--yes")
    assert code == 0, err
    assert "unschedulable" not in node_obj(cluster, BAD)["spec"]

    text = audit.read_text()
    assert sim.token not in text
    records: list[dict[str, Any]] = [json.loads(line) for line in text.splitlines()]
    starts = [r for r in records if r["record"] == "start"]
    assert [(r["action"], r["user"], r["reason"]) for r in starts] == [
        ("nodes evict", "krea-sim-admin", "XID 79"),
        ("nodes restore", "krea-sim-admin", "replaced GPU"),
    ]


class Terminal(io.StringIO):
    """stdin as a terminal the operator types ``answer`` into."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("typed", "code"), [("3\n", 2), ("\n", 2), ("2\n", 0)])
def test_more_than_one_node_asks_for_the_count(
    sim: LocalApiServer,
    cluster: Cluster,
    audit: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    typed: str,
    code: int,
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    before = version(cluster)
    got, out, err = run(
        sim, capsys, "evict", BAD, "gpu-node-002", "--reason", "rack 3", "--max-share", "0.2"
    )
    assert got == code, err
    assert "Type 2 to go on" in out
    if code:
        assert err.strip() == "error: not confirmed; nothing was changed"
        assert version(cluster) == before and not audit.exists()
    else:
        assert node_obj(cluster, "gpu-node-002")["spec"]["unschedulable"] is True


@pytest.mark.parametrize(("typed", "code"), [("n\n", 2), ("\n", 2), ("y\n", 0)])
def test_one_node_asks_yes_or_no_defaulting_to_no(
    sim: LocalApiServer,
    cluster: Cluster,
    audit: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    typed: str,
    code: int,
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    before = version(cluster)
    got, _, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79")
    assert got == code, err
    assert (version(cluster) == before) == bool(code)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_sees_the_eviction_and_its_own_taint_survives_evict_and_restore(
    sim: LocalApiServer,
    cluster: Cluster,
    audit: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl = Kubectl(sim.kubeconfig, tmp_path / "home")
    kubectl("taint", "nodes", BAD, "example.com/gpu-check=pending:NoSchedule")
    kubectl("label", "node", BAD, "team.example/owner=ml")
    pod_on(cluster, BAD, "web-0")

    code, _, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79", "--yes")
    assert code == 0, err

    # kubectl get node prints STATUS "Ready,SchedulingDisabled" for a cordoned node
    assert "SchedulingDisabled" in kubectl("get", "node", BAD).stdout
    node = json.loads(kubectl("get", "node", BAD, "-o", "json").stdout)
    taints = [t for t in node["spec"]["taints"] if t["key"] not in CONTROL_PLANE_TAINTS]
    assert sorted((t["key"], t.get("value"), t["effect"]) for t in taints) == [
        ("example.com/gpu-check", "pending", "NoSchedule"),
        ("krea.ai/unhealthy", "xid-79", "NoSchedule"),
    ]
    assert node["metadata"]["annotations"]["krea.ai/evicted-by"] == "krea-sim-admin"
    events = json.loads(
        kubectl(
            "get", "events", "-n", "default", "--field-selector",
            f"involvedObject.kind=Node,involvedObject.name={BAD}", "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    ours = [e for e in events if e.get("reportingComponent") == "krea.ai/krea-ops"]
    assert sorted(e["reason"] for e in ours) == ["Cordoned", "Drained"]
    # the rest, where there are any, are the control plane's own (RegisteredNode)
    assert {e["source"].get("component") for e in events if e not in ours} <= {"node-controller"}

    pass_validation(cluster, BAD)
    code, _, err = run(sim, capsys, "restore", BAD, "--yes")
    assert code == 0, err
    node = json.loads(kubectl("get", "node", BAD, "-o", "json").stdout)
    taints = [t for t in node["spec"]["taints"] if t["key"] not in CONTROL_PLANE_TAINTS]
    assert taints == [{"key": "example.com/gpu-check", "value": "pending", "effect": "NoSchedule"}]
    assert "unschedulable" not in node["spec"]
    assert node["metadata"]["labels"]["team.example/owner"] == "ml"
    assert not any(k.startswith("krea.ai/evicted") for k in node["metadata"].get("annotations", {}))
