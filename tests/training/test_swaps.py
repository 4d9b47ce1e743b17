"""Planned swaps, the pure decision: a slow burn on a node of a running gang asks for a
checkpoint once; nothing more while it is pending; the node's eviction once the trainer
answers; after the timeout a SUSPECT node is never evicted (a BAD one is). The state is
carried from pass to pass as JSON, as node-health stores it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from krea_ops.kube.times import rfc3339
from krea_ops.model import OK_VERDICT, Reason, Severity, Verdict
from krea_ops.runbook.plan import StepKind
from krea_ops.runbook.training import build_checkpoint_request
from krea_ops.training.swaps import (
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_COMPLETED_STEP,
    CHECKPOINT_REQUESTED_AT,
    CHECKPOINT_REQUESTED_BY,
    CHECKPOINT_REQUESTED_REASON,
    SwapConfig,
    SwapEviction,
    SwapRequest,
    plan_swaps,
    request_state,
    slow_burn,
    withdraw,
)

T0 = 1_800_000_000.0
NODES = ("gpu-node-000", "gpu-node-001", "gpu-node-002", "gpu-node-003")
WARM = Reason(Severity.SUSPECT, "gpu_warm", "GPU 3 at 76 °C, warm (at or above 75 °C)", gpu=3)
HOT = Reason(Severity.BAD, "gpu_hot", "GPU 3 at 84 °C, at or above 78 °C for the last 5 min", 3)


@dataclass(frozen=True)
class Gang:
    namespace: str = "training"
    name: str = "dit"
    uid: str = "uid-1"
    nodes: tuple[str, ...] = NODES
    running: bool = True
    annotations: Mapping[str, str] = field(default_factory=dict)


class Passes:
    """Passes of ``plan_swaps`` over one gang, its state kept as JSON between them."""

    def __init__(self, cfg: SwapConfig | None = None) -> None:
        self.gang = Gang()
        self.verdicts: dict[str, Verdict] = dict.fromkeys(NODES, OK_VERDICT)
        self.state: dict[str, Any] = {}
        self.cfg = cfg or SwapConfig(timeout_s=300.0, after_s=0.0)

    def step(self, now: float) -> tuple[list[SwapRequest], list[SwapEviction]]:
        requests, evictions, state = plan_swaps(
            [self.gang], self.verdicts, self.state, now, self.cfg
        )
        self.state = json.loads(json.dumps(state))
        for request in requests:  # as node-health's plan writes it
            self.annotate(**{CHECKPOINT_REQUESTED_AT: rfc3339(now)})
            assert request.gang == "training/dit"
        return requests, evictions

    def annotate(self, **values: str) -> None:
        self.gang = replace(self.gang, annotations={**self.gang.annotations, **values})

    def complete(self, at: float, step: int) -> None:
        """The trainer's launcher answers."""
        self.annotate(
            **{CHECKPOINT_COMPLETED_AT: rfc3339(at), CHECKPOINT_COMPLETED_STEP: str(step)}
        )


def test_a_slow_burn_asks_for_a_checkpoint_once_and_evicts_once_it_is_honoured() -> None:
    p = Passes()
    p.verdicts[NODES[2]] = Verdict.of([WARM])

    (request,), evictions = p.step(T0)

    assert (request.node, request.finding, evictions) == (NODES[2], WARM, [])
    assert "planned swap of gpu-node-002: GPU 3 at 76 °C" in request.reason
    # pending: nothing more, however many passes (not a second request, no eviction)
    for t in (T0 + 10, T0 + 60, T0 + 120):
        assert p.step(t) == ([], [])

    p.complete(T0 + 130, step=4321)
    requests, (eviction,) = p.step(T0 + 140)

    assert requests == [] and (eviction.node, eviction.step, eviction.planned) == (
        NODES[2],
        4321,
        True,
    )
    assert eviction.reason.startswith("planned swap: GPU 3 at 76 °C")
    assert "checkpoint step 4321 of training/dit is complete" in eviction.reason
    # the node leaves the gang (evicted; the gang restarts without it): forgotten
    p.gang = replace(p.gang, nodes=(*NODES[:2], NODES[3], "gpu-node-004"))
    assert p.step(T0 + 200) == ([], [])
    assert p.state == {}


def test_a_checkpoint_completed_before_the_request_does_not_honour_it() -> None:
    p = Passes()
    p.complete(T0 - 600, step=100)  # an earlier request's answer
    p.verdicts[NODES[1]] = Verdict.of([WARM])
    assert len(p.step(T0)[0]) == 1

    assert p.step(T0 + 30) == ([], [])
    p.complete(T0 + 45, step=200)
    assert p.step(T0 + 60)[1][0].step == 200


def test_an_unanswered_request_never_evicts_a_suspect_node_and_is_not_repeated() -> None:
    p = Passes(SwapConfig(timeout_s=300.0, after_s=0.0))
    p.verdicts[NODES[0]] = Verdict.of([WARM])
    assert len(p.step(T0)[0]) == 1

    decisions = [p.step(T0 + t) for t in range(60, 3600, 60)]  # an hour, no answer

    assert all(d == ([], []) for d in decisions)  # not evicted, not asked again
    # the finding clears and comes back: a new finding, asked about again
    p.verdicts[NODES[0]] = OK_VERDICT
    p.step(T0 + 3600)
    p.verdicts[NODES[0]] = Verdict.of([WARM])
    assert [r.node for r in p.step(T0 + 3660)[0]] == [NODES[0]]


