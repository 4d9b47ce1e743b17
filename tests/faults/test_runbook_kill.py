"""Every runbook action killed between every pair of steps, then run again: the state
converges to what one clean run leaves, no side effect is made twice, and the audit log
shows both attempts.

"Killed after step k": the executor's ``fence`` hook (asked before every step) raises
``Killed``, a ``BaseException`` the executor does not catch, before step k+1. Nothing of
the executor runs after it: no further step, no ``end`` record (a process killed there
leaves exactly that: the ``start`` record and k ``step`` records). That this is the state
a real ``kill -9`` leaves is checked once, end to end, by SIGKILLing a ``krea-ops nodes
evict --yes`` subprocess while its next write is held at the API server.

"Converges" means: after the second run, the nodes (taints, cordon, annotations), pods,
JobSets and the controllers' ConfigMap are those one clean run on the same starting state
leaves, times aside (every RFC 3339 stamp compares equal: the second run writes its own);
no taint appears twice on a node; the second run ends ``done``. Events converge too:
each (object, reason) of the clean run is there exactly once, the Event of a change the
killed attempt made and never told of included (the second run records it, owed), and
each one was posted by an attempt's own recorded call. The audit log: two ``start``
records with different ``run_id``, the first with its k steps and no ``end``, the second
with its ``end`` ``done``."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from krea_ops.controllers.base import NAMESPACE
from krea_ops.controllers.status import plan_ack
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.events import CONTROLLER as EVENTS_CONTROLLER
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.burst import plan_pause, plan_unpause
from krea_ops.runbook.execute import execute
from krea_ops.runbook.nodes import plan_evict, plan_restore
from krea_ops.runbook.plan import Plan
from krea_ops.runbook.training import jobset_path, plan_launch, plan_resume
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.standins.kueue import KUEUE_API, kueue_objects
from krea_ops.training.manifests import TrainingSpec
from tests.conftest import EMBEDDED_ONLY, KREA_OPS, api_server, sim_on_control_plane, wait_for
from tests.faults.conftest import kubeconfig
from tests.kube.conftest import Kubelets, create, registered, set_status
from tests.runbook.conftest import fleet, pod_on
from tests.runbook.test_burst import virtual_nodes
from tests.runbook.test_train import NAME, NS, launched
from tests.training.dcp_fixture import write_dcp_checkpoint
from tests.validated import pass_validation

BAD = "gpu-node-001"
VKS = ("vk-runpod", "vk-salad")
REASON = "xid 79 on gpu 3"
SIM_USER = "krea-sim-admin"  # the user of the simulator's kubeconfig: who the CLI says acts
# When the evicted node passed its validation before ``nodes restore``: one time for the
# clean run and the killed one (the node's annotation is compared whole), after any
# eviction this session makes.
VALIDATED_AT = float(int(time.time())) + 24 * 3600

sim = sim_on_control_plane  # an API server per test, on each control plane


@pytest.fixture(autouse=True)
def kubelets(sim: Any) -> Iterator[Kubelets]:
    """The nodes' kubelets: alive, each ending its evicted pods' deletion."""
    with Kubelets(sim) as kubelets:
        yield kubelets


class Killed(BaseException):
    """The process dies here: nothing after it runs (not an error the executor handles)."""


class DiesBeforeTheEnd(AuditLog):
    """An audit log whose process dies as the run's ``end`` record is about to be written:
    killed after the last step."""

    def append(self, record: Mapping[str, Any]) -> None:
        if record.get("record") == "end":
            raise Killed
        super().append(record)


@dataclass(frozen=True)
class Action:
    """How to make the starting state and the plan of one runbook action."""

    setup: Callable[[Cluster, Path], None]
    plan: Callable[[Cluster, Path], Plan]
    steps: int  # how many steps its plan has from the starting state
    # what the control plane does after the action, waited for before the state is read
    # (given the cluster and its control plane)
    settle: Callable[[Cluster, str], None] = lambda _cluster, _control_plane: None


def _evict_setup(cluster: Cluster, tmp: Path) -> None:
    fleet(cluster, 4)
    # bare pods: a drain treats every owner but a DaemonSet alike, and a pod naming an
    # owner that does not exist is refused by Kueue's pod webhook (and deleted by the
    # garbage collector) on the upstream control plane
    pod_on(cluster, BAD, "web-0", owned_by=None)
    pod_on(cluster, BAD, "web-1", owned_by=None)
    pod_on(cluster, "gpu-node-002", "web-2", owned_by=None)


def _evict_plan(cluster: Cluster, tmp: Path) -> Plan:
    return plan_evict(cluster, [BAD], reason=REASON, user="alice", timeout_s=30)


def _restore_setup(cluster: Cluster, tmp: Path) -> None:
    _evict_setup(cluster, tmp)
    assert execute(cluster, _evict_plan(cluster, tmp)).status == "done"
    pass_validation(cluster, BAD, at=VALIDATED_AT)  # a restore wants a pass since


def _pause_plan(cluster: Cluster, tmp: Path) -> Plan:
    return plan_pause(cluster, VKS, reason="provider outage", user="alice")


def _unpause_setup(cluster: Cluster, tmp: Path) -> None:
    virtual_nodes(cluster)
    assert execute(cluster, _pause_plan(cluster, tmp)).status == "done"


def _launch_setup(cluster: Cluster, tmp: Path) -> None:
    """Kueue's objects as the simulated installation has them, and 4 healthy GPU nodes in
    its ``h200`` flavor: the gang fits."""
    plurals = {"Namespace": "/api/v1/namespaces",
               "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses"}  # fmt: skip
    for obj in kueue_objects(WorldConfig(nodes=4, exporters=False, prometheus=False)):
        kind, ns = obj["kind"], obj["metadata"].get("namespace")
        path = plurals.get(kind) or (
            f"/apis/{KUEUE_API}/namespaces/{ns}/localqueues"
            if ns
            else f"/apis/{KUEUE_API}/{kind.lower().replace('class', 'classe')}s"
        )
        create(cluster, path, obj)
    fleet(cluster, 4)
    for i in range(4):
        set_status(cluster, f"/api/v1/nodes/gpu-node-{i:03d}", {
            "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}]})  # fmt: skip
        registered(cluster, f"gpu-node-{i:03d}")


def _launch_settle(cluster: Cluster, control_plane: str) -> None:
    """Kueue admits the JobSet (its ClusterQueue has the gang's quota): on the upstream
    control plane, where Kueue runs, its admission unsuspends it and the Jobs' pods come."""
    if control_plane == "upstream":
        path = jobset_path(NS, NAME)
        wait_for(lambda: cluster.get("jobset", path)["spec"].get("suspend") is False, timeout=60)


def _launch_plan(cluster: Cluster, tmp: Path) -> Plan:
    spec = TrainingSpec(NAME, 2, "krea/dit:1.0", namespace=NS, args=("--lr=3e-4",))
    return plan_launch(cluster, spec, user="alice")[0]


def _resume_setup(cluster: Cluster, tmp: Path) -> None:
    write_dcp_checkpoint(tmp / "mnt" / NS / NAME / "step-100")
    launched(cluster)


def _resume_plan(cluster: Cluster, tmp: Path) -> Plan:
    mount = ("/checkpoints", tmp / "mnt")
    return plan_resume(
        cluster, NAME, namespace=NS, user="alice", mount=mount, audit_log=tmp / "audit.jsonl"
    )[0]


def _ack_setup(cluster: Cluster, tmp: Path) -> None:
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})


