"""The rules of Kubernetes objects that the reads, the runbook and the controllers share,
each written once: who controls (or owns) an object, whether tolerations tolerate a
taint, whether a node or pod is Ready, whether a pod has finished, is being deleted or
still holds its resources, and label selectors, matched and written.

Each follows the upstream rule it names, so that krea-ops judges an object as the
API server, the scheduler and the controllers do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]
TERMINAL_PHASES = ("Succeeded", "Failed")
# the field selector of the pods that have not finished (``Cluster.active_pods``' list)
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def controller_of(obj: Obj) -> dict[str, Any] | None:
    """The owner reference with ``controller: true`` (``metav1.GetControllerOf``)."""
    for owner in meta(obj).get("ownerReferences") or ():
        if owner.get("controller"):
            return dict(owner)
    return None


def owned_by(obj: Obj, uid: str | None) -> bool:
    """Whether one of the object's owner references (controller or not) is ``uid``."""
    return uid is not None and any(
        owner.get("uid") == uid for owner in meta(obj).get("ownerReferences") or ()
    )


def controller_text(obj: Obj) -> str | None:
    """``Kind/name`` of the object's controller, or None."""
    owner = controller_of(obj)
    return None if owner is None else f"{owner.get('kind')}/{owner.get('name')}"


def tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (``key``, ``value``,
    ``effect``): the rules of ``k8s.io/api/core/v1/toleration.go`` ``ToleratesTaint``."""
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        key = tol.get("key") or ""
        if key and key != taint.get("key"):
            continue
        if tol.get("operator") == "Exists":
            return True
        if not key:  # an empty key goes with Exists only
            continue
        if (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def condition(obj: Obj, kind: str) -> Obj | None:
    """The object's first status condition ``kind``, None when it has none."""
    conditions: Iterable[Obj] = (obj.get("status") or {}).get("conditions") or ()
    for c in conditions:
        if c.get("type") == kind:
            return c
    return None


def condition_status(obj: Obj, kind: str) -> str | None:
    """The ``status`` (``True``, ``False``, ``Unknown``) of the object's first status
    condition ``kind``, None when it has none."""
    c = condition(obj, kind)
    status = None if c is None else c.get("status")
    return None if status is None else str(status)


def condition_true(obj: Obj, kind: str) -> bool:
    """Whether the object's status condition ``kind`` is ``"True"``."""
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def is_ready(obj: Obj) -> bool:
    """A node's or a pod's Ready condition is True (missing or Unknown: not Ready)."""
    return condition_true(obj, "Ready")


def is_terminal(pod: Obj) -> bool:
    """The pod has finished: phase Succeeded or Failed (its containers will not run
    again)."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_deleting(obj: Obj) -> bool:
    """A deletion has been asked for (``deletionTimestamp`` set): the object is going."""
    return bool(meta(obj).get("deletionTimestamp"))


def is_active(pod: Obj) -> bool:
    """Not finished and not being deleted: it holds (or is about to hold) its node's
    resources, as the scheduler and ``kubectl drain`` count it."""
    return not is_terminal(pod) and not is_deleting(pod)


def labels_match(wanted: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A nodeSelector or a flavor's ``nodeLabels``: every key with that value."""
    return all(labels.get(k) == v for k, v in (wanted or {}).items())


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels. ``None``
    matches nothing and ``{}`` everything, as a policy/v1 PodDisruptionBudget's does."""
    if selector is None:
        return False
    if not labels_match(selector.get("matchLabels"), labels):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op = expr.get("key"), expr.get("operator")
        values = set(expr.get("values") or ())
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def format_selector(labels: Mapping[str, str]) -> str:
    """Labels as the equality-based LabelSelector string that selects them
    (``app=serve,tier=web``: sorted by key, as ``labels.SelectorFromSet`` writes it)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
