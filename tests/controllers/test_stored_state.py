"""A controller's persisted state, as the version before its state types wrote it, still
loads: each typed state reads the stored example (``stored_state/<controller>.json``,
gathered from that version's own test passes: per key, the richest value a pass wrote)
and writes it back as it was, so a controller upgraded in place keeps its hold timers,
token buckets and pending changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from krea_ops.controllers.burst_taint import BurstTaintState
from krea_ops.controllers.ladder import ValidationMemo
from krea_ops.controllers.ledger import Ledger, LedgerEntry, NodeMemo
from krea_ops.controllers.loop import _encode
from krea_ops.controllers.migrate_back import (
    UNREADABLE,
    BucketLevel,
    MigrateBackState,
    MoveMemo,
)
from krea_ops.controllers.node_health_state import Evicting, LemonMark, NodeHealthState
from krea_ops.controllers.planned_swaps import PlannedSwapsState
from krea_ops.controllers.quota_sync import PendingQuota, QuotaSyncState
from krea_ops.controllers.restarts import (
    AttributedRestart,
    GangMemo,
    Hang,
    KeptSignal,
    PendingRestart,
    RecordedRestart,
    RecorderState,
    RestartInputs,
    attributed_of,
    record,
)
from krea_ops.model import Severity
from krea_ops.training.attribution import FailedPod
from krea_ops.training.swaps import GangSwaps

STORED = Path(__file__).parent / "stored_state"


def stored(controller: str) -> dict[str, Any]:
    data = json.loads((STORED / f"{controller}.json").read_text())
    assert isinstance(data, dict)
    return data


def test_burst_taint_state_reads_and_writes_the_stored_example() -> None:
    data = stored("burst-taint")
    state = BurstTaintState.from_json(data)
    assert state.tainted is False and state.high_since == 1800003600.0
    assert state.to_json() == data


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"tainted": "yes", "high_since": True, "low_since": "1", "free_gpus": 1.5},
        None,
        [],
    ],
)
def test_burst_taint_state_reads_what_is_not_its_type_as_absent(data: Any) -> None:
    assert BurstTaintState.from_json(data) == BurstTaintState()
    assert BurstTaintState().to_json() == {
        "tainted": None,
        "high_since": None,
        "low_since": None,
    }


def test_migrate_back_state_reads_and_writes_the_stored_example() -> None:
    data = stored("migrate-back")
    state = MigrateBackState.from_json(data)
    assert state.buckets["cluster"] == BucketLevel(98.0, 3600.0)
    assert state.moves["Deployment ns1/a"] == MoveMemo(4, 3600.0)
    assert state.to_json() == data


def test_migrate_back_state_counts_an_unreadable_bucket_empty_and_forgets_a_bad_move() -> None:
    state = MigrateBackState.from_json(
        {
            "version": 1,
            "buckets": {"cluster": {"tokens": "x"}, "namespace/a": None, "namespace/b": []},
            "moves": {"Deployment a/x": {"ready": "many"}, "Deployment a/y": {"ready": 2, "at": 5}},
        }
    )
    assert state.buckets == {"cluster": UNREADABLE, "namespace/b": UNREADABLE}
    assert state.moves == {"Deployment a/y": MoveMemo(2, 5.0)}
    assert MigrateBackState.from_json(None) == MigrateBackState()


def test_quota_sync_state_reads_and_writes_the_stored_example() -> None:
    data = stored("quota-sync")
    state = QuotaSyncState.from_json(data)
    assert state.pending["training/h200"] == PendingQuota(24, 1020.0)
    assert state.to_json() == data
    odd = QuotaSyncState.from_json({"pending": {"a/x": [], "b/x": {"quota": 3, "since": "?"}}})
    assert odd.pending == {"b/x": PendingQuota(3, None)}


def test_node_health_state_reads_and_writes_the_stored_example() -> None:
    data = stored("node-health")
    state = NodeHealthState.from_json(data)
    assert state.evicting["gpu-node-000"] == Evicting("1", 1800000660.0)
    assert state.stalls["training/dit"].state == "HUNG"
    assert state.lemons["gpu-node-003"] == LemonMark(1799917200.0, True)
    assert state.veto is not None and state.veto.active
    assert state.to_json() == data


def test_node_health_state_forgets_what_is_not_of_its_type() -> None:
    state = NodeHealthState.from_json(
        {
            "restored": {"a": "soon", "b": 5},
            "evicting": {"a": ["1"], "b": ["7", 9], "c": "x"},
            "remediations": {"a": [1, "x", 2.5], "b": 3},
            "lemons": {"a": {"seen": True}, "b": []},
            "stalls": {"ns/run": {"state": "HUNG", "since": "now", "acted": 1}},
            "marked": "gpu-node-000",
            "ledger": [],
        }
    )
    assert state.restored == {"b": 5.0}
    assert state.evicting == {"b": Evicting("7", 9.0)}
    assert state.remediations == {"a": (1.0, 2.5)}
    assert state.lemons == {"a": LemonMark(0.0, True)}
    assert state.stalls["ns/run"].since is None and state.stalls["ns/run"].acted
    assert state.marked == () and state.ledger is None
    assert NodeHealthState.from_json(None) == NodeHealthState()


def test_the_ledger_reads_and_writes_the_stored_example() -> None:
    data = stored("node-health")["ledger"]
    ledger = Ledger.from_json(data)
    assert ledger.nodes["gpu-node-000"][0] == LedgerEntry(
        1800000000,
        "quarantined",
        "GPU 3 at 84 °C, at or above 78 °C for the last 5 min",
        "system:serviceaccount:krea-ops:node-health",
    )
    assert ledger.to_json() == data
    memo = NodeMemo.from_json({"m": 1, "R": 1800000000, "r": "gpu-3"})
    assert memo == NodeMemo(marked=True, repair_label="gpu-3", restored_at=1800000000.0)
    assert memo.to_json() == {"m": 1, "R": 1800000000, "r": "gpu-3"}


def test_the_ladders_memos_read_and_write_the_stored_example() -> None:
    data = stored("node-health")["validation"]
    memos = {n: ValidationMemo.from_json(m) for n, m in data.items()}
    assert memos["gpu-node-002"] == ValidationMemo(1796586643.0, 0, False)
    assert {n: m.to_json() for n, m in memos.items() if m is not None} == data
    ready = ValidationMemo.from_json({"since": 5, "failures": 2, "escalated": True, "ready": True})
    assert ready == ValidationMemo(5.0, 2, True, True)
    assert ready.to_json() == {"since": 5.0, "failures": 2, "escalated": True, "ready": True}


def test_an_attributed_restart_reads_and_writes_its_positional_entry() -> None:
    raw = ["gpu-node-003", 1800000000.0, "training/dit", 2, "gpu_hot"]
    entry = AttributedRestart.from_json(raw)
    assert entry is not None
    assert entry == AttributedRestart("gpu-node-003", 1800000000.0, "training/dit", 2, "gpu_hot")
    assert entry.to_json() == raw
    recorder = {"attributed": [raw, ["gpu-node-004", "soon", "training/dit", 3, "x"], "junk"]}
    assert attributed_of(recorder) == [entry]
    assert attributed_of(stored("node-health")["recorder"]) == []


def test_planned_swaps_state_reads_and_writes_the_stored_example() -> None:
    data = stored("node-health")["swaps"]
    state = PlannedSwapsState.from_json(data)
    assert state.to_json() == data
    gangs = {k: GangSwaps.from_json(v) for k, v in data["gangs"].items()}
    assert {k: g.to_json() for k, g in gangs.items() if g is not None} == data["gangs"]
    active = state.active()["training/a"]
    assert active.node == "gpu-node-001" and active.status == "pending"
    assert active.requested_at == 1800000000.0


def test_the_restart_recorders_state_reads_and_writes_the_stored_example() -> None:
    """``node-health-recorder.json``: node-health's ``recorder`` as the version before its
    types wrote it (passes over three runs: a restart attributed to a hot GPU with the work
    it lost and its anatomy, one pending, a hung run's restart attributed to the hang, a
    hang carried over a pass), as the ConfigMap holds it: written back byte for byte."""
    data = stored("node-health-recorder")
    state = RecorderState.from_json(data)
    assert _encode(state.to_json()) == _encode(data)  # the ConfigMap's bytes (loop.write_state)
    assert json.dumps(state.to_json(), sort_keys=True) == json.dumps(data)
    assert RecorderState.from_json(state.to_json()) == state
    (dit,) = state.log["training/dit"]
    assert dit.attribution.node == "n2" and dit.attribution.cause == "thermal"
    assert (dit.lost.last_step, dit.lost.resumed_step, dit.lost.lost_steps) == (210, 200, 10)
    assert dit.anatomy is not None and dit.anatomy.first_step_at == 1800000400.0
    (llm,) = state.log["training/llm"]
    assert llm.hung is not None and llm.hung.node == "n6" and llm.steps == ((1800000000.0, 400),)
    (pending,) = state.pending
    assert (pending.run, pending.number, pending.nodes) == ("training/dit", 2, ("n1", "n3"))
    assert pending.failed[0].log_tail == ("CUDA error: an illegal memory access",)
    assert state.gangs["training/dit"].jobs == {"dit-trainer-0": "n1", "dit-trainer-1": "n4"}
    assert state.gangs["training/dit"].resumed_step == 200
    assert state.gangs["training/vae"].hung == Hang(
        1800000700.0,
        1800000400.0,
        None,
        None,
        ("no step since 90 for 5 min", "every GPU busy (100%) with tensor activity 0.01"),
    )
    assert state.gangs["training/llm"].failed["llm-1b"].node == "n7"
    assert state.signals["n6"] == (
        KeptSignal(
            "ib_link_flap",
            Severity.SUSPECT,
            None,
            "mlx5_3/1",
            1800000060.0,
            1800000110.0,
            "IB mlx5_3/1 link went down 2x in the last 5 min",
        ),
    )
    assert [a.cause for a in state.attributed] == ["thermal", "hang"]
    # a pass that sees none of the runs any more: the log kept, less the steps kept for a
    # new attempt that will not say what it loaded now
    later, _ = record(RestartInputs(), {}, [], 1800000800.0, data)
    assert later["log"]["training/dit"] == data["log"]["training/dit"]
    assert later["log"]["training/llm"] == [
        {k: v for k, v in data["log"]["training/llm"][0].items() if k != "steps"}
    ]
    assert later["attributed"] == data["attributed"] and later["gangs"] == {}


FAILED = {
    "pod": "dit-1",
    "node": "n2",
    "at": 5.0,
    "reason": "Error",
    "exit_code": 1,
    "message": "trainer exited",
    "log_tail": ["a", "b"],
}
SIGNAL = ["gpu_hot", "BAD", 5, None, 1.0, 2.0, "GPU 5 at 86 °C"]


def test_the_restart_recorders_state_drops_what_is_not_of_its_shape() -> None:
    """As ``sane_state`` did before it: an entry without the shape it is written in is
    dropped, a value that is not of its type reads as absent or its default; never a
    failed pass."""
    state = RecorderState.from_json(
        {
            "signals": {
                "n1": [SIGNAL, ["gpu_hot"], [*SIGNAL[:1], "WORSE", *SIGNAL[2:]], "x"],
                "n2": [[*SIGNAL[:2], 1.5, *SIGNAL[3:]], [*SIGNAL[:4], "soon", *SIGNAL[5:]]],
                "n3": "junk",
            },
            "gangs": {
                "a/x": {"restarts": "2"},
                "a/y": {
                    "restarts": 2,
                    "nodes": ["n1", 3],
                    "gpus": "8",
                    "steps": [[1, 10], [2, "x"], "y", [3, 11.0]],
                    "failed": {"dit-1": FAILED, "dit-2": "junk"},
                    "jobs": {"j": "n1", "k": 5},
                    "attempt_seen": "soon",
                    "hung": {"node": "n1"},
                    "resumed_step": 2.5,
                },
                "a/z": [],
            },
            "pending": [
                {"run": "a/y", "number": 3, "at": 7, "failed": [FAILED, 4], "hung": {"since": 6}},
                {"run": "no-namespace", "number": 1, "at": 1.0},
                {"run": "a/y", "number": 1.5, "at": 1.0},
                {"run": "a/y", "number": 1, "at": "x"},
                "junk",
            ],
            "log": {
                "a/y": [{"number": 2, "at": 3.0, "attribution": []}, {"number": 1}, None],
                "a/w": ["junk"],
            },
            "attributed": [["n1", 3.0, "a/y", 2, "thermal"], ["n1", "soon", "a/y", 2, "x"]],
        }
    )
    assert state.signals == {"n1": (KeptSignal.from_json(SIGNAL),)}
    assert state.gangs == {
        "a/y": GangMemo(
            uid="",
            restarts=2,
            steps=((1.0, 10), (3.0, 11)),
            failed={
                "dit-1": FailedPod("dit-1", "n2", 5.0, "Error", 1, "trainer exited", ("a", "b"))
            },
            jobs={"j": "n1"},
        )
    }
    (pending,) = state.pending
    assert pending == PendingRestart(
        "a/y", 3, 7.0, failed=(state.gangs["a/y"].failed["dit-1"],), hung=Hang(6.0)
    )
    (logged,) = state.log["a/y"]
    assert logged == RecordedRestart.from_json({"number": 2, "at": 3.0})
    assert logged.attribution.cause == "unattributed" and logged.steps is None
    assert list(state.log) == ["a/y"]
    assert state.attributed == (AttributedRestart("n1", 3.0, "a/y", 2, "thermal"),)
    for junk in (None, [], "x", {"signals": 1, "gangs": [], "log": 2, "attributed": 5}):
        assert RecorderState.from_json(junk) == RecorderState()
        assert record(RestartInputs(), {}, [], 10.0, junk)[0] == RecorderState().to_json()