def test_an_unanswered_request_falls_back_to_a_plain_eviction_only_once_the_node_is_bad() -> None:
    p = Passes(SwapConfig(timeout_s=300.0, after_s=0.0))
    p.verdicts[NODES[3]] = Verdict.of([WARM])
    p.step(T0)
    p.verdicts[NODES[3]] = Verdict.of([HOT])

    assert p.step(T0 + 240) == ([], [])  # still waiting for the checkpoint
    _, (eviction,) = p.step(T0 + 300)

    assert (eviction.node, eviction.planned, eviction.step) == (NODES[3], False, None)
    assert "planned swap given up (training/dit did not checkpoint)" in eviction.reason


def test_only_slow_burners_of_a_running_gangs_suspect_nodes_are_asked_about() -> None:
    congestion = Reason(Severity.SUSPECT, "ib_congestion", "IB mlx5_0/1: waiting", port="mlx5_0/1")
    app_xid = Reason(Severity.SUSPECT, "xid_application", "GPU 1: XID 13", gpu=1)
    symbols = Reason(Severity.SUSPECT, "ib_symbol_error", "IB mlx5_2/1: 12 link errors", port="x")
    assert slow_burn([congestion, app_xid]) is None
    assert slow_burn([congestion, symbols, WARM]) == symbols

    p = Passes()
    p.verdicts[NODES[0]] = Verdict.of([congestion, app_xid])  # the fabric's, the job's
    p.verdicts["gpu-node-009"] = Verdict.of([WARM])  # in no gang
    p.verdicts[NODES[1]] = Verdict.of([HOT, WARM])  # BAD: node-health evicts it now
    assert p.step(T0) == ([], [])
    p.gang = replace(p.gang, running=False)  # a gang restarting is not asked
    p.verdicts[NODES[2]] = Verdict.of([symbols])
    assert p.step(T0 + 60) == ([], [])
    p.gang = replace(p.gang, running=True)
    assert [(r.node, r.finding.code) for r in p.step(T0 + 120)[0]] == [
        (NODES[2], "ib_symbol_error")
    ]


def test_one_swap_at_a_time_per_gang_and_a_withdrawn_request_is_asked_again() -> None:
    p = Passes()
    p.verdicts[NODES[0]] = Verdict.of([WARM])
    p.verdicts[NODES[1]] = Verdict.of([WARM])
    requests, _ = p.step(T0)
    assert [r.node for r in requests] == [NODES[0]]

    # the caller could not make it (the blast cap held it back): not pending
    p.state = withdraw(p.state, requests[0])
    p.gang = replace(p.gang, annotations={})
    assert [r.node for r in p.step(T0 + 60)[0]] == [NODES[0]]


def test_a_new_jobset_of_the_same_name_starts_afresh() -> None:
    p = Passes()
    p.verdicts[NODES[0]] = Verdict.of([WARM])
    p.step(T0)
    p.gang = Gang(uid="uid-2")
    assert [r.node for r in p.step(T0 + 60)[0]] == [NODES[0]]


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        ({}, (None, None, None)),
        ({CHECKPOINT_REQUESTED_AT: "soon", CHECKPOINT_COMPLETED_STEP: "-3"}, (None, None, None)),
        (
            {
                CHECKPOINT_REQUESTED_AT: "2027-01-15T08:00:00Z",
                CHECKPOINT_COMPLETED_AT: "2027-01-15T08:01:00Z",
                CHECKPOINT_COMPLETED_STEP: "812",
            },
            (1800000000.0, 1800000060.0, 812),
        ),
    ],
)
def test_request_state_reads_the_annotations(
    notes: dict[str, str], expected: tuple[object, ...]
) -> None:
    assert request_state(notes) == expected


def test_the_request_plan_patches_the_jobset_with_its_version_and_records_an_event() -> None:
    plan = build_checkpoint_request(
        "training",
        "dit",
        resource_version="812",
        reason="planned swap of gpu-node-002: GPU 3 at 76 °C",
        user="system:serviceaccount:krea-ops:node-health",
        now=T0,
    )
    update, event = plan.steps
    (call,) = update.calls
    assert (update.kind, call.method, call.precondition) == (
        StepKind.UPDATE,
        "PATCH",
        "resourceVersion 812",
    )
    assert call.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/training/jobsets/dit"
    assert call.body == {
        "metadata": {
            "resourceVersion": "812",
            "annotations": {
                CHECKPOINT_REQUESTED_AT: "2027-01-15T08:00:00Z",
                CHECKPOINT_REQUESTED_BY: "system:serviceaccount:krea-ops:node-health",
                CHECKPOINT_REQUESTED_REASON: "planned swap of gpu-node-002: GPU 3 at 76 °C",
            },
        }
    }
    assert event.kind is StepKind.EVENT and event.event is not None
    assert event.event.reason == "PlannedSwap" and event.event.regarding.kind == "JobSet"
    assert (plan.subject, plan.reason) == (
        "training/dit",
        "planned swap of gpu-node-002: GPU 3 at 76 °C",
    )


def test_a_slow_burn_is_asked_about_only_once_it_has_shown_for_its_time() -> None:
    p = Passes(SwapConfig(timeout_s=300.0, after_s=120.0))
    p.verdicts[NODES[1]] = Verdict.of([WARM])
    assert p.step(T0) == ([], [])  # one reading: not yet a slow burn
    p.verdicts[NODES[1]] = OK_VERDICT
    assert p.step(T0 + 30) == ([], [])  # it went away: forgotten
    p.verdicts[NODES[1]] = Verdict.of([WARM])
    assert p.step(T0 + 60) == ([], [])
    assert p.step(T0 + 150) == ([], [])  # 90 s of it
    (request,), _ = p.step(T0 + 180)  # 120 s of it
    assert request.node == NODES[1]
