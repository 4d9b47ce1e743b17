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
from krea_ops.controllers.migrate_back import (
    UNREADABLE,
    BucketLevel,
    MigrateBackState,
    MoveMemo,
)
from krea_ops.controllers.node_health_state import Evicting, LemonMark, NodeHealthState
from krea_ops.controllers.planned_swaps import PlannedSwapsState
from krea_ops.controllers.quota_sync import PendingQuota, QuotaSyncState
from krea_ops.controllers.restarts import AttributedRestart, attributed_of
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
