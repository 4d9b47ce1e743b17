"""What ``train status`` and the dashboard say of a run's status, and how the dashboard's
header and ``controller status`` count the runs node-health judges HUNG or STRAGGLER
(pure: constructed statuses and controller rows)."""

from __future__ import annotations

from commands.train import STATUS_COLUMNS, status_json, status_rows, status_text
from krea_ops.controllers.status import _runs
from krea_ops.gangstatus import GangStatus, summary_lines
from krea_ops.training.progress import Progress
from krea_ops.training.stalls import GpuRow, RunJudgement, Standout
from screens.text import controllers_text

T0 = 1_800_000_000.0


def straggling() -> GangStatus:
    held = ("hw_power_brake", "hw_slowdown")
    rows = tuple(
        GpuRow(
            "n1",
            i,
            1.0,
            0.6 if i == 5 else 0.3,
            990.0 if i == 5 else 1905.0,
            1980.0,
            60.0,
            held if i == 5 else (),
        )
        for i in range(8)
    )
    mark = Standout("n1", 5, "clock", "GPU 5 SM clock 990 of 1980 MHz (hw_power_brake)", 3.5)
    judgement = RunJudgement(
        "STRAGGLER",
        ("step time 2.00 s, 2.00x the run's baseline 1.00 s", "n1: GPU 5 SM clock 990"),
        node="n1",
        gpu=5,
        standouts=(mark,),
        busy=1.0,
        tensor=0.34,
        gpus=rows,
    )
    prog = Progress(1200, T0 - 3, T0 - 3600, 2.0, 1.0, 120)
    return GangStatus("training", "dit", 2, ("n1", "n2"), prog, judgement)


def test_the_status_says_state_progress_gpus_why_and_what_stands_out() -> None:
    got = straggling()
    lines = summary_lines(got, T0)
    assert lines[0] == "training/dit: STRAGGLER (restarts 2, 2 nodes, 8 GPUs read)"
    assert lines[1] == "progress: step 1,200, 3.0 s ago; step time 2.00 s (baseline 1.00 s)"
    assert lines[2] == "GPUs: 100% busy, tensor activity 0.34"
    assert "stands out:" in lines
    assert lines[-1] == "  n1 GPU 5: GPU 5 SM clock 990 of 1980 MHz (hw_power_brake)"
    rows = status_rows(got)
    assert [r["gpu"] for r in rows if r["stands_out"]] == [5]
    text = status_text(got, T0, "TABLE\n")
    assert text.startswith("training/dit: STRAGGLER") and text.endswith("TABLE\n")
    shown = status_json(got, T0)
    assert (shown["state"], shown["node"], shown["gpu"]) == ("STRAGGLER", "n1", 5)
    assert shown["last_step_age_s"] == 3.0 and shown["baseline_step_time_s"] == 1.0
    assert set(STATUS_COLUMNS) <= set(rows[0])


def test_the_header_and_controller_status_count_hung_and_straggling_runs() -> None:
    state = {
        "stalls": {
            "training/a": {"state": "HUNG"},
            "training/b": {"state": "STRAGGLER"},
            "training/c": {"state": "RUNNING"},
            "training/d": {"state": "STRAGGLER"},
        }
    }
    runs = _runs(state)
    assert runs == {"HUNG": ["training/a"], "STRAGGLER": ["training/b", "training/d"]}
    header = controllers_text([{"running": True, "runs": runs}]).plain
    assert "1 run HUNG" in header and "2 runs STRAGGLER" in header
    # a controller that does not run any more says nothing of what it judged
    assert "HUNG" not in controllers_text([{"running": False, "runs": runs}]).plain
