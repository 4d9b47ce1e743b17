"""``burst migrate --back`` and ``--out`` killed between every pair of steps, then run
again: the same kill as tests/faults/test_runbook_kill.py (the executor's ``fence`` raises
``Killed`` before step k+1; after the last step, the ``end`` record is never written).

A move waits for its pod's replacement to be Ready on the other side. The workload is a
ReplicaSet's; on the upstream control plane its controller makes each replacement and the
scheduler places it (in-cluster first: the pods prefer it), and the test plays the
kubelets (``Replicas``: a pod bound to a node comes up Ready). The embedded API server has
no ReplicaSet controller and no scheduler, so there ``Replicas`` is a small one of each:
it keeps the workload at its replica count, each replacement bound Ready to the first
node with room and no taint against it, in-cluster first, else the virtual node.

"Converges": after the second run the nodes (taints, annotations: the steering of the
move lifted), the workload's Ready pods per side and the Events per (object, reason)
equal what one clean run leaves from the same start (pod names aside: replacements get
new ones), no pod was evicted twice (evictions across both attempts equal the clean run's)
and the second run ends ``done``."""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from krea_ops.burst import VK_TAINT_KEY
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.events import CONTROLLER as EVENTS_CONTROLLER
from krea_ops.runbook import burst as burst_runbook
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.burst import plan_migrate, read_side
from krea_ops.runbook.execute import execute
from krea_ops.runbook.plan import Plan
from tests.conftest import api_server, sim_on_control_plane, wait_for
from tests.faults.test_runbook_kill import (
    DiesBeforeTheEnd,
    Killed,
    killed_after,
    records,
    state,
)
from tests.kube.conftest import Kubelets, create, registered, set_status

NS = "serving"
VK = "vk-runpod"
IN_CLUSTER = ("gpu-node-000", "gpu-node-001")
REPLICAS = 3
LABELS = {"app": "serve", "krea.ai/workload": "inference", "pod-template-hash": "5d8f"}
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
GPU_NODE = {"allocatable": {"nvidia.com/gpu": "8", "pods": "110"},
            "capacity": {"nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
# the pods prefer in-cluster nodes (the scheduler weighs it; the embedded stand-in tries
# them first)
PREFER_IN_CLUSTER = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "preference": {"matchExpressions": [
        {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}}]}}  # fmt: skip


def _pod_spec() -> dict[str, Any]:
    return {
        "affinity": PREFER_IN_CLUSTER,
        "tolerations": [{"key": VK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "server",
                "image": "ghcr.io/krea-ai/dit-serve:test",
                "resources": {
                    "requests": {"nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
            }
        ],
    }


def _pod(name: str, node: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": LABELS}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": {**_pod_spec(), "nodeName": node}}


def _run_pod(cluster: Cluster, name: str, node: str, owner: dict[str, Any] | None) -> None:
    path = f"/api/v1/namespaces/{NS}/pods"
    create(cluster, path, _pod(name, node, owner))
    set_status(cluster, f"{path}/{name}", READY)


def _owned(cluster: Cluster) -> list[dict[str, Any]]:
    body = cluster.get("pods", f"/api/v1/namespaces/{NS}/pods")
    return [p for p in body["items"] if p["metadata"].get("ownerReferences")]


def _setup(cluster: Cluster, offsite: bool, control_plane: str) -> dict[str, Any]:
    """The nodes and the workload's pods, Ready; returns the ReplicaSet's reference, as
    its pods have it."""
    for name in IN_CLUSTER:
        create(cluster, "/api/v1/nodes",
               {"metadata": {"name": name, "labels": {"krea.ai/pool": "h200"}}})  # fmt: skip
        set_status(cluster, f"/api/v1/nodes/{name}", GPU_NODE)
    create(cluster, "/api/v1/nodes", {
        "metadata": {"name": VK, "labels": {"type": "virtual-kubelet"}},
        "spec": {"taints": [{"key": VK_TAINT_KEY, "value": "runpod", "effect": "NoSchedule"}]},
    })  # fmt: skip
    set_status(cluster, f"/api/v1/nodes/{VK}", GPU_NODE)
    for name in (*IN_CLUSTER, VK):
        registered(cluster, name)
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NS}})
    # the pods first, then their ReplicaSet, which adopts them (its controller's claim of
    # the pods its selector matches): it makes none of its own
    for i in range(REPLICAS):
        _run_pod(cluster, f"serve-5d8f-{i}", VK if offsite else IN_CLUSTER[0], None)
    rs = create(cluster, f"/apis/apps/v1/namespaces/{NS}/replicasets", {
        "metadata": {"name": "serve-5d8f", "labels": LABELS},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": LABELS},
                 "template": {"metadata": {"labels": LABELS}, "spec": _pod_spec()}},
    })  # fmt: skip
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-5d8f",
           "uid": rs["metadata"]["uid"], "controller": True,
           "blockOwnerDeletion": True}  # fmt: skip
    if control_plane == "upstream":
        wait_for(lambda: len(_owned(cluster)) == REPLICAS, timeout=30)
    else:  # no ReplicaSet controller: its adoption, as it patches each pod
        for i in range(REPLICAS):
            answer = cluster.request(
                "adopt", "PATCH", f"/api/v1/namespaces/{NS}/pods/serve-5d8f-{i}",
                body={"metadata": {"ownerReferences": [ref]}},
                content_type="application/merge-patch+json",
            )  # fmt: skip
            assert answer.ok, answer.body
    return ref


