"""``krea-ops queue`` on a bare simulated API server holding exactly the Kueue objects
each test writes (the server validates them against Kueue's real CRDs): states and the
Kueue bug flag, estimated positions, borrowing in a cohort, flavor node taints, the
v1beta1 fallback, and a cluster without Kueue."""

from __future__ import annotations

import calendar
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from commands.main import invoke
from krea_ops.kube.cluster import Cluster
from krea_ops.sim.apiserver.local import LocalApiServer, bundled_crds

GROUP = "kueue.x-k8s.io"
V2 = (GROUP, "v1beta2")
T0 = "2026-11-29T21:00:00Z"


@pytest.fixture(autouse=True)
def _clean_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KREA_OPS_CONFIG", "/nonexistent/krea-ops.yaml")


def _run(kubeconfig: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = invoke(["--kubeconfig", str(kubeconfig), "queue", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _json(kubeconfig: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    rc, out, err = _run(kubeconfig, capsys, *args, "-o", "json")
    assert rc == 0, err
    return json.loads(out)


def _node(name: str, pool: str, *, ready: bool = True, taints: list[Any] | None = None) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"krea.ai/pool": pool}},
        "spec": {"taints": taints or []},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "",
                    "lastHeartbeatTime": T0,
                    "lastTransitionTime": T0,
                }
            ],
        },
    }


def _cond(ctype: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": T0}  # fmt: skip


def _workload(
    ns: str, name: str, *, queue: str = "q", count: int = 2, gpus: int = 8, priority: int = 0
) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "priorityClassRef": {
                "group": GROUP,
                "kind": "WorkloadPriorityClass",
                "name": "high" if priority >= 100 else "low",
            },
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "krea/dit:latest",
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def _admission(cq: str, count: int, gpus: int) -> dict[str, Any]:
    return {
        "clusterQueue": cq,
        "podSetAssignments": [
            {
                "name": "main",
                "flavors": {"nvidia.com/gpu": "h200"},
                "resourceUsage": {"nvidia.com/gpu": str(count * gpus)},
                "count": count,
            }
        ],
    }


WAITING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
    "in flavor h200, 16 more needed"
)


def _cq(name: str, flavors: list[tuple[str, int, int | None]]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": "gpu",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": f,
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": str(q)}
                                | ({"borrowingLimit": str(b)} if b is not None else {})
                            ],
                        }
                        for f, q, b in flavors
                    ],
                }
            ],
        },
    }


def _cq_status(flavors: list[tuple[str, int, int]], pending: int, admitted: int) -> Any:
    usage = [
        {"name": f, "resources": [{"name": "nvidia.com/gpu", "total": str(t), "borrowed": str(b)}]}
        for f, t, b in flavors
    ]
    return {
        "status": {
            "conditions": [_cond("Active", "True", "Ready", "Can admit new workloads")],
            "pendingWorkloads": pending,
            "reservingWorkloads": admitted,
            "admittedWorkloads": admitted,
            "flavorsReservation": usage,
            "flavorsUsage": usage,
        }
    }


