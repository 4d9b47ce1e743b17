"""``krea-ops nodes show NODE``'s validation section against a simulated API server: a
node's last validation as its ``krea.ai/validation`` annotation holds it (pass or fail,
level, when, by whom, the Job), a line per check with its figure against the pool's
baseline and where that comes from, the failing checks' details, the needs-repair label,
the pending-validation taint, and whether a node krea-ops evicted was validated since;
``-o json`` has the result as ``validation``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.validation import Check, Validation
from tests.conftest import sim_on_control_plane
from tests.runbook.conftest import _kubelets, fleet, kubelets, node_obj

__all__ = ["_kubelets", "kubelets"]  # a kubelet on every node the tests make

NODE = "gpu-node-001"
NEW = "gpu-node-002"  # joined pending validation
JOB = "krea-ops/krea-validate-gpu-node-001-quick-260101000000"
PENDING = {"key": "krea.ai/validation", "value": "pending", "effect": "NoSchedule"}

sim = sim_on_control_plane  # an API server per test, on each control plane


@pytest.fixture
def cluster(sim: LocalApiServer) -> Iterator[Cluster]:
    with sim.api_client() as api:
        c = Cluster(api, timeout_s=30)
        fleet(c, 10, taints={NEW: [PENDING]})
        yield c


def show(
    sim: LocalApiServer, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = invoke(["nodes", "show", *args, "--kubeconfig", str(sim.kubeconfig)])
    out, err = capsys.readouterr()
    return code, out, err


def section(out: str) -> list[str]:
    """The ``Validation:`` line and the indented lines under it."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Validation:"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return lines[start:end]


def record(cluster: Cluster, name: str, v: Validation, repair: str | None = None) -> None:
    """What ``nodes validate`` records: the annotation, and the label on a failure."""
    answer = cluster.request(
        f"patch node {name}",
        "PATCH",
        f"/api/v1/nodes/{name}",
        body={
            "metadata": {
                "annotations": {"krea.ai/validation": v.annotation()},
                "labels": {"krea.ai/needs-repair": repair},
            }
        },
        content_type="application/merge-patch+json",
    )
    assert answer.ok, answer.status


def passed(at: float) -> Validation:
    checks = (
        Check("dcgm", True, "8 tests passed"),
        Check(
            "nccl",
            True,
            "bus bandwidth 472.1 GB/s at 8589934592 B",
            472.1,
            "GB/s",
            476.0,
            "pool median of 4",
        ),
    )
    return Validation(NODE, "quick", at, checks, job=JOB, by="alice")


def failed(at: float) -> Validation:
    checks = (
        Check("dcgm", False, "failed Memory Bandwidth (GPU: 3): GPU 3 Thermal violations"),
        Check(
            "nccl",
            False,
            "bus bandwidth 261.3 GB/s, under 428.4 (90% of the baseline) at 8589934592 B",
            261.3,
            "GB/s",
            476.0,
            "nominal",
        ),
    )
    return Validation(NODE, "quick", at, checks, job=JOB, by="system:serviceaccount:x:nh")


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_a_passing_validation_shows_each_check_against_its_baseline(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = time.time() - 7200
    record(cluster, NODE, passed(at))
    _, out, _ = show(sim, capsys, NODE)
    assert section(out) == [
        f"Validation:  pass (quick) at {iso(at)} (120m ago) by alice, Job {JOB}",
        "  dcgm  pass  8 tests passed",
        "  nccl  pass  472.1 GB/s against 476.0 (pool median of 4)",
    ]
    # the JSON is not repeated among the annotations
    annotations = next(line for line in out.splitlines() if line.startswith("Annotations:"))
    assert "krea.ai/validation" not in annotations

    _, out, _ = show(sim, capsys, NODE, "-o", "json")
    [row] = json.loads(out)
    assert row["validation"] == passed(at).as_dict()
    assert row["validation"]["result"] == "pass" and row["validation"]["failed"] == []

    # a node never validated says so, and its JSON has null
    _, out, _ = show(sim, capsys, "gpu-node-000")
    assert section(out) == ["Validation:  none"]
    _, out, _ = show(sim, capsys, "gpu-node-000", "-o", "json")
    assert json.loads(out)[0]["validation"] is None


def test_a_failed_validation_of_an_evicted_node_shows_why_and_what_it_waits_for(
    sim: LocalApiServer, cluster: Cluster, audit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(cluster, NODE, passed(time.time() - 86400))  # before the eviction
    code = invoke(
        ["nodes", "evict", NODE, "--reason", "XID 79", "--yes", "--kubeconfig", str(sim.kubeconfig)]
    )
    assert code == 0
    evicted_at = node_obj(cluster, NODE)["metadata"]["annotations"]["krea.ai/evicted-at"]
    _, out, _ = show(sim, capsys, NODE)
    lines = section(out)
    assert lines[0].startswith("Validation:  pass (quick)")
    assert lines[-1] == (
        f"  evicted at {evicted_at}; none since its eviction: krea-ops nodes validate {NODE}"
    )

    at = time.time() + 30  # (ages under 0 read 0s)
    record(cluster, NODE, failed(at), repair="dcgm.nccl")
    _, out, _ = show(sim, capsys, NODE)
    assert section(out) == [
        f"Validation:  FAIL (quick) at {iso(at)} (0s ago) by system:serviceaccount:x:nh, Job {JOB}",
        "  dcgm  FAIL  failed Memory Bandwidth (GPU: 3): GPU 3 Thermal violations",
        "  nccl  FAIL  261.3 GB/s against 476.0 (nominal): bus bandwidth 261.3 GB/s, under "
        "428.4 (90% of the baseline) at 8589934592 B",
        "  needs repair: krea.ai/needs-repair=dcgm.nccl",
        f"  evicted at {evicted_at}; validated since",
    ]
    _, out, _ = show(sim, capsys, NODE, "-o", "yaml")
    assert "result: fail" in out and "- dcgm" in out

    _, out, _ = show(sim, capsys, NODE, "-o", "json")
    [row] = json.loads(out)
    got: dict[str, Any] = row["validation"]
    assert got["failed"] == ["dcgm", "nccl"] and got["by"] == "system:serviceaccount:x:nh"
    assert row["labels"]["krea.ai/needs-repair"] == "dcgm.nccl"


def test_a_node_that_joined_pending_validation_says_so(
    sim: LocalApiServer, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = show(sim, capsys, NEW)
    assert section(out) == [
        "Validation:  none",
        "  pending validation: tainted krea.ai/validation until it passes",
    ]
