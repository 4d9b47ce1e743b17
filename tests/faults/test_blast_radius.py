"""Automation's blast radius: node-health, run by the runner against the simulated API
server, over simulated hours, fed hardware readings that lie (the one thing faked here:
a recorded fleet served as a telemetry source, at the simulated time).

After every pass the quarantined nodes are counted from the cluster (cordoned, or
carrying our taint): the most over a run is never above the blast cap, whatever the
exporters say and however slowly the findings come.

- every exporter lying at once (all GPUs hot; one NVLink of every GPU and every
  InfiniBand port down): a veto, zero cordons;
- a rack's exporters vanishing (8 nodes sharing a label): UNKNOWN, zero cordons, and a
  node quarantined there before is neither restored nor evicted again while blind;
- findings dripping in one node at a time for 24 simulated hours: at most the cap,
  every eviction of a node that was hot at the time;
- the API server refusing the uncordon of a capped node: the restore is tried again
  on each later pass, nothing else is quarantined meanwhile, and once the API server
  accepts, the restore lands and the next node waits its turn under the cap.

node-health runs here without its repair ladder (``validate`` off): these nodes run no
pods, so no validation Job could prove one sound, and a quarantined node is restored after
an hour OK, as a fleet without validation has it."""

from __future__ import annotations

import io
import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from krea_ops.controllers.base import NAMESPACE, Inputs
from krea_ops.controllers.loop import JsonLog, PassResult, Runner
from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.model import FleetTelemetry, GpuSample, IbPortSample, NodeTelemetry, NvLinkSample
from krea_ops.runbook.audit import AuditLog
from krea_ops.runbook.nodes import TAINT_KEY
from krea_ops.sim.apiserver.local import LocalApiServer
from tests.conftest import EMBEDDED_ONLY, sim_on_control_plane
from tests.controllers.conftest import Clock
from tests.kube.conftest import Kubelets, create, registered, set_status

sim = sim_on_control_plane  # an API server per test, on each control plane

MINUTE, HOUR = 60.0, 3600.0
USER = "system:serviceaccount:krea-ops:node-health"
POLICY = HealthPolicy()
GPUS = 8


def name_of(i: int) -> str:
    return f"gpu-node-{i:03d}"


