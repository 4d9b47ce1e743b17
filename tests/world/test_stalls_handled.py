"""Hung and straggling trainings found and handled in the simulated world, on both control
planes: node-health (the runner, its audit log and state, the exporters scraped) judges
each running gang from rank 0's log and its GPUs, restarts a HUNG gang well before NCCL's
watchdog would (through the JobSet's own failure policy, or by evicting the node a finding
names), swaps a STRAGGLER's node after a checkpoint, and leaves a uniformly slow gang and
a freshly resumed one alone; ``train status`` and ``train restarts`` say what happened.

The world: 4 GPU nodes at 20x (NCCL's 10-minute timeout is 30 wall seconds), no
Prometheus, a two-node gang pinned out of random input-bound phases. Times below are wall
seconds, as the product measures them: the thresholds are shortened to match the speed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.controllers.loop import read_state
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import inject_fault
from krea_ops.sim.machines.training import submit_training
from krea_ops.sim.world import SimWorld
from krea_ops.training.stalls import StallConfig
from tests.conftest import cli, wait_for
from tests.training.test_restarts_world import NodeHealthProcess

SPEED = 20.0
NCCL_TIMEOUT_WALL_S = 600.0 / SPEED
# Shortened as the defaults are proportioned for a real run: the step-time window
# (recent_s) spans the log's line interval in the slowest phase a test asks for, and the
# hang floor exceeds it. Rank 0 logs every 10 steps (torchtitan's log_freq): at full pace
# (40 steps a wall second here) a line each 0.25 s, input-bound (a tenth of it) each 2.5 s.
# With a window shorter than that gap, a uniformly slow gang read SLOW only in the first
# seconds after each line, and a pass late by as much on a loaded machine missed it.
STALLS = StallConfig(
    grace_s=4.0,
    hang_floor_s=4.5,
    hang_restart_after_s=1.0,
    recent_s=4.0,
    window_s=600.0,
)
# the same thresholds for the commands, as settings
SETTINGS = {
    "KREA_OPS_TRAINING_GRACE_S": "4",
    "KREA_OPS_TRAINING_HANG_FLOOR_S": "4.5",
    "KREA_OPS_TRAINING_RECENT_S": "4",
    "KREA_OPS_TRAINING_BASELINE_WINDOW_S": "600",
}


@pytest.fixture
def world(tmp_path: Path, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=4,
        speed=SPEED,
        checkpoint_interval_s=600.0,
        exporters=True,
        prometheus=False,
        failures_per_1000_node_days=0.0,
        extra={
            "devices_period_s": 5.0,
            "training_steps_per_s": 2.0,
            "ib_flush_s": 0.3,
            "gpm_interval_s": 0.3,
            "slow_burners": False,
            "checkpoint_write_s": 20.0,
            "training_quota_fraction": 1.0,
        },
    )
    with SimWorld(config, tmp_path / "world", parts=("cluster", "kueue", "devices")) as w:
        yield w


@pytest.fixture
def node_health(world: SimWorld, tmp_path: Path) -> Iterator[NodeHealthProcess]:
    process = NodeHealthProcess(
        world,
        tmp_path,
        planned_swaps=True,
        swap_after_s=0.0,
        cap_min_nodes=3,
        stalls=STALLS,
    )
    yield process
    process.close()


def _pods(w: SimWorld) -> list[dict[str, Any]]:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        "training", label_selector="krea.ai/training=dit", _preload_content=False
    )
    return [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]


def _restarts(w: SimWorld) -> int:
    js: Any = client.CustomObjectsApi(w.client).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "training", "jobsets", "dit"
    )
    return int((js.get("status") or {}).get("restarts") or 0)


def _gang(w: SimWorld, attempt: int) -> list[dict[str, Any]] | None:
    pods = [
        p
        for p in _pods(w)
        if p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == str(attempt)
    ]
    if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
        return sorted(pods, key=lambda p: p["spec"]["nodeName"])
    return None


def _pin(w: SimWorld, pods: list[dict[str, Any]]) -> None:
    """Out of random input-bound phases (a test asks for one when it wants it)."""
    core = client.CoreV1Api(w.client)
    for pod in pods:
        notes = {"sim.krea.ai/input-bound": "false"}
        core.patch_namespaced_pod(
            pod["metadata"]["name"], "training", {"metadata": {"annotations": notes}}
        )


def _state(nh: NodeHealthProcess) -> dict[str, Any]:
    return dict((read_state(nh.cluster).data.get("node-health") or {}).get("stalls") or {})


def _judged(nh: NodeHealthProcess, state: str, attempt: int, timeout: float) -> dict[str, Any]:
    """Passes until node-health judges the run ``state`` in ``attempt``; that entry."""

    judged: list[tuple[float, str, str]] = []  # what it said instead, for the failure
    began = time.monotonic()

    def seen() -> dict[str, Any] | None:
        nh.pass_once()
        entry = _state(nh).get("training/dit")
        ok = entry and entry["state"] == state and entry["attempt"] == attempt
        if entry and not ok:
            said = (entry["state"], "; ".join(entry.get("reasons") or ()))
            if not judged or judged[-1][1:] != said:
                judged.append((round(time.monotonic() - began, 1), *said))
        return entry if ok else None

    try:
        return dict(wait_for(seen, timeout=timeout, interval=0.2))
    except AssertionError as e:
        raise AssertionError(f"{e}; judged instead: {judged[-12:]}") from None


def _states_until(nh: NodeHealthProcess, state: str, attempt: int, timeout: float) -> list[str]:
    """The states node-health judges ``attempt`` in, pass by pass, until ``state``."""
    seen: list[str] = []

    def reached() -> bool:
        nh.pass_once()
        entry = _state(nh).get("training/dit")
        if entry and entry["attempt"] == attempt:
            seen.append(entry["state"])
        return bool(seen) and seen[-1] == state

    wait_for(reached, timeout=timeout, interval=0.2)
    return seen


def _status(w: SimWorld) -> dict[str, Any]:
    shown = cli(
        "train", "status", "dit", "-o", "json", "--kubeconfig", str(w.kubeconfig), env=SETTINGS
    )
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    return dict(row)


def _restart_row(w: SimWorld, nh: NodeHealthProcess, number: int) -> dict[str, Any] | None:
    """Restart ``number`` as ``train restarts`` shows it once attributed (after a pass)."""
    nh.pass_once()
    got = cli("train", "restarts", "dit", "-o", "json", "--kubeconfig", str(w.kubeconfig))
    rows = json.loads(got.stdout) if got.returncode == 0 else []
    done = [r for r in rows if r["number"] == number and not r["provisional"] and r["cause"]]
    return dict(done[0]) if done else None


def _running(w: SimWorld, nh: NodeHealthProcess, attempt: int) -> list[dict[str, Any]]:
    gang = wait_for(lambda: _gang(w, attempt), timeout=60)
    _pin(w, gang)
    _judged(nh, "RUNNING", attempt, timeout=30)
    return list(gang)


def test_a_hang_is_restarted_well_before_the_watchdog_and_attributed_to_the_hang(
    world: SimWorld, node_health: NodeHealthProcess
) -> None:
    submit_training(world.client, "dit", 2)
    gang = _running(world, node_health, 0)

    # an NCCL stall on one node, no finding anywhere: restarted through rank 0's pod
    stalled = time.time()
    inject_fault(world.client, "hang", gang[1]["spec"]["nodeName"])
    hung = _judged(node_health, "HUNG", 0, timeout=NCCL_TIMEOUT_WALL_S)
    found = time.time() - stalled
    assert hung["node"] is None and "no node of the gang shows a finding" in hung["reasons"]
    status = _status(world)
    assert status["state"] == "HUNG" and status["tensor"] <= 0.1 and status["busy"] >= 0.9
    # the passes resume after the command (a live node-health passes on its own clock
    # meanwhile): its time, seconds on a loaded machine, is not the product's
    asked = time.time()
    wait_for(lambda: node_health.pass_once() and _restarts(world) >= 1, timeout=30)
    restarted = found + time.time() - asked
    assert restarted < 0.6 * NCCL_TIMEOUT_WALL_S, restarted  # found and restarted in time
    audit = (node_health.runner.audit.path).read_text()
    assert '"train restart"' in audit and "HUNG" in audit

    # the new attempt runs, and is not flagged while it starts (a fresh resume: its first
    # steps are slow, and it is not judged for training_grace_s)
    seen = _states_until(node_health, "RUNNING", 1, timeout=30)
    assert set(seen) <= {"PENDING", "UNKNOWN", "STARTING", "RUNNING"}, seen
    gang = _running(world, node_health, 1)

    # train restarts: cause hang (no node shows a finding: none named)
    def timed_row() -> dict[str, Any] | None:
        row = _restart_row(world, node_health, 1)
        phases = row["anatomy"]["phases_s"].values() if row else ()
        return row if row and all(v is not None for v in phases) else None

    row = wait_for(timed_row, timeout=30, interval=0.5)
    assert row["cause"] == "hang" and row["node"] is None, row
    # and its anatomy: from the last step before the hang to the new attempt's first step
    timed = row["anatomy"]["phases_s"]
    assert set(timed) == {"detection", "teardown", "scheduling", "start", "first step"}
    assert all(v is not None and v >= 0 for v in timed.values()), row["anatomy"]
    assert row["anatomy"]["slowest"] == max(timed, key=lambda k: timed[k])
    # detection: the hang floor (4.5 s) at least, and well under the watchdog
    assert STALLS.hang_floor_s - 1 <= timed["detection"] < NCCL_TIMEOUT_WALL_S
    assert f"slowest: {row['anatomy']['slowest']}" in row["anatomy_text"]

    # a hang on a node whose InfiniBand port went down: that node is evicted, and named
    bad = gang[0]["spec"]["nodeName"]
    inject_fault(world.client, "ib-flap", bad, value="2")
    inject_fault(world.client, "hang", bad)
    hung = _judged(node_health, "HUNG", 1, timeout=NCCL_TIMEOUT_WALL_S)
    assert hung["node"] == bad, hung
    wait_for(lambda: node_health.pass_once() and _restarts(world) >= 2, timeout=30)
    node: Any = client.CoreV1Api(world.client).read_node(bad)
    assert node.spec.unschedulable and "HUNG" in node.metadata.annotations["krea.ai/evicted-reason"]
    row2 = wait_for(lambda: _restart_row(world, node_health, 2), timeout=30, interval=0.5)
    assert (row2["cause"], row2["node"]) == ("hang", bad), row2


def test_a_straggler_is_named_and_swapped_and_a_uniformly_slow_gang_is_not(
    world: SimWorld, node_health: NodeHealthProcess
) -> None:
    submit_training(world.client, "dit", 2)
    gang = _running(world, node_health, 0)
    nodes = [p["spec"]["nodeName"] for p in gang]

    # the whole gang input-bound: slower, nobody stands out: SLOW, nothing requested
    client.CoreV1Api(world.client).patch_namespaced_pod(
        gang[0]["metadata"]["name"],
        "training",
        {"metadata": {"annotations": {"sim.krea.ai/input-bound": "true"}}},
    )
    slow = _judged(node_health, "SLOW", 0, timeout=30)
    assert slow["node"] is None and "not a straggler" in slow["reasons"][-1]
    js: Any = client.CustomObjectsApi(world.client).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "training", "jobsets", "dit"
    )
    assert "krea.ai/checkpoint-requested-at" not in (js["metadata"].get("annotations") or {})
    _pin(world, gang)
    _judged(node_health, "RUNNING", 0, timeout=30)

    # one GPU held down by a power brake, the gang at half its pace: named, then swapped
    injected = time.time()
    inject_fault(world.client, "straggler", nodes[1], gpu=3, slowdown=2.0)
    straggler = _judged(node_health, "STRAGGLER", 0, timeout=30)
    detected = time.time() - injected
    assert (straggler["node"], straggler["gpu"]) == (nodes[1], 3), straggler
    # named by its clock (and by the step time, or by the others waiting for it)
    clock = [r for r in straggler["reasons"] if "SM clock" in r]
    assert clock and "hw_power_brake" in clock[0], straggler
    status = _status(world)
    assert status["state"] == "STRAGGLER" and status["standouts"][0]["gpu"] == 3
    # a planned swap: checkpoint asked, then the node evicted, and the gang goes on without it
    wait_for(lambda: node_health.pass_once() and _restarts(world) >= 1, timeout=40)
    swapped = time.time() - injected
    node: Any = client.CoreV1Api(world.client).read_node(nodes[1])
    assert node.spec.unschedulable
    assert "planned swap" in node.metadata.annotations["krea.ai/evicted-reason"]
    again = wait_for(lambda: _gang(world, 1), timeout=60)
    assert nodes[1] not in [p["spec"]["nodeName"] for p in again]
    print(f"straggler detected in {detected:.1f} s, swapped in {swapped:.1f} s (wall, 20x)")
