"""A run's progress from rank 0's log, and HUNG / STRAGGLER / SLOW judged from it and the
gang's GPUs (pure: constructed logs and readings)."""

from __future__ import annotations

import datetime as dt

import pytest

from krea_ops.model import GpuSample, Reason, Severity, Verdict
from krea_ops.training.progress import points, progress, remember
from krea_ops.training.stalls import (
    HUNG,
    PENDING,
    RUNNING,
    SLOW,
    STALLED,
    STARTING,
    STRAGGLER,
    StallConfig,
    judge,
)

T0 = 1_800_000_000.0
CFG = StallConfig()


def titan(t: float, text: str) -> str:
    moment = dt.datetime.fromtimestamp(t, dt.UTC)
    stamp = f"{moment:%Y-%m-%d %H:%M:%S},{moment.microsecond // 1000:03d}"
    return f"[rank0]:[titan] {stamp} - root - INFO - {text}"


def step_lines(first: int, last: int, t0: float, s_per_step: float) -> list[str]:
    return [
        titan(t0 + (s - first) * s_per_step, f"step: {s}  loss:  7.0  memory: 61.2GiB")
        for s in range(first, last + 1, 10)
    ]


def history(lines: list[str], start_at: float = T0, start_step: int = 1) -> dict:
    head = [titan(start_at, f"Training starts at step {start_step}.")]
    return remember(None, "u1", 0, lines, head, keep_s=CFG.window_s)


def gang(n_nodes: int = 4, over: dict | None = None) -> dict:
    """8 GPUs a node, training normally; ``over[(node, i)]`` overrides fields."""
    out: dict[str, list[GpuSample]] = {}
    over = over or {}
    for n in range(n_nodes):
        node = f"n{n}"
        normal = {
            "util_ratio": 1.0,
            "tensor_active_ratio": 0.6,
            "sm_clock_hz": 1980e6,
            "sm_clock_max_hz": 1980e6,
            "temperature_c": 62.0,
            "clock_events": frozenset(),
        }
        out[node] = [GpuSample(node, i, **{**normal, **over.get((node, i), {})}) for i in range(8)]
    return out


def test_points_and_history_follow_the_attempt() -> None:
    lines = step_lines(10, 100, T0 + 60, 1.0)
    assert points(lines)[:2] == [(T0 + 60, 10), (T0 + 70, 20)]
    h = history(lines)
    assert h["start"] == T0 and len(h["points"]) == 10
    # the next pass reads an overlapping tail: kept once
    h2 = remember(h, "u1", 0, step_lines(90, 150, T0 + 140, 1.0), keep_s=CFG.window_s)
    assert [p[1] for p in h2["points"]] == list(range(10, 160, 10))
    # a restart starts the history again
    h3 = remember(h2, "u1", 1, step_lines(160, 170, T0 + 900, 1.0), keep_s=CFG.window_s)
    assert [p[1] for p in h3["points"]] == [160, 170] and h3["start"] is None


def test_a_steady_run_has_its_baseline_and_runs() -> None:
    h = history(step_lines(10, 900, T0 + 10, 1.0))
    now = T0 + 905
    p = progress(h, now, recent_s=CFG.recent_s, grace_s=CFG.grace_s)
    assert p.last_step == 900 and p.age(now) == pytest.approx(5.0)
    assert p.baseline_s == pytest.approx(1.0) and p.step_time_s == pytest.approx(1.0)
    got = judge(True, p, gang(), {}, now)
    assert got.state == RUNNING and not got.standouts


def test_a_fresh_resume_is_not_judged_however_slow_its_first_steps() -> None:
    lines = step_lines(1010, 1100, T0 + 60, 2.5)
    h = history(lines, start_step=1001)
    now = T0 + 290
    p = progress(h, now, recent_s=CFG.recent_s, grace_s=CFG.grace_s)
    got = judge(True, p, gang(over={("n1", 3): {"sm_clock_hz": 1200e6}}), {}, now)
    assert got.state == STARTING and "not judged" in got.reasons[0]
    assert judge(False, p, gang(), {}, now).state == PENDING


def stalled_at(now: float) -> tuple:
    h = history(step_lines(10, 900, T0 + 10, 1.0))
    return progress(h, now, recent_s=CFG.recent_s, grace_s=CFG.grace_s), now


