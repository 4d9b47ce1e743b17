"""Stalled and slowed training gangs, as an operator sees them: an NCCL hang and a
straggler GPU injected as faults, and an input-bound phase forced by the pods'
annotation. What is asserted is what shows: rank 0's step lines, every rank's log, the
GPUs' readings (the devices' FakeGpu fields, what the exporters serve), the pods' exit
and the JobSet's restarts.

Small worlds (3 nodes of 8 GPUs, a two-node gang) at 120x with Prometheus and the
exporters off; the NCCL timeout is shortened through ``WorldConfig.extra``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from krea_ops.sim.common import podlogs
from krea_ops.sim.common.actor import WorldConfig
from krea_ops.sim.machines.faults import (
    APPLIED,
    FAULT_NAMESPACE,
    RESOLVED,
    TARGET,
    inject_fault,
)
from krea_ops.sim.machines.training import RESUMED_STEP_ANNOTATION, submit_training
from krea_ops.sim.world import SimWorld
from tests.conftest import cli, wait_for
from tests.world.test_disruption import PodRecorder

SPEED = 120.0
PARTS = ("devices", "cluster", "kueue")
STEPS_PER_S = 4.0  # simulated: 480 steps, 48 step lines, a wall second at full pace
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "training", "jobsets")
STEP = re.compile(r"^\[rank0\]:\[titan\] .* - step: +(\d+)  loss:")
MERGE = "application/merge-patch+json"


def _config(**extra: Any) -> WorldConfig:
    return WorldConfig(
        nodes=3,
        speed=SPEED,
        exporters=False,
        prometheus=False,
        failure_multiplier=0.0,
        checkpoint_interval_s=120.0,
        extra={
            "devices_period_s": 30.0,  # a quarter of a wall second
            "slow_burners": False,
            "checkpoint_write_s": 20.0,
            "training_steps_per_s": STEPS_PER_S,
            **extra,
        },
    )


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SimWorld]:
    """A world; ``@pytest.mark.parametrize("world", [{...}], indirect=True)`` adds to its
    ``WorldConfig.extra``."""
    extra = getattr(request, "param", None) or {}
    with SimWorld(_config(**extra), tmp_path, parts=PARTS) as w:
        yield w
        training = [a for a in w.actors if a.name == "training"]
        assert training and training[0].errors == 0


# -- reading the world as a user would ---------------------------------------------------


def _pods(w: SimWorld) -> list[dict[str, Any]]:
    raw: Any = client.CoreV1Api(w.client).list_namespaced_pod(
        "training", label_selector="krea.ai/training=dit", _preload_content=False
    )
    return list(json.loads(raw.data)["items"])


def _gang(w: SimWorld, not_of: frozenset[str] = frozenset()) -> list[dict[str, Any]] | None:
    """The two Running pods of the gang (none of ``not_of``), rank 0 first."""
    pods = [
        p
        for p in _pods(w)
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") == "Running"
        and p["metadata"]["uid"] not in not_of
    ]
    if len(pods) != 2:
        return None
    return sorted(
        pods, key=lambda p: p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
    )


def _uid(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["uid"])


def _log(w: SimWorld, pod: dict[str, Any]) -> list[podlogs.Line]:
    """The container log of ``pod`` (what ``kubectl logs`` serves), even once it is gone."""
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    return podlogs.for_state(w.world.state_dir).read(cid)


def _text(w: SimWorld, pod: dict[str, Any]) -> str:
    return "\n".join(line.text for line in _log(w, pod))


def _steps(w: SimWorld, pod: dict[str, Any]) -> list[tuple[float, int]]:
    return [(x.t, int(m.group(1))) for x in _log(w, pod) if (m := STEP.match(x.text))]


def _rate(w: SimWorld, pod: dict[str, Any], window_s: float = 2.5) -> float:
    """Steps a wall second in rank 0's log over the next ``window_s`` wall seconds."""
    start = time.time()
    time.sleep(window_s)
    got = [(t, s) for t, s in _steps(w, pod) if start <= t <= start + window_s]
    assert len(got) >= 3, got
    (t0, s0), (t1, s1) = got[0], got[-1]
    return (s1 - s0) / (t1 - t0)