@pytest.fixture(scope="module")
def kueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalApiServer]:
    with LocalApiServer(tmp_path_factory.mktemp("api")) as sim:
        api = sim.api_client()
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        for node in (
            _node("n1", "h200"),
            _node("n2", "h200"),
            _node("n3", "h200", ready=False),
            _node("s1", "spot", taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}]),
        ):
            core.create_node(node)
        for ns in ("team-a", "team-b"):
            core.create_namespace({"metadata": {"name": ns}})
        custom.create_cluster_custom_object(*V2, "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": "h200"}, "spec": {"nodeLabels": {"krea.ai/pool": "h200"}},
        })  # fmt: skip
        custom.create_cluster_custom_object(*V2, "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": "spot"},
            "spec": {"nodeLabels": {"krea.ai/pool": "spot"},
                     "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}]},
        })  # fmt: skip
        custom.create_cluster_custom_object(
            *V2, "clusterqueues", _cq("train", [("h200", 16, None), ("spot", 8, None)])
        )
        custom.create_cluster_custom_object(*V2, "clusterqueues", _cq("other", [("h200", 8, 8)]))
        custom.patch_cluster_custom_object_status(
            *V2, "clusterqueues", "train",
            _cq_status([("h200", 16, 0), ("spot", 0, 0)], pending=3, admitted=2),
        )  # fmt: skip
        custom.patch_cluster_custom_object_status(
            *V2, "clusterqueues", "other", _cq_status([("h200", 12, 4)], pending=0, admitted=1)
        )
        for ns in ("team-a", "team-b"):
            custom.create_namespaced_custom_object(*V2, ns, "localqueues", {
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": ns}, "spec": {"clusterQueue": "train"},
            })  # fmt: skip

        def put(ns: str, body: dict[str, Any], status: dict[str, Any] | None) -> None:
            custom.create_namespaced_custom_object(*V2, ns, "workloads", body)
            if status is not None:
                name = body["metadata"]["name"]
                custom.patch_namespaced_custom_object_status(
                    *V2, ns, "workloads", name, {"status": status}
                )

        waiting = _cond("QuotaReserved", "False", "WaitingForQuota", WAITING)
        put("team-a", _workload("team-a", "w-low", priority=10), {"conditions": [waiting]})
        put("team-a", _workload("team-a", "w-high", priority=100), {"conditions": [waiting]})
        put("team-b", _workload("team-b", "w-low", priority=10), {"conditions": [waiting]})
        # Kueue bug #14811: evicted for recovery, admission never cleared
        put("team-a", _workload("team-a", "stuck", priority=100), {
            "admission": _admission("train", 2, 8),
            "conditions": [
                _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in train"),
                _cond("Admitted", "True", "Admitted", "The workload is admitted"),
                _cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout"),
            ],
        })  # fmt: skip
        put("team-a", _workload("team-a", "again", priority=10), {
            "conditions": [
                _cond("QuotaReserved", "False", "Pending", "Preempted to accommodate a workload"),
                _cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
                _cond("Requeued", "True", "Preempted", "Preempted to accommodate a workload"),
            ],
            "requeueState": {"count": 2, "requeueAt": "2026-11-29T22:00:00Z"},
            "schedulingStats": {"evictions": [
                {"reason": "Preempted", "underlyingCause": "", "count": 2},
                {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1},
            ]},
        })  # fmt: skip
        put("team-a", _workload("team-a", "done", count=1), {
            "conditions": [_cond("Finished", "True", "Succeeded", "Job finished successfully")],
        })  # fmt: skip
        api.close()
        yield sim