def _ack_plan(cluster: Cluster, tmp: Path) -> Plan:
    return plan_ack(cluster, NAMESPACE, reason="looked at rack 3", user="alice", now=time.time())


ACTIONS = {
    "nodes evict": Action(_evict_setup, _evict_plan, 4),
    "nodes restore": Action(_restore_setup, lambda c, _: plan_restore(c, [BAD], user="bob"), 2),
    "burst pause": Action(lambda c, _: virtual_nodes(c), _pause_plan, 4),
    "burst unpause": Action(_unpause_setup, lambda c, _: plan_unpause(c, VKS, user="bob"), 4),
    "train launch": Action(_launch_setup, _launch_plan, 1, _launch_settle),
    "train resume": Action(_resume_setup, _resume_plan, 2),
    "controller ack": Action(_ack_setup, _ack_plan, 1),
}
CASES = [(name, k) for name, a in ACTIONS.items() for k in range(1, a.steps + 1)]


def killed_after(k: int) -> Callable[[], None]:
    """A fence that lets k steps begin and kills the run before step k+1."""
    asked = [0]

    def fence() -> None:
        asked[0] += 1
        if asked[0] > k:
            raise Killed

    return fence


STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
# the volume of a pod's service account token, named by the ServiceAccount admission
# plugin of kube-apiserver with a random suffix
TOKEN_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")
# the Workload Kueue made for a JobSet, named after its uid, which its admission writes
# into the JobSet's pod templates
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
VOLATILE = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"}


