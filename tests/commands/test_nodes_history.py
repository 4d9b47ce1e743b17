"""``krea-ops nodes history NODE`` end to end against a simulated API server: a node
evicted with the CLI and then validated shows both, newest first, with its figures, from
the node alone where node-health keeps no ledger, and from node-health's ledger and
restart recorder where it does; an unknown node is one line, exit 2."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.controllers.base import NAMESPACE
from krea_ops.controllers.ledger import observe
from krea_ops.controllers.loop import write_state
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import rfc3339
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.validation import Check, Validation
from tests.conftest import sim_on_control_plane
from tests.runbook.conftest import _kubelets, fleet, kubelets, node_obj

__all__ = ["_kubelets", "kubelets"]  # a kubelet on every node the tests make

BAD = "gpu-node-001"
NH = "system:serviceaccount:krea-ops:node-health"

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


def annotate(cluster: Cluster, name: str, annotations: dict[str, str | None]) -> None:
    answer = cluster.request(
        f"patch node {name}",
        "PATCH",
        f"/api/v1/nodes/{name}",
        body={"metadata": {"annotations": annotations}},
        content_type="application/merge-patch+json",
    )
    assert answer.ok, answer.status


def failed_validation(at: float) -> Validation:
    checks = (
        Check("dcgm", False, "failed Memory (GPU 3)"),
        Check("nccl", True, "bus bandwidth 480.0 GB/s at 8589934592 B"),
    )
    return Validation(BAD, "quick", at, checks, job="krea-ops/krea-validate-x", by="alice")


def history(sim: LocalApiServer, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(sim, capsys, "history", BAD, "-o", "json")
    assert code == 0, err
    [got] = json.loads(out)
    return dict(got)


def test_an_evicted_then_validated_node_shows_both_newest_first(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(sim, capsys, "evict", BAD, "--reason", "XID 79 on GPU 3", "--yes")
    assert code == 0, err
    evicted_at = node_obj(cluster, BAD)["metadata"]["annotations"]["krea.ai/evicted-at"]
    v = failed_validation(time.time() + 5)
    annotate(cluster, BAD, {"krea.ai/validation": v.annotation()})

    got = history(sim, capsys)
    assert set(got) == {"node", "entries", "summary"} and got["node"] == BAD
    assert [(e["kind"], e["by"]) for e in got["entries"]] == [
        ("validation-failed", "alice"),
        ("quarantined", "krea-sim-admin"),
    ]
    quarantine = got["entries"][1]
    assert quarantine["at"] == evicted_at and quarantine["detail"] == "XID 79 on GPU 3"
    assert got["entries"][0]["detail"].startswith("fail (quick): dcgm failed Memory (GPU 3)")
    summary = got["summary"]
    assert summary["incidents"] == 1 and summary["quarantined_now"] is True
    assert summary["quarantined_since"] == evicted_at and summary["waiting_repair"] is True
    assert summary["validations_failed"] == 1 and summary["repairs"] == 0
    assert summary["mtbi_s"] is None and summary["recorded"] is False

    code, out, err = run(sim, capsys, "history", BAD)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["AT", "(UTC)", "WHAT", "DETAIL", "BY"]
    assert "validation-failed" in lines[1] and "quarantined" in lines[2]
    assert lines[-1].startswith(f"{BAD}: 1 incident in 90d; validations 0 passed, 1 failed")
    assert "quarantined now since" in lines[-1] and "waits for repair" in lines[-1]

    code, out, err = run(sim, capsys, "history", BAD, "-o", "csv")
    assert code == 0, err
    assert out.splitlines()[0] == "node,at,at_unix_s,kind,detail,by"


def test_node_healths_ledger_and_restarts_are_shown_with_the_time_to_repair(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    out_obj = node_obj(cluster, BAD)
    out_obj["metadata"].setdefault("annotations", {}).update(
        {
            "krea.ai/evicted-at": rfc3339(now - 7200),
            "krea.ai/evicted-by": NH,
            "krea.ai/evicted-reason": "GPU 3 at 92 °C",
        }
    )
    ledger = observe(None, {BAD: out_obj}, now - 7000, user=NH, restoring=())
    ledger = observe(ledger, {BAD: node_obj(cluster, BAD)}, now - 3600, user=NH, restoring=())
    recorder = {"attributed": [[BAD, now - 7300, "training/dit", 2, "thermal"]]}
    made = cluster.request(
        "create namespace", "POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}}
    )
    assert made.ok or made.status == 409
    write_state(cluster, NAMESPACE, {"node-health": {"ledger": ledger, "recorder": recorder}})

    got = history(sim, capsys)
    assert [e["kind"] for e in got["entries"]] == ["restored", "quarantined", "restart"]
    assert got["entries"][0]["by"] == "an operator (nodes restore / uncordon)"
    assert got["entries"][2]["detail"] == "training/dit restart #2 (thermal)"
    summary = got["summary"]
    assert summary["recorded"] is True and summary["quarantined_now"] is False
    assert summary["repairs"] == 1
    assert summary["time_to_repair_mean_s"] == pytest.approx(3600, abs=2)

    code, out, err = run(sim, capsys, "history", BAD)
    assert code == 0, err
    assert "time to repair mean 60m, p90 60m (1 repair)" in out.splitlines()[-1]


def test_a_node_with_nothing_on_record_is_one_line(
    sim: LocalApiServer, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(sim, capsys, "history", BAD)
    assert code == 0, err
    assert out == (
        f"Nothing on record for node {BAD}: no quarantine, validation, restore or attributed "
        "restart in the last 90d\n"
    )
    got = history(sim, capsys)
    assert got["entries"] == [] and got["summary"]["incidents"] == 0


def test_an_unknown_node_is_one_line_exit_2(
    sim: LocalApiServer, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(sim, capsys, "history", "no-such-node")
    assert code == 2 and out == ""
    assert err == "error: node no-such-node not found (krea-ops nodes list shows the nodes)\n"
