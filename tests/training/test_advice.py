"""Checkpoint-interval advice against the worked numbers in shared/research/reliability.md
§2, and ``krea-ops train advise`` through the real CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.errors import BadInput
from krea_ops.training.advice import (
    advise,
    daly_interval_s,
    interval_cost,
    mtbf_hours_from_nodes,
    young_interval_s,
)

C, M = 30.0, 8 * 3600.0  # the note's worked example: 30 s checkpoints, 8 h MTBF


def advise_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = invoke(["train", "advise", *args, "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) == 1
    row: dict[str, Any] = rows[0]
    return row


def test_young_and_daly_match_the_worked_example() -> None:
    assert young_interval_s(C, M) == pytest.approx(1315, abs=1)  # 21.9 min
    assert young_interval_s(C, M) / 60 == pytest.approx(21.9, abs=0.05)
    assert daly_interval_s(C, M) == pytest.approx(1295, abs=1)  # 21.6 min of compute
    assert daly_interval_s(C, M) / 60 == pytest.approx(21.6, abs=0.05)
    # Daly's Fig. 3-5 values as the note reproduces them are for other inputs; the
    # formula's degenerate branch: a checkpoint as long as two MTBFs means "every M"
    assert daly_interval_s(2 * M, M) == M


@pytest.mark.parametrize(
    ("minutes", "waste_pct", "lost_min"),
    [(10, 6.1, 5.2), (20, 4.6, 10.2), (21.9, 4.6, 11.2), (30, 4.8, 15.2), (60, 7.1, 30.2)],
)
def test_interval_costs_match_the_note_table(
    minutes: float, waste_pct: float, lost_min: float
) -> None:
    cost = interval_cost(minutes * 60, C, M)
    assert round(cost.waste_ratio * 100, 1) == waste_pct
    assert round(cost.lost_s_per_failure / 60, 1) == lost_min
    # Daly's full model agrees to within a few tenths of a point at these intervals
    assert cost.waste_ratio_daly == pytest.approx(cost.waste_ratio, abs=0.004)


def test_restart_time_and_async_saves_as_in_the_note() -> None:
    # 3 failures a day with a 10 min restart: total waste about 6.7%
    with_restart = interval_cost(21.9 * 60, C, M, restart_s=600)
    assert round(with_restart.waste_ratio * 100, 1) == 6.7
    assert with_restart.lost_s_per_failure / 60 == pytest.approx(11.2 + 10, abs=0.05)
    # a 5 s async stall: T_opt about 9 min and waste about 1.9%
    t = young_interval_s(5, M)
    assert t / 60 == pytest.approx(8.9, abs=0.05)
    assert round(interval_cost(t, 5, M).waste_ratio * 100, 1) == 1.9


def test_mtbf_from_nodes_at_the_rsc1_rate() -> None:
    # 4,096 GPUs (512 nodes): MTTF 7.2 h, interval 21 min; 16,384 GPUs: 1.8 h, 10 min
    assert mtbf_hours_from_nodes(512) == pytest.approx(7.2, abs=0.05)
    assert young_interval_s(C, mtbf_hours_from_nodes(512) * 3600) / 60 == pytest.approx(21, abs=0.5)
    assert mtbf_hours_from_nodes(2048) == pytest.approx(1.8, abs=0.05)
    assert young_interval_s(C, mtbf_hours_from_nodes(2048) * 3600) / 60 == pytest.approx(
        10, abs=0.5
    )
    a = advise(C, nodes=512)
    assert a.mtbf_source == "nodes" and a.failures_per_1000_node_days == 6.5
    assert a.failures_per_day == pytest.approx(512 * 6.5 / 1000)


def test_advise_json_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    row = advise_json(capsys, "--checkpoint-seconds", "30", "--mtbf-hours", "8")
    assert row["checkpoint_seconds"] == 30
    assert row["mtbf_hours"] == 8 and row["mtbf_source"] == "given"
    assert row["nodes"] is None and row["failures_per_1000_node_days"] is None
    assert row["failures_per_day"] == 3
    assert row["young_interval_minutes"] == pytest.approx(21.9, abs=0.05)
    assert row["daly_interval_minutes"] == pytest.approx(21.6, abs=0.05)
    assert row["recommended_interval_minutes"] == row["daly_interval_minutes"]
    # (T + C) / 2 at Daly's interval
    assert row["expected_lost_minutes_per_failure"] == pytest.approx((21.58 + 0.5) / 2, abs=0.02)
    assert row["waste_ratio"] == pytest.approx(0.046, abs=0.001)
    assert row["waste_ratio_daly"] == pytest.approx(0.045, abs=0.001)
    assert row["current_interval_minutes"] is None and row["current_waste_ratio"] is None

    row = advise_json(
        capsys,
        "--checkpoint-seconds",
        "30",
        "--nodes",
        "64",
        "--failures-per-1000-node-days",
        "2.34",
        "--current-interval-minutes",
        "60",
        "--restart-minutes",
        "10",
    )
    assert row["mtbf_source"] == "nodes" and row["nodes"] == 64
    assert row["mtbf_hours"] == pytest.approx(24000 / (64 * 2.34), abs=0.001)
    assert row["restart_minutes"] == 10
    assert row["current_interval_minutes"] == 60
    assert row["current_expected_lost_minutes_per_failure"] == pytest.approx(30.25 + 10)
    assert row["current_waste_ratio"] > row["waste_ratio"]


def test_advise_table_is_a_short_summary(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["train", "advise", "--checkpoint-seconds", "30", "--mtbf-hours", "8"]
    assert invoke([*args, "--current-interval-minutes", "60"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # spans spelled as the dashboard's training screen spells them (krea_ops.units)
    assert lines[0] == "Checkpoint every 21.6m of compute (Daly; Young: 21.9m)."
    assert all(len(line) <= 80 for line in lines) and len(lines) <= 6
    assert "3.00 failures/day" in out
    assert "checkpoint 30s, MTBF 8h (given)" in out
    assert "at 21.6m: waste 4.6% (Daly 4.5%), 11m lost per failure" in out
    assert "at 60m (now): waste 7.1% (Daly 6.9%), 30.2m lost per failure" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint-seconds", "30"], "give exactly one of --mtbf-hours and --nodes"),
        (
            ["--checkpoint-seconds", "30", "--mtbf-hours", "8", "--nodes", "4"],
            "give exactly one of --mtbf-hours and --nodes",
        ),
        (
            ["--checkpoint-seconds", "0", "--mtbf-hours", "8"],
            "--checkpoint-seconds must be a positive number, got 0",
        ),
        (
            ["--checkpoint-seconds", "nan", "--mtbf-hours", "8"],
            "--checkpoint-seconds must be a positive number, got nan",
        ),
        (
            ["--checkpoint-seconds", "30", "--mtbf-hours", "-1"],
            "--mtbf-hours must be a positive number, got -1",
        ),
        (["--checkpoint-seconds", "30", "--nodes", "0"], "--nodes must be at least 1, got 0"),
        (
            ["--checkpoint-seconds", "30", "--nodes", "8", "--failures-per-1000-node-days", "0"],
            "--failures-per-1000-node-days must be a positive number, got 0",
        ),
        (
            [
                "--checkpoint-seconds",
                "30",
                "--mtbf-hours",
                "8",
                "--failures-per-1000-node-days",
                "2",
            ],
            "--failures-per-1000-node-days applies only with --nodes",
        ),
        (
            ["--checkpoint-seconds", "30", "--mtbf-hours", "8", "--current-interval-minutes", "0"],
            "--current-interval-minutes must be a positive number, got 0",
        ),
        (
            ["--checkpoint-seconds", "30", "--mtbf-hours", "8", "--restart-minutes", "-5"],
            "--restart-minutes must be zero or more, got -5",
        ),
    ],
)
def test_bad_numbers_exit_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(["train", "advise", *args, "-o", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: {message}\n"


def test_missing_checkpoint_seconds_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke(["train", "advise", "--mtbf-hours", "8"]) == 2
    assert "--checkpoint-seconds" in capsys.readouterr().err
    with pytest.raises(BadInput):
        advise(-1, mtbf_hours=8)