def _plain(value: Any) -> Any:
    """``value`` with times, uids and versions out of the way."""
    if isinstance(value, dict):
        return {
            k: "<workload>" if k == WORKLOAD_ANNOTATION else _plain(v)
            for k, v in value.items()
            if k not in VOLATILE
        }
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return TOKEN_VOLUME.sub("kube-api-access-<random>", STAMP.sub("<time>", value))
    return value


# The taints the node lifecycle controller keeps in step with a node's conditions and
# cordon (``node.kubernetes.io/not-ready``, ``unreachable``, ``unschedulable``, ...):
# the control plane's, put and lifted on its own time after each change, not an action's.
CONTROL_PLANE_TAINTS = "node.kubernetes.io/"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def _ours(node: dict[str, Any]) -> dict[str, Any]:
    spec = dict(node.get("spec") or {})
    if "taints" in spec:
        spec["taints"] = [
            t for t in spec["taints"] if not t["key"].startswith(CONTROL_PLANE_TAINTS)
        ] or None
        if spec["taints"] is None:
            del spec["taints"]
    return {**node, "spec": spec}


def state(cluster: Cluster) -> dict[str, Any]:
    """What an action may change, as a user compares it (Events and the control plane's
    own taints apart)."""

    def items(path: str) -> dict[str, Any]:
        body = cluster.get(path, path)
        return {
            f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": _plain(
                {"metadata": o["metadata"], "spec": o.get("spec"), "data": o.get("data")}
            )
            for o in body["items"]
        }

    nodes = {name: _ours(node) for name, node in items("/api/v1/nodes").items()}
    # the pods of a JobSet's Jobs follow from the JobSet (compared below), named at random
    # by the Job controller (on the upstream control plane)
    pods = {
        name: pod
        for name, pod in items("/api/v1/pods").items()
        if JOBSET_NAME_LABEL not in (pod["metadata"].get("labels") or {})
    }
    out = {"nodes": nodes, "pods": pods}
    out["configmaps"] = (
        items(f"/api/v1/namespaces/{NAMESPACE}/configmaps") if _has_ns(cluster, NAMESPACE) else {}
    )
    # the control plane's CA bundle, which kube-controller-manager publishes in every
    # namespace (its root-ca-cert-publisher): each control plane has a CA of its own
    out["configmaps"].pop(f"{NAMESPACE}/kube-root-ca.crt", None)
    out["jobsets"] = items(jobset_path(NS)) if _has_ns(cluster, NS) else {}
    return out


def _has_ns(cluster: Cluster, name: str) -> bool:
    return cluster.request("ns", "GET", f"/api/v1/namespaces/{name}").ok


def events(cluster: Cluster) -> Counter[tuple[str, str]]:
    """Occurrences per (object, reason) of the Events krea-ops recorded (the control
    plane's components record theirs, on their own time: a node registered, a Job
    suspended)."""
    body = cluster.get("events", "/api/v1/events")
    out: Counter[tuple[str, str]] = Counter()
    for e in body["items"]:
        if e.get("reportingComponent") != EVENTS_CONTROLLER:
            continue
        ref = e["involvedObject"]
        key = (f"{ref.get('kind')} {ref.get('namespace', '')}/{ref.get('name')}", e["reason"])
        out[key] += int(e.get("count") or (e.get("series") or {}).get("count") or 1)
    return out


# What one clean run of an action leaves, per control plane: every case of the action
# starts from the same state and compares with it, so it runs once for the module (a
# control plane of its own costs seconds to start).
_CLEAN: dict[tuple[Action, str], tuple[dict[str, Any], Counter[tuple[str, str]]]] = {}


def clean_run(
    action: Action, tmp: Path, control_plane: str
) -> tuple[dict[str, Any], Counter[tuple[str, str]]]:
    """What one uninterrupted run leaves, on an API server of its own (the same control
    plane's), run the first time it is asked of this module."""
    key = (action, control_plane)
    if key not in _CLEAN:
        _CLEAN[key] = _clean_run(action, tmp, control_plane)
    state, events = _CLEAN[key]
    return copy.deepcopy(state), Counter(events)


