"""The runner against the simulated API server: a pass taints, persists and reports;
fail-static when an input is down; dry-run changes nothing; a follower does nothing;
two replicas with the leader's renew frozen never both act; the fence stops a plan
between steps; every metric it serves is documented."""

from __future__ import annotations

import io
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from krea_ops.controllers import loop
from krea_ops.controllers.base import NAMESPACE, STATE_CONFIGMAP, Inputs
from krea_ops.controllers.burst_taint import TAINT_KEY, BurstTaint, BurstTaintConfig
from krea_ops.controllers.leader import LostLeadership
from krea_ops.controllers.loop import (
    FencedCluster,
    JsonLog,
    NotBuilt,
    Runner,
    read_state,
    write_state,
)
from krea_ops.errors import BadInput
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.execute import execute
from tests.conftest import ROOT
from tests.controllers.conftest import (
    PROVIDER_TAINT,
    Clock,
    RecordedSource,
    gpu_node,
    gpu_pod,
    healthy_telemetry,
    taints_of,
    virtual_node,
)

PAUSE_TAINT = {"key": "krea.ai/burst-paused", "value": "true", "effect": "NoSchedule"}
OURS = (TAINT_KEY, "true", "NoSchedule")
GPU_NODES = ("gpu-node-000", "gpu-node-001")