class Replicas:
    """What brings the workload's replacements up: on the upstream control plane the
    kubelets (a pod bound to a node comes up Ready; the ReplicaSet controller and the
    scheduler do the rest); on the embedded server the ReplicaSet controller and the
    scheduler it lacks too: every 20 ms, a pod Ready in place of each that went
    (in-cluster first, then the virtual node; never where a taint is against it or no GPU
    is free)."""

    def __init__(self, sim: Any, owner: dict[str, Any], control_plane: str) -> None:
        self.sim = sim
        self.owner = owner
        self.upstream = control_plane == "upstream"
        self.made = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Replicas:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _loop(self) -> None:
        with self.sim.api_client() as api:
            cluster = Cluster(api, timeout_s=30)
            while not self.stop.wait(0.02):
                body = cluster.get("pods", f"/api/v1/namespaces/{NS}/pods")
                active = [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]
                if self.upstream:
                    for pod in active:
                        if pod["spec"].get("nodeName") and pod["status"].get("phase") != "Running":
                            name = pod["metadata"]["name"]
                            set_status(cluster, f"/api/v1/namespaces/{NS}/pods/{name}", READY)
                    continue
                for _ in range(REPLICAS - len(active)):
                    probe = _pod("probe", "")
                    where = read_side(cluster, False, [VK]).place(probe) or read_side(
                        cluster, True, [VK]
                    ).place(probe)
                    if where is None:
                        break
                    _run_pod(cluster, f"serve-5d8f-{uuid.uuid4().hex[:5]}", where, self.owner)
                    self.made += 1


def _plan(cluster: Cluster, direction: str, audit_log: Path | None = None) -> Plan:
    return plan_migrate(
        cluster, [VK], direction=direction, user="alice", timeout_s=30, audit_log=audit_log
    )


def _placement(cluster: Cluster) -> tuple[int, int]:
    """(Ready pods of the workload in-cluster, on the virtual node)."""
    body = cluster.get("pods", f"/api/v1/namespaces/{NS}/pods")
    where = [p["spec"]["nodeName"] for p in body["items"] if not p["metadata"].get(
        "deletionTimestamp")]  # fmt: skip
    return len(where) - where.count(VK), where.count(VK)


def _events(cluster: Cluster) -> Counter[tuple[str, str]]:
    """Occurrences per (object, reason) of krea-ops' Events (the control plane's own
    components record theirs: a pod created, scheduled); a pod by its workload
    (replacements get names)."""
    out: Counter[tuple[str, str]] = Counter()
    for e in cluster.get("events", "/api/v1/events")["items"]:
        if e.get("reportingComponent") != EVENTS_CONTROLLER:
            continue
        ref = e["involvedObject"]
        name = "serve pod" if ref.get("kind") == "Pod" else ref.get("name")
        out[(f"{ref.get('kind')} {name}", e["reason"])] += int(e.get("count") or 1)
    return out


def _evictions(log: Path) -> int:
    return sum(
        1
        for r in records(log)
        if r["record"] == "step"
        for c in r["calls"]
        if c["path"].endswith("/eviction") and c["http_status"] == 201
    )