def test_states_bug_flag_history_and_estimated_positions(
    kueue: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _json(kueue.kubeconfig, capsys, "workloads", "-n", "team-a")
    by = {w["name"]: w for w in rows}
    assert {n: w["state"] for n, w in by.items()} == {
        "again": "evicted",
        "done": "finished",
        "stuck": "admitted",
        "w-high": "pending",
        "w-low": "pending",
    }
    assert by["stuck"]["evicted_holding_quota"] is True
    assert by["stuck"]["evicted_reason"] == "PodsReadyTimeout"
    assert by["stuck"]["flavors"] == ["h200"] and by["stuck"]["position"] is None
    assert not any(w["evicted_holding_quota"] for n, w in by.items() if n != "stuck")
    assert (by["again"]["evictions"], by["again"]["requeue_count"]) == (3, 2)
    assert by["again"]["requeue_at"] == calendar.timegm((2026, 11, 29, 22, 0, 0))
    assert by["again"]["preempted_reason"] is None and by["again"]["evicted_reason"] == "Preempted"
    assert by["done"]["finished_reason"] == "Succeeded" and by["done"]["position"] is None
    assert by["w-high"]["priority_class"] == "high" and by["w-high"]["priority"] == 100
    # BestEffortFIFO across the ClusterQueue (both namespaces): priority first, then age
    every = _json(kueue.kubeconfig, capsys, "workloads", "--queue", "train")
    positions = {
        (w["namespace"], w["name"]): w["position"] for w in every if w["position"] is not None
    }
    assert positions[("team-a", "w-high")] == 0
    assert sorted(positions.values()) == [0, 1, 2, 3]
    assert all(w["position_estimated"] for w in every if w["position"] is not None)
    assert _json(kueue.kubeconfig, capsys, "workloads", "--queue", "other") == []

    rc, table, _ = _run(kueue.kubeconfig, capsys, "workloads", "-n", "team-a")
    assert rc == 0
    stuck = next(line for line in table.splitlines() if " stuck " in line)
    assert "admitted!" in stuck
    assert "Kueue bug #14811" in table


def test_list_shows_borrowing_quota_and_flavor_node_taints(
    kueue: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {r["name"]: r for r in _json(kueue.kubeconfig, capsys, "list")}
    other = rows["other"]["flavors"][0]
    assert (other["nominal"], other["borrowing_limit"], other["reserved"]) == (8, 8, 12)
    assert (other["borrowed"], other["free"]) == (4, 0)
    train = {f["flavor"]: f for f in rows["train"]["flavors"]}
    assert rows["train"]["pending_workloads"] == 3
    assert [q["namespace"] for q in rows["train"]["local_queues"]] == ["team-a", "team-b"]
    h200 = train["h200"]["capacity"]
    # n3 is NotReady: 16 healthy GPUs under 16 + 8 GPUs of quota
    assert (h200["healthy_gpus"], h200["nominal_gpus"], h200["drift_gpus"]) == (16, 24, -8)
    assert h200["not_healthy"] == [
        {"node": "n3", "gpus": 8, "state": "not_ready", "detail": "KubeletNotReady"}
    ]
    # s1 carries the taint the spot flavor declares in nodeTaints: it is capacity
    spot = train["spot"]["capacity"]
    assert (spot["healthy_nodes"], spot["healthy_gpus"], spot["drift_gpus"]) == (1, 8, 0)


def test_why_names_quota_borrowers_and_unready_nodes(
    kueue: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    (report,) = _json(kueue.kubeconfig, capsys, "why", "w-high")
    assert report["blockers"] == ["quota"]
    assert (report["kueue_reason"], report["kueue_message"]) == ("WaitingForQuota", WAITING)
    fits = {f["flavor"]: f for f in report["flavors"]}
    assert list(fits) == ["h200", "spot"]
    h200 = fits["h200"]
    assert (h200["free_quota_gpus"], h200["available_gpus"], h200["max_gpus"]) == (0, 0, 24)
    assert h200["borrowers"] == [{"cluster_queue": "other", "borrowed_gpus": 4}]
    assert (h200["healthy_nodes"], h200["free_healthy_gpus"], h200["pods_placeable"]) == (2, 16, 2)
    assert fits["spot"]["max_gpus"] == 8 and fits["spot"]["available_gpus"] == 8

    rc, text, _ = _run(kueue.kubeconfig, capsys, "why", "w-high", "-n", "team-a")
    flat = " ".join(text.split())
    assert rc == 0
    assert "team-a/w-high is pending in LocalQueue q (ClusterQueue train), position 0" in flat
    assert "(borrowing now: other 4)" in flat
    assert "n3 (not ready KubeletNotReady, 8 GPUs)" in flat
    assert "Waiting for: not enough unreserved quota now." in flat
    assert f'Kueue says: WaitingForQuota "{WAITING}"' in flat

    (stuck,) = _json(kueue.kubeconfig, capsys, "why", "stuck", "-n", "team-a")
    assert stuck["blockers"][0] == "evicted_holding_quota"
    assert stuck["kueue_reason"] == "PodsReadyTimeout"
    (done,) = _json(kueue.kubeconfig, capsys, "why", "done")
    assert done["blockers"] == ["finished"]


def test_unknown_and_ambiguous_workloads_are_bad_input(
    kueue: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _run(kueue.kubeconfig, capsys, "why", "w-low")
    assert rc == 2
    assert err.startswith("error: workload w-low is ambiguous (team-a/w-low, team-b/w-low)")
    (one,) = _json(kueue.kubeconfig, capsys, "why", "w-low", "--namespace", "team-b")
    assert one["workload"]["namespace"] == "team-b"
    rc, _, err = _run(kueue.kubeconfig, capsys, "why", "ghost")
    assert rc == 2
    assert err == (
        "error: workload ghost not found in any namespace; krea-ops queue workloads lists them\n"
    )


def test_why_takes_the_namespace_slash_name_the_dashboard_shows(
    kueue: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    (one,) = _json(kueue.kubeconfig, capsys, "why", "team-b/w-low")
    assert (one["workload"]["namespace"], one["workload"]["name"]) == ("team-b", "w-low")
    (same,) = _json(kueue.kubeconfig, capsys, "why", "team-b/w-low", "-n", "team-b")
    assert same["workload"]["namespace"] == "team-b"
    rc, out, err = _run(kueue.kubeconfig, capsys, "why", "team-a/w-low", "-n", "team-b")
    assert (rc, out) == (2, "")
    assert err == "error: workload team-a/w-low is in namespace team-a, not --namespace team-b\n"
    for bad in ("team-a/", "/w-low", "team-a/w-low/x"):
        rc, _, err = _run(kueue.kubeconfig, capsys, "why", bad)
        assert rc == 2 and err == f"error: workload {bad!r}: give NAME or NAMESPACE/NAME\n"


def _v1beta1_only(crd: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(crd)
    crd["spec"]["versions"] = [
        dict(v, storage=True) for v in crd["spec"]["versions"] if v["name"] == "v1beta1"
    ]
    crd["spec"].pop("conversion", None)
    return crd


def test_an_old_kueue_serving_only_v1beta1_reads_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wanted = {f"{p}.{GROUP}" for p in ("clusterqueues", "localqueues", "resourceflavors",
                                        "workloads")}  # fmt: skip
    with LocalApiServer(tmp_path / "api", crds=False) as sim:
        api = sim.api_client()
        ext: Any = client.ApiextensionsV1Api(api)
        for crd in bundled_crds():
            if crd["metadata"]["name"] in wanted:
                ext.create_custom_resource_definition(_v1beta1_only(crd))
        custom: Any = client.CustomObjectsApi(api)
        v1 = (GROUP, "v1beta1")
        cq = _cq("legacy", [("h200", 8, None)])
        cq["apiVersion"] = f"{GROUP}/v1beta1"
        cq["spec"]["cohort"] = cq["spec"].pop("cohortName")
        custom.create_cluster_custom_object(*v1, "clusterqueues", cq)
        wl = _workload("default", "old", priority=100)
        wl["apiVersion"] = f"{GROUP}/v1beta1"
        wl["spec"].pop("priorityClassRef")
        wl["spec"]["priorityClassName"] = "high"
        wl["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        custom.create_namespaced_custom_object(*v1, "default", "workloads", wl)
        api.close()

        (row,) = _json(sim.kubeconfig, capsys, "list")
        assert (row["name"], row["cohort"]) == ("legacy", "gpu")
        assert row["flavors"][0]["nominal"] == 8 and row["flavors"][0]["reserved"] is None
        (w,) = _json(sim.kubeconfig, capsys, "workloads")
        assert (w["name"], w["priority_class"], w["priority"]) == ("old", "high", 100)
        assert w["state"] == "pending" and w["cluster_queue"] is None


def test_a_cluster_without_kueue_fails_queue_commands_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LocalApiServer(tmp_path / "api", crds=False) as sim:
        api = sim.api_client()
        client.CoreV1Api(api).create_node(_node("n1", "h200"))
        for args in (["list"], ["workloads"], ["why", "anything"]):
            rc, out, err = _run(sim.kubeconfig, capsys, *args)
            assert rc == 1 and out == ""
            assert err.count("\n") == 1
            assert err.startswith("error: the cluster has no ")
            assert ".kueue.x-k8s.io API; install Kueue (kubectl apply" in err
        # the rest of the console keeps working on that cluster
        assert [n.name for n in Cluster(api).nodes()] == ["n1"]
        api.close()


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        out = set()
        for k, v in value.items():
            out.add(k)
            if k not in ("preemption", "node_labels"):  # objects copied from the spec
                out |= _keys(v)
        return out
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value)) if value else set()
    return set()


def test_every_json_key_is_documented(
    kueue: LocalApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = text.split("## queue list / queue workloads / queue why", 1)[1].split("\n## ")[0]
    seen = (
        _keys(_json(kueue.kubeconfig, capsys, "list"))
        | _keys(_json(kueue.kubeconfig, capsys, "workloads"))
        | _keys(_json(kueue.kubeconfig, capsys, "why", "w-high", "-n", "team-a"))
    )
    assert {k for k in seen if not re.search(rf"[`{{ ]{k}\b", section)} == set()


@pytest.mark.parametrize(
    ("reason", "message", "preempting"),
    [
        # Kueue's default (UnadmittedWorkloadsObservability off): reason Pending, and the
        # scheduler appends what it did to the message (pkg/scheduler/scheduler.go)
        ("Pending", WAITING + ". Pending the preemption of 2 workload(s)", True),
        # the same with the gate on
        (
            "WaitingForPreemptedWorkloads",
            WAITING + ". Pending the preemption of 1 workload(s)",
            True,
        ),
        ("Pending", WAITING, False),
    ],
)
def test_why_sees_kueue_preempting_for_a_workload_with_or_without_its_gate(
    reason: str, message: str, preempting: bool
) -> None:
    from krea_ops.queue import PENDING, PodSetInfo, WorkloadInfo, _blockers

    wl = WorkloadInfo(
        namespace="training",
        name="big",
        owner="JobSet/big",
        local_queue="training",
        cluster_queue="training",
        state=PENDING,
        active=True,
        priority=100,
        priority_class="high",
        pod_sets=(PodSetInfo("main", 2, 8),),
        pending_reason=reason,
        pending_message=message,
    )
    assert ("preempting" in _blockers(wl, None, True, (), None)) is preempting


def test_a_node_the_health_read_did_not_judge_is_of_unknown_health() -> None:
    """A node that joined after the fleet was judged is not counted healthy: queue list
    counts it as burst migrate and train launch do (unknown). Without any judgement
    (telemetry unavailable) the API's view stands, with the reason given beside it."""
    from krea_ops.model import NodeInfo, Severity
    from krea_ops.queue import node_capacity

    node = NodeInfo(name="new-node", ready=True, gpu_allocatable=8)
    judged = {"old-node": Severity.OK}
    assert node_capacity(node, (), judged).state == "unknown"
    assert node_capacity(node, (), {**judged, "new-node": Severity.SUSPECT}).state == "healthy"
    assert node_capacity(node, (), {"new-node": Severity.BAD}).state == "bad"
    assert node_capacity(node, (), None).state == "healthy"
