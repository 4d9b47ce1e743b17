"""A node earns its way back, in the simulated world on both control planes: node-health
(the runner, its state and audit log, the exporters scraped) evicts a node whose GPU runs
hot, validates it after the cool-down while it is still hot (DCGM fails, the node is
labelled ``krea.ai/needs-repair``), validates it again once the cooling is repaired, and
restores it on the pass, without a person; ``nodes history`` tells it newest first. A node
with a bad NVLink fails ``nodes validate`` and is labelled. A node that joins carries the
pending-validation taint until node-health's validation passes.

The world: 5 GPU nodes at 60x with the validation tools' run times cut (a quick validation
takes a few wall seconds); the ladder's cool-down and retry shortened to match.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.health import HealthPolicy
from krea_ops.settings import Settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import FAULT_NAMESPACE, inject_fault
from krea_ops.sim.machines.joins import registered, request_node
from krea_ops.sim.world import SimWorld
from krea_ops.telemetry.scrape import ScrapeSource
from krea_ops.validation import (
    NEEDS_REPAIR_LABEL,
    PENDING_TAINT_KEY,
    RESULT_ANNOTATION,
    Validation,
)
from tests.conftest import cli, wait_for
from tests.training.test_restarts_world import USER, NodeHealthProcess
from tests.world.test_validation_sim import EXTRA

LADDER = {
    "validate_after_s": 3.0,
    "validate_retry_s": 3.0,
    "validate_level": "quick",
    "escalate_after": 3,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=5,
        speed=60.0,
        exporters=True,
        prometheus=False,
        failures_per_1000_node_days=0.0,
        extra=dict(EXTRA),  # the validation tools' run times cut
    )
    state = tmp_path_factory.mktemp(f"ladder-{control_plane}")
    with SimWorld(config, state, parts=("devices", "cluster", "kueue")) as w:
        yield w


def _node(w: SimWorld, name: str) -> dict[str, Any]:
    raw: Any = client.CoreV1Api(w.client).read_node(name, _preload_content=False)
    node: dict[str, Any] = json.loads(raw.data)
    return node


def _result(node: dict[str, Any]) -> Validation | None:
    name = node["metadata"]["name"]
    annotations = node["metadata"].get("annotations") or {}
    return Validation.from_annotation(name, annotations.get(RESULT_ANNOTATION))


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return dict(node["metadata"].get("labels") or {})


def _taints(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in node.get("spec", {}).get("taints") or ()}


def _node_health(w: SimWorld, tmp: Path) -> NodeHealthProcess:
    """node-health with the ladder's times shortened, judging heat over 2 s (its scrapes
    kept over as long)."""
    nh = NodeHealthProcess(w, tmp, **LADDER)
    nh.policy = HealthPolicy(window_s=2.0)
    nh.source.close()
    nh.source = ScrapeSource(nh.cluster.ops_config().exporters, Settings(telemetry_window_s=2.0))
    return nh


def _cli(w: SimWorld, tmp: Path, *args: str) -> Any:
    env = {"KREA_OPS_AUDIT_LOG": str(tmp / "cli-audit.jsonl")}
    return cli(*args, "--kubeconfig", str(w.kubeconfig), timeout=180, env=env)


def _passes_until(nh: NodeHealthProcess, done: Any, timeout: float) -> Any:
    """node-health passes one after another (as its runner's loop would) until ``done``."""

    def step() -> Any:
        nh.pass_once()
        return done()

    return wait_for(step, timeout=timeout, interval=2.0)


def test_a_hot_node_fails_validation_while_hot_passes_once_cooled_and_is_restored(
    world: SimWorld, tmp_path: Path
) -> None:
    node = "gpu-node-001"
    nh = _node_health(world, tmp_path)
    try:
        fault = inject_fault(world.client, "hot-gpu", node, gpu=3)

        def evicted() -> bool:
            marks = _node(world, node)["metadata"].get("annotations") or {}
            return marks.get("krea.ai/evicted-by") == USER

        try:
            _passes_until(nh, evicted, timeout=60)
        except AssertionError:
            print(nh.out.getvalue()[-3000:])
            raise
        # the cool-down, then a validation while the GPU is still hot: DCGM fails on GPU 3
        failed = _passes_until(nh, lambda: _result(_node(world, node)), timeout=90)
        assert not failed.passed and failed.failed() == ["dcgm"]
        assert "GPU: 3" in failed.checks[0].detail or "GPU 3" in failed.checks[0].detail
        out = _node(world, node)
        assert _labels(out)[NEEDS_REPAIR_LABEL] == "dcgm"
        assert out["spec"].get("unschedulable") is True  # it stays out

        # the cooling is repaired: the next validation passes and node-health restores it
        client.CoreV1Api(world.client).delete_namespaced_config_map(fault, FAULT_NAMESPACE)

        def restored() -> bool:
            n = _node(world, node)
            marks = n["metadata"].get("annotations", {})
            return "krea.ai/evicted-by" not in marks and not n["spec"].get("unschedulable")

        _passes_until(nh, restored, timeout=120)
        back = _node(world, node)
        result = _result(back)
        assert result is not None and result.passed and result.at > failed.at
        assert NEEDS_REPAIR_LABEL not in _labels(back)
        assert "krea.ai/unhealthy" not in _taints(back)
        nh.pass_once()  # the ledger sees the restore

        # what happened, newest first, as the operator reads it
        history = json.loads(_cli(world, tmp_path, "nodes", "history", node, "-o", "json").stdout)
        kinds = [e["kind"] for e in history[0]["entries"]]
        assert kinds.index("restored") < kinds.index("validation-passed")
        assert kinds.index("validation-passed") < kinds.index("validation-failed")
        assert kinds.index("validation-failed") < kinds.index("quarantined")
        assert history[0]["summary"]["validations_failed"] >= 1
    finally:
        nh.close()


def test_a_node_with_a_bad_nvlink_fails_validation_and_is_labelled(
    world: SimWorld, tmp_path: Path
) -> None:
    node = "gpu-node-002"
    fault = inject_fault(world.client, "nvlink-errors", node, gpu=1)
    try:
        time.sleep(1.0)  # applied within a device period at 60x
        run = _cli(world, tmp_path, "nodes", "validate", node, "--level", "quick", "--yes",
                   "--timeout", "120")  # fmt: skip
        assert run.returncode == 1, run.stderr
        assert "failed validation" in run.stderr and "nccl" in run.stderr
        assert "FAIL" in run.stdout and "GB/s" in run.stdout
        out = _node(world, node)
        assert _labels(out)[NEEDS_REPAIR_LABEL] == "nccl"
        result = _result(out)
        assert result is not None and result.failed() == ["nccl"]
        # the restore of a node whose validation failed needs --force (it was never
        # evicted here, so nothing is refused: the guard is for nodes krea-ops took out)
        shown = _cli(world, tmp_path, "nodes", "show", node).stdout
        assert "nccl" in shown
    finally:
        client.CoreV1Api(world.client).delete_namespaced_config_map(fault, FAULT_NAMESPACE)


def test_a_node_that_joins_is_held_until_its_validation_passes(
    world: SimWorld, tmp_path: Path
) -> None:
    request = request_node(
        world.client,
        None,
        [{"key": PENDING_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}],
    )
    node = wait_for(lambda: registered(world.client, request)[0], timeout=30)
    assert PENDING_TAINT_KEY in _taints(_node(world, node))
    nh = _node_health(world, tmp_path)
    try:

        def untainted() -> bool:
            return PENDING_TAINT_KEY not in _taints(_node(world, node))

        _passes_until(nh, untainted, timeout=90)
        result = _result(_node(world, node))
        assert result is not None and result.passed  # the taint went with the pass
    finally:
        nh.close()
