"""Crash attribution over signals: the node/GPU/port a restart is due to, or honestly none."""

from __future__ import annotations

from krea_ops.model import Severity
from krea_ops.training.attribution import (
    Attribution,
    FailedPod,
    Restart,
    Signal,
    attribute,
    last_step,
    lemon_candidates,
    loaded_step,
)

AT = 1_800_000_000.0
GANG = tuple(f"gpu-node-{i:03d}" for i in range(16))
BAD, SUSPECT, UNKNOWN = Severity.BAD, Severity.SUSPECT, Severity.UNKNOWN


def restart(**kw: object) -> Restart:
    base: dict[str, object] = {
        "namespace": "training",
        "run": "dit",
        "number": 1,
        "at": AT,
        "nodes": GANG,
    }
    base.update(kw)
    return Restart(**base)  # type: ignore[arg-type]


def test_a_hot_gpu_before_the_crash_is_blamed_on_that_node_and_gpu() -> None:
    hot = Signal("gpu-node-003", "gpu_hot", BAD, "GPU 5: 84 °C for the last 5 min", AT - 400,
                 AT - 30, gpu=5)  # fmt: skip
    got = attribute(restart(), [hot])
    assert (got.node, got.gpu, got.cause) == ("gpu-node-003", 5, "thermal")
    assert got.confidence > 0.5
    assert "84 °C" in got.evidence[0]
    assert got.target == "gpu-node-003 GPU 5"


def test_an_ib_flap_ten_minutes_before_an_nccl_timeout_is_blamed_on_the_port() -> None:
    flap = Signal("gpu-node-009", "ib_link_downed", BAD, "IB mlx5_3/1 link went down 1x",
                  AT - 640, AT - 600, port="mlx5_3/1")  # fmt: skip
    noise = Signal("gpu-node-001", "ib_congestion", SUSPECT, "IB mlx5_0/1: waiting ~20%",
                   AT - 300, AT, port="mlx5_0/1")  # fmt: skip
    timeout = "[rank8]: Watchdog caught collective operation timeout: WorkNCCL(...)"
    pods = (FailedPod("dit-workers-1-abc", "gpu-node-001", AT, "Error", 1, None, (timeout,)),)
    got = attribute(restart(failed=pods), [flap, noise])
    assert (got.node, got.port, got.cause) == ("gpu-node-009", "mlx5_3/1", "infiniband")
    assert any("NCCL watchdog timeout" in e for e in got.evidence)


def test_no_signal_is_unattributed_with_the_window_said() -> None:
    elsewhere = Signal("cpu-node-1", "node_not_ready", BAD, "NotReady", AT - 60, AT)
    late = Signal("gpu-node-002", "gpu_hot", BAD, "hot", AT + 900, AT + 1000, gpu=1)
    early = Signal("gpu-node-002", "gpu_hot", BAD, "hot", AT - 5000, AT - 4000, gpu=1)
    got = attribute(restart(), [elsewhere, late, early])
    assert not got.attributed
    assert got.cause == "unattributed"
    assert got.evidence[0].startswith("no BAD or SUSPECT finding on the gang's 16 node(s) from")


def test_a_bad_finding_beats_a_suspect_one_and_the_runner_up_is_named() -> None:
    warm = Signal("gpu-node-004", "gpu_warm", SUSPECT, "GPU 2 warm", AT - 100, AT, gpu=2)
    lost = Signal("gpu-node-007", "gpu_lost", BAD, "GPU 6 is not answering NVML", AT - 20, AT,
                  gpu=6)  # fmt: skip
    got = attribute(restart(), [warm, lost])
    assert (got.node, got.gpu, got.cause) == ("gpu-node-007", 6, "gpu-lost")
    assert any(e.startswith("also: gpu-node-004") for e in got.evidence)
    assert got.confidence < 1.0


def test_the_same_finding_on_many_nodes_is_systemic_and_blames_none() -> None:
    signals = [
        Signal(n, "ib_port_down", BAD, f"IB mlx5_0/1 is DOWN on {n}", AT - 60, AT, port="mlx5_0/1")
        for n in GANG[:5]
    ]
    got = attribute(restart(), signals)
    assert got.cause == "systemic" and not got.attributed
    assert "5 of the gang's 16 nodes" in got.evidence[0]


def test_a_failed_pod_names_the_gpu_when_the_signal_does_not() -> None:
    lost = Signal("gpu-node-005", "exporter_down", UNKNOWN, "exporter down", AT - 10, AT)
    pod = FailedPod("p", "gpu-node-005", AT, "Error", 1, "container lost (gpu 3)", ())
    got = attribute(restart(failed=(pod,)), [lost])
    assert (got.node, got.gpu, got.cause) == ("gpu-node-005", 3, "node-lost")


def test_attribution_round_trips_through_json() -> None:
    a = Attribution("n", 1, None, "thermal", 0.8123456, ("x",))
    assert Attribution.from_json(a.to_json()) == Attribution("n", 1, None, "thermal", 0.81, ("x",))


def test_two_restarts_in_the_window_make_a_lemon_candidate() -> None:
    day = 86400.0
    got = lemon_candidates(
        [
            ("a", AT - 30 * day),
            ("a", AT - day),
            ("b", AT - 2 * day),
            ("b", AT - day),
            ("c", AT - day),
        ],
        AT,
    )
    assert got == {"b": [AT - 2 * day, AT - day]}
    assert lemon_candidates([("a", AT)], AT, threshold=1) == {"a": [AT]}


def test_trainer_log_steps() -> None:
    lines = [
        "[titan] 2026-12-02 10:00:00,000 - root - INFO - step: 10  loss:  7.1",
        "[titan] 2026-12-02 10:00:05,000 - root - INFO - step: 20  loss:  7.0",
    ]
    assert last_step(lines) == 20
    assert last_step(["nothing"]) is None
    assert loaded_step(["x", "Loading the checkpoint at step 1200."]) == 1200
    assert loaded_step(["Training starts at step 1."]) == 0
    assert loaded_step([]) is None
