"""The rules of Kubernetes objects the reads, the runbook and the controllers share
(``krea_ops.kube.rules``), each against the upstream rule it names."""

from __future__ import annotations

from typing import Any

import pytest

from krea_ops.kube.rules import (
    UNFINISHED_PODS,
    condition_status,
    controller_of,
    controller_text,
    format_selector,
    is_active,
    is_deleting,
    is_ready,
    is_terminal,
    labels_match,
    owned_by,
    selector_matches,
    tolerates,
)

RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve-7d9", "uid": "u-rs"}
HOLDER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u-cm"}


def pod(
    phase: str | None = "Running",
    *,
    ready: str | None = None,
    owners: list[dict[str, Any]] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if owners is not None:
        meta["ownerReferences"] = owners
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {} if phase is None else {"phase": phase}
    if ready is not None:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": ready},
        ]
    return {"metadata": meta, "status": status}


def test_the_controller_is_the_owner_marked_controller_and_owned_by_takes_any() -> None:
    obj = pod(owners=[HOLDER, {**RS, "controller": True}])
    assert controller_of(obj) == {**RS, "controller": True}
    assert controller_text(obj) == "ReplicaSet/serve-7d9"
    assert owned_by(obj, "u-cm") and owned_by(obj, "u-rs")
    assert not owned_by(obj, "u-other") and not owned_by(obj, None)
    orphan = pod(owners=[HOLDER])
    assert controller_of(orphan) is None and controller_text(orphan) is None
    assert controller_of({}) is None and not owned_by({}, "u-cm")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"key": "k", "operator": "Equal", "value": "v"}, {"key": "k", "value": "v"}, True),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "w"}, False),  # Equal by default
        ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "w"}, True),
        ({"operator": "Exists"}, {"key": "any", "effect": "NoExecute"}, True),  # all taints
        ({"key": "", "value": "v"}, {"key": "k", "value": "v"}, False),  # empty key: Exists
        (
            {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "k", "effect": "NoExecute"},
            False,
        ),
        ({"key": "k", "operator": "Exists"}, {"key": "k", "effect": "NoExecute"}, True),
        ({"key": "k"}, {"key": "k"}, True),  # no value on either side
        ({"key": "j", "operator": "Exists"}, {"key": "k"}, False),
    ],
)
def test_tolerates_follows_toleration_go(
    toleration: dict[str, Any], taint: dict[str, Any], tolerated: bool
) -> None:
    assert tolerates([toleration], taint) is tolerated
    assert tolerates([{"key": "other", "operator": "Exists"}, toleration], taint) is tolerated
    assert not tolerates([], taint)


def test_ready_is_the_ready_condition_true() -> None:
    assert is_ready(pod(ready="True"))
    assert not is_ready(pod(ready="False")) and not is_ready(pod(ready="Unknown"))
    assert not is_ready(pod())
    assert condition_status(pod(ready="Unknown"), "Ready") == "Unknown"
    assert condition_status(pod(ready="True"), "PodScheduled") == "True"
    assert condition_status(pod(), "Ready") is None
    node = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert is_ready(node)


def test_active_is_neither_finished_nor_going() -> None:
    for phase in ("Pending", "Running", "Unknown", None):
        assert is_active(pod(phase)) and not is_terminal(pod(phase))
    for phase in ("Succeeded", "Failed"):
        assert is_terminal(pod(phase)) and not is_active(pod(phase))
    going = pod("Running", deleting=True)
    assert is_deleting(going) and not is_active(going) and not is_terminal(going)
    assert not is_deleting(pod())
    assert UNFINISHED_PODS == "status.phase!=Succeeded,status.phase!=Failed"


def test_label_selectors_match_and_are_written_as_the_api_reads_them() -> None:
    labels = {"app": "serve", "tier": "web"}
    assert labels_match({"app": "serve"}, labels) and labels_match(None, labels)
    assert not labels_match({"app": "train"}, labels)
    assert selector_matches({}, labels) and not selector_matches(None, labels)
    assert selector_matches({"matchLabels": {"app": "serve"}}, labels)
    expressions = [
        ({"key": "tier", "operator": "In", "values": ["web", "api"]}, True),
        ({"key": "tier", "operator": "In", "values": ["api"]}, False),
        ({"key": "zone", "operator": "In", "values": ["a"]}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["web"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "app", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "Exists"}, False),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "app", "operator": "DoesNotExist"}, False),
    ]
    for expr, matches in expressions:
        assert selector_matches({"matchExpressions": [expr]}, labels) is matches, expr
    assert format_selector({"tier": "web", "app": "serve"}) == "app=serve,tier=web"
    assert format_selector({}) == ""
