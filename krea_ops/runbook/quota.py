"""A Kueue ClusterQueue's nominal quota set, as a plan (the quota-sync controller's writes).

``plan_quota`` turns "ClusterQueue ``training``: ``nvidia.com/gpu`` on flavor ``h200``
to 40" into one ``UPDATE`` step per ClusterQueue: a read-modify-write whose edits
(``SetNominalQuota``) change that one ``nominalQuota`` and nothing else, sent as a merge
patch carrying the ``resourceVersion`` read (409: read again, edit again), so a quota
someone changed meanwhile is never written over blindly, and a run that finds the value
already there writes nothing. Each is followed by an audit Event ``QuotaSynced`` about
the ClusterQueue (what changed, and the capacity it stands on).

Kueue's rules kept: the quota is written as a whole-number quantity string; a
``lendingLimit`` above the new quota is lowered to it (Kueue's webhook refuses a
lendingLimit above nominalQuota; equal means "lends all its unused quota", as before);
``borrowingLimit``, the flavor order, the cohort and every other resource stay as they
are. A flavor the ClusterQueue does not list is never added (where it goes in the
flavor order is the operator's choice). Lowering a quota evicts nothing in Kueue:
admitted workloads keep running over it (shown as borrowed) and new ones wait; the plan
says so where it applies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from krea_ops.kube.cluster import GPU_RESOURCE
from krea_ops.kube.events import ObjectRef
from krea_ops.kube.quantity import number
from krea_ops.kube.writes import Target, custom_object, merge_patch
from krea_ops.runbook.execute import about
from krea_ops.runbook.nodes import EVENTS_OF_NODES
from krea_ops.runbook.plan import Call, EventSpec, Finding, FindingSeverity, Plan, Step, StepKind

KUEUE_GROUP = "kueue.x-k8s.io"
ACTION = "quota-sync"

Obj = dict[str, Any]


def _resources(obj: Mapping[str, Any], flavor: str, resource: str) -> list[Obj]:
    """The ``resources`` entries of ``flavor``/``resource`` in a ClusterQueue (one, or
    none when it does not list them)."""
    out: list[Obj] = []
    for group in (obj.get("spec") or {}).get("resourceGroups") or ():
        for fl in group.get("flavors") or ():
            if fl.get("name") != flavor:
                continue
            out.extend(r for r in fl.get("resources") or () if r.get("name") == resource)
    return out


def nominal_quota(
    obj: Mapping[str, Any], flavor: str, resource: str = GPU_RESOURCE
) -> float | None:
    """The ClusterQueue's nominalQuota of ``resource`` on ``flavor``; None when it does
    not list them."""
    found = _resources(obj, flavor, resource)
    return number(found[0].get("nominalQuota")) if found else None


def lending_limit(
    obj: Mapping[str, Any], flavor: str, resource: str = GPU_RESOURCE
) -> float | None:
    found = _resources(obj, flavor, resource)
    return number(found[0].get("lendingLimit")) if found else None


@dataclass(frozen=True)
class SetNominalQuota:
    """``nominalQuota`` of ``resource`` on ``flavor`` to ``quota`` (a lendingLimit above
    it is lowered to it); None when already so or when the ClusterQueue does not list
    the flavor and resource."""

    flavor: str
    quota: int
    resource: str = GPU_RESOURCE

    def apply(self, obj: Obj) -> Obj | None:
        out = copy.deepcopy(obj)
        changed = False
        for entry in _resources(out, self.flavor, self.resource):
            if number(entry.get("nominalQuota")) != self.quota:
                entry["nominalQuota"] = str(self.quota)
                changed = True
            limit = number(entry.get("lendingLimit"))
            if limit is not None and limit > self.quota:
                entry["lendingLimit"] = str(self.quota)
                changed = True
        return out if changed else None

    def describe(self) -> str:
        return f"{self.flavor} {self.resource} nominalQuota {self.quota}"


def cluster_queue(name: str, api_version: str) -> Target:
    """The ClusterQueue at the Kueue version the server serves (v1beta2, v1beta1)."""
    return custom_object(KUEUE_GROUP, api_version, "ClusterQueue", "clusterqueues", name)


@dataclass(frozen=True)
class QuotaChange:
    """One (ClusterQueue, flavor) quota to write and what it stands on."""

    cluster_queue: str
    flavor: str
    quota: int
    why: str  # "h200: 48 schedulable GPUs on 6 healthy nodes, share 0.75"


def plan_quota(
    cluster_queues: Mapping[str, Obj],
    changes: list[QuotaChange] | tuple[QuotaChange, ...],
    *,
    api_version: str,
    user: str,
    reason: str | None = None,
    resource: str = GPU_RESOURCE,
) -> Plan:
    """One UPDATE step per ClusterQueue whose quota differs from ``changes``, built
    from the objects as read (``cluster_queues``: name -> object); pure."""
    steps: list[Step] = []
    findings: list[Finding] = []
    by_cq: dict[str, list[QuotaChange]] = {}
    for change in changes:
        by_cq.setdefault(change.cluster_queue, []).append(change)
    for name in sorted(by_cq):
        obj = cluster_queues.get(name)
        if obj is None:
            findings.append(
                Finding(
                    "missing", FindingSeverity.INFO, f"ClusterQueue {name} does not exist", None
                )
            )
            continue
        edits = tuple(SetNominalQuota(c.flavor, c.quota, resource) for c in by_cq[name])
        new: Obj = dict(obj)
        parts: list[str] = []
        whys: list[str] = []
        for change, edit in zip(by_cq[name], edits, strict=True):
            before = nominal_quota(new, change.flavor, resource)
            limit = lending_limit(new, change.flavor, resource)
            out = edit.apply(new)
            if out is None:
                continue
            new = out
            text = f"{change.flavor} {resource} nominalQuota {_n(before)} -> {change.quota}"
            if limit is not None and limit > change.quota:
                text += f" (lendingLimit {_n(limit)} -> {change.quota})"
            parts.append(text)
            whys.append(change.why)
            reserved = _reserved(obj, change.flavor, resource)
            if reserved is not None and reserved > change.quota:
                findings.append(
                    Finding(
                        "over-quota",
                        FindingSeverity.INFO,
                        f"ClusterQueue {name} holds {_n(reserved)} {resource} on "
                        f"{change.flavor}, above its new quota {change.quota}: Kueue evicts "
                        "nothing, admitted work keeps running (counted as borrowed) and new "
                        "work waits",
                        None,
                        (f"clusterqueue {name}",),
                    )
                )
        if not parts:
            continue
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        patch = merge_patch(obj, new)
        patch.setdefault("metadata", {})["resourceVersion"] = version
        target = cluster_queue(name, api_version)
        call = Call(
            "PATCH",
            target.path,
            about("PATCH", target.path, patch),
            f"{'; '.join(whys)} (merge patch; on 409 re-read and re-applied)",
            patch,
            f"resourceVersion {version}",
        )
        steps.append(
            Step(
                StepKind.UPDATE,
                f"clusterqueue {name}: {', '.join(parts)}",
                (call,),
                target=target,
                edits=edits,
            )
        )
        steps.append(_event_step(obj, api_version, f"{', '.join(parts)}: {'; '.join(whys)}"))
    return Plan(
        action=ACTION,
        nodes=(),
        reason=reason,
        user=user,
        steps=tuple(steps),
        findings=tuple(findings),
        subject="clusterqueue " + ", ".join(sorted(by_cq)) if by_cq else "clusterqueues",
    )


def _event_step(obj: Obj, api_version: str, note: str) -> Step:
    """The audit Event about the ClusterQueue (cluster-scoped: it lives in ``default``,
    as Kubernetes puts Events about nodes)."""
    ref = ObjectRef.of(obj, kind="ClusterQueue", api_version=f"{KUEUE_GROUP}/{api_version}")
    ref = ObjectRef(ref.kind, ref.name, "", ref.uid, ref.api_version)  # not a version
    call = Call(
        "POST",
        f"/api/v1/namespaces/{EVENTS_OF_NODES}/events",
        f"event about clusterqueue {ref.name}",
        f"audit: Event QuotaSynced on clusterqueue {ref.name}",
    )
    return Step(
        StepKind.EVENT,
        f"record Event QuotaSynced on clusterqueue {ref.name}",
        (call,),
        event=EventSpec(ref, "SetQuota", "QuotaSynced", note),
    )


def _reserved(obj: Mapping[str, Any], flavor: str, resource: str) -> float | None:
    for fl in (obj.get("status") or {}).get("flavorsReservation") or ():
        if fl.get("name") != flavor:
            continue
        for res in fl.get("resources") or ():
            if res.get("name") == resource:
                return number(res.get("total"))
    return None


def _n(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