def make_nodes(cluster: Cluster, count: int, racks: int = 1) -> list[str]:
    """``count`` Ready GPU nodes, spread over ``racks`` racks (label ``rack``)."""
    create(cluster, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    names = []
    per_rack = -(-count // racks)
    for i in range(count):
        name = name_of(i)
        labels = {"topology.kubernetes.io/rack": f"r{i // per_rack}"}
        create(cluster, "/api/v1/nodes", {"metadata": {"name": name, "labels": labels}})
        set_status(
            cluster,
            f"/api/v1/nodes/{name}",
            {
                "capacity": {"nvidia.com/gpu": str(GPUS)},
                "allocatable": {"nvidia.com/gpu": str(GPUS)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        )
        names.append(name)
    for name in names:
        registered(cluster, name)
    return names


@pytest.fixture(autouse=True)
def kubelets(sim: Any) -> Iterator[Kubelets]:
    """The nodes' kubelets stay alive (their Leases renewed) all through a test."""
    with Kubelets(sim) as kubelets:
        yield kubelets


@dataclass
class Exporters:
    """What every node's exporter says, as a telemetry source read at the simulated time:
    each node cool and answering unless named in ``hot`` (every GPU at or above the hot
    threshold for the whole window), ``links_down`` (one NVLink of each GPU and the
    InfiniBand port down) or ``gone`` (node -> when its exporter vanished: first a
    failing scrape, past five minutes no series at all)."""

    clock: Clock
    nodes: list[str]
    hot: set[str] = field(default_factory=set)
    links_down: set[str] = field(default_factory=set)
    gone: dict[str, float] = field(default_factory=dict)
    reads: int = 0

    def _node(self, name: str, at: float) -> NodeTelemetry | None:
        if name in self.gone:
            since = self.gone[name]
            if at - since > 5 * MINUTE:
                return None
            return NodeTelemetry(
                node=name,
                exporter_up=False,
                last_sample_at=since,
                age_s=at - since,
                error=f"scrape of http://{name}:9400/metrics failing: connection refused",
            )
        temp = POLICY.hot_c + 7 if name in self.hot else 40.0
        down = name in self.links_down
        gpus = tuple(
            GpuSample(
                node=name,
                index=i,
                up=True,
                temperature_c=temp,
                temperature_min_window_c=temp - 1,
                slowdown_margin_c=40.0 if temp < POLICY.hot_c else 2.0,
                power_w=500.0,
                util_ratio=0.9,
                tensor_active_ratio=0.4,
                sm_active_ratio=0.5,
                nvlinks_up=17 if down else 18,
                sampled_at=at,
            )
            for i in range(GPUS)
        )
        links = tuple(NvLinkSample(name, i, 0, up=False) for i in range(GPUS)) if down else ()
        port = IbPortSample(
            name,
            "mlx5_0",
            "1",
            state="DOWN" if down else "ACTIVE",
            phys_state="Disabled" if down else "LinkUp",
        )
        return NodeTelemetry(
            node=name,
            exporter_up=True,
            last_sample_at=at,
            age_s=0.0,
            gpus=gpus,
            nvlinks=links,
            ib_ports=(port,),
        )

    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        self.reads += 1
        at = self.clock.wall()
        tel = {}
        for name in self.nodes:
            if nodes is not None and name not in nodes:
                continue
            node = self._node(name, at)
            if node is not None:
                tel[name] = node
        return FleetTelemetry(source="recorded exporters", collected_at=at, window_s=300.0,
                              nodes=tel)  # fmt: skip

    def describe(self) -> str:
        return f"recorded exporters of {len(self.nodes)} nodes"

    def close(self) -> None:
        pass

    def __enter__(self) -> Exporters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def quarantined(cluster: Cluster) -> set[str]:
    """Nodes cordoned or carrying our taint, as the API server has them now."""
    out = set()
    for obj in cluster.get("nodes", "/api/v1/nodes").get("items") or ():
        spec = obj.get("spec") or {}
        if spec.get("unschedulable") or any(
            t.get("key") == TAINT_KEY for t in spec.get("taints") or ()
        ):
            out.add(obj["metadata"]["name"])
    return out


class Controller:
    """node-health as in its pod: the runner, its Lease, its JSON log, simulated time;
    ``history``: after each pass, (time, the result, the nodes quarantined then)."""

    def __init__(self, cluster: Cluster, tmp: Path, config: NodeHealthConfig | None = None) -> None:
        self.cluster = cluster
        self.clock = Clock()
        self.out = io.StringIO()
        self.controller = NodeHealth(config or NodeHealthConfig(validate=False))
        self.exporters: Exporters | None = None
        self.runner = Runner(
            cluster,
            [self.controller],
            lambda _: Inputs(cluster, self.exporters, POLICY, USER),
            identity="node-health-0",
            audit=AuditLog(tmp / "audit.jsonl"),
            log=JsonLog(self.out, self.clock.wall),
            clock=self.clock.mono,
            wall=self.clock.wall,
        )
        self.history: list[tuple[float, PassResult, set[str]]] = []

    def pass_at(self, t: float) -> PassResult:
        self.clock.t = t
        assert self.runner.electors[self.controller.name].try_acquire_or_renew(t)
        result = self.runner.pass_once(self.controller)
        assert result.outcome == "ok", result
        self.history.append((t, result, quarantined(self.cluster)))
        return result

    def run(self, start: float, end: float, every: float = 10 * MINUTE) -> None:
        t = start
        while t < end:
            self.pass_at(t)
            t += every

    def most_quarantined(self) -> int:
        return max(len(q) for _, _, q in self.history)

    def actions(self, action: str, status: str | None = None) -> list[tuple[float, str]]:
        """(pass time, node) of each run of ``action`` (``nodes evict``, ``nodes restore``)."""
        return [
            (t, node)
            for t, result, _ in self.history
            for run in result.runs
            if run.plan.action == action and (status is None or run.status == status)
            for node in run.plan.nodes
        ]

    def alerts(self, kind: str) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in self.out.getvalue().splitlines()]
        return [r for r in records if r["event"] == "alert" and r["kind"] == kind]


def evictions(ctl: Controller) -> list[tuple[float, str]]:
    return ctl.actions("nodes evict", "done")


def test_every_exporter_lying_at_once_is_vetoed_and_nothing_is_cordoned(
    product: Cluster, tmp_path: Path
) -> None:
    nodes = make_nodes(product, 32)
    ctl = Controller(product, tmp_path)
    ctl.exporters = Exporters(ctl.clock, nodes)
    ctl.run(0, 20 * MINUTE)  # a healthy fleet first
    assert ctl.most_quarantined() == 0
    # every exporter at once: all GPUs hot, one NVLink of each GPU and every IB port down
    ctl.exporters.hot = set(nodes)
    ctl.exporters.links_down = set(nodes)
    before = len(ctl.history)
    ctl.run(20 * MINUTE, 6 * HOUR)
    lying = ctl.history[before:]
    assert all(q == set() for _, _, q in ctl.history), "a node was quarantined"
    assert ctl.actions("nodes evict") == []
    # each pass said why: a veto per finding class, naming every node
    for t, result, _ in lying:
        assert result.decision is not None
        vetoed = {a.message.split(" same ")[1].split()[0] for a in result.decision.alerts
                  if a.kind == "veto"}  # fmt: skip
        assert {"thermal", "nvlink"} <= vetoed, (t, result.decision.alerts)
        if t >= 20 * MINUTE + 2 * MINUTE + 120:  # past the InfiniBand window too
            assert "infiniband" in vetoed
        assert result.decision.gauges["veto_active"] == 1.0
        assert len({s.target for s in result.decision.skipped if s.why == "veto"}) == len(nodes)
    # the exporters stop lying: nothing to undo, nothing done
    ctl.exporters.hot.clear()
    ctl.exporters.links_down.clear()
    ctl.run(6 * HOUR, 7 * HOUR)
    assert ctl.most_quarantined() == 0 and ctl.actions("nodes evict") == []


def test_a_racks_exporters_vanishing_is_unknown_and_nothing_is_cordoned(
    product: Cluster, tmp_path: Path
) -> None:
    nodes = make_nodes(product, 32, racks=4)  # r0..r3, 8 nodes each
    rack = [n for n in nodes if n <= name_of(15) and n >= name_of(8)]  # r1
    ctl = Controller(product, tmp_path)
    ctl.exporters = Exporters(ctl.clock, nodes)
    # one node of the rack genuinely hot: quarantined (the cap is 1 of 32)
    ctl.exporters.hot = {rack[0]}
    ctl.run(0, 30 * MINUTE)
    assert ctl.history[-1][2] == {rack[0]}
    # the rack's exporters vanish (its switch, its power feed to the exporters)
    ctl.exporters.gone = dict.fromkeys(rack, 30 * MINUTE)
    ctl.exporters.hot = set()
    start = len(ctl.history)
    ctl.run(30 * MINUTE, 5 * HOUR)
    blind = ctl.history[start:]
    for t, result, q in blind:
        assert result.decision is not None
        # the quarantined node is neither restored while we cannot see it, nor is any
        # other node of the rack cordoned
        assert q == {rack[0]}, (t, q)
        assert result.runs == [], (t, result.runs)
        assert result.decision.gauges["unknown_nodes"] == len(rack)
    # the rack comes back healthy: the quarantined node is restored an hour later
    ctl.exporters.gone = {}
    ctl.run(5 * HOUR, 7 * HOUR)
    assert ctl.history[-1][2] == set()
    restores = ctl.actions("nodes restore", "done")
    assert [n for _, n in restores] == [rack[0]] and restores[0][0] >= 6 * HOUR
    assert [n for _, n in evictions(ctl)] == [rack[0]]
    assert ctl.most_quarantined() == 1


def test_findings_dripping_in_for_24_hours_never_exceed_the_cap(
    product: Cluster, tmp_path: Path
) -> None:
    nodes = make_nodes(product, 40)
    config = NodeHealthConfig(cap_share=0.05, validate=False)  # 2 of 40
    cap = config.cap(len(nodes))
    assert cap == 2
    ctl = Controller(product, tmp_path, config)
    ctl.exporters = Exporters(ctl.clock, nodes)
    # node i turns hot at hour i and cools 3 hours later: up to 3 hot at once, more
    # than the cap; a quarantined node that has cooled is restored an hour after
    hot_spells = {name_of(i): (i * HOUR + 5 * MINUTE, (i + 3) * HOUR) for i in range(24)}
    hot_at: list[tuple[float, set[str]]] = []
    t = 0.0
    while t < 24 * HOUR:
        ctl.exporters.hot = {n for n, (a, b) in hot_spells.items() if a <= t < b}
        hot_at.append((t, set(ctl.exporters.hot)))
        ctl.pass_at(t)
        t += 10 * MINUTE
    assert ctl.most_quarantined() <= cap
    hot_then = dict(hot_at)
    done = evictions(ctl)
    # no wrong action: every node evicted was hot when it was evicted, each at most once
    assert all(node in hot_then[at] for at, node in done), done
    assert len({n for _, n in done}) == len(done)
    # the controller kept working under the cap (not stuck at the first two)
    assert len(done) > 2 * cap
    assert ctl.alerts("cap") and not ctl.alerts("veto")
    for _, result, q in ctl.history:
        assert result.decision is not None
        assert result.decision.gauges["quarantined_unacked"] <= cap
        assert len(q) <= cap


@EMBEDDED_ONLY  # the refusal is the embedded server's fault switch (sim.api.faults)
def test_a_refused_uncordon_of_a_capped_node_is_retried_and_nothing_else_is_quarantined(
    sim: LocalApiServer, product: Cluster, tmp_path: Path
) -> None:
    nodes = make_nodes(product, 20)  # cap 1
    first, second = nodes[3], nodes[7]
    ctl = Controller(product, tmp_path)
    ctl.exporters = Exporters(ctl.clock, nodes)
    ctl.exporters.hot = {first}
    ctl.run(0, 30 * MINUTE)
    assert ctl.history[-1][2] == {first}
    # a second node turns hot: held back by the cap
    ctl.exporters.hot = {first, second}
    ctl.run(30 * MINUTE, 60 * MINUTE)
    # the first cools; its restore (after an hour OK) is refused by the API server
    ctl.exporters.hot = {second}
    sim.api.faults.set([{"verbs": ["patch", "update"], "resources": ["nodes"], "name": first,
                         "status": 500}])  # fmt: skip
    ctl.run(60 * MINUTE, 4 * HOUR)
    refused = ctl.actions("nodes restore", "failed")
    assert len(refused) >= 6 and {n for _, n in refused} == {first}
    assert all(t >= 2 * HOUR for t, _ in refused)
    assert ctl.actions("nodes restore", "done") == []
    assert all(q == {first} for _, _, q in ctl.history), "beyond the cap while refused"
    assert ctl.actions("nodes evict") == [(0.0, first)]
    assert sim.api.faults.injected("patch", "nodes") or sim.api.faults.injected("update", "nodes")
    # the API server accepts again: the restore lands, then the second node is evicted
    sim.api.faults.clear()
    ctl.run(4 * HOUR, 5 * HOUR)
    restored = ctl.actions("nodes restore", "done")
    assert [n for _, n in restored] == [first] and restored[0][0] == 4 * HOUR
    assert evictions(ctl) == [(0.0, first), (4 * HOUR + 10 * MINUTE, second)]
    assert ctl.history[-1][2] == {second}
    assert ctl.most_quarantined() == 1
