"""Training restarts explained, in the simulated cluster: node-health (run by the runner,
with the exporters scraped) records each restart of a gang with the signals around it,
attributes it once its window closes, and ``krea-ops train restarts`` / ``nodes lemons``
show what an operator would look at.

The world: 4 GPU nodes, Kueue, the devices with their exporters (no Prometheus: the
scrape source), no random failures; a 2-node DiT gang. Faults are injected as ``krea-ops
sim inject`` makes them; a crash is a pod of the gang failing (its status patched, as the
kubelet writes it)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.controllers.base import Inputs
from krea_ops.controllers.loop import JsonLog, Runner, read_state
from krea_ops.controllers.node_health import NodeHealth, NodeHealthConfig
from krea_ops.health import HealthPolicy
from krea_ops.kube.cluster import Cluster, connect
from krea_ops.runbook.audit import AuditLog
from krea_ops.settings import Settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from krea_ops.telemetry.scrape import ScrapeSource
from tests.conftest import cli, wait_for

FAST = {
    "devices_period_s": 15.0,
    "ib_flush_s": 0.3,
    "gpm_interval_s": 0.5,
    "slow_burners": False,
    "checkpoint_write_s": 30.0,
}
USER = "system:serviceaccount:krea-ops:node-health"


@pytest.fixture
def world(tmp_path: Path, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=4,
        speed=60,
        checkpoint_interval_s=240.0,
        exporters=True,
        prometheus=False,
        failures_per_1000_node_days=0.0,
        extra=dict(FAST),
    )
    with SimWorld(config, tmp_path / "world", parts=("cluster", "kueue", "devices")) as w:
        yield w


class NodeHealthProcess:
    """node-health as its pod runs it: the runner, its Lease, state ConfigMap and audit
    log, the exporters scraped for telemetry; restarts attributed 3 s after they happen.
    Planned swaps off: these tests crash the gang themselves (tests/world/test_planned_swap.py
    has the swap)."""

    def __init__(self, world: SimWorld, tmp: Path, **config: Any) -> None:
        self.cluster: Cluster = connect(str(world.kubeconfig), None)
        exporters = self.cluster.ops_config().exporters
        self.source = ScrapeSource(exporters, Settings())
        self.policy = HealthPolicy()
        cfg = {
            "attribution_after_s": 3.0,
            "restore_after_s": None,
            "planned_swaps": False,
            **config,
        }
        self.controller = NodeHealth(NodeHealthConfig(**cfg))
        self.out = io.StringIO()
        self.runner = Runner(
            self.cluster,
            [self.controller],
            lambda _: Inputs(self.cluster, self.source, self.policy, USER),
            identity="node-health-0",
            audit=AuditLog(tmp / "audit.jsonl"),
            log=JsonLog(self.out, time.time),
        )

    def pass_once(self) -> Any:
        assert self.runner.electors["node-health"].try_acquire_or_renew(time.monotonic())
        result = self.runner.pass_once(self.controller)
        assert result.outcome == "ok", (result.detail, self.out.getvalue()[-2000:])
        return result

    def recorder(self) -> dict[str, Any]:
        state = read_state(self.cluster).data.get("node-health") or {}
        return dict(state.get("recorder") or {})

    def close(self) -> None:
        self.source.close()
        self.cluster.close()


@pytest.fixture
def node_health(world: SimWorld, tmp_path: Path) -> Iterator[NodeHealthProcess]:
    process = NodeHealthProcess(world, tmp_path)
    yield process
    process.close()


def _pods(world: SimWorld, attempt: int) -> list[dict[str, Any]]:
    raw: Any = client.CoreV1Api(world.client).list_namespaced_pod(
        "training",
        label_selector=f"krea.ai/training=dit,jobset.sigs.k8s.io/restart-attempt={attempt}",
        _preload_content=False,
    )
    items: list[dict[str, Any]] = json.loads(raw.data)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _running(world: SimWorld, attempt: int) -> list[dict[str, Any]] | None:
    pods = _pods(world, attempt)
    ok = len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)
    return sorted(pods, key=lambda p: p["spec"]["nodeName"]) if ok else None


def _fail(world: SimWorld, pod: dict[str, Any], message: str) -> None:
    """The pod's trainer exits 1, as the kubelet reports it."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": 1, "reason": "Error", "message": message, "finishedAt": now}
    client.CoreV1Api(world.client).patch_namespaced_pod_status(
        pod["metadata"]["name"],
        "training",
        {
            "status": {
                "phase": "Failed",
                "reason": "Error",
                "message": message,
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "ready": False,
                        "restartCount": 0,
                        "image": "dit",
                        "imageID": "",
                        "state": {"terminated": terminated},
                    }
                ],
            }
        },
    )


