"""``krea-ops queue`` against the simulated world: real Kueue objects written by the
simulated Kueue, real gangs (JobSets) and pods, read through the real CLI.

One world for the module (4 nodes x 8 GPUs: training quota 24, inference 8, cohort
``gpu``): training ``big`` (2 x 8 GPUs) runs, an inference pod (8 GPUs) runs, training
``next`` (3 x 8) waits for quota. The last test cordons and taints nodes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from commands.main import invoke
from krea_ops.kube.cluster import Cluster
from krea_ops.model import Severity
from krea_ops.queue import read_queues
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from tests.conftest import wait_for
from tests.telemetry.conftest import Prometheus

KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "training", "jobsets")
PARTS = ("cluster", "kueue")
NODES = [f"gpu-node-{i:03d}" for i in range(4)]


def _custom(w: SimWorld) -> Any:
    return client.CustomObjectsApi(w.client)


def _core(w: SimWorld) -> Any:
    return client.CoreV1Api(w.client)


def _cond(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def _workload_of(w: SimWorld, ns: str, owner: str) -> dict[str, Any] | None:
    items = _custom(w).list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]
    for wl in items:
        if any(r.get("name") == owner for r in wl["metadata"].get("ownerReferences") or []):
            return dict(wl)
    return None


def _running(w: SimWorld, ns: str, selector: str, count: int) -> list[dict[str, Any]] | None:
    raw = _core(w).list_namespaced_pod(ns, label_selector=selector, _preload_content=False)
    pods = [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]
    ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def _inference_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "flux-0",
            "namespace": "inference",
            "labels": {
                "app": "flux",
                "kueue.x-k8s.io/queue-name": "inference",
                "kueue.x-k8s.io/priority-class": "inference",
            },
        },
        "spec": {
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
            "containers": [
                {
                    "name": "server",
                    "image": "krea/flux-serve:latest",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=4,
        speed=120,
        exporters=False,
        prometheus=False,
        # Kueue's tiered QuotaReserved reasons (WaitingForQuota, ...), which this suite
        # reads, come with its UnadmittedWorkloadsObservability gate (off by default).
        extra={"slow_burners": False, "unadmitted_workloads_observability": True},
    )
    with SimWorld(config, tmp_path_factory.mktemp("world"), parts=PARTS) as w:
        submit_training(w.client, "big", nodes=2)
        wait_for(lambda: _running(w, "training", "krea.ai/training=big", 2), timeout=30)
        _core(w).create_namespaced_pod("inference", _inference_pod())
        wait_for(lambda: _running(w, "inference", "app=flux", 1), timeout=30)
        submit_training(w.client, "next", nodes=3)
        wait_for(
            lambda: (
                _cond(_workload_of(w, "training", "next"), "QuotaReserved").get("reason")
                == "WaitingForQuota"
            ),
            timeout=20,
        )
        yield w


@pytest.fixture(autouse=True)
def _clean_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")


def _cli(w: SimWorld, capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    """stdout of ``krea-ops queue ARGS`` (stderr when ``code`` is not 0)."""
    capsys.readouterr()
    rc = invoke(["--kubeconfig", str(w.kubeconfig), "queue", *args])
    out, err = capsys.readouterr()
    assert rc == code, err
    return out if code == 0 else err


def _json(w: SimWorld, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    return json.loads(_cli(w, capsys, *args, "-o", "json"))


def _gpu(entries: list[dict[str, Any]], flavor: str, key: str = "total") -> float:
    for f in entries:
        if f["name"] == flavor:
            (r,) = [r for r in f["resources"] if r["name"] == "nvidia.com/gpu"]
            return float(r[key])
    raise AssertionError(f"no {flavor} in {entries}")


def test_list_json_matches_the_cluster_queue_objects(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    custom = _custom(world)

    def settled() -> list[dict[str, Any]] | None:
        rows = _json(world, capsys, "list")
        training = next(r for r in rows if r["name"] == "training")
        ok = (training["pending_workloads"], training["admitted_workloads"]) == (1, 1)
        return rows if ok else None

    rows = wait_for(settled, timeout=20)
    assert [r["name"] for r in rows] == ["inference", "training"]
    for row in rows:
        obj = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", row["name"])
        status = obj["status"]
        assert row["cohort"] == obj["spec"]["cohortName"] == "gpu"
        assert row["queueing_strategy"] == "BestEffortFIFO"
        assert row["active"] is True and row["active_reason"] == "Ready"
        for key in ("pending_workloads", "reserving_workloads", "admitted_workloads"):
            assert row[key] == status[key.replace("_w", "W")], key
        spec_flavors = obj["spec"]["resourceGroups"][0]["flavors"]
        assert [f["flavor"] for f in row["flavors"]] == [f["name"] for f in spec_flavors]
        for f, spec in zip(row["flavors"], spec_flavors, strict=True):
            assert f["resource"] == "nvidia.com/gpu"
            assert f["nominal"] == int(spec["resources"][0]["nominalQuota"])
            assert f["reserved"] == _gpu(status["flavorsReservation"], f["flavor"])
            assert f["used"] == _gpu(status["flavorsUsage"], f["flavor"])
            assert f["borrowed"] == _gpu(status["flavorsReservation"], f["flavor"], "borrowed")
            assert f["free"] == max(f["nominal"] - f["reserved"], 0)
    training = rows[1]
    (h200,) = training["flavors"]
    assert (h200["nominal"], h200["reserved"], h200["used"], h200["free"]) == (24, 16, 16, 8)
    # the flavor's nodes: 4 healthy nodes x 8 GPUs against 24 + 8 GPUs of quota
    cap = h200["capacity"]
    assert (cap["nodes"], cap["healthy_nodes"], cap["healthy_gpus"]) == (4, 4, 32)
    assert (cap["nominal_gpus"], cap["drift_gpus"]) == (32, 0)
    assert cap["not_healthy"] == []
    (lq,) = training["local_queues"]
    lq_obj = custom.get_namespaced_custom_object(*KUEUE, "training", "localqueues", "training")
    assert (lq["namespace"], lq["name"], lq["cluster_queue"]) == ("training",) * 3
    assert lq["pending_workloads"] == lq_obj["status"]["pendingWorkloads"] == 1
    assert lq["admitted_workloads"] == lq_obj["status"]["admittedWorkloads"] == 1
    assert lq["reserved_gpus"] == 16
    inference = rows[0]
    assert [f["flavor"] for f in inference["flavors"]] == ["h200", "burst"]
    assert inference["flavors"][0]["reserved"] == 8
    # no virtual-kubelet node in this world: the burst quota has no node behind it
    assert inference["flavors"][1]["capacity"]["drift_gpus"] == -inference["flavors"][1]["nominal"]

    table = _cli(world, capsys, "list")
    header = table.splitlines()[0].split()
    assert header[:3] == ["CLUSTERQUEUE", "COHORT", "FLAVOR"] and "DRIFT" in header
    assert max(len(line) for line in table.splitlines()[:4]) <= 80
    assert "flavor h200: 32 healthy GPUs on 4 of 4 nodes, quota 32, drift 0" in table


def test_workloads_filter_by_queue_and_namespace(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    every = _json(world, capsys, "workloads")
    assert {(w["namespace"], w["owner"]) for w in every} == {
        ("training", "JobSet/big"),
        ("training", "JobSet/next"),
        ("inference", "Pod/flux-0"),
    }
    training = _json(world, capsys, "workloads", "--namespace", "training")
    assert {w["owner"] for w in training} == {"JobSet/big", "JobSet/next"}
    by_queue = _json(world, capsys, "workloads", "--queue", "inference")
    assert [w["owner"] for w in by_queue] == ["Pod/flux-0"]
    assert by_queue[0]["state"] == "admitted" and by_queue[0]["flavors"] == ["h200"]
    assert by_queue[0]["priority"] == 100 and by_queue[0]["priority_class"] == "inference"
    assert _json(world, capsys, "workloads", "--queue", "training", "-n", "inference") == []

    nxt = next(w for w in training if w["owner"] == "JobSet/next")
    assert nxt["state"] == "pending" and nxt["cluster_queue"] == "training"
    assert (nxt["pods"], nxt["gpus_per_pod"], nxt["total_gpus"]) == (3, 8, 24)
    assert nxt["pod_sets"] == [
        {"name": "trainer", "count": 3, "gpus_per_pod": 8, "total_gpus": 24, "flavor": None}
    ]
    # the simulator serves no visibility API: the position is computed and says so
    assert (nxt["position"], nxt["position_estimated"]) == (0, True)
    assert nxt["pending_reason"] == "WaitingForQuota"
    raw = _workload_of(world, "training", "next")
    assert nxt["name"] == raw["metadata"]["name"]  # type: ignore[index]
    assert nxt["pending_message"] == _cond(raw, "QuotaReserved")["message"]
    big = next(w for w in training if w["owner"] == "JobSet/big")
    assert big["state"] == "admitted" and big["position"] is None
    assert big["admitted_at"] is not None and big["evictions"] == 0

    table = _cli(world, capsys, "workloads", "-q", "training")
    assert "flux" not in table and "~0" in table and "WaitingForQuota" in table
    assert max(len(line) for line in table.splitlines()) <= 80


def test_why_a_gang_waits_for_quota(world: SimWorld, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _workload_of(world, "training", "next")
    message = _cond(raw, "QuotaReserved")["message"]
    (report,) = _json(world, capsys, "why", "next", "--namespace", "training")
    assert report["workload"]["name"] == raw["metadata"]["name"]  # type: ignore[index]
    assert (report["pods"], report["gpus_per_pod"], report["total_gpus"]) == (3, 8, 24)
    assert report["whole_node"] is True
    assert report["blockers"][0] == "quota"
    assert report["kueue_reason"] == "WaitingForQuota"
    assert report["kueue_message"] == message
    (fit,) = report["flavors"]
    # 24 nominal - 16 reserved = 8 free; inference uses its own 8, so the cohort lends 0
    assert (fit["nominal_gpus"], fit["reserved_gpus"], fit["free_quota_gpus"]) == (24, 16, 8)
    assert (fit["available_gpus"], fit["max_gpus"], fit["quota_fits"]) == (8, 32, False)
    # free GPUs per healthy node: one node idle, three full
    assert sorted(n["free_gpus"] for n in fit["free_by_node"]) == [0, 0, 0, 8]
    assert fit["nodes_fitting_one_pod"] == 1 and fit["pods_placeable"] == 1

    text = _cli(world, capsys, "why", "next")
    flat = " ".join(text.split())
    assert "3 pods x 8 GPUs = 24 GPUs, each pod needs a whole node" in flat
    assert "quota 24 nominal, 16 reserved, 8 free" in flat
    assert "8 available of 24 needed" in flat
    assert "not enough unreserved quota now" in flat
    assert f'Kueue says: WaitingForQuota "{message}"' in flat
    assert max(len(line) for line in text.splitlines()) <= 80

    err = _cli(world, capsys, "why", "nothing-here", "-n", "training", code=2)
    assert err == (
        "error: workload nothing-here not found in namespace training; "
        "krea-ops queue workloads lists them\n"
    )


def test_cordoned_and_tainted_nodes_make_drift_negative_and_block_the_gang(
    world: SimWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    core = _core(world)
    (flux,) = _running(world, "inference", "app=flux", 1) or []
    busy = {flux["spec"]["nodeName"]}
    busy |= {
        p["spec"]["nodeName"] for p in _running(world, "training", "krea.ai/training=big", 2) or []
    }
    assert len(busy) == 3  # one 8-GPU pod per node
    # take two nodes out that do not host the inference pod
    cordoned, tainted = [n for n in NODES if n != flux["spec"]["nodeName"]][:2]
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    taint = {"key": "krea.ai/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    core.patch_node(tainted, {"spec": {"taints": [taint]}})

    rows = _json(world, capsys, "list")
    cap = next(r for r in rows if r["name"] == "training")["flavors"][0]["capacity"]
    assert (cap["healthy_nodes"], cap["healthy_gpus"], cap["unavailable_gpus"]) == (2, 16, 16)
    assert cap["drift_gpus"] == 16 - 32
    assert {(n["node"], n["state"]) for n in cap["not_healthy"]} == {
        (cordoned, "cordoned"),
        (tainted, "tainted"),
    }
    assert next(n for n in cap["not_healthy"] if n["state"] == "tainted")["detail"] == (
        "krea.ai/unhealthy=xid-79:NoSchedule"
    )
    assert "drift -16" in _cli(world, capsys, "list")

    # health verdicts from the health module count too: a BAD node is not capacity, an
    # UNKNOWN one is counted apart
    healthy = [n for n in NODES if n not in (cordoned, tainted)]
    snap = read_queues(
        Cluster(world.client), {healthy[0]: Severity.BAD, healthy[1]: Severity.UNKNOWN}
    )
    h200 = snap.flavors["h200"]
    assert (h200.healthy_gpus, h200.unknown_gpus, h200.unavailable_gpus) == (0, 8, 24)
    assert h200.drift_gpus == -32 and snap.health_judged

    # big goes: Kueue admits next on quota alone, but 2 healthy nodes cannot hold 3 pods
    _custom(world).delete_namespaced_custom_object(*JOBSET, "big")
    wait_for(
        lambda: _cond(_workload_of(world, "training", "next"), "Admitted").get("status") == "True",
        timeout=30,
    )

    def stuck() -> dict[str, Any] | None:
        # the one pod that fits is bound, then Running: wait for that too, not only for
        # the two that cannot be placed (a loaded machine shows the pending ones first)
        (report,) = _json(world, capsys, "why", "next")
        return report if report["pods_unscheduled"] == 2 and report["pods_running"] == 1 else None

    report = wait_for(stuck, timeout=30)
    assert report["workload"]["state"] == "admitted"
    assert report["pods_running"] == 1
    assert report["blockers"] == ["capacity_max"]
    (fit,) = report["flavors"]
    assert fit["healthy_nodes"] == 2 and fit["pods_placeable_empty"] == 2
    assert fit["gang_gpu_pods"] == 3
    flat = " ".join(_cli(world, capsys, "why", "next").split())
    assert "2 of its 3 pods have no node yet (1 bound)" in flat
    assert f"{cordoned} (cordoned, 8 GPUs)" in flat
    assert f"{tainted} (tainted krea.ai/unhealthy=xid-79:NoSchedule, 8 GPUs)" in flat
    assert "not enough healthy nodes to hold the gang even when empty" in flat


def test_help_texts_have_no_square_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["queue"], ["queue", "list"], ["queue", "workloads"], ["queue", "why"]):
        assert invoke([*args, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: krea-ops queue" in out and "default: all namespaces" in out


def test_list_reads_the_nodes_once_and_asks_for_kueues_versions_once(
    world: SimWorld, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``queue list`` judges the flavors' nodes against the one node list it reads (at
    5,000 nodes a LIST is about half a second), and asks which versions of Kueue's API
    the server serves once for its three kinds, not once per kind."""
    asked: list[tuple[str, str, dict[str, Any]]] = []
    real = Cluster.request

    def recording(self: Cluster, what: str, method: str, path: str, **kw: Any) -> Any:
        asked.append((method, path, dict(kw.get("query") or {})))
        return real(self, what, method, path, **kw)

    monkeypatch.setattr(Cluster, "request", recording)
    # with a Prometheus (no exporter in it: every node's verdict unknown), so that the
    # verdicts are read and judged as well
    prometheus = Prometheus([])
    try:
        capsys.readouterr()
        rc = invoke(["--kubeconfig", str(world.kubeconfig), "--prometheus", prometheus.url,
                     "queue", "list", "-o", "json"])  # fmt: skip
        out, err = capsys.readouterr()
    finally:
        prometheus.stop()
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["inference", "training"]
    assert rows[1]["flavors"][0]["capacity"]["healthy_nodes"] == 0  # (judged: unknown)
    node_lists = [q for m, p, q in asked if (m, p) == ("GET", "/api/v1/nodes")]
    assert len([q for q in node_lists if not q.get("continue")]) == 1, node_lists
    discovery = Counter(p for m, p, _ in asked if m == "GET" and p.startswith("/apis") and (
        p == "/apis" or p.count("/") == 3))  # fmt: skip
    assert discovery, asked
    assert max(discovery.values()) == 1, discovery
