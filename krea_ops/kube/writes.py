"""Change one Kubernetes object without clobbering anyone else's change: read-modify-write.

``update(cluster, node("gpu-node-003"), Cordon(), AddTaint(...))`` reads the object, applies
the edits (pure functions of the object), and sends what changed as a JSON merge patch
that carries the ``metadata.resourceVersion`` it read. If anyone wrote the object in
between, the API server refuses with 409 Conflict; the object is then read again and the
edits applied again to what is there now, a bounded number of times with jittered backoff
(client-go's ``retry.DefaultBackoff``: 10 ms × 5ⁿ, +10 %, one step longer), then one
clear error. Edits that find the object already as asked change nothing, so running an
action twice writes nothing the second time.

Taints, labels and annotations are edited one key at a time: a taint added here leaves
every other taint on the node (the node controller's, a provider's, another operator's)
as it is, and removing ours removes only ours. A taint is identified by key and effect,
as ``kubectl taint`` identifies it.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from krea_ops.errors import Unavailable
from krea_ops.kube.cluster import Cluster

Obj = dict[str, Any]

ATTEMPTS = 5
BACKOFF_FIRST_S = 0.010
BACKOFF_FACTOR = 5.0
BACKOFF_JITTER = 0.1


class WriteConflict(Unavailable):
    """Every attempt met a newer version of the object (409 each time)."""


# -- what is written ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One object the API serves: its kind and name for messages and events, its path."""

    kind: str
    name: str
    path: str
    namespace: str = ""
    api_version: str = "v1"

    @property
    def what(self) -> str:
        """``node gpu-node-003``, ``pod ml/train-0``: how messages name it."""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.lower()} {where}{self.name}"


def node(name: str) -> Target:
    return Target("Node", name, f"/api/v1/nodes/{quote(name)}")


def pod(namespace: str, name: str) -> Target:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    return Target("Pod", name, path, namespace)


def custom_object(
    group: str, version: str, kind: str, plural: str, name: str, namespace: str | None = None
) -> Target:
    """A custom resource (a Kueue ClusterQueue, a JobSet) at a served version
    (``Cluster.custom_version`` finds which)."""
    base = f"/apis/{group}/{version}"
    if namespace:
        path = f"{base}/namespaces/{quote(namespace)}/{plural}/{quote(name)}"
    else:
        path = f"{base}/{plural}/{quote(name)}"
    return Target(kind, name, path, namespace or "", f"{group}/{version}")


# -- edits ----------------------------------------------------------------------------------


class Edit(Protocol):
    """A pure change to an object: ``apply`` returns the changed copy, or None when the
    object is already as the edit asks (so a re-run is a no-op)."""

    def apply(self, obj: Obj) -> Obj | None: ...

    def describe(self) -> str: ...


def _taint_text(key: str, value: str | None, effect: str) -> str:
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


@dataclass(frozen=True)
class AddTaint:
    """Our taint on a node: added, or its value updated when a taint with the same key
    and effect is there with another value. Every other taint stays."""

    key: str
    value: str | None
    effect: str
    # metav1.Time; the API expects it on NoExecute taints only (tolerationSeconds count
    # from it)
    time_added: str | None = None

    def apply(self, obj: Obj) -> Obj | None:
        taints = list((obj.get("spec") or {}).get("taints") or [])
        wanted: Obj = {"key": self.key, "effect": self.effect}
        if self.value:
            wanted["value"] = self.value
        if self.time_added and self.effect == "NoExecute":
            wanted["timeAdded"] = self.time_added
        for i, taint in enumerate(taints):
            if taint.get("key") == self.key and taint.get("effect") == self.effect:
                if (taint.get("value") or None) == (self.value or None):
                    return None
                taints[i] = {**taint, **wanted}
                if not self.value:
                    taints[i].pop("value", None)
                break
        else:
            taints.append(wanted)
        out = copy.deepcopy(obj)
        out.setdefault("spec", {})["taints"] = taints
        return out

    def describe(self) -> str:
        return f"taint {_taint_text(self.key, self.value, self.effect)}"


@dataclass(frozen=True)
class RemoveTaint:
    """Remove the taints with this key (and effect, when given); nobody else's."""

    key: str
    effect: str | None = None

    def apply(self, obj: Obj) -> Obj | None:
        taints = list((obj.get("spec") or {}).get("taints") or [])
        kept = [
            t
            for t in taints
            if not (t.get("key") == self.key and self.effect in (None, t.get("effect")))
        ]
        if len(kept) == len(taints):
            return None
        out = copy.deepcopy(obj)
        if kept:
            out["spec"]["taints"] = kept
        else:
            out["spec"].pop("taints", None)
        return out

    def describe(self) -> str:
        return f"remove taint {self.key}{':' + self.effect if self.effect else ''}"


def _set_keys(obj: Obj, section: str, values: Mapping[str, str | None]) -> Obj | None:
    current = dict((obj.get("metadata") or {}).get(section) or {})
    updated = dict(current)
    for key, value in values.items():
        if value is None:
            updated.pop(key, None)
        else:
            updated[key] = value
    if updated == current:
        return None
    out = copy.deepcopy(obj)
    if updated:
        out.setdefault("metadata", {})[section] = updated
    else:
        out.setdefault("metadata", {}).pop(section, None)
    return out


def _describe_keys(section: str, values: Mapping[str, str | None]) -> str:
    parts = [f"{k}={v}" if v is not None else f"{k}-" for k, v in sorted(values.items())]
    return f"{section} " + " ".join(parts)