def _restarted(node_health: NodeHealthProcess, number: int) -> dict[str, Any] | None:
    """The recorder's record of restart ``number`` of training/dit, once attributed."""
    node_health.pass_once()
    for rec in node_health.recorder().get("log", {}).get("training/dit", []):
        if rec["number"] == number:
            return dict(rec)
    return None


def krea_ops(world: SimWorld, *args: str, **env: str) -> Any:
    return cli(*args, env={"KUBECONFIG": str(world.kubeconfig), **env})


def test_a_hot_gpu_then_the_gangs_crash_is_attributed_to_that_node_and_gpu(
    world: SimWorld, node_health: NodeHealthProcess, tmp_path: Path
) -> None:
    submit_training(world.client, "dit", nodes=2)
    first = wait_for(lambda: _running(world, 0), timeout=90)
    hot_node = first[1]["spec"]["nodeName"]
    node_health.pass_once()  # the gang seen running, nothing wrong yet
    inject_fault(world.client, "hot-gpu", hot_node, gpu=5, value=86)

    def hot_seen() -> bool:
        node_health.pass_once()
        signals = node_health.recorder().get("signals", {}).get(hot_node, [])
        return any(s[2] == 5 and str(s[0]).startswith("gpu_") for s in signals)

    wait_for(hot_seen, timeout=60, interval=0.5)
    _fail(world, first[1], "trainer exited with code 1")
    wait_for(lambda: _running(world, 1), timeout=90)
    rec = wait_for(lambda: _restarted(node_health, 1), timeout=60, interval=0.5)
    got = rec["attribution"]
    assert (got["node"], got["gpu"], got["cause"]) == (hot_node, 5, "thermal"), rec
    assert got["confidence"] >= 0.5
    assert "°C" in got["evidence"][0]
    # the failed pod went with the restart; the JobSet controller's Event says when and
    # which child Job failed first, and the last pass saw where it ran
    assert rec["at_exact"], rec
    (failed,) = rec["failed"]
    assert "first failed job" in failed["message"]
    # the work lost: the steps the first attempt logged past the step the second loaded
    rec = wait_for(
        lambda: (r := _restarted(node_health, 1)) and r["lost_steps"] is not None and r,
        timeout=30,
        interval=0.5,
    )
    assert rec["last_step"] > 0 and rec["resumed_step"] is not None
    assert rec["lost_steps"] == rec["last_step"] - rec["resumed_step"]

    shown = krea_ops(world, "train", "restarts", "dit", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    assert (row["number"], row["node"], row["gpu"], row["cause"]) == (1, hot_node, 5, "thermal")
    table = krea_ops(world, "train", "restarts", "dit")
    assert f"{hot_node} GPU 5" in table.stdout and "thermal" in table.stdout


NCCL = (
    "[rank8]:[E1202 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 8] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=4021, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds before timing out."
)


def test_a_bare_crash_is_unattributed_and_an_nccl_timeout_after_an_ib_flap_goes_to_the_port(
    world: SimWorld, node_health: NodeHealthProcess
) -> None:
    submit_training(world.client, "dit", nodes=2)
    first = wait_for(lambda: _running(world, 0), timeout=90)
    node_health.pass_once()
    # a crash with no signal anywhere on the gang: said so, nobody blamed
    _fail(world, first[0], "trainer exited with code 1")
    second = wait_for(lambda: _running(world, 1), timeout=90)
    rec = wait_for(lambda: _restarted(node_health, 1), timeout=60, interval=0.5)
    assert rec["attribution"]["node"] is None
    assert rec["attribution"]["cause"] == "unattributed"
    assert rec["attribution"]["evidence"][0].startswith("no BAD or SUSPECT finding")

    flapping, other = second[0]["spec"]["nodeName"], second[1]["spec"]["nodeName"]
    inject_fault(world.client, "ib-flap", flapping, value=3)

    def flap_seen() -> bool:
        node_health.pass_once()
        signals = node_health.recorder().get("signals", {}).get(flapping, [])
        return any(s[3] == "mlx5_3/1" and s[1] == "BAD" for s in signals)

    wait_for(flap_seen, timeout=60, interval=0.5)
    # the rank that times out is on the other node: NCCL's watchdog names no culprit
    _fail(world, second[1], NCCL)
    wait_for(lambda: _running(world, 2), timeout=90)
    rec = wait_for(lambda: _restarted(node_health, 2), timeout=60, interval=0.5)
    got = rec["attribution"]
    assert (got["node"], got["port"], got["cause"]) == (flapping, "mlx5_3/1", "infiniband"), rec
    assert other != flapping

    shown = json.loads(krea_ops(world, "train", "restarts", "dit", "-o", "json").stdout)
    assert [(r["number"], r["attributed_to"]) for r in shown] == [
        (1, "unattributed"),
        (2, f"{flapping} port mlx5_3/1"),
    ]


def test_a_node_that_caused_two_restarts_is_a_lemon_kept_out_of_the_next_gang(
    world: SimWorld, tmp_path: Path
) -> None:
    # two restarts a minute apart would be one fault (node_health_lemon_same_fault_s: an
    # hour); here they stand for two a day apart
    node_health = NodeHealthProcess(world, tmp_path, lemon_same_fault_s=1.0)
    try:
        _lemon(world, node_health)
    finally:
        node_health.close()


def _cordon(world: SimWorld, nodes: list[str], unschedulable: bool) -> None:
    core = client.CoreV1Api(world.client)
    for name in nodes:
        core.patch_node(name, {"spec": {"unschedulable": unschedulable}})


def _lemon(world: SimWorld, node_health: NodeHealthProcess) -> None:
    submit_training(world.client, "dit", nodes=2)
    pods = wait_for(lambda: _running(world, 0), timeout=90)
    lemon = pods[0]["spec"]["nodeName"]
    # the restarted gang must land on the lemon again (the scheduler may place it on any
    # two of the four): the other nodes are cordoned until the lemon is labelled
    gang = {p["spec"]["nodeName"] for p in pods}
    spare = [f"gpu-node-{i:03d}" for i in range(4) if f"gpu-node-{i:03d}" not in gang]
    _cordon(world, spare, True)
    node_health.pass_once()
    inject_fault(world.client, "hot-gpu", lemon, gpu=2, value=86)
    wait_for(
        lambda: node_health.pass_once()
        and any(s[2] == 2 for s in node_health.recorder().get("signals", {}).get(lemon, [])),
        timeout=60,
        interval=0.5,
    )
    for attempt in (1, 2):
        (on_lemon,) = [p for p in pods if p["spec"]["nodeName"] == lemon]
        _fail(world, on_lemon, "trainer exited with code 1")
        pods = wait_for(lambda a=attempt: _running(world, a), timeout=90)
        rec = wait_for(lambda a=attempt: _restarted(node_health, a), timeout=60, interval=0.5)
        assert rec["attribution"]["node"] == lemon, rec
    # the pass that attributed the second restart labelled it (under the cap of 1 node)
    node_health.pass_once()
    labelled = client.CoreV1Api(world.client).read_node(lemon).metadata.labels
    assert labelled.get("krea.ai/lemon") == "true"
    reading = {"KREA_OPS_NODE_HEALTH_LEMON_SAME_FAULT_S": "1"}  # as node-health's
    shown = json.loads(krea_ops(world, "nodes", "lemons", "-o", "json", **reading).stdout)
    assert shown[0]["node"] == lemon and shown[0]["labelled"] and shown[0]["candidate"]
    assert shown[0]["restarts"] == 2 and len(shown[0]["history"]) == 2
    # the next attempt of the gang is placed without it
    _cordon(world, spare, False)
    _fail(world, pods[0], "trainer exited with code 1")
    after = wait_for(lambda: _running(world, 3), timeout=90)
    assert lemon not in {p["spec"]["nodeName"] for p in after}