def test_no_step_with_busy_gpus_and_no_tensor_work_is_hung_and_names_the_likely_node() -> None:
    spinning = {(f"n{n}", i): {"tensor_active_ratio": 0.01} for n in range(4) for i in range(8)}
    # under the floor (180 s, more than 10 steps' time): still running
    p, now = stalled_at(T0 + 900 + 150)
    assert judge(True, p, gang(over=spinning), {}, now).state == RUNNING
    p, now = stalled_at(T0 + 900 + 200)
    got = judge(True, p, gang(over=spinning), {}, now)
    assert got.state == HUNG and got.node is None
    assert got.reasons[0].startswith("no step since 900 for 3 min (step time 1.00 s")
    assert "no node of the gang shows a finding" in got.reasons[-1]
    flap = Verdict.of(
        [Reason(Severity.SUSPECT, "ib_link_downed", "mlx5_3/1 went down 1 time", port="mlx5_3/1")]
    )
    got = judge(True, p, gang(over=spinning), {"n2": flap}, now)
    assert got.state == HUNG and got.node == "n2"
    assert got.reasons[-1] == "likely n2: mlx5_3/1 went down 1 time"
    # GPUs idle instead: stuck outside the collectives, reported but not HUNG
    idle = {k: {"util_ratio": 0.0, "tensor_active_ratio": 0.0} for k in spinning}
    assert judge(True, p, gang(over=idle), {}, now).state == STALLED
    assert judge(True, p, {}, {}, now).state == STALLED  # GPUs not read: no HUNG


def test_one_gpu_held_down_slowing_the_gang_is_a_straggler_named_with_its_gpu() -> None:
    lines = step_lines(10, 900, T0 + 10, 1.0) + step_lines(915, 1065, T0 + 910 + 5, 1.5)
    h = history(lines)
    now = T0 + 1140
    p = progress(h, now, recent_s=CFG.recent_s, grace_s=CFG.grace_s)
    assert p.ratio == pytest.approx(1.5, rel=0.05)
    slow = {
        ("n2", 5): {
            "sm_clock_hz": 1320e6,
            "clock_events": frozenset({"hw_power_brake", "hw_slowdown"}),
        }
    }
    waiting = {
        (f"n{n}", i): {"tensor_active_ratio": 0.4}
        for n in range(4)
        for i in range(8)
        if (f"n{n}", i) != ("n2", 5)
    }
    got = judge(True, p, gang(over={**waiting, **slow}), {}, now)
    assert got.state == STRAGGLER and (got.node, got.gpu) == ("n2", 5)
    assert got.standouts[0].kind == "clock"
    assert "SM clock 1320 of 1980 MHz (hw_power_brake, hw_slowdown)" in got.reasons[1]
    # the whole gang slower alike (input-bound): SLOW, no straggler
    uniform = {k: {"tensor_active_ratio": 0.05} for k in [*waiting, ("n2", 5)]}
    got = judge(True, p, gang(over=uniform), {}, now)
    assert got.state == SLOW and got.node is None and "not a straggler" in got.reasons[1]


def test_a_straggler_there_since_the_attempt_began_is_named_by_the_gang_waiting_for_it() -> None:
    # the baseline was taken with it in the gang: the step time is as ever
    now = T0 + 1800
    h = history(step_lines(10, 1780, T0 + 10, 1.0))
    p = progress(h, now - 10, recent_s=CFG.recent_s, grace_s=CFG.grace_s)
    assert p.ratio == pytest.approx(1.0)
    slow = {("n2", 5): {"sm_clock_hz": 990e6, "clock_events": frozenset({"hw_slowdown"})}}
    waiting = {
        (f"n{n}", i): {"tensor_active_ratio": 0.3}
        for n in range(4)
        for i in range(8)
        if (f"n{n}", i) != ("n2", 5)
    }
    got = judge(True, p, gang(over={**waiting, **slow}), {}, now - 10)
    assert got.state == STRAGGLER and (got.node, got.gpu) == ("n2", 5)
    assert got.reasons[-1].endswith("against the rest of the gang's 0.30: they wait for it")
    # a clock standing out that nobody waits for: shown, not a straggler
    got = judge(True, p, gang(over=slow), {}, now - 10)
    assert got.state == RUNNING and got.standouts[0].gpu == 5


def test_settings_are_checked() -> None:
    assert StallConfig.from_mapping({"hang_floor_s": 60}).hang_floor_s == 60.0
    with pytest.raises(ValueError, match="unknown training stall setting"):
        StallConfig.from_mapping({"hang_flor_s": 60})
    with pytest.raises(ValueError, match="expected a number"):
        StallConfig.from_mapping({"grace_s": -1})