@dataclass(frozen=True)
class SetLabels:
    """Set labels (a value) or remove them (None); other labels stay."""

    labels: Mapping[str, str | None]

    def apply(self, obj: Obj) -> Obj | None:
        return _set_keys(obj, "labels", self.labels)

    def describe(self) -> str:
        return _describe_keys("label", self.labels)


@dataclass(frozen=True)
class SetAnnotations:
    """Set annotations (a value) or remove them (None); other annotations stay."""

    annotations: Mapping[str, str | None]

    def apply(self, obj: Obj) -> Obj | None:
        return _set_keys(obj, "annotations", self.annotations)

    def describe(self) -> str:
        return _describe_keys("annotate", self.annotations)


@dataclass(frozen=True)
class Cordon:
    """``spec.unschedulable: true``, as ``kubectl cordon`` sets it."""

    def apply(self, obj: Obj) -> Obj | None:
        if (obj.get("spec") or {}).get("unschedulable") is True:
            return None
        out = copy.deepcopy(obj)
        out.setdefault("spec", {})["unschedulable"] = True
        return out

    def describe(self) -> str:
        return "cordon"


@dataclass(frozen=True)
class Uncordon:
    """``spec.unschedulable`` cleared, as ``kubectl uncordon`` leaves it."""

    def apply(self, obj: Obj) -> Obj | None:
        if not (obj.get("spec") or {}).get("unschedulable"):
            return None
        out = copy.deepcopy(obj)
        out["spec"].pop("unschedulable", None)
        return out

    def describe(self) -> str:
        return "uncordon"


@dataclass(frozen=True)
class Mutate:
    """Any other pure change (a ClusterQueue's quota): ``fn`` returns the changed copy
    or None; ``description`` says what it does, for plans and results."""

    fn: Callable[[Obj], Obj | None]
    description: str

    def apply(self, obj: Obj) -> Obj | None:
        out = self.fn(copy.deepcopy(obj))
        return None if out is None or out == obj else out

    def describe(self) -> str:
        return self.description


# -- the write ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteResult:
    """What one ``update`` did: which edits changed the object, which found it already
    so, the resourceVersion now on the object, and the patch sent (None: nothing to
    send)."""

    target: Target
    changed: bool
    resource_version: str
    changes: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    patch: Obj | None = None
    attempts: int = 1
    dry_run: bool = False
    object: Obj = field(default_factory=dict, repr=False, compare=False)

    def summary(self) -> str:
        """``node gpu-node-003: cordon, taint k=v:NoSchedule (resourceVersion 812)``."""
        if not self.changed:
            return f"{self.target.what}: unchanged (resourceVersion {self.resource_version})"
        verb = " (dry run)" if self.dry_run else ""
        return (
            f"{self.target.what}: {', '.join(self.changes)}{verb} "
            f"(resourceVersion {self.resource_version})"
        )


def merge_patch(old: Obj, new: Obj) -> Obj:
    """The RFC 7386 JSON merge patch that turns ``old`` into ``new`` (lists are replaced
    whole, as merge patch replaces them; a removed key is ``null``)."""
    patch: Obj = {key: None for key in old.keys() - new.keys()}
    for key, value in new.items():
        before = old.get(key)
        if key not in old:
            patch[key] = value
        elif before != value:
            if isinstance(value, dict) and isinstance(before, dict):
                patch[key] = merge_patch(before, value)
            else:
                patch[key] = value
    return patch


def _resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _apply_all(edits: tuple[Edit, ...], obj: Obj) -> tuple[Obj, list[str], list[str]]:
    changes: list[str] = []
    already: list[str] = []
    for edit in edits:
        out = edit.apply(obj)
        if out is None:
            already.append(edit.describe())
        else:
            obj = out
            changes.append(edit.describe())
    return obj, changes, already


def update(
    cluster: Cluster,
    target: Target,
    *edits: Edit,
    dry_run: bool = False,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], object] = time.sleep,
    rng: random.Random | None = None,
) -> WriteResult:
    """Apply ``edits`` to ``target`` with ``resourceVersion`` as the precondition;
    re-read and re-apply on 409 up to ``attempts`` reads.

    ``dry_run`` sends the patch with ``dryRun=All``: the server validates and answers
    what it would store, and stores nothing. An object that does not exist is a
    ``BadInput`` (``node x: not found``); other refusals are the one line
    ``Cluster.refusal`` gives.
    """
    rng = rng or random.Random()
    for attempt in range(1, attempts + 1):
        current = cluster.get(f"get {target.what}", target.path)
        new, changes, already = _apply_all(edits, current)
        read_version = _resource_version(current)
        if not changes:
            return WriteResult(
                target, False, read_version, (), tuple(already), None, attempt, dry_run, current
            )
        patch = merge_patch(current, new)
        patch.setdefault("metadata", {})["resourceVersion"] = read_version
        answer = cluster.request(
            f"update {target.what}",
            "PATCH",
            target.path,
            body=patch,
            content_type="application/merge-patch+json",
            query={"dryRun": "All" if dry_run else None},
        )
        if answer.ok and answer.body is not None:
            return WriteResult(
                target,
                True,
                _resource_version(answer.body),
                tuple(changes),
                tuple(already),
                patch,
                attempt,
                dry_run,
                answer.body,
            )
        if answer.status != 409:
            raise cluster.refusal(f"update {target.what}", answer)
        if attempt < attempts:
            delay = BACKOFF_FIRST_S * BACKOFF_FACTOR ** (attempt - 1)
            sleep(delay * (1 + BACKOFF_JITTER * rng.random()))
    raise WriteConflict(
        f"update {target.what}: another client changed it between each read and write "
        f"({attempts} attempts, HTTP 409 each time); run the command again"
    )