class Replica:
    """One controller process: its runner, log and audit log, on simulated time."""

    def __init__(
        self,
        cluster: Cluster,
        identity: str,
        clock: Clock,
        source: RecordedSource,
        tmp: Path,
        *,
        dry_run: bool = False,
        inputs_cluster: Cluster | None = None,
    ) -> None:
        self.out = io.StringIO()
        self.audit_path = tmp / f"audit-{identity}.jsonl"
        self.controller = BurstTaint(BurstTaintConfig(free_gpus_high=8, free_gpus_low=4, hold_s=0))
        reader = inputs_cluster or cluster
        self.runner = Runner(
            cluster,
            [self.controller],
            lambda name: Inputs(reader, source, HealthPolicy(), f"tester-{identity}"),
            identity=identity,
            dry_run=dry_run,
            audit=AuditLog(self.audit_path),
            log=JsonLog(self.out, clock.wall),
            clock=clock.mono,
            wall=clock.wall,
        )

    @property
    def elector(self) -> Any:
        return self.runner.electors["burst-taint"]

    def lines(self, event: str | None = None) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in self.out.getvalue().splitlines()]
        return [r for r in records if event is None or r["event"] == event]

    def audit(self) -> list[dict[str, Any]]:
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines()]

    def metric(self, metric_name: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(self.runner.metrics.text()):
            for sample in family.samples:
                if sample.name == metric_name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return None

    def pass_once(self) -> loop.PassResult:
        return self.runner.pass_once(self.controller)


@pytest.fixture
def fleet(ops: Cluster) -> RecordedSource:
    """Two GPU nodes (16 GPUs, all free) with fresh cool readings, one virtual node that
    carries its provider's taint and the operator's pause switch."""
    for name in GPU_NODES:
        gpu_node(ops, name)
    virtual_node(ops, "vk-0", [PROVIDER_TAINT, PAUSE_TAINT])
    return RecordedSource(healthy_telemetry(GPU_NODES, Clock().wall()))


def test_a_pass_taints_persists_and_a_second_pass_writes_nothing(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    clock = Clock()
    a = Replica(ops, "a", clock, fleet, tmp_path)
    assert a.elector.try_acquire_or_renew(0.0)
    result = a.pass_once()
    assert result.outcome == "ok" and [r.status for r in result.runs] == ["done"]
    assert OURS in taints_of(ops, "vk-0")
    # the pause switch and the provider's taint stay
    assert ("krea.ai/burst-paused", "true", "NoSchedule") in taints_of(ops, "vk-0")
    assert ("virtual-kubelet.io/provider", "acme", "NoSchedule") in taints_of(ops, "vk-0")
    stored = read_state(ops, NAMESPACE)
    assert stored.data["burst-taint"]["tainted"] is True
    last = stored.data["burst-taint.last-action"]
    assert last["action"] == "burst-taint add" and last["status"] == "done" and last["by"] == "a"
    (action,) = a.lines("action")
    assert action["controller"] == "burst-taint" and action["nodes"] == ["vk-0"]
    assert "16 of 16 healthy in-cluster GPUs free" in action["reason"]
    assert [r["record"] for r in a.audit()] == ["start", "step", "step", "end"]
    assert a.audit()[0]["user"] == "tester-a"
    version = stored.resource_version

    clock.t = 30.0
    a.elector.try_acquire_or_renew(30.0)
    again = a.pass_once()
    assert again.outcome == "ok" and again.runs == []
    assert len(a.audit()) == 4 and len(a.lines("action")) == 1
    assert read_state(ops, NAMESPACE).resource_version == version  # no state write either
    assert a.metric("krea_ops_controller_passes_total", result="ok") == 2
    assert a.metric("krea_ops_controller_actions_total", status="done") == 1
    assert a.metric("krea_ops_controller_leader", controller="burst-taint") == 1
    assert a.metric("krea_ops_controller_state", name="free_gpus") == 16


def test_telemetry_down_changes_nothing_and_the_metrics_and_log_say_why(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    clock = Clock()
    a = Replica(ops, "a", clock, fleet, tmp_path)
    a.elector.try_acquire_or_renew(0.0)
    a.pass_once()
    assert OURS in taints_of(ops, "vk-0")
    # a training takes every GPU, and Prometheus goes down: the taint stays
    for i, node in enumerate(GPU_NODES):
        gpu_pod(ops, node, f"train-{i}", 8)
    fleet.down = True
    clock.t = 30.0
    a.elector.try_acquire_or_renew(30.0)
    result = a.pass_once()
    assert result.outcome == "ok" and result.runs == []
    assert OURS in taints_of(ops, "vk-0")
    (skip,) = a.lines("skip")
    assert skip["why"] == "stale" and "cannot reach Prometheus" in skip["detail"]
    assert [x["kind"] for x in a.lines("alert")] == ["stale-input"]
    assert a.metric("krea_ops_controller_skipped_total", why="stale") == 1
    assert a.metric("krea_ops_controller_alerts_active", kind="stale-input") == 1
    # the last good telemetry read is still the one of the first pass
    read = a.metric("krea_ops_controller_input_last_read_timestamp_seconds", input="telemetry")
    assert read == pytest.approx(Clock().wall())
    # back: the GPUs are taken, the taint comes off (hold 0); the alert clears
    fleet.down = False
    clock.t = 60.0
    a.elector.try_acquire_or_renew(60.0)
    assert [r.status for r in a.pass_once().runs] == ["done"]
    assert OURS not in taints_of(ops, "vk-0")
    assert a.metric("krea_ops_controller_alerts_active", kind="stale-input") == 0


def test_an_api_server_that_cannot_be_read_is_fail_static(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path, sim: Any
) -> None:
    api = sim.api_client()
    api.configuration.host = "https://127.0.0.1:1"  # nothing listens there
    try:
        unreachable = Cluster(api, timeout_s=2)
        clock = Clock()
        a = Replica(ops, "a", clock, fleet, tmp_path, inputs_cluster=unreachable)
        a.elector.try_acquire_or_renew(0.0)
        result = a.pass_once()
    finally:
        api.close()
    assert result.outcome == "unavailable"
    assert "cannot reach the API server" in (result.detail or "")
    assert OURS not in taints_of(ops, "vk-0")
    (line,) = a.lines("fail-static")
    assert "cannot reach the API server" in line["why"]
    assert a.metric("krea_ops_controller_unavailable", controller="burst-taint") == 1
    assert a.metric("krea_ops_controller_passes_total", result="unavailable") == 1


def test_dry_run_plans_and_changes_nothing_and_takes_no_lease(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    a = Replica(ops, "a", Clock(), fleet, tmp_path, dry_run=True)
    result = a.pass_once()
    assert result.outcome == "ok" and result.runs == []
    (planned,) = a.lines("plan")
    assert planned["dry_run"] is True
    assert planned["plan"]["action"] == "burst-taint add"
    assert planned["plan"]["steps"][0]["calls"][0]["precondition"].startswith("resourceVersion")
    assert OURS not in taints_of(ops, "vk-0")
    assert not read_state(ops, NAMESPACE).found
    leases = ops.get("leases", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases")
    assert leases["items"] == []
    assert a.audit() == []


def test_a_follower_does_nothing(ops: Cluster, fleet: RecordedSource, tmp_path: Path) -> None:
    clock = Clock()
    a = Replica(ops, "a", clock, fleet, tmp_path)
    b = Replica(ops, "b", clock, fleet, tmp_path)
    assert a.elector.try_acquire_or_renew(0.0)
    assert not b.elector.try_acquire_or_renew(0.0)
    assert b.pass_once().outcome == "follower"
    assert OURS not in taints_of(ops, "vk-0") and b.audit() == []
    assert b.metric("krea_ops_controller_leader", controller="burst-taint") == 0


def test_two_replicas_with_the_leaders_renew_frozen_never_both_act(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    """a leads and then its renew freezes (its pod starved, its renew thread stuck)
    while its passes go on; the provider re-creates the virtual node every second, so
    there is always something to do. a stops acting at its renew deadline, b starts
    only once the Lease expired, and no second goes by with both acting."""
    clock = Clock()
    a = Replica(ops, "a", clock, fleet, tmp_path)
    b = Replica(ops, "b", clock, fleet, tmp_path)
    assert a.elector.try_acquire_or_renew(0.0)
    acted: dict[str, list[float]] = {"a": [], "b": []}
    for second in range(0, 21):
        t = float(second)
        clock.t = t
        b.elector.try_acquire_or_renew(t)
        ops.request("delete", "DELETE", "/api/v1/nodes/vk-0")
        virtual_node(ops, "vk-0", [PROVIDER_TAINT, PAUSE_TAINT])
        for name, replica in (("a", a), ("b", b)):
            result = replica.pass_once()
            writes = [
                c for r in result.runs for c in r.made if c.method == "PATCH" and "nodes" in c.path
            ]
            if writes:
                acted[name].append(t)
    assert acted["a"] and max(acted["a"]) < a.elector.settings.renew_deadline_s
    assert acted["b"] and min(acted["b"]) >= a.elector.settings.lease_duration_s
    assert not set(acted["a"]) & set(acted["b"])
    # every second someone led, the re-created node was tainted once, by one of them
    assert acted["a"] + acted["b"] == [t for t in map(float, range(21)) if t < 10 or t >= 15]
    assert OURS in taints_of(ops, "vk-0")


def test_the_fence_stops_a_plan_between_steps(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    virtual_node(ops, "vk-1")
    clock = Clock()
    a = Replica(ops, "a", clock, fleet, tmp_path)
    snapshot = a.controller.read(Inputs(ops, fleet, HealthPolicy(), "tester"), clock.wall())
    (plan,) = a.controller.decide(snapshot, clock.wall(), {}).plans
    assert [s.node for s in plan.steps] == ["vk-0", "vk-0", "vk-1", "vk-1"]
    asked: list[int] = []

    def fence() -> None:
        asked.append(1)
        if len(asked) > 2:  # the Lease is lost after vk-0's two steps
            raise LostLeadership("not the leader of lease krea-ops/krea-ops-burst-taint any more")

    audit = AuditLog(tmp_path / "fence.jsonl")
    result = execute(ops, plan, audit=audit, fence=fence)
    assert result.status == "failed" and "not the leader" in (result.stopped or "")
    assert len(result.steps) == 2
    assert OURS in taints_of(ops, "vk-0") and OURS not in taints_of(ops, "vk-1")
    end = json.loads((tmp_path / "fence.jsonl").read_text().splitlines()[-1])
    assert end["record"] == "end" and "not the leader" in end["stopped"]


def test_a_fenced_cluster_reads_but_does_not_write(ops: Cluster, fleet: RecordedSource) -> None:
    def lost() -> None:
        raise LostLeadership("not the leader")

    fenced = FencedCluster(ops, lost)
    assert fenced.get("node", "/api/v1/nodes/vk-0")["metadata"]["name"] == "vk-0"
    with pytest.raises(LostLeadership):
        fenced.request("label", "PATCH", "/api/v1/nodes/vk-0", body={"metadata": {}})


def test_state_of_each_controller_is_kept_beside_the_others(ops: Cluster) -> None:
    write_state(ops, NAMESPACE, {"node-health": {"cap": {"held": 3}}})
    write_state(ops, NAMESPACE, {"burst-taint": {"tainted": True}})
    stored = read_state(ops, NAMESPACE)
    assert stored.data == {"node-health": {"cap": {"held": 3}}, "burst-taint": {"tainted": True}}
    cm = ops.get("cm", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{STATE_CONFIGMAP}")
    assert json.loads(cm["data"]["burst-taint"]) == {"tainted": True}


def test_controllers_are_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from krea_ops.settings import Settings

    with pytest.raises(BadInput, match="unknown controller 'nope'"):
        loop.resolve("nope", Settings())
    monkeypatch.setitem(loop.REGISTRY, "later", "krea_ops.controllers.not_written_yet:Later")
    with pytest.raises(NotBuilt, match="controller later is not in this build"):
        loop.resolve("later", Settings())
    names = [c.name for c in loop.resolve("all", Settings())]
    assert "burst-taint" in names and "later" not in names


def test_every_controller_metric_is_served_and_documented(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    clock = Clock()
    a = Replica(ops, "a", clock, fleet, tmp_path)
    a.elector.try_acquire_or_renew(0.0)
    a.pass_once()
    fleet.down = True
    a.pass_once()
    server = a.runner.metrics.serve(0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
    served = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    ours = {n for n in served if n.startswith("krea_ops_controller_")}
    assert len(ours) >= 9
    doc = (ROOT / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`(krea_[a-z0-9_]+)", doc))
    assert sorted(ours - documented) == []


def test_two_running_replicas_hand_over_and_the_new_leader_retaints_a_recreated_node(
    ops: Cluster, tmp_path: Path
) -> None:
    """The real loops on threads (short Lease timings, real clocks): one replica leads
    and taints; it stops (releasing its Lease), the other leads and taints the virtual
    node its provider re-created meanwhile."""
    import threading
    import time

    from krea_ops.controllers.leader import ElectionSettings
    from tests.conftest import wait_for

    for name in GPU_NODES:
        gpu_node(ops, name)
    virtual_node(ops, "vk-0")
    source = RecordedSource(healthy_telemetry(GPU_NODES, time.time()))
    fast = ElectionSettings(lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.25)
    runners: dict[str, Runner] = {}
    stops: dict[str, threading.Event] = {}
    threads: dict[str, threading.Thread] = {}

    def inputs(name: str) -> Inputs:
        return Inputs(ops, source, HealthPolicy(), "tester")

    for identity in ("a", "b"):
        runners[identity] = Runner(
            ops,
            [BurstTaint(BurstTaintConfig(free_gpus_high=8, free_gpus_low=4, hold_s=0))],
            inputs,
            identity=identity,
            election=fast,
            audit=AuditLog(tmp_path / f"audit-{identity}.jsonl"),
            log=JsonLog(io.StringIO()),
        )
        stops[identity] = threading.Event()
    try:
        for identity, runner in runners.items():
            threads[identity] = threading.Thread(
                target=runner.run, args=(stops[identity],), kwargs={"interval_s": 0.2}
            )
            threads[identity].start()
            if identity == "a":
                wait_for(lambda: OURS in taints_of(ops, "vk-0"), timeout=30)

        def leaders() -> list[str]:
            return [i for i, r in runners.items() if r.leads("burst-taint")]

        (first,) = wait_for(lambda: leaders() if len(leaders()) == 1 else None, timeout=30)
        second = "b" if first == "a" else "a"
        stops[first].set()
        threads[first].join(timeout=30)
        ops.request("delete", "DELETE", "/api/v1/nodes/vk-0")
        virtual_node(ops, "vk-0")

        def last_action() -> dict[str, Any]:
            action = read_state(ops, NAMESPACE).data.get("burst-taint.last-action") or {}
            return action if action.get("by") == second else {}

        assert wait_for(last_action, timeout=30)["nodes"] == ["vk-0"]
        assert OURS in taints_of(ops, "vk-0")
        assert runners[second].leads("burst-taint")
    finally:
        for stop in stops.values():
            stop.set()
        for thread in threads.values():
            thread.join(timeout=30)


def test_a_partitioned_leader_acts_no_more_and_the_other_takes_over_once(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path, sim: Any, proxy: Any
) -> None:
    """a reaches the API server only through a proxy that stops forwarding (a
    partition: its renews and its reads hang until they time out); b reaches it
    directly. The provider re-creates the virtual node every second: a's passes
    change nothing (fail-static, then follower), b acts only once it holds the Lease,
    and after the partition heals a stays a follower."""
    import copy

    from kubernetes import client

    base = sim.api_client()
    config = copy.deepcopy(base.configuration)
    base.close()
    config.host = f"https://127.0.0.1:{proxy.port}"
    config.retries = False  # one timeout per call, not four
    api = client.ApiClient(config)
    try:
        partitioned = Cluster(api, timeout_s=10)
        clock = Clock()
        a = Replica(partitioned, "a", clock, fleet, tmp_path)
        b = Replica(ops, "b", clock, fleet, tmp_path)
        assert a.elector.try_acquire_or_renew(0.0)
        assert not b.elector.try_acquire_or_renew(0.0)
        assert [r.status for r in a.pass_once().runs] == ["done"]
        # partitioned: each call of a's hangs until its timeout (short, to keep the test so)
        partitioned.timeout_s = a.elector.cluster.timeout_s = 1
        proxy.pause()
        acted: dict[str, list[float]] = {"a": [], "b": []}
        outcomes: dict[float, str] = {}
        for second in range(1, 21):
            t = float(second)
            clock.t = t
            b.elector.try_acquire_or_renew(t)
            if second in (2, 4):  # a's renew loop tries, and hangs
                assert not a.elector.try_acquire_or_renew(t)
            ops.request("delete", "DELETE", "/api/v1/nodes/vk-0")
            virtual_node(ops, "vk-0", [PROVIDER_TAINT, PAUSE_TAINT])
            for name, replica in (("a", a), ("b", b)):
                if name == "a" and second not in (1, 5, 9, 10, 15, 20):
                    continue  # a's passes that hang cost a timeout each: a few suffice
                result = replica.pass_once()
                if name == "a":
                    outcomes[t] = result.outcome
                if any(c.method == "PATCH" for r in result.runs for c in r.made):
                    acted[name].append(t)
        assert acted["a"] == []
        assert outcomes == {
            1.0: "unavailable",
            5.0: "unavailable",
            9.0: "unavailable",
            10.0: "follower",
            15.0: "follower",
            20.0: "follower",
        }
        assert acted["b"] == [float(s) for s in range(15, 21)]
        proxy.resume()
        clock.t = 21.0
        assert not a.elector.try_acquire_or_renew(21.0)
        assert a.pass_once().outcome == "follower"
        assert a.lines("fail-static") and "cannot reach" in a.lines("fail-static")[0]["why"]
        assert a.metric("krea_ops_controller_unavailable", controller="burst-taint") == 1
    finally:
        api.close()


def test_independent_plans_are_grouped_and_dependent_ones_keep_their_order() -> None:
    """node-health's one plan per node run side by side; a plan on a node already in the
    group, about the same subject, or naming no node waits for what came before."""
    from krea_ops.controllers.loop import independent_groups
    from krea_ops.runbook.plan import Plan

    def plan(name: str, *nodes: str, subject: str | None = None) -> Plan:
        return Plan(action=name, nodes=nodes, reason=None, user="u", steps=(), subject=subject)

    a, b, c = plan("a", "n1"), plan("b", "n2"), plan("c", "n3")
    lemon = plan("lemon", "n2")  # the same node as b: after it
    quota = plan("quota", subject="clusterqueue training")  # no node: alone
    d = plan("d", "n4", subject="x")
    e = plan("e", "n5", subject="x")  # the same subject as d: after it
    groups = independent_groups([a, b, c, lemon, quota, d, e])
    assert [[p.action for p in g] for g in groups] == [
        ["a", "b", "c"],
        ["lemon"],
        ["quota"],
        ["d"],
        ["e"],
    ]
    assert independent_groups([]) == []


def test_a_slow_controller_does_not_hold_up_another(
    ops: Cluster, fleet: RecordedSource, tmp_path: Path
) -> None:
    """`controller run all`: each controller passes on its own thread. A pass that takes
    long (migrate-back waits for each moved pod's replacement) does not delay another's:
    here the slow one waits until burst-taint's pass has tainted the virtual node, which
    would never happen if the passes ran one after the other."""
    import threading
    import time

    from krea_ops.controllers.base import Decision

    seen: list[bool] = []

    class Slow:
        name = "migrate-back"

        def read(self, inputs: Inputs, now: float) -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and OURS not in taints_of(ops, "vk-0"):
                time.sleep(0.1)
            seen.append(OURS in taints_of(ops, "vk-0"))

        def decide(self, snapshot: None, now: float, state: Any) -> Decision:
            return Decision(controller=self.name)

    burst = BurstTaint(BurstTaintConfig(free_gpus_high=8, free_gpus_low=4, hold_s=0))
    runner = Runner(
        ops,
        [Slow(), burst],  # the slow one first, as `all` orders them
        lambda name: Inputs(ops, fleet, HealthPolicy(), "tester"),
        identity="solo",
        audit=AuditLog(tmp_path / "audit.jsonl"),
        log=JsonLog(io.StringIO()),
    )
    code = runner.run(threading.Event(), once=True)
    assert seen == [True], "the slow pass waited for burst-taint's, which never came"
    assert code == 0 and OURS in taints_of(ops, "vk-0")
