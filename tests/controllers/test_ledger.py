"""The node ledger pass by pass over hand-built node objects (pure: the ledger carried as
the runner persists it, JSON), a node's history with its attributed restarts, and the
time-to-repair figures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from krea_ops.controllers.ledger import (
    DELETED,
    ESCALATED,
    EVICTED_AGAIN_KIND,
    JOINED,
    NEEDS_REPAIR,
    OPERATOR,
    QUARANTINED,
    REPAIRED,
    RESTART,
    RESTORED,
    VALIDATION_FAILED,
    VALIDATION_PASSED,
    HistoryRow,
    history,
    node_history,
    node_repair,
    observe,
    p90,
    repair_stats,
)
from krea_ops.kube.cluster import node_info
from krea_ops.kube.times import rfc3339
from krea_ops.validation import Check, Validation

T0 = 1_800_000_000.0
H = 3600.0
DAY = 86400.0
NH = "system:serviceaccount:krea-ops:node-health"
N1, N2 = "gpu-node-001", "gpu-node-002"


def node(
    name: str,
    *,
    evicted: tuple[float, str, str] | None = None,
    again: list[tuple[float, str, str]] | None = None,
    validation: Validation | None = None,
    needs_repair: str | None = None,
    pending: bool = False,
    created: float = T0 - 30 * DAY,
    gpus: int = 8,
) -> dict[str, Any]:
    """A node object as the API lists it."""
    annotations: dict[str, str] = {}
    labels = {"krea.ai/pool": "h200"}
    taints: list[dict[str, str]] = []
    spec: dict[str, Any] = {"taints": taints}
    if evicted is not None:
        at, by, reason = evicted
        annotations |= {
            "krea.ai/evicted-at": rfc3339(at),
            "krea.ai/evicted-by": by,
            "krea.ai/evicted-reason": reason,
        }
        taints.append({"key": "krea.ai/unhealthy", "value": "xid-79", "effect": "NoSchedule"})
        spec["unschedulable"] = True
    if again:
        annotations["krea.ai/evicted-again"] = json.dumps(
            [{"by": b, "reason": r, "at": rfc3339(t)} for t, b, r in again]
        )
    if validation is not None:
        annotations["krea.ai/validation"] = validation.annotation()
    if needs_repair is not None:
        labels["krea.ai/needs-repair"] = needs_repair
    if pending:
        taints.append({"key": "krea.ai/validation", "value": "pending", "effect": "NoSchedule"})
    return {
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": annotations,
            "creationTimestamp": rfc3339(created),
        },
        "spec": spec,
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}},
    }


def passed(at: float, by: str = NH) -> Validation:
    return Validation(
        N1,
        "quick",
        at,
        (Check("dcgm", True, "4 tests passed"), Check("nccl", True, "bus bandwidth 480 GB/s")),
        by=by,
    )


def failed(at: float, by: str = NH) -> Validation:
    return Validation(
        N1,
        "quick",
        at,
        (Check("dcgm", False, "failed Memory (GPU 3)"), Check("nccl", True, "ok")),
        by=by,
    )


def run(
    prev: dict[str, Any] | None,
    nodes: list[dict[str, Any]],
    now: float,
    restoring: tuple[str, ...] = (),
    escalated: tuple[str, ...] = (),
    **kw: Any,
) -> dict[str, Any]:
    """One pass, the ledger through JSON as the ConfigMap carries it."""
    got = observe(
        prev,
        {n["metadata"]["name"]: n for n in nodes},
        now,
        user=NH,
        restoring=restoring,
        escalated=escalated,
        **kw,
    )
    return json.loads(json.dumps(got))


def kinds(ledger: dict[str, Any], name: str = N1) -> list[str]:
    return [e[1] for e in ledger["nodes"].get(name, [])]


# -- observe -------------------------------------------------------------------------------


def test_a_quarantine_validation_and_restore_by_node_health_each_once_with_their_times() -> None:
    ev = (T0 + 10.0, NH, "GPU 3 lost (XID 79)")
    led = run(None, [node(N1), node(N2)], T0)
    assert led["nodes"] == {} and led["seen"] == {}

    led = run(led, [node(N1, evicted=ev), node(N2)], T0 + 60)
    assert led["nodes"][N1] == [[T0 + 10, QUARANTINED, "GPU 3 lost (XID 79)", NH]]
    assert led["seen"] == {N1: {"m": 1}}

    led = run(led, [node(N1, evicted=ev), node(N2)], T0 + 120)  # nothing new
    assert kinds(led) == [QUARANTINED]

    v = passed(T0 + 2 * H)
    led = run(led, [node(N1, evicted=ev, validation=v)], T0 + 2 * H + 30, restoring=(N1,))
    assert kinds(led) == [QUARANTINED, VALIDATION_PASSED]
    [_, (t, _, detail, by)] = led["nodes"][N1]
    assert t == round(v.at) and detail.startswith("pass (quick): dcgm") and by == NH

    # restored in the pass above: the next pass sees it unmarked, by node-health, then
    led = run(led, [node(N1, validation=v)], T0 + 2 * H + 90)
    assert led["nodes"][N1][-1] == [T0 + 2 * H + 30, RESTORED, "", NH]
    assert led["seen"] == {}

    stats = repair_stats(led, T0 + 3 * H)
    assert stats.incidents == 1 and stats.repairs == 1
    assert stats.time_to_repair_mean_s == pytest.approx(2 * H + 20)
    assert stats.validations_passed == 1 and stats.quarantined_now == ()


def test_a_restore_node_health_did_not_plan_is_an_operators() -> None:
    ev = (T0, "alice", "rack 3 maintenance")
    led = run(None, [node(N1, evicted=ev)], T0 + 10)
    led = run(led, [node(N1)], T0 + 100)
    assert led["nodes"][N1][-1] == [T0 + 100, RESTORED, "", OPERATOR]


def test_a_restore_seen_in_the_same_pass_that_planned_it_is_node_healths() -> None:
    led = run(None, [node(N1, evicted=(T0, NH, "hot"))], T0 + 10)
    led = run(led, [node(N1)], T0 + 70, restoring=(N1,))
    assert led["nodes"][N1][-1] == [T0 + 70, RESTORED, "", NH]


def test_a_restore_that_failed_is_forgotten_and_a_later_one_is_the_operators() -> None:
    ev = (T0, NH, "hot")
    led = run(None, [node(N1, evicted=ev)], T0 + 10, restoring=(N1,))
    led = run(led, [node(N1, evicted=ev)], T0 + 70)  # the restore failed: still marked
    assert "R" not in led["seen"][N1]
    led = run(led, [node(N1)], T0 + 130)
    assert led["nodes"][N1][-1][3] == OPERATOR


def test_needs_repair_and_repaired_take_the_validations_time_and_its_author() -> None:
    ev = (T0, NH, "hot")
    led = run(None, [node(N1, evicted=ev)], T0 + 10)
    bad = failed(T0 + 50)
    led = run(led, [node(N1, evicted=ev, validation=bad, needs_repair="dcgm")], T0 + 70)
    assert led["nodes"][N1][1:] == [
        [T0 + 50, VALIDATION_FAILED, bad.summary(), NH],
        [T0 + 50, NEEDS_REPAIR, "dcgm", None],
    ]
    assert led["seen"][N1] == {"m": 1, "r": "dcgm"}
    good = passed(T0 + 5 * H, by="bob")
    led = run(led, [node(N1, evicted=ev, validation=good)], T0 + 5 * H + 60)
    assert led["nodes"][N1][-2:] == [
        [T0 + 5 * H, VALIDATION_PASSED, good.summary(), "bob"],
        [T0 + 5 * H, REPAIRED, "dcgm", "bob"],
    ]


def test_a_label_set_by_hand_is_timed_by_the_pass_that_saw_it() -> None:
    led = run(None, [node(N1, validation=passed(T0 - H))], T0)
    led = run(led, [node(N1, validation=passed(T0 - H), needs_repair="ib")], T0 + 60)
    assert led["nodes"][N1][-1] == [T0 + 60, NEEDS_REPAIR, "ib", None]
    led = run(led, [node(N1, validation=passed(T0 - H))], T0 + 120)
    assert led["nodes"][N1][-1] == [T0 + 120, REPAIRED, "ib", None]


def test_a_new_node_with_the_pending_taint_joined_when_it_was_made() -> None:
    led = run(None, [node(N2)], T0)
    led = run(led, [node(N1, pending=True, created=T0 + 20), node(N2)], T0 + 60)
    assert led["nodes"][N1] == [[T0 + 20, JOINED, "pending validation", None]]
    led = run(led, [node(N1, pending=True, created=T0 + 20)], T0 + 120)
    assert kinds(led) == [JOINED]  # once
    led = run(led, [node(N1, created=T0 + 20, validation=passed(T0 + 100))], T0 + 180)
    assert kinds(led) == [JOINED, VALIDATION_PASSED] and led["seen"] == {}


def test_an_old_node_newly_tainted_pending_joined_at_the_pass() -> None:
    led = run(None, [node(N1, created=T0 - DAY)], T0)
    led = run(led, [node(N1, pending=True, created=T0 - DAY)], T0 + 60)
    assert led["nodes"][N1][0][0] == T0 + 60


def test_escalated_once_with_the_failures_since_its_quarantine() -> None:
    ev = (T0, NH, "hot")
    led = run(None, [node(N1, evicted=ev, validation=failed(T0 + H), needs_repair="dcgm")], T0 + H)
    led = run(led, [node(N1, evicted=ev, validation=failed(T0 + 2 * H), needs_repair="dcgm")],
              T0 + 2 * H + 10, escalated=(N1,))  # fmt: skip
    assert led["nodes"][N1][-1] == [T0 + 2 * H + 10, ESCALATED, "after 2 failed validations", NH]
    led = run(led, [node(N1, evicted=ev, validation=failed(T0 + 2 * H), needs_repair="dcgm")],
              T0 + 2 * H + 70, escalated=(N1,))  # fmt: skip
    assert kinds(led).count(ESCALATED) == 1


def test_evictions_of_a_node_already_out_are_recorded_but_not_incidents() -> None:
    ev = (T0, NH, "hot")
    again = [(T0 + 600, "alice", "rack 3")]
    led = run(None, [node(N1, evicted=ev, again=again)], T0 + 700)
    assert led["nodes"][N1][1] == [T0 + 600, EVICTED_AGAIN_KIND, "rack 3", "alice"]
    assert repair_stats(led, T0 + 800).incidents == 1


def test_a_controller_without_a_ledger_records_what_nodes_say_of_themselves() -> None:
    ev = (T0 - 5 * H, NH, "hot")
    nodes = [
        node(N1, evicted=ev, validation=failed(T0 - H), needs_repair="dcgm", pending=True),
        node(N2, validation=passed(T0 - 40 * DAY)),
    ]
    led = run(None, nodes, T0)
    assert led["nodes"][N1] == [
        [T0 - 30 * DAY, JOINED, "pending validation", None],
        [T0 - 5 * H, QUARANTINED, "hot", NH],
        [T0 - H, VALIDATION_FAILED, failed(T0 - H).summary(), NH],
        [T0 - H, NEEDS_REPAIR, "dcgm", None],
    ]
    assert kinds(led, N2) == [VALIDATION_PASSED]
    assert led["seen"] == {N1: {"m": 1, "p": 1, "r": "dcgm"}}
    # and a second start without the ledger again writes nothing twice once it is back
    again = run(led, nodes, T0 + 60)
    assert again["nodes"] == led["nodes"]


def test_a_node_deleted_is_recorded_once_and_its_memo_dropped() -> None:
    ev = (T0, NH, "hot")
    led = run(None, [node(N1, evicted=ev), node(N2)], T0 + 10)
    led = run(led, [node(N2)], T0 + 70)
    assert led["nodes"][N1][-1] == [T0 + 70, DELETED, "", None] and led["seen"] == {}
    led = run(led, [node(N2)], T0 + 130)
    assert kinds(led) == [QUARANTINED, DELETED]
    s = repair_stats(led, T0 + 200)
    assert s.quarantined_now == () and s.repairs == 0 and s.nodes[0].quarantined_now is False
    assert N2 not in led["nodes"]  # nothing ever happened to it


def test_entries_are_bounded_by_window_per_node_and_total() -> None:
    led: dict[str, Any] | None = None
    for i in range(6):
        ev = (T0 + i * DAY, NH, f"incident {i}")
        led = run(led, [node(N1, evicted=ev), node(N2, evicted=ev)], T0 + i * DAY + 10)
        led = run(led, [node(N1), node(N2)], T0 + i * DAY + H)
    assert led is not None and len(led["nodes"][N1]) == 12
    small = run(led, [node(N1), node(N2)], T0 + 6 * DAY, per_node=4)
    assert [e[2] for e in small["nodes"][N1] if e[1] == QUARANTINED] == ["incident 4", "incident 5"]
    capped = run(led, [node(N1), node(N2)], T0 + 6 * DAY, total=6)
    assert sum(len(v) for v in capped["nodes"].values()) == 6
    assert min(e[0] for v in capped["nodes"].values() for e in v) == T0 + 4 * DAY + H
    windowed = run(led, [node(N1), node(N2)], T0 + 6 * DAY, window_s=2 * DAY - 1)
    assert [e[2] for e in windowed["nodes"][N1] if e[1] == QUARANTINED] == ["incident 5"]
    # an eviction older than the window is not recorded on a fresh start either
    assert run(None, [node(N1, evicted=(T0, NH, "x"))], T0 + 3 * DAY, window_s=DAY)["nodes"] == {}
    gone = run(led, [node(N1), node(N2)], T0 + 200 * DAY)
    assert gone["nodes"] == {} and [s for _, s in gone["observed"]] == [2 * H]  # this pass


def test_a_malformed_ledger_is_read_for_what_it_still_holds() -> None:
    prev = {
        "at": "yesterday",
        "nodes": {N1: [[T0, QUARANTINED, "hot", NH], [T0, "eaten", "", None], "junk"], N2: 3},
        "seen": {N1: {"m": 1}, N2: "x"},
        "observed": [[T0, "lots"], "x"],
    }
    led = run(prev, [node(N1), node(N2)], T0 + 60)
    assert kinds(led) == [QUARANTINED, RESTORED] and led["observed"] == []


def test_observed_node_time_counts_gpu_nodes_and_caps_a_gap() -> None:
    cpu = node("cpu-node-000", gpus=0)
    led = run(None, [node(N1), node(N2), cpu], T0)
    led = run(led, [node(N1), node(N2), cpu], T0 + 600)
    assert sum(s for _, s in led["observed"]) == 2 * 600
    led = run(led, [node(N1), node(N2), cpu], T0 + 600 + 5 * H)  # down for 5 hours
    assert sum(s for _, s in led["observed"]) == 2 * 600 + 2 * H


# -- figures -------------------------------------------------------------------------------


def rows(*items: tuple[float, str]) -> list[HistoryRow]:
    return [HistoryRow(t, k, "", None) for t, k in items]


def test_node_figures_incidents_mtbi_repairs_and_state() -> None:
    got = node_repair(
        N1,
        rows(
            (T0, QUARANTINED),
            (T0 + 2 * H, VALIDATION_FAILED),
            (T0 + 2 * H, NEEDS_REPAIR),
            (T0 + 5 * H, VALIDATION_PASSED),
            (T0 + 5 * H, REPAIRED),
            (T0 + 6 * H, RESTORED),
            (T0 + 2 * DAY, QUARANTINED),
            (T0 + 2 * DAY + H, RESTORED),
            (T0 + 4 * DAY, QUARANTINED),
            (T0 + 4 * DAY + H, VALIDATION_FAILED),
            (T0 + 4 * DAY + 2 * H, RESTART),
        ),
        T0 + 5 * DAY,
    )
    assert got.incidents == 3 and got.mtbi_s == pytest.approx(2 * DAY)
    assert got.repairs == (6 * H, H)
    assert got.time_to_repair_mean_s == pytest.approx(3.5 * H)
    assert got.time_to_repair_p90_s == 6 * H
    assert (got.validations_passed, got.validations_failed) == (1, 2)
    assert got.waiting_repair and got.quarantined_now
    assert got.quarantined_since == T0 + 4 * DAY and got.last_incident_at == T0 + 4 * DAY


def test_a_node_with_one_incident_has_no_mtbi_and_one_never_restored_no_repair() -> None:
    got = node_repair(N1, rows((T0, QUARANTINED)), T0 + H)
    assert got.mtbi_s is None and got.repairs == () and got.time_to_repair_mean_s is None
    assert not got.waiting_repair and got.quarantined_now


def test_p90_is_the_nearest_rank() -> None:
    assert p90([]) is None and p90([5.0]) == 5.0
    assert p90([float(i) for i in range(1, 11)]) == 9.0
    assert p90([float(i) for i in range(1, 12)]) == 10.0


def test_fleet_figures_pool_node_gaps_and_divide_node_time_by_incidents() -> None:
    led: dict[str, Any] | None = run(None, [node(N1), node(N2)], T0)
    t = T0
    for _ in range(24):  # a day watched, two GPU nodes: 2 node-days
        t += H
        led = run(led, [node(N1), node(N2)], t)
    led = run(led, [node(N1, evicted=(t, NH, "a")), node(N2, evicted=(t, NH, "b"))], t + 10)
    led = run(led, [node(N1), node(N2, evicted=(t, NH, "b"))], t + H)
    s = repair_stats(led, t + 2 * H)
    assert s.node_days == pytest.approx((24 * H * 2 + 20 + 2 * (H - 10)) / DAY)
    assert s.incidents == 2 and s.fleet_mtbi_s == pytest.approx(s.node_days * DAY / 2)
    assert s.mtbi_s is None  # no node had two
    assert s.repairs == 1 and s.time_to_repair_mean_s == pytest.approx(H)
    assert s.quarantined_now == (N2,) and s.waiting_repair == ()
    g = s.gauges()
    assert g["repair_incidents"] == 2.0 and g["repair_quarantined"] == 1.0
    assert "repair_mtbi_s" not in g  # unknown is left out, not 0


def test_no_ledger_has_no_figures() -> None:
    s = repair_stats(None, T0)
    assert (s.incidents, s.node_days, s.fleet_mtbi_s, s.nodes) == (0, 0.0, None, ())


# -- history -------------------------------------------------------------------------------


def recorder(*restarts: tuple[str, float, str, int, str]) -> dict[str, Any]:
    return {"attributed": [list(r) for r in restarts]}


def test_history_merges_attributed_restarts_newest_first() -> None:
    led = run(None, [node(N1, evicted=(T0, NH, "hot"))], T0 + 10)
    led = run(led, [node(N1, validation=passed(T0 + H))], T0 + H + 60)
    rec = recorder(
        (N1, T0 - 600, "training/dit", 3, "thermal"), (N2, T0, "training/dit", 4, "memory")
    )
    got = history(led, rec, N1, T0 + 2 * H)
    assert [(r.kind, r.at) for r in got] == [
        (RESTORED, T0 + H + 60),
        (VALIDATION_PASSED, T0 + H),
        (QUARANTINED, T0),
        (RESTART, T0 - 600),
    ]
    assert got[-1].detail == "training/dit restart #3 (thermal)" and got[-1].by is None
    assert history(None, None, N1, T0) == []


def test_node_history_adds_what_the_node_says_when_node_health_has_not_seen_it() -> None:
    v = failed(T0 + H)
    now_obj = node(N1, evicted=(T0, "alice", "fan"), validation=v)
    got = node_history(None, None, node_info(now_obj), T0 + 2 * H)
    assert [r.kind for r in got.rows] == [VALIDATION_FAILED, QUARANTINED]
    assert got.rows[1].by == "alice" and not got.recorded
    s = got.summary
    assert s.incidents == 1 and s.quarantined_now and s.quarantined_since == T0
    assert s.waiting_repair and s.validations_failed == 1
    # with the ledger holding the same events they are not shown twice
    led = run(None, [now_obj], T0 + H + 30)
    again = node_history(led, None, node_info(now_obj), T0 + 2 * H)
    assert [r.kind for r in again.rows] == [VALIDATION_FAILED, QUARANTINED] and again.recorded


def test_node_history_trusts_the_node_for_its_state_now() -> None:
    led = run(None, [node(N1, evicted=(T0, NH, "hot"))], T0 + 10)  # restore not yet seen
    got = node_history(led, None, node_info(node(N1, validation=passed(T0 + H))), T0 + 2 * H)
    assert not got.summary.quarantined_now and not got.summary.waiting_repair
