"""node-health's restart recorder, pass by pass over constructed gangs (pure: the state
carried as the runner persists it, JSON), and the lemons it makes under the blast cap."""

from __future__ import annotations

import datetime
import json
from typing import Any

from krea_ops.controllers.restarts import (
    MAX_SIGNALS,
    RecorderConfig,
    RestartInputs,
    lemon_rows,
    record,
    run_restarts,
)
from krea_ops.kube.times import rfc3339
from krea_ops.model import OK_VERDICT, Reason, Severity, Verdict
from krea_ops.training.gangs import gangs_of

T0 = 1_800_000_000.0
CFG = RecorderConfig(after_s=300.0)
HOT = Verdict.of([Reason(Severity.BAD, "gpu_hot", "GPU 5 at 86 °C, at or above 78 °C", gpu=5)])


def jobset(restarts: int, uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "training", "name": "dit", "uid": uid, "resourceVersion": "7"},
        "spec": {
            "replicatedJobs": [
                {"name": "trainer", "replicas": 1, "template": {"spec": {"parallelism": 2}}}
            ]
        },
        "status": {"restarts": restarts},
    }


def pod(name: str, node: str, attempt: int, phase: str = "Running", **status: Any) -> Any:
    return {
        "metadata": {
            "namespace": "training",
            "name": name,
            "creationTimestamp": rfc3339(T0),
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "dit",
                "jobset.sigs.k8s.io/restart-attempt": str(attempt),
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-name": "dit-trainer-0",
                "batch.kubernetes.io/job-completion-index": name[-1],
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": phase, "startTime": rfc3339(T0), **status},
    }


def failed(name: str, node: str, attempt: int, at: float) -> Any:
    term = {"exitCode": 1, "reason": "Error", "finishedAt": rfc3339(at)}
    return pod(name, node, attempt, "Failed", message="trainer exited",
               containerStatuses=[{"name": "trainer", "state": {"terminated": term}}])  # fmt: skip


class Passes:
    """The recorder run pass after pass, its state through JSON as the runner keeps it."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    def run(
        self,
        t: float,
        js: Any,
        pods: list[Any],
        verdicts: dict[str, Verdict] | None = None,
        tails: dict[str, tuple[str, ...]] | None = None,
        heads: dict[str, tuple[str, ...]] | None = None,
        events: dict[str, tuple[tuple[float, str, str], ...]] | None = None,
    ) -> dict[str, float]:
        inputs = RestartInputs(tuple(gangs_of([js], pods)), tails or {}, heads or {}, events or {})
        state, gauges = record(inputs, verdicts, [], t, self.state, CFG)
        self.state = json.loads(json.dumps(state))
        return gauges

    def log(self) -> list[dict[str, Any]]:
        return list(self.state["log"].get("training/dit", []))


def steps(*pairs: int) -> tuple[str, ...]:
    return tuple(f"[rank0]:[titan] x - root - INFO - step: {s}  loss:  7.0" for s in pairs)


def test_a_restart_is_pending_for_its_window_then_attributed_with_the_work_lost() -> None:
    p = Passes()
    running = [pod("dit-0", "n1", 0), pod("dit-1", "n2", 0)]
    p.run(T0, jobset(0), running, {"n1": OK_VERDICT, "n2": OK_VERDICT},
          tails={"training/dit-0": steps(100)})  # fmt: skip
    p.run(T0 + 60, jobset(0), running, {"n2": HOT},
          tails={"training/dit-0": steps(200, 210)})  # fmt: skip
    crashed = [pod("dit-0", "n1", 0), failed("dit-1", "n2", 0, T0 + 100)]
    p.run(T0 + 110, jobset(0), crashed, {"n2": HOT})
    again = [pod("dit-0b", "n1", 1), pod("dit-1b", "n3", 1)]
    gauges = p.run(T0 + 130, jobset(1), again, {"n2": HOT})
    assert gauges["restarts_pending"] == 1 and p.log() == []
    (pending,) = p.state["pending"]
    assert pending["at"] == T0 + 100 and pending["at_exact"] and pending["nodes"] == ["n1", "n2"]
    # while the window is open, train restarts shows what the findings so far say, and
    # when that becomes final (not "window open" with nothing for five minutes)
    (row,) = run_restarts(p.state, "training", "dit", 1).rows
    assert row.provisional and row.attributed_at == T0 + 100 + 300
    assert row.attribution is not None
    assert (row.attribution.node, row.attribution.gpu) == ("n2", 5)
    from commands.train import restart_row, restarts_text

    shown = restart_row(row)
    assert shown["attributed_to"].endswith("(provisional)") and shown["provisional"]
    text = restarts_text(run_restarts(p.state, "training", "dit", 1), [shown], "")
    assert "#1: provisional, from the findings so far; final at " in text
    # the window closes 300 s after it; the new attempt has said what it loaded by then
    head = ("[rank0]:[titan] x - root - INFO - Loading the checkpoint at step 200.",)
    p.run(T0 + 401, jobset(1), again, {}, heads={"training/dit-0b": head})
    (rec,) = p.log()
    got = rec["attribution"]
    assert (got["node"], got["gpu"], got["cause"]) == ("n2", 5, "thermal")
    assert (rec["last_step"], rec["resumed_step"], rec["lost_steps"]) == (210, 200, 10)
    # (restart at T0+100) - (step 200 first logged at T0+60), 16 GPUs
    assert rec["lost_gpu_hours"] == round(40 * 16 / 3600, 2)
    assert p.state["attributed"] == [["n2", T0 + 100, "training/dit", 1, "thermal"]]
    assert p.state["pending"] == []


def test_the_lost_work_is_filled_in_once_the_next_attempt_says() -> None:
    p = Passes()
    running = [pod("dit-0", "n1", 0), pod("dit-1", "n2", 0)]
    p.run(T0, jobset(0), running, {}, tails={"training/dit-0": steps(50)})
    again = [pod("dit-0b", "n1", 1), pod("dit-1b", "n2", 1)]
    p.run(T0 + 30, jobset(1), again, {})
    p.run(T0 + 400, jobset(1), again, {})
    (rec,) = p.log()
    assert rec["lost_steps"] is None and not rec["at_exact"]
    head = ("[rank0]:[titan] x - root - INFO - Training starts at step 1.",)
    p.run(T0 + 430, jobset(1), again, {}, heads={"training/dit-0b": head})
    (rec,) = p.log()
    assert (rec["resumed_step"], rec["lost_steps"]) == (0, 50)
    assert "steps" not in rec


def test_a_checkpoint_past_the_last_step_read_makes_the_loss_a_floor() -> None:
    # the last pass read step 240; the attempt then logged on, saved step 244 and crashed
    # before the next pass: the loss is at least 0 steps, not 240 - 244
    p = Passes()
    running = [pod("dit-0", "n1", 0), pod("dit-1", "n2", 0)]
    p.run(T0, jobset(0), running, {}, tails={"training/dit-0": steps(240)})
    again = [pod("dit-0b", "n1", 1), pod("dit-1b", "n2", 1)]
    head = ("[rank0]:[titan] x - root - INFO - Loading the checkpoint at step 244.",)
    p.run(T0 + 30, jobset(1), again, {}, heads={"training/dit-0b": head})
    p.run(T0 + 400, jobset(1), again, {}, heads={"training/dit-0b": head})
    (rec,) = p.log()
    assert (rec["last_step"], rec["resumed_step"], rec["lost_steps"]) == (244, 244, 0)
    assert rec["lost_at_least"] and rec["lost_gpu_hours"] is None
    (row,) = run_restarts(p.state, "training", "dit", 1).rows
    assert row.lost_at_least
    from screens.training import restart_cells

    assert str(restart_cells(row, T0 + 400)[2]).startswith("≥0 steps")


def test_a_restarts_phases_are_timed_and_the_slowest_named() -> None:
    from krea_ops.controllers.restarts import anatomy_text, phases

    p = Passes()
    running = [pod("dit-0", "n1", 0), pod("dit-1", "n2", 0)]
    p.run(T0, jobset(0), running, {}, tails={"training/dit-0": steps(100)})
    crashed = [pod("dit-0", "n1", 0), failed("dit-1", "n2", 0, T0 + 100)]
    p.run(T0 + 110, jobset(0), crashed, {})
    restart_event = ((T0 + 104, "RestartJobSet", "applying RestartJobSet failure policy"),)

    def new_pod(name: str, node: str) -> Any:
        made = pod(name, node, 1)
        made["metadata"]["creationTimestamp"] = rfc3339(T0 + 130)
        made["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(T0 + 133)},
            {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(T0 + 160)},
        ]
        return made

    again = [new_pod("dit-0b", "n1"), new_pod("dit-1b", "n3")]
    # (rank 0's first metrics line of the new attempt, 4 minutes after it started)
    stamp = datetime.datetime.fromtimestamp(T0 + 400, datetime.UTC)
    head = (f"[rank0]:[titan] {stamp:%Y-%m-%d %H:%M:%S},000 - root - INFO - step: 110  l: 7",)
    p.run(T0 + 390, jobset(1), again, {}, heads={"training/dit-0b": ()},
          events={"training/dit": restart_event})  # fmt: skip
    (pending,) = p.state["pending"]
    assert pending["anatomy"]["first_step_at"] is None  # not logged yet
    p.run(T0 + 410, jobset(1), again, {}, heads={"training/dit-0b": head})
    (rec,) = p.log()
    known = rec["anatomy"]
    assert known == {
        "failed_at": T0 + 100,
        "detected_at": T0 + 104,
        "pods_gone_at": T0 + 130,
        "scheduled_at": T0 + 133,
        "running_at": T0 + 160,
        "first_step_at": T0 + 400,
    }
    durations, slowest = phases(known)
    assert dict(durations) == {
        "detection": 4.0,
        "teardown": 26.0,
        "scheduling": 3.0,
        "start": 27.0,
        "first step": 240.0,
    }
    assert slowest == "first step"
    assert anatomy_text(known).endswith("first step 4 min; slowest: first step")
    (row,) = run_restarts(p.state, "training", "dit", 1).rows
    assert row.anatomy == known


def test_restarts_before_the_recorder_and_a_new_run_of_the_same_name_are_not_mixed() -> None:
    p = Passes()
    p.run(T0, jobset(3), [pod("dit-0", "n1", 3)], {})
    assert p.state["gangs"]["training/dit"]["unrecorded"] == 3
    assert p.state["pending"] == []
    # deleted and launched again under the same name: a new uid, its own count
    p.run(T0 + 30, jobset(1, uid="u2"), [pod("dit-0", "n1", 1)], {})
    assert p.state["pending"] == [] and p.state["gangs"]["training/dit"]["unrecorded"] == 1
    got = run_restarts(p.state, "training", "dit", 1)
    assert got.unrecorded == 1 and got.rows == ()


def test_the_jobset_event_times_a_restart_whose_pods_are_gone() -> None:
    p = Passes()
    solo = {
        "metadata": {"namespace": "training", "name": "dit", "uid": "u1"},
        "spec": {"replicatedJobs": [{"name": "trainer", "replicas": 2}]},
        "status": {"restarts": 0},
    }
    a = pod("dit-0", "n1", 0)
    b = pod("dit-1", "n2", 0)
    b["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "dit-trainer-1"
    p.run(T0, solo, [a, b], {})
    said = "applying RestartJobSet failure policy action (first failed job: dit-trainer-1)"
    older = (T0 - 500, "RestartJobSetFailurePolicyAction", said.replace("-1)", "-0)"))
    event = (T0 + 20, "RestartJobSetFailurePolicyAction", said)
    solo["status"]["restarts"] = 1
    p.run(T0 + 40, solo, [], {}, events={"training/dit": (older, event)})
    (pending,) = p.state["pending"]
    assert pending["at"] == T0 + 20 and pending["at_exact"]
    assert pending["failed"][0]["node"] == "n2"
    assert pending["failed"][0]["pod"] == "child Job dit-trainer-1"


def test_signals_are_kept_for_the_window_only_and_blind_passes_add_nothing() -> None:
    p = Passes()
    js = jobset(0)
    p.run(T0, js, [], {"n2": HOT})
    p.run(T0 + 60, js, [], None)  # telemetry unreadable: nothing added, nothing dropped
    (entry,) = p.state["signals"]["n2"]
    assert entry[4:6] == [T0, T0]
    p.run(T0 + 90, js, [], {"n2": HOT})
    assert p.state["signals"]["n2"][0][4:6] == [T0, T0 + 90]
    p.run(T0 + 90 + 720 + 300 + 601, js, [], {})
    assert p.state["signals"] == {}


def test_signals_stay_under_their_cap() -> None:
    p = Passes()
    many = {f"n{i}": HOT for i in range(MAX_SIGNALS + 50)}
    p.run(T0, jobset(0), [], many)
    assert sum(len(v) for v in p.state["signals"].values()) == MAX_SIGNALS


def test_congestion_is_not_kept_as_a_signal() -> None:
    p = Passes()
    busy = Verdict.of([Reason(Severity.SUSPECT, "ib_congestion", "IB x: waiting", port="x")])
    p.run(T0, jobset(0), [], {"n1": busy})
    assert p.state["signals"] == {}


def test_lemon_rows_list_restarts_and_evictions_worst_first() -> None:
    state = {
        "recorder": {
            "attributed": [
                ["a", T0 - 3 * 86400, "training/dit", 1, "thermal"],
                ["a", T0 - 1800, "training/dit", 2, "thermal"],
                ["a", T0 - 50, "training/dit", 3, "thermal"],  # the same fault again
                ["e", T0 - 7200, "training/dit", 4, "evicted"],  # node-health evicted it
                ["e", T0 - 10, "training/dit", 5, "evicted"],
                ["b", T0 - 40 * 86400, "training/dit", 3, "nvlink"],  # out of the window
            ]
        },
        "remediations": {"c": [T0 - 10]},
    }
    rows = lemon_rows(state, ["d"], T0)
    assert [(r.node, r.candidate, r.labelled, len(r.restarts)) for r in rows] == [
        ("a", True, False, 3),
        ("e", True, False, 2),
        ("c", False, False, 0),
        ("d", False, True, 0),
    ]


def test_the_log_keeps_the_newest_records_within_its_caps() -> None:
    def rec(i: int) -> dict[str, Any]:
        return {"number": i, "at": T0 + i, "attribution": {"evidence": ["x" * 1000] * 20}}

    prev = {"log": {f"training/run-{r}": [rec(r * 10 + i) for i in range(10)] for r in range(15)}}
    state, _ = record(RestartInputs(), {}, [], T0 + 1000, prev, CFG)
    kept = [r for rs in state["log"].values() for r in rs]
    assert len(kept) == 100 and min(r["number"] for r in kept) == 50  # the newest 100
    assert len(json.dumps(state)) < 1024 * 1024
