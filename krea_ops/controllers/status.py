"""What an operator sees of the bundled controllers, and the one write they make to lift
the node-health blast cap or veto: ``controller_status`` reads each controller's Lease
(who leads, whether its renew is within the lease duration) and the state ConfigMap (the
last action, node-health's cap and veto, the last acknowledgement); ``plan_ack`` is the
plan of ``krea-ops controller ack``. ``krea-ops controller status`` and the dashboard's
header both show ``controller_status``."""

from __future__ import annotations

import time
from typing import Any

from krea_ops.controllers.base import ACK_AT, ACK_BY, ACK_REASON, STATE_CONFIGMAP
from krea_ops.controllers.ladder import ValidationMemo
from krea_ops.controllers.leader import lease_name, read_lease
from krea_ops.controllers.loop import (
    LAST_ACTION_SUFFIX,
    REGISTRY,
    StoredState,
    read_state,
    state_path,
)
from krea_ops.controllers.node_health_state import NodeHealthState
from krea_ops.errors import BadInput
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.times import parse_time, rfc3339
from krea_ops.kube.writes import SetAnnotations, Target
from krea_ops.runbook.plan import Call, Plan, Step, StepKind


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


ACTED_ON = ("HUNG", "STRAGGLER")


def _runs(state: dict[str, Any]) -> dict[str, list[str]]:
    """The running trainings node-health last judged HUNG or STRAGGLER (``stalls`` of its
    state): state -> runs (``namespace/name``)."""
    out: dict[str, list[str]] = {}
    for run, watch in sorted(NodeHealthState.from_json(state).stalls.items()):
        if watch.state in ACTED_ON:
            out.setdefault(watch.state, []).append(run)
    return out


def _repairs(state: dict[str, Any]) -> dict[str, list[str]]:
    """The repair ladder's nodes an operator must act on (``validation`` of node-health's
    state): ``escalated`` (failed validation repeatedly: a person repairs them) and
    ``ready`` (passed, waiting for a restore by hand)."""
    out: dict[str, list[str]] = {}
    for node, raw in sorted(NodeHealthState.from_json(state).validation.items()):
        memo = ValidationMemo.from_json(raw)
        if memo is None:
            continue
        for key, holds in (("escalated", memo.escalated), ("ready", memo.ready)):
            if holds:
                out.setdefault(key, []).append(node)
    return out


def controller_status(
    cluster: Cluster, namespace: str, now: float
) -> tuple[list[dict[str, Any]], StoredState]:
    """One object per registered controller: its Lease (who leads, since when, last
    renew, whether that renew is within the lease duration by our clock), its last
    action, and for node-health the blast cap and veto it persisted (keys ``cap`` and
    ``veto`` of its state) and the trainings it judged HUNG or STRAGGLER (``runs``).
    The ConfigMap's acknowledgement rides on every row."""

    stored = read_state(cluster, namespace)
    ack = {
        "at": stored.annotations.get(ACK_AT),
        "by": stored.annotations.get(ACK_BY),
        "reason": stored.annotations.get(ACK_REASON),
    }
    rows: list[dict[str, Any]] = []
    for name in REGISTRY:
        lease = read_lease(cluster, namespace, lease_name(name))
        state = stored.data.get(name)
        state = state if isinstance(state, dict) else None
        last = stored.data.get(name + LAST_ACTION_SUFFIX)
        last = last if isinstance(last, dict) else None
        held = None
        if lease is not None:
            duration = lease.lease_duration_s or 0
            held = bool(
                lease.holder and lease.renew_time is not None and lease.renew_time + duration > now
            )
        rows.append(
            {
                "controller": name,
                "lease": f"{namespace}/{lease_name(name)}",
                "running": bool(held),
                "leader": lease.holder if lease is not None and held else None,
                "last_holder": lease.holder if lease is not None else None,
                "acquired_at": iso(lease.acquire_time) if lease else None,
                "renewed_at": iso(lease.renew_time) if lease else None,
                "lease_duration_s": lease.lease_duration_s if lease else None,
                "transitions": lease.transitions if lease else None,
                "blast_cap": state.get("cap") if state and name == "node-health" else None,
                "veto": state.get("veto") if state and name == "node-health" else None,
                "runs": _runs(state) if state and name == "node-health" else None,
                "repairs": _repairs(state) if state and name == "node-health" else None,
                "state": state,
                "last_action": last,
                "last_action_at_s": parse_time(last.get("at")) if last else None,
                "ack": ack if any(ack.values()) else None,
            }
        )
    return rows, stored


def plan_ack(cluster: Cluster, namespace: str, *, reason: str, user: str, now: float) -> Plan:
    """Annotate the state ConfigMap with who acknowledged, why and when (a
    read-modify-write carrying its resourceVersion; created when there is none yet)."""

    reason = (reason or "").strip()
    if not reason:
        raise BadInput("--reason must say what was looked at (it goes on the acknowledgement)")
    path = state_path(namespace)
    what = f"configmap {namespace}/{STATE_CONFIGMAP}"
    annotations = {ACK_AT: rfc3339(now), ACK_BY: user, ACK_REASON: reason}
    answer = cluster.request(f"get {what}", "GET", path)
    if answer.status == 404:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": STATE_CONFIGMAP,
                "namespace": namespace,
                "annotations": annotations,
            },
        }
        call = Call(
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            what,
            "acknowledge: lift the node-health blast cap or veto",
            body,
        )
        step = Step(StepKind.CREATE, f"{what}: create with the acknowledgement", (call,))
    else:
        if not answer.ok or answer.body is None:
            raise cluster.refusal(f"get {what}", answer)
        version = str((answer.body.get("metadata") or {}).get("resourceVersion") or "")
        edit = SetAnnotations(annotations)
        call = Call(
            "PATCH",
            path,
            what,
            "acknowledge: lift the node-health blast cap or veto (merge patch; on 409 "
            "re-read and re-applied)",
            {"metadata": {"annotations": annotations, "resourceVersion": version}},
            f"resourceVersion {version}",
        )
        target = Target("ConfigMap", STATE_CONFIGMAP, path, namespace)
        step = Step(
            StepKind.UPDATE, f"{what}: {edit.describe()}", (call,), target=target, edits=(edit,)
        )
    return Plan(
        action="controller ack",
        nodes=(),
        reason=reason,
        user=user,
        steps=(step,),
        subject=what,
    )