def _clean_run(
    action: Action, tmp: Path, control_plane: str
) -> tuple[dict[str, Any], Counter[tuple[str, str]]]:
    with (
        api_server(control_plane, tmp / "clean-state") as server,
        server.api_client() as api,
        Kubelets(server),
    ):
        cluster = Cluster(api, timeout_s=30)
        action.setup(cluster, tmp / "clean")
        before = events(cluster)
        plan = action.plan(cluster, tmp / "clean")
        assert len(plan.steps) == action.steps, [s.description for s in plan.steps]
        assert execute(cluster, plan).status == "done"
        action.settle(cluster, control_plane)
        return state(cluster), events(cluster) - before


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(("name", "k"), CASES, ids=[f"{n}-after-{k}" for n, k in CASES])
def test_killed_after_step_k_then_run_again_converges(
    cluster: Cluster, tmp_path: Path, name: str, k: int, control_plane: str
) -> None:
    action = ACTIONS[name]
    want_state, want_events = clean_run(action, tmp_path, control_plane)

    action.setup(cluster, tmp_path / "kill")
    before = events(cluster)
    audit = AuditLog(tmp_path / "kill" / "audit.jsonl")  # where the plans look for it
    plan = action.plan(cluster, tmp_path / "kill")
    with pytest.raises(Killed):
        if k < action.steps:
            execute(cluster, plan, audit=audit, fence=killed_after(k))
        else:
            execute(cluster, plan, audit=DiesBeforeTheEnd(audit.path))
    first = records(audit.path)
    assert [r["record"] for r in first] == ["start"] + ["step"] * k  # no end: it died

    try:
        again = action.plan(cluster, tmp_path / "kill")
    except BadInput as exc:
        # a resume that had finished: the new JobSet waits for Kueue, and resuming it
        # again is refused with nothing changed
        assert (name, k) == ("train resume", action.steps), exc
        assert "is Suspended" in str(exc) and "nothing was changed" in str(exc)
        assert state(cluster) == want_state
        return
    result = execute(cluster, again, audit=audit)
    assert result.status == "done", result.as_dict()
    action.settle(cluster, control_plane)

    # the same state as one clean run
    assert state(cluster) == want_state
    for node in state(cluster)["nodes"].values():
        taints = [json.dumps(t, sort_keys=True) for t in node["spec"].get("taints") or ()]
        assert len(taints) == len(set(taints)), node["spec"]
    # Events: the clean run's, each occurrence from an attempt that ran its Event step
    got = events(cluster) - before
    # each Event of the clean run exactly once: none missing (also the one of the change
    # the killed attempt made last, which it never recorded), none twice
    assert got == want_events, got
    posted = [c for r in first if r["record"] == "step" for c in r["calls"]] + [
        {"method": c.method, "about": c.about, "http_status": c.status} for c in result.made
    ]
    recorded = [c for c in posted if c["about"].startswith("event about") and
                c["method"] == "POST" and c["http_status"] == 201]  # fmt: skip
    assert sum(got.values()) == len(recorded)  # each one an attempt's own, once

    # the audit log: both attempts
    log = records(audit.path)
    starts = [r for r in log if r["record"] == "start"]
    assert len(starts) == 2 and starts[0]["run_id"] != starts[1]["run_id"]
    assert all(r["action"] == plan.action for r in starts)
    ends = [r for r in log if r["record"] == "end"]
    assert [(e["run_id"], e["status"]) for e in ends] == [(starts[1]["run_id"], "done")]


