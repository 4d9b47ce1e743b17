"""The console seam: what a read covers, the dashboard's history, node health reused, and
the domain rules both UI layers take from the core (fleet totals, "busy is not work",
the workload reason, gang and position texts)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator

import pytest
from kubernetes import client

from krea_ops.console import EVERYTHING, Console, FleetScope
from krea_ops.fleet import fleet_totals
from krea_ops.health import HealthPolicy, busy_not_work
from krea_ops.model import FleetTelemetry, Severity
from krea_ops.queue import PodSetInfo, WorkloadInfo
from krea_ops.settings import load_settings
from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.fixtures import synthetic_fleet


class RecordedSource:
    """A telemetry source that serves a recorded fleet (the protocol, no Prometheus) and
    remembers what it was asked for."""

    def __init__(self, telemetry: FleetTelemetry) -> None:
        self.telemetry = telemetry
        self.asked: list[frozenset[str] | None] = []
        self.closed = False

    def collect(
        self, nodes: Collection[str] | None = None, *, families: Collection[str] | None = None
    ) -> FleetTelemetry:
        self.asked.append(None if families is None else frozenset(families))
        return self.telemetry

    def describe(self) -> str:
        return "recorded fleet"

    def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalApiServer]:
    snap = synthetic_fleet(4)
    with LocalApiServer(tmp_path_factory.mktemp("console")) as sim:
        api = sim.api_client()
        core = client.CoreV1Api(api)
        for view in snap.views:
            core.create_node(
                {
                    "metadata": {"name": view.info.name, "labels": dict(view.info.labels)},
                    "status": {
                        "capacity": {"nvidia.com/gpu": "8"},
                        "allocatable": {"nvidia.com/gpu": "8"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
        api.close()
        yield sim


def console_on(server: LocalApiServer, **kw: int) -> tuple[Console, RecordedSource]:
    telemetry = synthetic_fleet(4).telemetry
    assert telemetry is not None
    source = RecordedSource(telemetry)
    settings = load_settings({"kubeconfig": str(server.kubeconfig)}, env={})
    return Console(settings, source=source, **kw), source


def test_a_scoped_read_asks_only_its_families_and_history_needs_the_gpu_readings(
    server: LocalApiServer,
) -> None:
    console, source = console_on(server, history_points=10)
    with console:
        snap = console.fleet(FleetScope.of(families=("verdicts",)))
        assert source.asked == [frozenset({"verdicts"})]
        assert [v.info.name for v in snap.views if v.verdict.severity is Severity.BAD]
        assert console.history("gpu-node-000") is None  # no GPU readings were read
        console.fleet(FleetScope.of(families=("gpu", "verdicts")))
        console.fleet(EVERYTHING)
        history = console.history("gpu-node-000")
        assert history is not None and len(history.times) == 2
        assert source.asked[1:] == [frozenset({"gpu", "verdicts"}), None]
    assert source.closed


def test_node_health_reuses_the_last_whole_read_instead_of_reading_again(
    server: LocalApiServer,
) -> None:
    console, source = console_on(server)
    with console:
        first = console.node_health()  # nothing read yet: a verdicts-only read
        assert source.asked == [frozenset({"verdicts"})]
        assert first.error is None and first.severity is not None
        console.fleet(FleetScope.of(families=("gpu", "verdicts")))
        again = console.node_health()
        assert len(source.asked) == 2  # the fleet read's verdicts were taken
        assert again.severity == first.severity


def test_one_node_is_read_whole_with_its_pods(server: LocalApiServer) -> None:
    console, source = console_on(server)
    with console:
        detail = console.node("gpu-node-001")
        assert detail.view.info.name == "gpu-node-001"
        assert [v.info.name for v in detail.snapshot.views] == ["gpu-node-001"]
        assert source.asked == [None] and detail.pods == ()


def test_scope_covers_what_it_read() -> None:
    gpu = FleetScope.of(families=("gpu", "verdicts"))
    assert gpu.covers(("gpu",)) and gpu.covers(("verdicts",)) and not gpu.covers(None)
    assert EVERYTHING.covers(None) and EVERYTHING.covers(("ib",))
    assert not FleetScope.of(families=("verdicts",)).covers(("gpu",))


def test_fleet_totals_say_over_which_gpus_the_means_are() -> None:
    snap = synthetic_fleet(16)
    totals = fleet_totals(snap)
    assert (totals.nodes, totals.gpus) == (16, 128)
    # the exporter-down node and the lost GPU have no readings to average
    assert totals.averaged < totals.gpus and totals.averaged == totals.with_temperature
    assert totals.hot == 1 and sum(totals.by_severity.values()) == 16
    assert totals.tensor_active_ratio is not None and totals.util_ratio is not None
    assert totals.tensor_active_ratio < totals.util_ratio


def test_busy_is_not_work_is_a_setting_and_inclusive() -> None:
    policy = HealthPolicy.from_settings(load_settings({}, env={}))
    assert policy.busy_not_work_gap == 0.3
    assert busy_not_work(0.9, 0.6, policy)  # exactly the gap: marked
    assert not busy_not_work(0.9, 0.61, policy)
    assert not busy_not_work(None, 0.1, policy)
    strict = HealthPolicy.from_settings(
        load_settings({}, env={"KREA_OPS_HEALTH_BUSY_NOT_WORK_GAP": "0.5"})
    )
    assert not busy_not_work(0.9, 0.6, strict)
    snap = dataclasses.replace(synthetic_fleet(16), policy=strict)
    assert fleet_totals(snap).busy_not_work is busy_not_work(
        fleet_totals(snap).util_ratio, fleet_totals(snap).tensor_active_ratio, strict
    )


def _workload(state: str, **kw: object) -> WorkloadInfo:
    base = WorkloadInfo(
        namespace="t",
        name="w",
        owner="JobSet/w",
        local_queue="q",
        cluster_queue="training",
        state=state,
        active=True,
        priority=100,
        priority_class=None,
        pod_sets=(PodSetInfo("main", 4, 8),),
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_the_workload_reason_both_uis_show() -> None:
    pending = _workload("pending", pending_reason="Pending", evicted_reason="Preempted")
    assert pending.reason == "Pending"
    evicted = _workload("evicted", pending_reason="Pending", evicted_reason="Preempted",
                        evicted_message="preempted by dit-xl")  # fmt: skip
    assert (evicted.reason, evicted.message) == ("Preempted", "preempted by dit-xl")
    assert _workload("admitted", pending_reason="Pending").reason is None
    stuck = _workload("admitted", evicted_reason="Preempted", evicted_holding_quota=True)
    assert stuck.reason == "Preempted"
    assert _workload("finished", finished_reason="Succeeded").reason == "Succeeded"


def test_gang_and_position_texts() -> None:
    assert _workload("pending").gang == "4x8"
    mixed = _workload("pending", pod_sets=(PodSetInfo("a", 1, 8), PodSetInfo("b", 2, 4)))
    assert mixed.gang == "16 GPUs"
    assert _workload("pending", position=3, position_estimated=True).position_text == "~3"
    assert _workload("pending", position=0, position_estimated=False).position_text == "0"
    assert _workload("admitted").position_text is None