def _settled(cluster: Cluster) -> dict[str, Any]:
    nodes = state(cluster)["nodes"]
    return {"nodes": nodes, "placement": _placement(cluster), "events": _events(cluster)}


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A move looks for its replacement every 50 ms, not every second (the test's
    replicas come within 20 ms): the same waits, shorter."""
    monkeypatch.setattr(burst_runbook, "POLL_S", 0.05)


sim = sim_on_control_plane  # the killed run's API server, on each control plane


@pytest.fixture(autouse=True)
def kubelets(sim: Any) -> Iterator[Kubelets]:
    """The nodes' kubelets: alive (their Leases renewed), each ending its evicted pods'
    deletion."""
    with Kubelets(sim) as kubelets:
        yield kubelets


STEPS = {"back": 7, "out": 7}  # pause+Event, 3 moves, unpause+Event; taint x2, 3, untaint x2
CASES = [(d, k) for d, n in STEPS.items() for k in range(1, n + 1)]


# What one clean move leaves, per direction and control plane (placement, nodes, Events):
# every case of a direction starts from the same state and compares with it, so it runs
# once for the module, on an API server of its own.
_CLEAN: dict[tuple[str, str], dict[str, Any]] = {}


def clean_move(direction: str, tmp: Path, control_plane: str) -> dict[str, Any]:
    key = (direction, control_plane)
    if key not in _CLEAN:
        _CLEAN[key] = _clean_move(direction, tmp, control_plane)
    return copy.deepcopy(_CLEAN[key])


def _clean_move(direction: str, tmp: Path, control_plane: str) -> dict[str, Any]:
    offsite = direction == "back"
    with (
        api_server(control_plane, tmp / "clean") as server,
        Kubelets(server),
        server.api_client() as api,
    ):
        cluster = Cluster(api, timeout_s=30)
        owner = _setup(cluster, offsite, control_plane)
        plan = _plan(cluster, direction)
        assert len(plan.steps) == STEPS[direction], [s.description for s in plan.steps]
        clean_log = tmp / "clean.jsonl"
        with Replicas(server, owner, control_plane):
            assert execute(cluster, plan, audit=AuditLog(clean_log)).status == "done"
        want = _settled(cluster)
        assert want["placement"] == ((REPLICAS, 0) if offsite else (0, REPLICAS))
        assert _evictions(clean_log) == REPLICAS
        return want


@pytest.mark.parametrize(("direction", "k"), CASES, ids=[f"{d}-after-{k}" for d, k in CASES])
def test_migrate_killed_after_step_k_then_run_again_converges(
    sim: Any, tmp_path: Path, direction: str, k: int, control_plane: str
) -> None:
    offsite = direction == "back"
    want = clean_move(direction, tmp_path, control_plane)
    moved = REPLICAS  # one clean move evicts each pod once

    with sim.api_client() as api:
        cluster = Cluster(api, timeout_s=30)
        owner = _setup(cluster, offsite, control_plane)
        audit = AuditLog(tmp_path / "kill.jsonl")
        with Replicas(sim, owner, control_plane), pytest.raises(Killed):
            if k < STEPS[direction]:
                execute(cluster, _plan(cluster, direction), audit=audit, fence=killed_after(k))
            else:
                execute(cluster, _plan(cluster, direction), audit=DiesBeforeTheEnd(audit.path))
        assert [r["record"] for r in records(audit.path)] == ["start"] + ["step"] * k

        try:
            again = _plan(cluster, direction, audit.path)
        except BadInput as exc:
            # killed after its last move, its steering lifted and its Event recorded:
            # nothing is left to move, lift or record, and the command is refused with
            # nothing changed
            assert "to move; nothing was changed" in str(exc)
            assert k == STEPS[direction], exc
            got = _settled(cluster)
            assert got == want
            assert _evictions(audit.path) == moved
            return
        with Replicas(sim, owner, control_plane):
            result = execute(cluster, again, audit=audit)
        assert result.status == "done", result.as_dict()
        got = _settled(cluster)
        assert got["nodes"] == want["nodes"]  # the steering lifted, nothing else changed
        assert got["placement"] == want["placement"]
        assert got["events"] == want["events"], got["events"]
        assert _evictions(audit.path) == moved  # no pod moved twice
        for node in got["nodes"].values():
            taints = [
                json.dumps(t, sort_keys=True) for t in (node["spec"] or {}).get("taints") or ()
            ]
            assert len(taints) == len(set(taints)), node["spec"]
        log = records(audit.path)
        starts = [r["run_id"] for r in log if r["record"] == "start"]
        assert len(set(starts)) == 2
        assert [(r["run_id"], r["status"]) for r in log if r["record"] == "end"] == [
            (starts[1], "done")
        ]


def test_max_bounds_the_command_not_each_attempt(
    sim: Any, tmp_path: Path, control_plane: str
) -> None:
    """`burst migrate --back --max 2` killed after its first move: the run again moves one
    more, not two (2 evictions in all, as one clean run), and says so; a later command,
    after that one ended, has its own --max."""
    with sim.api_client() as api:
        cluster = Cluster(api, timeout_s=30)
        owner = _setup(cluster, True, control_plane)
        log = tmp_path / "max.jsonl"

        def plan() -> Plan:
            return plan_migrate(
                cluster, [VK], direction="back", user="alice", timeout_s=30, max_pods=2,
                audit_log=log,
            )  # fmt: skip

        first = plan()
        moves = [i for i, s in enumerate(first.steps, 1) if str(s.kind) == "migrate"]
        assert len(moves) == 2, [s.description for s in first.steps]
        with Replicas(sim, owner, control_plane), pytest.raises(Killed):
            execute(cluster, first, audit=AuditLog(log), fence=killed_after(moves[0]))
        assert _evictions(log) == 1
        again = plan()
        assert any(
            f.kind == "already-moved" and "moved 1 of its --max 2" in f.message
            for f in again.findings
        )
        with Replicas(sim, owner, control_plane):
            assert execute(cluster, again, audit=AuditLog(log)).status == "done"
        assert _evictions(log) == 2
        assert _placement(cluster) == (2, REPLICAS - 2)
        # the command ended: a new one may move --max 2 again
        later = plan()
        assert not any(f.kind == "already-moved" for f in later.findings)
        with Replicas(sim, owner, control_plane):
            assert execute(cluster, later, audit=AuditLog(log)).status == "done"
        assert _evictions(log) == 3 and _placement(cluster) == (REPLICAS, 0)
