"""migrate-back: offsite inference comes home at its pace, within budgets, only where it
fits, never taking a workload below its Ready count minus one; the pace survives a
restart (its buckets are the persisted state). Pure decisions over constructed snapshots
and simulated hours, then one pass against the simulated world."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from krea_ops.burst import (
    DISABLED_TAINT_EFFECT,
    DISABLED_TAINT_KEY,
    DISABLED_TAINT_VALUE,
    PAUSE_TAINT_KEY,
    VK_TAINT_KEY,
)
from krea_ops.controllers.base import Decision, Inputs
from krea_ops.controllers.migrate_back import (
    Bucket,
    KueueQueues,
    MigrateBack,
    MigrateBackConfig,
    MigrateBackSnapshot,
)
from krea_ops.errors import BadInput
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster
from krea_ops.model import NodeInfo, Severity, Taint
from krea_ops.queue import parse_cluster_queue, parse_local_queue
from krea_ops.runbook.execute import execute
from krea_ops.runbook.plan import StepKind
from krea_ops.settings import load_settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines import burst
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from tests.burst.test_runbook_world import CHEAP, MID, NO_DEPLOYMENTS, request, vk_node
from tests.conftest import wait_for
from tests.runbook.test_nodes import assert_plan_was_run

VK = "vk-0"
PROVIDER = Taint(VK_TAINT_KEY, "cheap", "NoSchedule")
DISABLED = Taint(DISABLED_TAINT_KEY, DISABLED_TAINT_VALUE, DISABLED_TAINT_EFFECT)
GENEROUS = Bucket(per_hour=3600.0, burst=100.0)


# -- a small world of dicts, moved by a model of the executor --------------------------------


def mb_virtual(*taints: Taint, name: str = VK, ready: bool = True) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={"type": "virtual-kubelet"},
        taints=(PROVIDER, *taints),
        ready=ready,
        virtual=True,
    )


def mb_node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"krea.ai/pool": "h200"}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def mb_pod(
    name: str,
    node: str | None,
    *,
    workload: str = "serve",
    namespace: str = "serving",
    ready: bool = True,
    gpus: int = 1,
    price: float = 2.0,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": {"app": workload, "krea.ai/workload": "inference", "pod-template-hash": "h"},
            "annotations": {"burst.krea.ai/usd-per-gpu-hour": str(price)},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{workload}-h",
                    "uid": f"rs-{namespace}-{workload}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": VK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {"name": "server", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {
            "phase": "Running" if node else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


class MbModel:
    """Nodes, pods and budgets as a pass reads them; ``run`` plays the executor: each move
    evicts the pod and starts its replacement on the node the plan found room on, Ready
    after ``ready_after`` passes."""

    def __init__(self, free: Mapping[str, int], *virtual: NodeInfo) -> None:
        self.virtual = virtual or (mb_virtual(DISABLED),)
        self.nodes = {name: mb_node(name) for name in free}
        self.free = dict(free)
        self.pods: list[dict[str, Any]] = []
        self.budgets: list[dict[str, Any]] = []
        self.severity: dict[str, Severity] | None = dict.fromkeys(free, Severity.OK)
        self.starting: list[tuple[int, dict[str, Any]]] = []
        self.replaced = 0

    def snapshot(self) -> MigrateBackSnapshot:
        return MigrateBackSnapshot(
            user="system:serviceaccount:krea-ops:migrate-back",
            virtual=self.virtual,
            in_cluster=self.nodes,
            free_gpus=dict(self.free),
            severity=self.severity,
            health_error=None if self.severity is not None else "no telemetry source",
            pods=tuple(self.pods),
            budgets=tuple(self.budgets),
        )

    def tick(self) -> None:
        """One pass later: replacements whose time has come are Ready."""
        still = []
        for left, pod in self.starting:
            if left <= 1:
                pod["status"]["conditions"][0]["status"] = "True"
            else:
                still.append((left - 1, pod))
        self.starting = still

    def run(self, decision: Decision, ready_after: int = 0) -> list[str]:
        """The plan's moves in order, as ``run_move`` makes them: one whose workload
        has no more Ready pods than its floor waits, here longer than its timeout, so it
        and the moves after it are not made (the run ends blocked)."""
        moved: list[str] = []
        for plan in decision.plans:
            for step in plan.steps:
                assert step.kind is StepKind.MIGRATE and step.move is not None
                (ref,) = step.pods
                pod = next(p for p in self.pods if p["metadata"]["uid"] == ref.uid)
                app = pod["metadata"]["labels"]["app"]
                if self.ready(app) <= step.move.ready_floor:
                    return moved
                target = step.description.split("room on ")[1].split(")")[0]
                self.pods.remove(pod)
                self.replaced += 1
                new = mb_pod(
                    f"{app}-new{self.replaced}",
                    target,
                    workload=app,
                    namespace=pod["metadata"]["namespace"],
                    ready=ready_after == 0,
                    gpus=step.move.gpus,
                )
                self.pods.append(new)
                if ready_after:
                    self.starting.append((ready_after, new))
                self.free[target] -= step.move.gpus
                moved.append(ref.what)
        return moved

    def ready(self, workload: str) -> int:
        return sum(
            1
            for p in self.pods
            if p["metadata"]["labels"]["app"] == workload
            and p["status"]["conditions"][0]["status"] == "True"
        )

    def offsite(self) -> int:
        return sum(1 for p in self.pods if p["spec"]["nodeName"] == VK)


def controller(**kw: Any) -> MigrateBack:
    base: dict[str, Any] = {"cluster": GENEROUS, "namespace": GENEROUS, "workload": GENEROUS}
    return MigrateBack(MigrateBackConfig(**{**base, **kw}))


def whys(decision: Decision) -> dict[str, str]:
    return {s.target: s.why for s in decision.skipped}


def moves(decision: Decision) -> list[str]:
    return [p.what for plan in decision.plans for s in plan.steps for p in s.pods]


# -- when it acts -----------------------------------------------------------------------------


def test_without_the_burst_disabled_taint_nothing_moves_and_nothing_is_skipped() -> None:
    world = MbModel({"gpu-a": 8}, mb_virtual(), mb_virtual(name="vk-1"))
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(3)]

    decision = controller().decide(world.snapshot(), 0.0, {})

    assert decision.plans == () and decision.skipped == () and not decision.acts
    assert decision.gauges["burst_disabled"] == 0


def test_a_virtual_node_still_open_to_new_pods_holds_every_move() -> None:
    # the other virtual node would take the replacements: moving now just churns
    world = MbModel({"gpu-a": 8}, mb_virtual(DISABLED), mb_virtual(name="vk-1"))
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(3)]

    decision = controller().decide(world.snapshot(), 0.0, {})

    assert not decision.acts
    assert whys(decision) == {"node vk-1": "hold"}
    # with nothing offsite there is nothing to hold either
    world.pods = [mb_pod(f"serve-{i}", "gpu-a") for i in range(3)]
    assert controller().decide(world.snapshot(), 0.0, {}).skipped == ()
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(3)]
    # a paused node takes nothing new either: then the move goes ahead
    paused = mb_virtual(Taint(PAUSE_TAINT_KEY, "true", "NoSchedule"), name="vk-1")
    world.virtual = (mb_virtual(DISABLED), paused)
    assert controller().decide(world.snapshot(), 0.0, {}).acts


def test_a_plan_is_migrate_steps_that_wait_for_the_replacement_within_the_floor() -> None:
    world = MbModel({"gpu-a": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(3)]

    decision = controller().decide(world.snapshot(), 0.0, {})

    (plan,) = decision.plans
    assert plan.action == "migrate-back"
    assert plan.options["timeout_s"] == MigrateBackConfig().move_timeout_s
    step = plan.steps[0]
    assert step.kind is StepKind.MIGRATE and step.move is not None
    assert step.move.to == "in-cluster" and step.move.ready_floor == 3 - 1
    assert step.calls[0].method == "POST" and step.calls[0].path.endswith("/eviction")
    assert step.calls[0].precondition == "uid uid-serving-serve-0"
    assert "room on gpu-a" in step.description
    # all three in one plan: the executor moves them one at a time, each above the floor
    assert [p.what for s in plan.steps for p in s.pods] == [
        "serving/serve-0",
        "serving/serve-1",
        "serving/serve-2",
    ]
    assert decision.skipped == ()


def test_a_single_replica_is_never_moved_it_would_go_dark() -> None:
    world = MbModel({"gpu-a": 8})
    world.pods = [mb_pod("solo-0", VK, workload="solo")]

    decision = controller().decide(world.snapshot(), 0.0, {})

    assert not decision.acts
    assert whys(decision) == {"pod serving/solo-0": "floor"}
    assert controller(min_ready=0).decide(world.snapshot(), 0.0, {}).acts


# -- where it fits, and budgets ------------------------------------------------------------------


def test_only_pods_that_fit_on_healthy_in_cluster_gpus_move() -> None:
    world = MbModel({"gpu-a": 1, "gpu-bad": 8})
    world.severity = {"gpu-a": Severity.OK, "gpu-bad": Severity.BAD}
    world.pods = [
        mb_pod("a-0", VK, workload="a", price=3.0),
        mb_pod("a-1", "gpu-a", workload="a"),
        mb_pod("b-0", VK, workload="b", price=2.0),
        mb_pod("b-1", "gpu-a", workload="b"),
        mb_pod("c-0", VK, workload="c", gpus=4),
        mb_pod("c-1", "gpu-a", workload="c"),
    ]

    decision = controller().decide(world.snapshot(), 0.0, {})

    # the dearest provider first takes the one healthy free GPU
    assert moves(decision) == ["serving/a-0"]
    assert whys(decision) == {"pod serving/b-0": "no-room", "pod serving/c-0": "no-room"}
    assert decision.gauges["free_in_cluster_gpus"] == 1
    # room kept free for a training: none of it is taken
    world.free["gpu-a"] = 3
    kept = controller(keep_free_gpus=2).decide(world.snapshot(), 0.0, {})
    assert moves(kept) == ["serving/a-0"]
    assert "below keep_free_gpus 2" in next(s.detail for s in kept.skipped if "b-0" in s.target)


def test_unknown_nodes_count_as_room_unless_configured_not_to() -> None:
    world = MbModel({"gpu-a": 8})
    world.severity = None  # the telemetry could not be read
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(3)]

    counted = controller().decide(world.snapshot(), 0.0, {})
    assert counted.acts
    assert [a.kind for a in counted.alerts] == ["stale-input"]

    strict = controller(count_unknown=False).decide(world.snapshot(), 0.0, {})
    assert not strict.acts
    assert set(whys(strict).values()) == {"no-room"}


def test_a_budget_that_allows_no_disruption_leaves_its_pods() -> None:
    world = MbModel({"gpu-a": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(3)]
    world.pods += [mb_pod(f"other-{i}", VK, workload="other") for i in range(3)]
    world.budgets = [
        {
            "metadata": {"name": "serve", "namespace": "serving"},
            "spec": {"selector": {"matchLabels": {"app": "serve"}}},
            "status": {"disruptionsAllowed": 0},
        }
    ]

    decision = controller().decide(world.snapshot(), 0.0, {})

    assert all(not m.startswith("serving/serve") for m in moves(decision))
    assert [w for t, w in whys(decision).items() if "serve-" in t] == ["budget"] * 3
    assert moves(decision) == ["serving/other-0", "serving/other-1", "serving/other-2"]


# -- Kueue-managed inference: its replacement needs quota in-cluster ----------------------------


def mb_cq(name: str, quotas: dict[str, tuple[int, int]], **limits: Any) -> Any:
    """A ClusterQueue in cohort ``gpu``: flavor -> (nominal, reserved) GPUs."""
    return parse_cluster_queue(
        {
            "metadata": {"name": name},
            "spec": {
                "cohortName": "gpu",
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f,
                                "resources": [
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(n), **limits}
                                ],
                            }
                            for f, (n, _) in quotas.items()
                        ],
                    }
                ],
            },
            "status": {
                "flavorsReservation": [
                    {"name": f, "resources": [{"name": "nvidia.com/gpu", "total": str(r)}]}
                    for f, (_, r) in quotas.items()
                ]
            },
        }
    )


def mb_kueue(training_reserved: int, **inference_limits: Any) -> KueueQueues:
    return KueueQueues(
        cluster_queues=(
            mb_cq("training", {"h200": (24, training_reserved)}),
            mb_cq("inference", {"h200": (8, 8), "burst": (16, 3)}, **inference_limits),
        ),
        local_queues=(
            parse_local_queue(
                {
                    "metadata": {"name": "inference", "namespace": "serving"},
                    "spec": {"clusterQueue": "inference"},
                }
            ),
        ),
        flavor_labels={"h200": {"krea.ai/pool": "h200"}, "burst": {"type": "virtual-kubelet"}},
    )


def mb_kueue_pod(name: str) -> dict[str, Any]:
    """An offsite pod Kueue admitted on the burst flavor (its node labels injected)."""
    pod = mb_pod(name, VK)
    pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "inference"
    pod["spec"]["nodeSelector"] = {"type": "virtual-kubelet", "disk": "nvme"}
    return pod


def test_kueue_managed_pods_move_only_as_far_as_in_cluster_quota_goes() -> None:
    world = MbModel({"gpu-a": 8})
    world.nodes["gpu-a"]["metadata"]["labels"]["disk"] = "nvme"
    world.pods = [mb_kueue_pod(f"serve-{i}") for i in range(4)]

    def decide(kueue: KueueQueues) -> Decision:
        snap = world.snapshot()
        return controller().decide(replace(snap, kueue=kueue), 0.0, {})

    # the inference queue's h200 quota is all reserved and training lends nothing: Kueue
    # would admit the replacements on burst again (offsite)
    full = decide(mb_kueue(training_reserved=24))
    assert not full.acts
    assert set(whys(full).values()) == {"no-room"}
    assert "on flavor burst (offsite)" in full.skipped[0].detail
    # training leaves 2 GPUs unused: inference borrows them in the cohort, two come home
    two = decide(mb_kueue(training_reserved=22))
    assert moves(two) == ["serving/serve-0", "serving/serve-1"]
    assert whys(two) == {"pod serving/serve-2": "no-room", "pod serving/serve-3": "no-room"}
    # placed, and paced by the executor, as the replacement will be: h200's labels, not
    # the burst flavor's, and the pod's own
    (plan,) = two.plans
    assert plan.steps[0].move is not None
    assert dict(plan.steps[0].move.node_selector or ()) == {
        "krea.ai/pool": "h200",
        "disk": "nvme",
    }
    # a borrowing limit of 0: nothing to borrow
    assert not decide(mb_kueue(training_reserved=0, borrowingLimit="0")).acts


# -- the pace, over simulated hours ---------------------------------------------------------------


def test_the_pace_follows_the_cluster_bucket_over_hours() -> None:
    world = MbModel({"gpu-a": 8, "gpu-b": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(16)]
    mb = controller(cluster=Bucket(per_hour=6.0, burst=2.0))
    state: Mapping[str, Any] = {}
    when: list[float] = []
    for minute in range(0, 121):  # a pass a minute for two hours
        now = minute * 60.0
        decision = mb.decide(world.snapshot(), now, state)
        state = decision.state or state
        when += [now] * len(world.run(decision))
    # two at once (the burst), then one each time a token has refilled (every 10 min)
    assert when == [0.0, 0.0, *(600.0 * k for k in range(1, 13))]
    assert world.offsite() == 16 - 14


def test_namespace_and_workload_buckets_pace_each_on_its_own() -> None:
    world = MbModel({"gpu-a": 8, "gpu-b": 8})
    world.pods = [mb_pod(f"a-{i}", VK, workload="a", namespace="ns1") for i in range(4)]
    world.pods += [mb_pod(f"b-{i}", VK, workload="b", namespace="ns1") for i in range(4)]
    world.pods += [mb_pod(f"c-{i}", VK, workload="c", namespace="ns2") for i in range(4)]
    mb = controller(
        namespace=Bucket(per_hour=4.0, burst=1.0), workload=Bucket(per_hour=1.0, burst=1.0)
    )
    state: Mapping[str, Any] = {}
    moved: list[tuple[float, str]] = []
    for minute in range(0, 61, 5):  # an hour, a pass every 5 minutes
        decision = mb.decide(world.snapshot(), minute * 60.0, state)
        state = decision.state or state
        moved += [(minute, m) for m in world.run(decision)]
    per_namespace = {ns: [t for t, m in moved if m.startswith(ns)] for ns in ("ns1", "ns2")}
    # ns2 has one workload: one move an hour (its workload bucket), at the start and the end
    assert per_namespace["ns2"] == [0, 60]
    # ns1: its namespace bucket allows one at once, four an hour; each workload one an hour
    assert per_namespace["ns1"] == [0, 15, 60]
    assert [m.split("/")[1][0] for t, m in moved if m.startswith("ns1")] == ["a", "b", "a"]
    assert any(s.why == "pace" for s in decision.skipped)


def test_the_buckets_survive_a_restart_through_json() -> None:
    world = MbModel({"gpu-a": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(8)]
    config = {"cluster": Bucket(per_hour=2.0, burst=1.0)}

    first = controller(**config).decide(world.snapshot(), 1000.0, {})
    assert world.run(first) == ["serving/serve-0"]
    stored = json.loads(json.dumps(first.state))  # what the state ConfigMap keeps

    # a new process, ten minutes later: the bucket is as the old one left it
    restarted = controller(**config).decide(world.snapshot(), 1600.0, stored)
    assert not restarted.acts
    assert whys(restarted)["pod serving/serve-1"] == "pace"
    assert "next token in 1200s" in next(s.detail for s in restarted.skipped if s.why == "pace")
    # (forgetting the state would have bought a fresh burst)
    assert controller(**config).decide(world.snapshot(), 1600.0, {}).acts
    assert restarted.gauges["cluster_bucket_tokens"] == pytest.approx(1 / 3)
    assert restarted.gauges["empty_buckets"] == 1
    # half an hour after the first move, the token is back
    later = controller(**config).decide(world.snapshot(), 2800.0, json.loads(json.dumps(stored)))
    assert moves(later) == ["serving/serve-1"]


def test_a_corrupt_or_future_state_never_buys_a_burst() -> None:
    world = MbModel({"gpu-a": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(4)]
    mb = controller(cluster=Bucket(per_hour=1.0, burst=3.0))
    corrupt = {"buckets": {"cluster": {"tokens": "lots", "at": None}}}
    assert not mb.decide(world.snapshot(), 0.0, corrupt).acts
    # a clock that went back refills nothing
    behind = {"buckets": {"cluster": {"tokens": 0.5, "at": 5000.0}}}
    assert not mb.decide(world.snapshot(), 100.0, behind).acts


# -- never below the Ready count minus one ---------------------------------------------------


def test_never_below_ready_minus_one_while_replacements_take_their_time() -> None:
    world = MbModel({"gpu-a": 8, "gpu-b": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(6)]
    mb = controller()  # buckets never in the way: only the floor holds it back
    state: Mapping[str, Any] = {}
    lowest = world.ready("serve")
    skips: set[str] = set()
    for minute in range(0, 240):
        decision = mb.decide(world.snapshot(), minute * 60.0, state)
        state = json.loads(json.dumps(decision.state))
        skips |= {s.why for s in decision.skipped}
        # the executor evicts each pod as planned (in one plan they go one at a time,
        # each replacement Ready before the next: here the replacement takes 5 passes)
        world.run(decision, ready_after=5)
        lowest = min(lowest, world.ready("serve"))
        world.tick()
    assert lowest == 6 - 1
    assert "floor" in skips
    assert world.offsite() == 0  # and yet everything came home
    assert world.ready("serve") == 6


def test_a_workload_scaled_down_meanwhile_is_not_held_forever() -> None:
    world = MbModel({"gpu-a": 8})
    world.pods = [mb_pod(f"serve-{i}", VK) for i in range(4)]
    mb = controller(floor_hold_s=600.0)
    first = mb.decide(world.snapshot(), 0.0, {})
    world.run(first, ready_after=1000)  # a replacement that never becomes Ready
    world.pods = [p for p in world.pods if p["status"]["conditions"][0]["status"] == "True"]
    held = mb.decide(world.snapshot(), 60.0, first.state or {})
    assert set(whys(held).values()) == {"floor"} and not held.acts
    freed = mb.decide(world.snapshot(), 700.0, held.state or {})
    assert freed.acts


# -- settings ----------------------------------------------------------------------------------


def test_settings_from_a_mapping_and_one_line_errors() -> None:
    config = MigrateBackConfig.from_mapping(
        {"cluster": {"per_hour": 30, "burst": 3}, "min-ready": 2, "selector": "app=x"}
    )
    assert config.cluster == Bucket(30.0, 3.0)
    assert config.min_ready == 2 and config.selector == "app=x"
    assert config.workload == MigrateBackConfig().workload
    assert MigrateBackConfig.from_mapping(None) == MigrateBackConfig()
    for bad, words in (
        ({"clutser": {}}, "unknown setting 'clutser'"),
        ({"cluster": {"per_hour": "fast"}}, "cluster.per_hour must be a number"),
        ({"cluster": {"burst": 0}}, "burst >= 1"),
        ({"min_ready": 1.5}, "min_ready must be a whole number"),
        ({"count_unknown": "yes"}, "count_unknown must be true or false"),
    ):
        with pytest.raises(BadInput) as error:
            MigrateBackConfig.from_mapping(bad)
        assert words in str(error.value) and "\n" not in str(error.value)


def test_settings_from_the_krea_ops_settings_per_minute() -> None:
    # the deploy's settings file names one refill rate per bucket, in moves per minute
    settings = load_settings(
        {"migrate_back_cluster_per_minute": 4.0, "migrate_back_workload_per_minute": 0.5},
        env={"KREA_OPS_CONFIG": "/nonexistent"},
    )
    config = MigrateBack.from_settings(settings).config
    assert config.cluster == Bucket(per_hour=240.0, burst=MigrateBackConfig().cluster.burst)
    assert config.workload.per_hour == 30.0
    assert config.namespace == MigrateBackConfig().namespace  # not set: the default
    with pytest.raises(BadInput, match="migrate_back_cluster_per_minute must be a number"):
        MigrateBackConfig.from_settings(
            dataclasses.replace(settings, migrate_back_cluster_per_minute="x")  # type: ignore[arg-type]
        )


# -- against the simulated world --------------------------------------------------------------


def mb_serving(cluster: Cluster) -> list[dict[str, Any]]:
    body = cluster.get("pods", "/api/v1/namespaces/inference/pods", labelSelector="app=serve")
    return [p for p in body["items"] if not p["metadata"].get("deletionTimestamp")]


def mb_ready_where(cluster: Cluster) -> tuple[int, int]:
    """(Ready pods of ``serve`` in-cluster, Ready on the virtual node)."""
    ready = [p for p in mb_serving(cluster) if mb_is_ready(p)]
    offsite = sum(1 for p in ready if p["spec"].get("nodeName") == burst.VK_NODE)
    return len(ready) - offsite, offsite


def mb_is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod["status"].get("conditions") or ()
    )


def mb_training_pods(cluster: Cluster) -> int:
    body = cluster.get("pods", "/api/v1/namespaces/training/pods")
    return sum(1 for p in body["items"] if p["status"].get("phase") == "Running")


@pytest.fixture
def mb_kueue_world(tmp_path: Path, control_plane: str) -> Iterator[tuple[SimWorld, Cluster]]:
    """Two 8-GPU nodes with the simulated Kueue and virtual kubelet. A training took
    every in-cluster GPU, so Kueue admitted the three replicas of the Kueue-managed
    inference Deployment ``serve`` on the burst flavor (offsite); then the training
    ended: the GPUs and the quota are free."""
    service = burst.InferenceService("serve", "img:1", "1", "1Gi", 1, 3, 1.0, 12.0)
    manifest = burst.deployment_manifest(service, 3)
    manifest["metadata"].pop("annotations")  # no autoscaler: three replicas stay
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 5
    config = WorldConfig(
        control_plane=control_plane,
        nodes=2,
        speed=120,
        providers=(CHEAP, MID),
        exporters=False,
        prometheus=False,
        extra={**NO_DEPLOYMENTS, "slow_burners": False},
    )
    with SimWorld(config, tmp_path, parts=("cluster", "kueue", "burst")) as world:
        cluster = Cluster(world.client, timeout_s=30)
        wait_for(lambda: vk_node(cluster), timeout=30)
        submit_training(world.client, "big", nodes=2)
        wait_for(lambda: mb_training_pods(cluster) == 2, timeout=60)
        request(cluster, "POST", "/apis/apps/v1/namespaces/inference/deployments", manifest)
        wait_for(lambda: mb_ready_where(cluster) == (0, 3), timeout=60)
        path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/training/jobsets/big"
        assert cluster.request("delete jobset", "DELETE", path).ok
        wait_for(lambda: mb_training_pods(cluster) == 0, timeout=60)
        yield world, cluster


def test_against_the_simulator_kueue_managed_inference_comes_home_at_the_pace(
    mb_kueue_world: tuple[SimWorld, Cluster],
) -> None:
    _, cluster = mb_kueue_world
    mb = MigrateBack(MigrateBackConfig(cluster=Bucket(per_hour=1.0, burst=1.0), move_timeout_s=120))
    inputs = Inputs(cluster, None, HealthPolicy(), "system:serviceaccount:krea-ops:migrate-back")

    # no burst-disabled taint yet: nothing is planned
    assert not mb.decide(mb.read(inputs, 0.0), 0.0, {}).acts

    node = vk_node(cluster) or {}
    ours = {"key": DISABLED_TAINT_KEY, "value": DISABLED_TAINT_VALUE, "effect": "NoSchedule"}
    taints = {"spec": {"taints": [*node["spec"]["taints"], ours]}}
    request(cluster, "PATCH", f"/api/v1/nodes/{burst.VK_NODE}", taints, True)
    snapshot = mb.read(inputs, 0.0)
    # what the runner exports as each input's last read (no telemetry here)
    assert set(snapshot.read_at) == {
        "virtual_nodes",
        "offsite_pods",
        "nodes",
        "pods",
        "budgets",
        "kueue",
    }
    decision = mb.decide(snapshot, 0.0, {})
    (plan,) = decision.plans
    (step,) = plan.steps  # one token: one pod
    assert step.kind is StepKind.MIGRATE and step.move is not None
    # Kueue admitted it offsite with the burst flavor's labels; its replacement gets h200's
    assert dict(step.move.node_selector or ()) == {"krea.ai/pool": "h200"}

    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(mb_ready_where(cluster))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = execute(cluster, plan)
    finally:
        done.set()
        sampler.join()

    assert result.status == "done", result.as_dict()
    assert_plan_was_run(plan, result)
    assert min(a + b for a, b in samples) >= 3 - 1  # never below its Ready count minus one
    assert wait_for(lambda: mb_ready_where(cluster) == (1, 2), timeout=30)
    home = [p for p in mb_serving(cluster) if p["spec"].get("nodeName") != burst.VK_NODE]
    assert [p["spec"].get("nodeSelector") for p in home] == [{"krea.ai/pool": "h200"}]
    # the next pass, a minute later (after a restart: the state through JSON), waits for
    # the bucket; the taint is as it was
    state = json.loads(json.dumps(decision.state))
    later = mb.decide(mb.read(inputs, 60.0), 60.0, state)
    assert not later.acts
    assert {s.why for s in later.skipped} == {"pace"}
    assert ours in (vk_node(cluster) or {})["spec"]["taints"]
