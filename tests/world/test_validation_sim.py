"""Node validation Jobs on the simulated machines (``krea_ops/sim/machines/validation.py``):
the product's Job (``krea_ops.validation.job_manifest``) created with the kubernetes
client on an evicted node (cordoned, tainted ``krea.ai/unhealthy``) runs there on both
control planes, its pod's log (``read_namespaced_pod_log``) is what the real tools print
from the node's hardware model, and the product's parser reads it: a healthy node passes
near nominal, a hot GPU fails DCGM naming it, NVLink errors fail NCCL, a port down fails
its ``ib_write_bw``. A node added at run time (``sim add-node``) registers with the
pending-validation taint and its devices.

One world per control plane (5 nodes, 60x, tool durations cut through
``WorldConfig.extra``); each test uses a node of its own. The formats are checked against
the parser without a world as well.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops import validation as v
from krea_ops.settings import Settings
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import APPLIED, ERROR, FAULT_NAMESPACE, inject_fault
from krea_ops.sim.machines.joins import parse_taint, registered, request_node
from krea_ops.sim.machines.validation import (
    GpuState,
    NodeState,
    PortState,
    dcgm_output,
    expand,
    ib_output,
    nccl_output,
    read_script,
)
from krea_ops.sim.world import SimWorld
from tests.conftest import cli, wait_for

SPEC = v.ValidationSpec.from_settings(Settings())
EXTRA = {
    "slow_burners": False,
    "devices_period_s": 15.0,
    "validation_dcgm_r2_s": 30.0,
    "validation_dcgm_r3_s": 60.0,
    "validation_nccl_s": 20.0,
    "validation_ib_s": 4.0,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, control_plane: str) -> Iterator[SimWorld]:
    config = WorldConfig(
        control_plane=control_plane,
        nodes=5,
        speed=60,
        exporters=False,
        prometheus=False,
        failure_multiplier=0.0,
        extra=dict(EXTRA),
    )
    state = tmp_path_factory.mktemp(f"validation-{control_plane}")
    with SimWorld(config, state, parts=("devices", "cluster", "kueue")) as w:
        yield w
        actors = [a for a in w.actors if a.name in ("validation", "node-joins")]
        assert actors and all(a.errors == 0 for a in actors)


def _core(w: SimWorld) -> Any:
    return client.CoreV1Api(w.client)


def _evict(w: SimWorld, node: str) -> None:
    """What ``krea-ops nodes evict`` leaves on a node: cordoned, tainted unhealthy."""
    _core(w).patch_node(
        node,
        {
            "spec": {
                "unschedulable": True,
                "taints": [
                    {"key": "krea.ai/unhealthy", "value": "validation", "effect": "NoSchedule"}
                ],
            }
        },
    )


def _fault(w: SimWorld, kind: str, node: str, **kw: Any) -> None:
    name = inject_fault(w.client, kind, node, **kw)

    def applied() -> bool:
        cm: Any = _core(w).read_namespaced_config_map(name, FAULT_NAMESPACE)
        notes = cm.metadata.annotations or {}
        assert not notes.get(ERROR), notes
        return bool(notes.get(APPLIED))

    wait_for(applied, timeout=20)


def _validate(w: SimWorld, node: str, level: str, timeout: float = 60.0) -> tuple[str, str, Any]:
    """Run the product's validation Job on ``node``; (the Job's end, the log, the pod)."""
    job = v.job_manifest(node, level, 8, SPEC, user="test", reason="test", now=time.time())
    batch: Any = client.BatchV1Api(w.client)
    batch.create_namespaced_job(SPEC.namespace, job)
    name = job["metadata"]["name"]

    def finished() -> str | None:
        status = batch.read_namespaced_job(name, SPEC.namespace).status
        for c in status.conditions or []:
            if c.type in ("Complete", "Failed") and c.status == "True":
                return str(c.type)
        return None

    end = wait_for(finished, timeout=timeout)
    pods: Any = _core(w).list_namespaced_pod(SPEC.namespace, label_selector=f"job-name={name}")
    (pod,) = pods.items
    assert pod.spec.node_name == node
    log = _core(w).read_namespaced_pod_log(pod.metadata.name, SPEC.namespace, container="validate")
    return str(end), str(log), pod


def _judge(node: str, level: str, log: str) -> v.Validation:
    return v.judge(node, level, log, v.pool_baselines([], SPEC), SPEC, at=time.time())


# -- on the world ----------------------------------------------------------------------------


def test_healthy_evicted_node_passes_near_nominal(world: SimWorld) -> None:
    node = "gpu-node-000"
    _evict(world, node)
    end, log, pod = _validate(world, node, "quick")
    assert end == "Complete"
    assert pod.spec.priority_class_name == v.PRIORITY_CLASS
    lines = log.splitlines()
    assert lines[0] == f"krea-ops validation quick on {node}"
    assert "=== dcgm: dcgmi diag -r 2" in lines and lines[-1] == "=== done"
    result = _judge(node, "quick", log)
    assert result.passed, result.summary()
    nccl = next(c for c in result.checks if c.name == "nccl")
    assert nccl.figure is not None and 465 <= nccl.figure <= 485
    # the node's own GPUs, by name, in the NCCL device list
    assert sum("NVIDIA H200" in line and "Rank" in line for line in lines) == 8


def test_hot_gpu_fails_dcgm_naming_it(world: SimWorld) -> None:
    node = "gpu-node-001"
    _fault(world, "hot-gpu", node, gpu=3)
    _evict(world, node)
    end, log, _ = _validate(world, node, "quick")
    assert end == "Failed"  # dcgmi exited non-zero, so the script exits 1
    dcgm = v.sections(log)["dcgm"]
    assert dcgm.exit_code == 226
    text = "\n".join(dcgm.lines)
    # DCGM's own shape: the passing GPUs, then the failing one on a continuation row
    assert "| Memory Bandwidth          | Pass - GPUs: 0, 1, 2, 4, 5, 6, 7" in text
    assert "|                           | Fail - GPU: 3 " in text
    assert "| Warning                   | GPU 3 Thermal violations totaling" in text
    assert "Clocks are being throttled for GPU 3" in text.replace("|", "").replace("\n", "")
    result = _judge(node, "quick", log)
    dcgm_check = next(c for c in result.checks if c.name == "dcgm")
    assert not dcgm_check.passed and "Memory Bandwidth (GPU: 3)" in dcgm_check.detail
    nccl = next(c for c in _judge(node, "quick", log).checks if c.name == "nccl")
    assert nccl.passed


def test_nvlink_errors_fail_nccl(world: SimWorld) -> None:
    node = "gpu-node-002"
    _fault(world, "nvlink-errors", node, gpu=5)
    _evict(world, node)
    end, log, _ = _validate(world, node, "quick")
    assert end == "Complete"  # the tool ran; its figure is what fails
    result = _judge(node, "quick", log)
    checks = {c.name: c for c in result.checks}
    assert checks["dcgm"].passed
    assert not checks["nccl"].passed
    assert checks["nccl"].figure is not None and checks["nccl"].figure < 0.6 * 476


def test_full_level_with_a_port_down_fails_that_port(world: SimWorld) -> None:
    node = "gpu-node-003"
    _fault(world, "ib-flap", node, value="2", duration_s=3600.0)
    _evict(world, node)
    end, log, _ = _validate(world, node, "full")
    assert end == "Failed"
    assert "=== dcgm: dcgmi diag -r 3" in log
    result = _judge(node, "full", log)
    failed = result.failed()
    assert failed == ["ib/mlx5_2"], result.summary()
    ports = [c for c in result.checks if c.name.startswith("ib/")]
    assert len(ports) == 8
    assert all(385 <= (c.figure or 0) <= 400 for c in ports if c.passed)
    assert " Port number 1 state is Down" in v.sections(log)["ib/mlx5_2"].lines


def test_a_new_node_joins_with_the_pending_taint_and_validates(world: SimWorld) -> None:
    out = cli("--kubeconfig", str(world.kubeconfig), "sim", "add-node")
    assert out.returncode == 0, out.stderr
    node = out.stdout.strip()
    assert node == "gpu-node-005"
    obj: Any = _core(world).read_node(node)
    assert [(t.key, t.value, t.effect) for t in obj.spec.taints] == [
        ("krea.ai/validation", "pending", "NoSchedule")
    ]
    assert obj.status.capacity["nvidia.com/gpu"] == "8"
    assert world.world.services["devices"].node(node).gpus
    wait_for(
        lambda: any(
            c.type == "Ready" and c.status == "True"
            for c in _core(world).read_node(node).status.conditions or []
        ),
        timeout=20,
    )
    end, log, _ = _validate(world, node, "quick")
    assert end == "Complete"
    assert _judge(node, "quick", log).passed
    # a name and taints of one's own, through the request the command makes
    request = request_node(
        world.client, "gpu-extra-a", [parse_taint("example.com/burn-in:NoExecute")]
    )
    assert wait_for(lambda: registered(world.client, request)[0], timeout=20) == "gpu-extra-a"
    extra: Any = _core(world).read_node("gpu-extra-a")
    assert [(t.key, t.value, t.effect) for t in extra.spec.taints] == [
        ("example.com/burn-in", None, "NoExecute")
    ]
    assert extra.metadata.labels["kubernetes.io/hostname"] == "gpu-extra-a"


# -- the formats against the parser -----------------------------------------------------------

PLAN = read_script(v.script("full", SPEC, 8))
GPUS = tuple(GpuState(i, bus=0x18 + i) for i in range(8))
HEALTHY = NodeState("gpu-node-009", GPUS, tuple(PortState(f"mlx5_{h}") for h in range(8)))


def _log(state: NodeState, level: str) -> str:
    run_level = v.DCGM_RUN_LEVEL[level]
    out = [f"krea-ops validation {level} on {state.name}", f"=== dcgm: dcgmi diag -r {run_level}"]
    lines, code = dcgm_output(state, run_level, 120.0)
    out += [*lines, f"=== exit {code}", f"=== nccl: {PLAN.nccl}"]
    lines, code = nccl_output(state, str(PLAN.nccl), 476.0, random.Random(1))
    out += [*lines, f"=== exit {code}"]
    if level == "full":
        for port in state.ports:
            mark = expand(str(PLAN.ib), {"dev": port.device})
            lines, code = ib_output(port, mark.split(": ", 1)[1], 392.0, random.Random(2))
            out += [f"=== {mark}", *lines, f"=== exit {code}"]
    return "\n".join([*out, "=== done"])


def _with(state: NodeState, gpu: int, **change: Any) -> NodeState:
    gpus = tuple(dataclasses.replace(g, **change) if g.index == gpu else g for g in state.gpus)
    return dataclasses.replace(state, gpus=gpus)


def test_the_script_is_read_as_bash_prints_it() -> None:
    assert PLAN.banner == ("krea-ops validation ${KREA_VALIDATION_LEVEL} on ${NODE_NAME}",)
    assert (PLAN.dcgm, PLAN.run_level) == ("dcgmi diag -r 3", 3)
    assert PLAN.nccl == "all_reduce_perf -b 8 -e 8G -f 2 -g 8"
    assert expand(str(PLAN.ib), {"dev": "mlx5_1"}) == (
        "ib mlx5_1: ib_write_bw -d mlx5_1 -F --report_gbits -D 10 localhost"
    )
    assert read_script(v.script("quick", SPEC, 8)).ib is None


def test_formats_of_a_healthy_node_pass_the_parser() -> None:
    result = _judge(HEALTHY.name, "full", _log(HEALTHY, "full"))
    assert result.passed, result.summary()
    assert len(result.checks) == 10
    dcgm = next(c for c in result.checks if c.name == "dcgm")
    assert (
        dcgm.detail == "15 tests passed"
    )  # 9 deployment checks; PCIe, GPU Memory, Diagnostic, 3 stress
    quick = _judge(HEALTHY.name, "quick", _log(HEALTHY, "quick"))
    assert next(c for c in quick.checks if c.name == "dcgm").detail == "12 tests passed"


def test_a_lost_gpu_fails_nccl_and_every_dcgm_test_it_is_in() -> None:
    lost = _with(HEALTHY, 3, lost=True)
    log = _log(lost, "quick")
    result = _judge(lost.name, "quick", log)
    checks = {c.name: c for c in result.checks}
    assert not checks["nccl"].passed and "Test NCCL failure" in checks["nccl"].detail
    assert v.sections(log)["nccl"].exit_code == 3
    assert "GPU 3 failed to create a CUDA context" in log


def test_every_gpu_hot_fails_dcgm_through_the_parser() -> None:
    hot = HEALTHY
    for g in range(8):
        hot = _with(hot, g, stress_c=84.0)
    result = _judge(hot.name, "quick", _log(hot, "quick"))
    dcgm = next(c for c in result.checks if c.name == "dcgm")
    assert not dcgm.passed
    assert dcgm.detail.startswith("failed Memory Bandwidth (All): GPU 0 Thermal violations")


def test_one_hot_gpu_fails_dcgm_through_the_parser() -> None:
    # the test passes on seven GPUs and fails on one: DCGM's second row has no name
    hot = _with(HEALTHY, 3, stress_c=84.0)
    result = _judge(hot.name, "quick", _log(hot, "quick"))
    dcgm = next(c for c in result.checks if c.name == "dcgm")
    assert not dcgm.passed and "Memory Bandwidth (GPU: 3)" in dcgm.detail
    assert "Thermal violations" in dcgm.detail


def test_a_pending_row_remap_fails_the_deployment_check() -> None:
    bad = _with(HEALTHY, 6, remap_pending=True, dbe=1)
    log = _log(bad, "quick")
    dcgm = next(c for c in _judge(bad.name, "quick", log).checks if c.name == "dcgm")
    assert not dcgm.passed
    assert "Page Retirement/Row Remap" in dcgm.detail
    assert "GPU 6 had memory errors and row remappings are pending" in dcgm.detail
    assert "| Warning                   | GPU 6 Detected 1 volatile double-bit ECC " in log


def test_output_is_the_tools_shape() -> None:
    log = _log(HEALTHY, "full")
    assert json.dumps(log)  # plain text
    nccl = v.sections(log)["nccl"].lines
    assert nccl[0].startswith("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)")
    rows = [line for line in nccl if line and not line.startswith("#")]
    assert len(rows) == 31 and rows[-1].lstrip().startswith("8589934592    2147483648     float")
    assert nccl[-3] == "# Out of bounds values : 0 OK"
    ib = v.sections(log)["ib/mlx5_0"].lines
    assert ib[1].strip() == "RDMA_Write BW Test"
    assert any(line.startswith(" #bytes     #iterations    BW peak[Gb/sec]") for line in ib)


def test_the_world_installs_the_deployed_priority_class() -> None:
    import yaml

    from krea_ops.sim.standins.kueue import kueue_objects

    deployed = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy/controllers/validation.yaml").read_text()
    )
    (world,) = [
        o
        for o in kueue_objects(WorldConfig())
        if o["kind"] == "PriorityClass" and o["metadata"]["name"] == v.PRIORITY_CLASS
    ]
    for key in ("value", "preemptionPolicy", "description"):
        assert world[key] == deployed[key], key
    assert deployed["preemptionPolicy"] == "Never"
    assert deployed["value"] < min(
        o["value"]
        for o in kueue_objects(WorldConfig())
        if o["kind"] == "PriorityClass" and o["metadata"]["name"] != v.PRIORITY_CLASS
    )