def _gpus(w: SimWorld, gang: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
    """(node, index, FakeGpu) of every GPU the devices gave the gang's pods."""
    devices = w.world.services["devices"]
    out = []
    for pod in gang:
        node = pod["spec"]["nodeName"]
        for i in devices.assignment(node).get(_uid(pod), []):
            out.append((node, i, devices.gpu(node, i)))
    return out


def _annotate(w: SimWorld, pods: list[dict[str, Any]], annotations: dict[str, str]) -> None:
    core = client.CoreV1Api(w.client)
    for pod in pods:
        core.patch_namespaced_pod(
            pod["metadata"]["name"], "training", {"metadata": {"annotations": annotations}}
        )


def _fault(w: SimWorld, name: str) -> dict[str, str]:
    cm: Any = client.CoreV1Api(w.client).read_namespaced_config_map(name, FAULT_NAMESPACE)
    return dict(cm.metadata.annotations or {})


def _running_gang(w: SimWorld) -> list[dict[str, Any]]:
    """Start a two-node training, pin it out of random input-bound phases, and wait
    until its GPUs are busy and rank 0 logs steps."""
    submit_training(w.client, "dit", nodes=2)
    gang = wait_for(lambda: _gang(w), timeout=30)
    _annotate(w, gang, {"sim.krea.ai/input-bound": "false"})
    wait_for(lambda: len(_gpus(w, gang)) == 16, timeout=15)
    wait_for(lambda: len(_steps(w, gang[0])) >= 5, timeout=15)
    return gang


# -- hang ------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [{"nccl_timeout_s": 600.0}], indirect=True)  # 5 wall s
def test_a_hang_is_silent_until_the_watchdog_fails_the_gang_which_resumes(
    world: SimWorld,
) -> None:
    recorder = PodRecorder(world, "krea.ai/training=dit")
    try:
        gang = _running_gang(world)
        rank0 = gang[0]
        wait_for(lambda: "Finished saving the checkpoint" in _text(world, rank0), timeout=20)
        name = inject_fault(world.client, "hang", rank0["spec"]["nodeName"])
        notes = wait_for(lambda: (n := _fault(world, name)).get(APPLIED) and n, timeout=10)
        assert notes[TARGET] == "gang training/dit"

        # Every GPU of the gang: busy, no tensor work, an NCCL kernel on a few SMs,
        # full clocks, no clock-event reason, power little above idle.
        def spinning() -> bool:
            gpus = [g for _, _, g in _gpus(world, gang)]
            return len(gpus) == 16 and all(g.tensor_active <= 0.02 for g in gpus)

        wait_for(spinning, timeout=10)
        for _, _, g in _gpus(world, gang):
            assert g.util_percent >= 99.0 and 0.05 <= g.sm_active <= 0.1
            assert g.sm_clock_mhz >= 1950 and g.clock_event_reasons == 0
            assert g.power_w < 200
        # Silent: rank 0 writes nothing from the moment the collective hung, no step, no
        # checkpoint line. (A trainer tick that lagged behind the devices, on a loaded
        # machine, may still write the steps done before it, stamped before it.)
        stall = world.world.services["devices"].stalls[name]
        clock = world.clock
        hung_at = clock.wall() - clock.to_wall(clock.time() - stall.since)
        before = _log(world, rank0)
        time.sleep(1.5)
        after = _log(world, rank0)
        assert [x.text for x in after if x.t > hung_at + 0.01] == []
        assert all(STEP.match(x.text) for x in after[len(before) :]), after[len(before) :]
        assert not any("Watchdog" in x.text for x in after)

        # After NCCL's timeout every rank's watchdog fires and takes its process down.
        wait_for(
            lambda: all("taking the entire process down" in _text(world, p) for p in gang),
            timeout=20,
        )
        for pod in gang:
            text = _text(world, pod)
            ran = [int(x) for x in re.findall(r"Timeout\(ms\)=600000\) ran for (\d+) milli", text)]
            assert len(ran) == 8 and min(ran) >= 600_000
            assert "exitcode  : -6" in text and "Signal 6 (SIGABRT)" in text

        # The pods fail with torchrun's exit code; the JobSet restarts the gang.
        def failed() -> list[int] | None:
            codes = []
            for pod in gang:
                seen = recorder.last.get(pod["metadata"]["name"]) or {}
                if (seen.get("status") or {}).get("phase") != "Failed":
                    return None
                state = seen["status"]["containerStatuses"][0]["state"]
                codes.append(state["terminated"]["exitCode"])
            return codes

        assert wait_for(failed, timeout=20) == [1, 1]
        custom: Any = client.CustomObjectsApi(world.client)

        def restarted() -> int:
            js = custom.get_namespaced_custom_object(*JOBSET[:3], JOBSET[3], "dit")
            return int((js.get("status") or {}).get("restarts") or 0)

        wait_for(lambda: restarted() >= 1, timeout=20)
        new = wait_for(lambda: _gang(world, frozenset(_uid(p) for p in gang)), timeout=30)
        loaded = wait_for(
            lambda: re.search(r"Loading the checkpoint at step (\d+)\.", _text(world, new[0])),
            timeout=15,
        )
        resumed = int(loaded.group(1))
        assert resumed > 0
        js = custom.get_namespaced_custom_object(*JOBSET[:3], JOBSET[3], "dit")
        assert js["metadata"]["annotations"][RESUMED_STEP_ANNOTATION] == str(resumed)
        wait_for(lambda: any(s > resumed for _, s in _steps(world, new[0])), timeout=15)
        wait_for(lambda: _fault(world, name).get(RESOLVED), timeout=15)
    finally:
        recorder.stop()


@pytest.mark.parametrize("world", [{"nccl_timeout_s": 900.0}], indirect=True)  # 7.5 wall s
def test_a_hung_gang_restarted_before_the_timeout_never_times_out(world: SimWorld) -> None:
    gang = _running_gang(world)
    name = inject_fault(world.client, "hang", gang[1]["spec"]["nodeName"])
    wait_for(lambda: _fault(world, name).get(APPLIED), timeout=10)
    stalled = time.time()
    time.sleep(1.0)
    core = client.CoreV1Api(world.client)
    for pod in gang:  # what a restart of the gang does
        core.delete_namespaced_pod(pod["metadata"]["name"], "training")
    new = wait_for(lambda: _gang(world, frozenset(_uid(p) for p in gang)), timeout=30)
    wait_for(lambda: _fault(world, name).get(RESOLVED), timeout=15)
    wait_for(lambda: len(_steps(world, new[0])) >= 3, timeout=15)
    # well past the timeout from the stall: nobody's watchdog fired
    time.sleep(max(0.0, stalled + 7.5 + 1.5 - time.time()))
    for pod in gang + new:
        assert "Watchdog caught collective operation timeout" not in _text(world, pod)
    assert len(_steps(world, new[0])) > 3


# -- straggler, input-bound ---------------------------------------------------------------------


def test_a_straggler_slows_the_gang_and_its_mates_wait_for_it(world: SimWorld) -> None:
    gang = _running_gang(world)
    base = _rate(world, gang[0])
    node = gang[1]["spec"]["nodeName"]
    out = cli("--kubeconfig", str(world.kubeconfig), "sim", "inject", "straggler", node,
              "--slowdown", "2")  # fmt: skip
    assert out.returncode == 0, out.stderr
    m = re.match(
        rf"^fault (\S+): straggler on {node} GPU (\d) \(the simulator chose the GPU; --gpu "
        r"picks the GPU\)$",
        out.stdout.strip(),
    )
    assert m, out.stdout
    name, slow_index = m.group(1), int(m.group(2))
    devices = world.world.services["devices"]
    slow = devices.gpu(node, slow_index)
    wait_for(lambda: slow.sm_clock_mhz <= 1000, timeout=10)
    # 1/F of its clock, with the power-brake reasons; it never waits, so its tensor
    # activity stays; it draws less than its waiting gang-mates and runs no hotter.
    assert 960 <= slow.sm_clock_mhz <= 1000
    assert slow.clock_event_reasons & 0x88 == 0x88
    assert slow.tensor_active >= 0.45
    mates = [g for n, i, g in _gpus(world, gang) if (n, i) != (node, slow_index)]
    assert len(mates) == 15

    def waiting() -> bool:
        return all(abs(g.tensor_active - slow.tensor_active / 2) < 0.03 for g in mates)

    wait_for(waiting, timeout=10)
    for g in mates:
        assert g.util_percent >= 99.0 and g.sm_clock_mhz >= 1950
        assert g.clock_event_reasons == 0 and g.power_w > slow.power_w
    # the gang steps at half its pace
    assert 0.35 < _rate(world, gang[0]) / base < 0.65

    client.CoreV1Api(world.client).delete_namespaced_config_map(name, FAULT_NAMESPACE)
    # its full clock again (a training GPU may be at its power cap: sw_power_cap, 0x04)
    wait_for(lambda: slow.sm_clock_mhz >= 1800, timeout=10)
    assert slow.clock_event_reasons & 0x88 == 0
    assert _rate(world, gang[0]) / base > 0.8


def test_an_input_bound_gang_slows_down_together(world: SimWorld) -> None:
    gang = _running_gang(world)
    base = _rate(world, gang[0])
    _annotate(world, gang[:1], {"sim.krea.ai/input-bound": "true"})  # one pod: the whole job

    def starved() -> list[Any] | None:
        gpus = [g for _, _, g in _gpus(world, gang)]
        return gpus if len(gpus) == 16 and all(g.tensor_active < 0.1 for g in gpus) else None

    gpus = wait_for(starved, timeout=10)
    tensor = [g.tensor_active for g in gpus]
    assert max(tensor) - min(tensor) < 0.02  # no GPU stands out
    assert all(g.util_percent >= 99.0 and g.sm_clock_mhz >= 1950 for g in gpus)
    assert _rate(world, gang[0], window_s=4.0) / base < 0.2


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("straggler", "gpu-node-000", "--slowdown", "0.5"), "greater than 1 and at most 4"),
        (("straggler", "gpu-node-000", "--slowdown", "5"), "greater than 1 and at most 4"),
        (("hot-gpu", "gpu-node-000", "--slowdown", "2"), "--slowdown is for straggler only"),
        (("hang", "gpu-node-000", "--gpu", "1"), "hang takes no --gpu"),
    ],
)
def test_inject_rejects_a_bad_slowdown_in_one_line(args: tuple[str, ...], message: str) -> None:
    out = cli("sim", "inject", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