@EMBEDDED_ONLY  # the held eviction is the embedded server's fault switch (sim.api.faults)
def test_a_real_kill_9_between_steps_leaves_what_the_fence_leaves(
    sim: LocalApiServer, cluster: Cluster, tmp_path: Path
) -> None:
    """``krea-ops nodes evict --yes`` in a process of its own, SIGKILLed while the first
    write of its step 3 (the drain's eviction) is held at the API server, unanswered and
    never applied (a ``latency`` + ``drop`` fault): it dies between step 2 and step 3.
    It leaves what ``killed_after(2)`` leaves, and running the command again converges."""
    _evict_setup(cluster, tmp_path)
    as_cli = Action(_evict_setup, lambda c, _: plan_evict(c, [BAD], reason=REASON,
                    user=SIM_USER, timeout_s=30), 4)  # fmt: skip
    want_state, _ = clean_run(as_cli, tmp_path, "embedded")
    plan = _evict_plan(cluster, tmp_path)
    assert [str(s.kind) for s in plan.steps][:3] == ["update", "event", "evict"]
    # every eviction held (they go in parallel), unanswered, never applied
    sim.api.faults.set(
        [{"verbs": ["create"], "resources": ["pods/eviction"], "latency": 120, "drop": True}]
    )
    audit_path = tmp_path / "audit.jsonl"
    env = {**os.environ, "KREA_OPS_AUDIT_LOG": str(audit_path), "HOME": str(tmp_path)}
    argv = [*KREA_OPS, "nodes", "evict", BAD, "--reason", REASON, "--yes",
            *kubeconfig(sim)]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        wait_for(lambda: sim.api.faults.injected(), timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    sim.api.faults.clear()

    first = records(audit_path)
    assert [r["record"] for r in first] == ["start", "step", "step"]
    node = state(cluster)["nodes"][f"/{BAD}"]
    assert node["spec"]["unschedulable"] is True
    assert sorted(state(cluster)["pods"]) == ["default/web-0", "default/web-1", "default/web-2"]

    again = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert state(cluster) == want_state
    log = records(audit_path)
    starts = [r["run_id"] for r in log if r["record"] == "start"]
    assert len(set(starts)) == 2
    assert [r["status"] for r in log if r["record"] == "end"] == ["done"]


def test_train_resume_killed_after_its_delete_is_finished_by_the_command(
    sim: LocalApiServer,
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The JobSet deleted and not created again: ``krea-ops train resume`` run again reads
    the interrupted resume from the audit log the console writes, says so, and creates
    the JobSet it planned (once: a third run is refused, the run is Suspended)."""
    from commands.main import invoke

    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("KREA_OPS_AUDIT_LOG", str(log))
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_TRAINING_CHECKPOINT_MOUNT", f"/checkpoints={tmp_path / 'mnt'}")
    _resume_setup(cluster, tmp_path)
    plan = plan_resume(cluster, NAME, namespace=NS, user=SIM_USER,
                       mount=("/checkpoints", tmp_path / "mnt"))[0]  # fmt: skip
    with pytest.raises(Killed):
        execute(cluster, plan, audit=AuditLog(log), fence=killed_after(1))
    assert not cluster.request("get", "GET", jobset_path(NS, NAME)).ok

    argv = ["train", "resume", NAME, "--yes", *kubeconfig(sim)]
    capsys.readouterr()
    assert invoke(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "stopped before creating it again" in out and "Result: done" in out
    new = cluster.get("jobset", jobset_path(NS, NAME))
    chosen = "/checkpoints/training/dit/step-100"
    assert new["metadata"]["annotations"]["krea.ai/resume-from"] == chosen
    assert [r["action"] for r in records(log) if r["record"] == "start"] == ["train resume"] * 2

    assert invoke(argv) == 2
    assert "is Suspended" in capsys.readouterr().err
    assert cluster.get("jobset", jobset_path(NS, NAME))["metadata"]["uid"] == new["metadata"]["uid"]


def test_the_event_a_killed_run_owes_is_recorded_once_by_the_next_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``nodes evict`` killed between its cordon and the Event that tells of it: the next
    run records that Event first, as a step of its own named after the killed run, and a
    third run has nothing left to record."""
    _evict_setup(cluster, tmp_path)
    before = events(cluster)
    audit = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(Killed):
        execute(cluster, _evict_plan(cluster, tmp_path), audit=audit, fence=killed_after(1))
    killed = records(audit.path)[0]["run_id"]
    cordoned = ("Node /gpu-node-001", "Cordoned")
    assert cordoned not in events(cluster) - before

    again = execute(cluster, _evict_plan(cluster, tmp_path), audit=audit)
    assert again.status == "done"
    first = again.steps[0]
    assert str(first.kind) == "event" and f"owed by run {killed[:12]}" in first.description
    assert (events(cluster) - before)[cordoned] == 1

    third = execute(cluster, _evict_plan(cluster, tmp_path), audit=audit)
    assert (third.status, third.steps) == ("done", ())
    assert (events(cluster) - before)[cordoned] == 1
    # another command's run (a different node) owes nothing of that one
    other = plan_evict(cluster, ["gpu-node-002"], reason=REASON, user="alice", timeout_s=30)
    assert all("owed" not in s.description for s in execute(cluster, other, audit=audit).steps)
