"""The three PATCH flavours the API server accepts: JSON merge, JSON patch and strategic merge.

* :func:`json_merge_patch` is RFC 7386 (``application/merge-patch+json``).
* :func:`json_patch` is RFC 6902 (``application/json-patch+json``); error text follows the
  ``evanphx/json-patch`` library the real API server uses.
* :func:`strategic_merge_patch` is Kubernetes' strategic merge patch
  (``application/strategic-merge-patch+json``), a port of the apply half of
  ``k8s.io/apimachinery/pkg/util/strategicpatch``. Where Go reads ``patchStrategy`` and
  ``patchMergeKey`` from struct tags, this module reads :data:`_SCHEMA`, a declarative table
  copied from the ``k8s.io/api`` types of the kinds in :data:`SMP_KINDS`.

Every function returns a new object and never mutates its arguments. Errors are
:class:`PatchError`, whose ``reason`` picks the HTTP status: ``BadRequest`` (400) for a
malformed patch document or directive, ``Invalid`` (422) for a JSON-patch operation that
cannot be applied (a failed ``test``, a missing path).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SMP_KINDS",
    "PatchError",
    "json_merge_patch",
    "json_patch",
    "strategic_merge_patch",
]

BAD_REQUEST = "BadRequest"
INVALID = "Invalid"


class PatchError(Exception):
    """Bad patch.

    ``reason`` is ``'BadRequest'`` (malformed patch document, HTTP 400) or ``'Invalid'``
    (a JSON-patch ``test`` that failed, a path that doesn't exist, HTTP 422); ``str()`` is one
    line worded as the real API server words it.
    """

    reason: str

    def __init__(self, message: str, reason: str = BAD_REQUEST) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _bad(message: str) -> PatchError:
    return PatchError(message, BAD_REQUEST)


def _invalid(message: str) -> PatchError:
    return PatchError(message, INVALID)


# -- JSON helpers --------------------------------------------------------------------------


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality: numbers compare by value, but a bool is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if a is None or b is None:
        return a is None and b is None
    return type(a) is type(b) and bool(a == b)


def _gofmt(value: Any) -> str:
    """Render a decoded JSON value the way Go's ``%v`` prints ``interface{}`` (for messages)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, dict):
        inner = " ".join(f"{k}:{_gofmt(value[k])}" for k in sorted(value, key=str))
        return f"map[{inner}]"
    if isinstance(value, list):
        return "[" + " ".join(_gofmt(v) for v in value) + "]"
    return str(value)


def _go_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# -- RFC 7386 JSON merge patch --------------------------------------------------------------


def json_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch; returns a new value and never mutates the inputs."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


# -- RFC 6902 JSON patch --------------------------------------------------------------------

_INDEX = re.compile(r"0|[1-9][0-9]*")


def _pointer(path: Any, what: str, op: str) -> list[str]:
    """Split a JSON pointer (RFC 6901) into unescaped reference tokens."""
    if not isinstance(path, str):
        raise _invalid(f"{op} operation, missing {what} field: missing value")
    if path == "":
        return []
    if not path.startswith("/"):
        raise _invalid(f'{op} operation does not apply: invalid JSON pointer: "{path}"')
    tokens = path[1:].split("/")
    for token in tokens:
        if re.search(r"~(?![01])", token):
            raise _invalid(f'{op} operation does not apply: invalid JSON pointer: "{path}"')
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def _array_index(token: str, size: int, *, for_add: bool) -> int | None:
    """An array index for ``token`` (``-`` appends when adding), or None when it is invalid."""
    if for_add and token == "-":
        return size
    if not _INDEX.fullmatch(token):
        return None
    index = int(token)
    limit = size if for_add else size - 1
    return index if index <= limit else None


def _resolve(doc: Any, tokens: list[str]) -> tuple[bool, Any]:
    """Follow ``tokens`` from ``doc``: (found, value)."""
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                return False, None
            node = node[token]
        elif isinstance(node, list):
            index = _array_index(token, len(node), for_add=False)
            if index is None:
                return False, None
            node = node[index]
        else:
            return False, None
    return True, node


def _container(doc: Any, tokens: list[str]) -> Any:
    """The object or array that holds the last token, or None when the parent is missing."""
    found, parent = _resolve(doc, tokens[:-1])
    if not found or not isinstance(parent, dict | list):
        return None
    return parent


def _op_add(doc: Any, tokens: list[str], value: Any, path: str, op: str = "add") -> Any:
    if not tokens:
        return value
    parent = _container(doc, tokens)
    if parent is None:
        raise _invalid(
            f'{op} operation does not apply: doc is missing path: "{path}": missing value'
        )
    key = tokens[-1]
    if isinstance(parent, dict):
        parent[key] = value
        return doc
    index = _array_index(key, len(parent), for_add=True)
    if index is None:
        raise _invalid(
            f"error in {op} for path: '{path}': Unable to access invalid index: "
            f"{key}: invalid index referenced"
        )
    parent.insert(index, value)
    return doc


def _op_remove(doc: Any, tokens: list[str], path: str, op: str = "remove") -> tuple[Any, Any]:
    """Remove the value at ``tokens``: (document, removed value)."""
    if not tokens:
        raise _invalid(
            f'{op} operation does not apply: doc is missing path: "{path}": missing value'
        )
    parent = _container(doc, tokens)
    if parent is None:
        raise _invalid(
            f'{op} operation does not apply: doc is missing path: "{path}": missing value'
        )
    key = tokens[-1]
    if isinstance(parent, dict):
        if key not in parent:
            raise _invalid(
                f"error in {op} for path: '{path}': Unable to remove nonexistent "
                f"key: {key}: missing value"
            )
        return doc, parent.pop(key)
    index = _array_index(key, len(parent), for_add=False)
    if index is None:
        raise _invalid(
            f"error in {op} for path: '{path}': Unable to access invalid index: "
            f"{key}: invalid index referenced"
        )
    return doc, parent.pop(index)


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch; returns a new value and never mutates the inputs.

    A document that is not a list of objects is ``BadRequest``; an operation that cannot be
    applied (unknown ``op``, missing ``path``/``from``/``value``, a path that does not exist,
    a failed ``test``) is ``Invalid``, as the real API server answers 422 for those.
    """
    if not isinstance(operations, list):
        raise _bad(
            f"json: cannot unmarshal {_go_type(operations)} into Go value of type jsonpatch.Patch"
        )
    for operation in operations:
        if not isinstance(operation, dict):
            raise _bad(
                f"json: cannot unmarshal {_go_type(operation)} into Go value of type "
                "jsonpatch.Operation"
            )
    doc = copy.deepcopy(target)
    for operation in operations:
        op = operation.get("op")
        if op not in ("add", "remove", "replace", "move", "copy", "test"):
            raise _invalid(f"Unexpected kind: {op if isinstance(op, str) else 'unknown'}")
        path = operation.get("path")
        tokens = _pointer(path, "path", op)
        if op in ("add", "replace", "test") and "value" not in operation:
            raise _invalid(f"{op} operation, missing value field: missing value")
        value = copy.deepcopy(operation.get("value"))
        if op == "add":
            doc = _op_add(doc, tokens, value, path)
        elif op == "remove":
            doc, _ = _op_remove(doc, tokens, path)
        elif op == "replace":
            found, _ = _resolve(doc, tokens)
            if not found:
                raise _invalid(
                    f"replace operation does not apply: doc is missing key: {path}: missing value"
                )
            if tokens:
                doc, _ = _op_remove(doc, tokens, path, "replace")
            doc = _op_add(doc, tokens, value, path, "replace")
        elif op == "test":
            found, current = _resolve(doc, tokens)
            if not found:
                raise _invalid(
                    f"test operation does not apply: is missing path: {path}: missing value"
                )
            if not json_equal(current, value):
                raise _invalid(f"testing value {path} failed: test failed")
        else:  # move, copy
            source = operation.get("from")
            from_tokens = _pointer(source, "from", op)
            found, moved = _resolve(doc, from_tokens)
            if not found:
                raise _invalid(
                    f"{op} operation does not apply: doc is missing from path: "
                    f"{source}: missing value"
                )
            if op == "move":
                if tokens[: len(from_tokens)] == from_tokens and len(tokens) > len(from_tokens):
                    raise _invalid(
                        f"move operation does not apply: path {path} is a child of from {source}"
                    )
                if tokens == from_tokens:
                    continue
                doc, moved = _op_remove(doc, from_tokens, source, "move")
            else:
                moved = copy.deepcopy(moved)
            doc = _op_add(doc, tokens, moved, path, op)
    return doc


# -- strategic merge patch: the schema table -----------------------------------------------

MERGE = "merge"
REPLACE = "replace"


@dataclass(frozen=True)
class _Field:
    """Patch metadata of one field, as the Go struct tags give it.

    ``strategy`` is ``patchStrategy`` without ``retainKeys`` (``"merge"``, ``"replace"`` or
    ``""`` for none: a list with none is replaced whole, a map is merged key by key);
    ``key`` is ``patchMergeKey``; ``retain_keys`` records a ``retainKeys`` strategy (kubectl
    uses it to compute ``$retainKeys``; applying only needs the directive itself); ``type`` is
    the name in :data:`_SCHEMA` of the field's struct type (for a list, its element type).
    """

    strategy: str = ""
    key: str = ""
    type: str | None = None
    retain_keys: bool = False


_PLAIN = _Field()


def _struct(type_name: str) -> _Field:
    return _Field(type=type_name)


def _merge(key: str = "", type_name: str | None = None, *, retain_keys: bool = False) -> _Field:
    return _Field(MERGE, key, type_name, retain_keys)


_CONDITIONS = _merge("type")

# Field tables from k8s.io/api (core/v1, apps/v1, batch/v1, policy/v1) and apimachinery's
# ObjectMeta. Only fields with a patch strategy, or that lead to one, are listed; every other
# field merges maps key by key and replaces lists whole.
_SCHEMA: dict[str, dict[str, _Field]] = {
    "ObjectMeta": {
        "finalizers": _merge(),
        "ownerReferences": _merge("uid"),
    },
    "Object": {"metadata": _struct("ObjectMeta")},
    # core/v1
    "Container": {
        "ports": _merge("containerPort"),
        "env": _merge("name"),
        "volumeMounts": _merge("mountPath"),
        "volumeDevices": _merge("devicePath"),
    },
    "PodSpec": {
        "volumes": _merge("name", retain_keys=True),
        "initContainers": _merge("name", "Container"),
        "containers": _merge("name", "Container"),
        "ephemeralContainers": _merge("name", "Container"),
        "imagePullSecrets": _merge("name"),
        "hostAliases": _merge("ip"),
        "topologySpreadConstraints": _merge("topologyKey"),
        "schedulingGates": _merge("name"),
        "resourceClaims": _merge("name", retain_keys=True),
    },
    "PodStatus": {
        "conditions": _CONDITIONS,
        "podIPs": _merge("ip"),
        "hostIPs": _merge("ip"),
        "resourceClaimStatuses": _merge("name", retain_keys=True),
    },
    "PodTemplateSpec": {"metadata": _struct("ObjectMeta"), "spec": _struct("PodSpec")},
    "Pod": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("PodSpec"),
        "status": _struct("PodStatus"),
    },
    "PodTemplate": {"metadata": _struct("ObjectMeta"), "template": _struct("PodTemplateSpec")},
    "NodeSpec": {"podCIDRs": _merge()},
    "NodeStatus": {"conditions": _CONDITIONS, "addresses": _merge("type")},
    "Node": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("NodeSpec"),
        "status": _struct("NodeStatus"),
    },
    "Namespace": {"metadata": _struct("ObjectMeta"), "status": _struct("ConditionsStatus")},
    "ServiceSpec": {"ports": _merge("port")},
    "Service": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("ServiceSpec"),
        "status": _struct("ConditionsStatus"),
    },
    "ServiceAccount": {"metadata": _struct("ObjectMeta"), "secrets": _merge("name")},
    "PersistentVolumeClaim": {
        "metadata": _struct("ObjectMeta"),
        "status": _struct("ConditionsStatus"),
    },
    "ReplicationController": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("WorkloadSpec"),
        "status": _struct("ConditionsStatus"),
    },
    # apps/v1
    "WorkloadSpec": {"template": _struct("PodTemplateSpec")},
    "DeploymentSpec": {
        "template": _struct("PodTemplateSpec"),
        "strategy": _Field(retain_keys=True),
    },
    "Deployment": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("DeploymentSpec"),
        "status": _struct("ConditionsStatus"),
    },
    "Workload": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("WorkloadSpec"),
        "status": _struct("ConditionsStatus"),
    },
    # batch/v1
    "JobTemplateSpec": {"metadata": _struct("ObjectMeta"), "spec": _struct("WorkloadSpec")},
    "CronJobSpec": {"jobTemplate": _struct("JobTemplateSpec")},
    "CronJob": {"metadata": _struct("ObjectMeta"), "spec": _struct("CronJobSpec")},
    # policy/v1
    "PodDisruptionBudgetSpec": {"selector": _Field(REPLACE)},
    "PodDisruptionBudget": {
        "metadata": _struct("ObjectMeta"),
        "spec": _struct("PodDisruptionBudgetSpec"),
        "status": _struct("ConditionsStatus"),
    },
    # networking/v1: no patch strategy anywhere (podSelector, a LabelSelector, merges key by
    # key; ingress, egress and policyTypes are replaced whole); the spec is named so that
    # server-side apply finds podSelector atomic (LabelSelector is +structType=atomic).
    "NetworkPolicy": {"metadata": _struct("ObjectMeta"), "spec": _struct("NetworkPolicySpec")},
    # The status of every kind whose only strategic status list is conditions-by-type.
    "ConditionsStatus": {"conditions": _CONDITIONS},
}

# (group, kind) -> root type in _SCHEMA. Every built-in kind supports strategic merge patch;
# custom resources do not (the server answers 415 for them).
_ROOTS: dict[tuple[str, str], str] = {
    ("", "Pod"): "Pod",
    ("", "Node"): "Node",
    ("", "Namespace"): "Namespace",
    ("", "Service"): "Service",
    ("", "ConfigMap"): "Object",
    ("", "Secret"): "Object",
    ("", "Event"): "Object",
    ("events.k8s.io", "Event"): "Object",
    ("", "ServiceAccount"): "ServiceAccount",
    ("", "Endpoints"): "Object",
    ("", "PersistentVolumeClaim"): "PersistentVolumeClaim",
    ("", "ReplicationController"): "ReplicationController",
    ("", "PodTemplate"): "PodTemplate",
    ("apps", "Deployment"): "Deployment",
    ("apps", "ReplicaSet"): "Workload",
    ("apps", "DaemonSet"): "Workload",
    ("apps", "StatefulSet"): "Workload",
    ("batch", "Job"): "Workload",
    ("batch", "CronJob"): "CronJob",
    ("policy", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("networking.k8s.io", "NetworkPolicy"): "NetworkPolicy",
    ("coordination.k8s.io", "Lease"): "Object",
    ("scheduling.k8s.io", "PriorityClass"): "Object",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "Object",
}

SMP_KINDS: frozenset[tuple[str, str]] = frozenset(_ROOTS)


def root_type(group: str, kind: str) -> str:
    """The table's type for the root of ``group``/``kind`` (``Object``: ObjectMeta only)."""
    return _ROOTS.get((group, kind), "Object")


def schema_field(type_name: str, field: str) -> _Field:
    """The patch metadata of ``field`` in the table's ``type_name`` (server-side apply
    reads list types from it too)."""
    return _SCHEMA.get(type_name, {}).get(field, _PLAIN)


def _lookup(type_name: str | None, field: str) -> _Field:
    if type_name is None:
        return _PLAIN
    return _SCHEMA.get(type_name, {}).get(field, _PLAIN)


# -- strategic merge patch: the algorithm --------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"

_ERR_PRIMITIVE_LIST = "invalid patch format of primitive list"
_ERR_RETAIN_KEYS = "invalid patch format of retainKeys"
_ERR_SET_ORDER = "invalid patch format of setElementOrder list"


def strategic_merge_patch(target: dict, patch: dict, kind: str, group: str = "") -> dict:
    """Apply a strategic merge patch to ``target`` (an object of ``group``/``kind``).

    Returns a new dict with every directive (``$patch``, ``$retainKeys``,
    ``$setElementOrder/…``, ``$deleteFromPrimitiveList/…``) consumed; never mutates inputs.
    A kind outside :data:`SMP_KINDS` is patched with ObjectMeta's table only.
    """
    if not isinstance(patch, dict):
        raise _bad(
            f"json: cannot unmarshal {_go_type(patch)} into Go value of type "
            "map[string]interface {}"
        )
    if not isinstance(target, dict):
        raise TypeError("strategic_merge_patch needs a JSON object to patch")
    root = _ROOTS.get((group, kind), "Object")
    return _merge_map(copy.deepcopy(target), copy.deepcopy(patch), root)


def _split_directive(key: str, prefix: str, message: str) -> str:
    head, sep, field = key.partition("/")
    if not sep or head != prefix:
        raise _bad(message)
    return field


def _bad_patch_type(directive: Any, element: dict) -> PatchError:
    return _bad(f"unknown patch type: {_gofmt(directive)} in map: {_gofmt(element)}")


def _no_merge_key(element: Any, key: str) -> PatchError:
    return _bad(f"map: {_gofmt(element)} does not contain declared merge key: {key}")


def _merge_map(original: dict, patch: dict, type_name: str | None) -> dict:
    """Merge ``patch`` into ``original``; both are private copies and may be changed."""
    if _DIRECTIVE in patch:
        directive = patch.pop(_DIRECTIVE)
        if directive == REPLACE:
            return _merge_map({}, patch, type_name)
        if directive == "delete":
            return {}
        if directive != MERGE:
            patch[_DIRECTIVE] = directive
            raise _bad_patch_type(directive, patch)
    _apply_retain_keys(original, patch)
    _apply_set_element_order(original, patch, type_name)

    for key, value in list(patch.items()):
        delete_list = key.startswith(_DELETE_PRIMITIVE)
        field = key
        if delete_list:
            field = _split_directive(key, _DELETE_PRIMITIVE, _ERR_PRIMITIVE_LIST)
        meta = _lookup(type_name, field)
        if value is None:
            original.pop(field, None)
            continue
        if delete_list:
            _delete_from_primitive_list(original, field, value)
            continue
        current = original.get(field)
        if isinstance(current, dict) and isinstance(value, dict):
            if meta.strategy == REPLACE:
                original[field] = _merge_map({}, value, meta.type)
            else:
                original[field] = _merge_map(current, value, meta.type)
        elif isinstance(current, list) and isinstance(value, list):
            original[field] = _merge_list(current, value, meta)
        else:
            # Absent from the original, or of another JSON type: take the patch value, with
            # its directives applied as if merged into nothing.
            original[field] = _fresh(value, meta)
    return original


def _fresh(value: Any, meta: _Field) -> Any:
    """A patch value stored where the original has nothing to merge it with."""
    if isinstance(value, dict):
        return _merge_map({}, value, meta.type)
    if isinstance(value, list):
        return _clean_list(value, meta.type)
    return value


def _clean_list(items: list, type_name: str | None) -> list:
    """A patch list taken as is, less its directives (apimachinery's removeDirectives):
    ``$patch: delete`` items and bare ``{"$patch": "replace"}`` markers are dropped."""
    result = []
    for item in items:
        if isinstance(item, dict) and _DIRECTIVE in item:
            directive = item[_DIRECTIVE]
            if directive not in ("delete", REPLACE, MERGE):
                raise _bad_patch_type(directive, item)
            if directive == "delete" or len(item) == 1:
                continue
            item = {k: v for k, v in item.items() if k != _DIRECTIVE}
        result.append(_fresh(item, _Field(type=type_name)))
    return result


def _apply_retain_keys(original: dict, patch: dict) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
        raise _bad(_ERR_RETAIN_KEYS)
    keep = set(retain)
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_PRIMITIVE, _SET_ORDER)):
            continue
        if key not in keep:
            raise _bad(_ERR_RETAIN_KEYS)
    for key in list(original):
        if key not in keep:
            del original[key]


def _delete_from_primitive_list(original: dict, field: str, value: Any) -> None:
    if not isinstance(value, list) or any(isinstance(v, dict | list) for v in value):
        raise _bad(_ERR_PRIMITIVE_LIST)
    current = original.get(field)
    if isinstance(current, list):
        original[field] = [x for x in current if not any(json_equal(x, d) for d in value)]


def _element_kind(*lists: list) -> str:
    """``"map"`` when the elements are objects, ``"scalar"`` otherwise; errors on a mix."""
    kinds: set[str] = set()
    for lst in lists:
        for item in lst:
            if isinstance(item, list):
                raise _bad("lists of lists are not supported")
            kinds.add("map" if isinstance(item, dict) else "scalar")
    if len(kinds) > 1:
        raise _bad(f"list element types are not identical: {_gofmt(list(lists))}")
    return kinds.pop() if kinds else "scalar"


def _merge_list(original: list, patch: list, meta: _Field) -> list:
    """Merge two lists according to the field's strategy (private copies, may be changed)."""
    if meta.strategy != MERGE:
        # No strategy (or replace): the patch list replaces the original, minus directives.
        return _clean_list(patch, meta.type)
    if not original and not patch:
        return original
    kind = _element_kind(original, patch)
    key = meta.key
    if kind == "scalar":
        merged: list = []
        for item in original + patch:
            if not any(json_equal(item, seen) for seen in merged):
                merged.append(item)
        patch_items, server_only = _partition(merged, patch, "")
        return _normalize_order(patch_items, server_only, patch, original, "", kind)
    if not key:
        raise _bad(f"cannot merge lists without merge key for {_gofmt(patch)}")
    original, patch = _special_elements(original, patch, key)
    merged = _merge_elements(original, patch, key, meta)
    patch_items, server_only = _partition(merged, patch, key)
    return _normalize_order(patch_items, server_only, patch, original, key, kind)


def _special_elements(original: list, patch: list, key: str) -> tuple[list, list]:
    """Apply ``$patch`` list elements: (original after deletions, remaining patch)."""
    remaining: list = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            remaining.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == "delete":
            if key not in item:
                raise _no_merge_key(item, key)
            original = [o for o in original if not (key in o and json_equal(o[key], item[key]))]
        elif directive == REPLACE:
            replace = True
        elif directive == MERGE:
            remaining.append({k: v for k, v in item.items() if k != _DIRECTIVE})
        else:
            raise _bad_patch_type(directive, item)
    if replace:
        return [], remaining
    return original, remaining


def _merge_elements(original: list, patch: list, key: str, meta: _Field) -> list:
    merged = list(original)
    for item in patch:
        if key not in item:
            raise _no_merge_key(item, key)
        for index, existing in enumerate(merged):
            if key in existing and json_equal(existing[key], item[key]):
                merged[index] = _merge_map(existing, item, meta.type)
                break
        else:
            merged.append(_merge_map({}, item, meta.type))
    return merged


def _same(a: Any, b: Any, key: str) -> bool:
    if key:
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and key in a
            and key in b
            and (json_equal(a[key], b[key]))
        )
    return json_equal(a, b)


def _index(order: list, item: Any, key: str) -> int:
    for i, candidate in enumerate(order):
        if _same(candidate, item, key):
            return i
    return -1


def _partition(items: list, present_in: list, key: str) -> tuple[list, list]:
    """Split ``items`` into (those found in ``present_in``, those that are not)."""
    found: list = []
    server_only: list = []
    for item in items:
        if key and (not isinstance(item, dict) or key not in item):
            raise _no_merge_key(item, key)
        (found if _index(present_in, item, key) >= 0 else server_only).append(item)
    return found, server_only


def _sort_by(items: list, order: list, key: str) -> list:
    """Items found in ``order`` sorted by it, then the rest in their own order."""
    ranked = [(i, item) for item in items if (i := _index(order, item, key)) >= 0]
    ranked.sort(key=lambda pair: pair[0])
    rest = [item for item in items if _index(order, item, key) < 0]
    return [item for _, item in ranked] + rest


def _normalize_order(
    patch_items: list, server_only: list, patch_order: list, server_order: list, key: str, kind: str
) -> list:
    """Order patch items by the patch, server-only items by the live list, then interleave."""
    if kind == "map":
        for item in [*patch_items, *server_only, *patch_order]:
            if not isinstance(item, dict) or key not in item:
                raise _no_merge_key(item, key)
    patch_items = _sort_by(patch_items, patch_order, key)
    server_only = _sort_by(server_only, server_order, key)
    return _merge_sorted(server_only, patch_items, server_order, key)


def _merge_sorted(left: list, right: list, server_order: list, key: str) -> list:
    """apimachinery's mergeSortedSlice: insert each ``left`` item before the first ``right``
    item that comes after it in the live list, keeping both lists' relative order."""
    result: list = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            result.append(right[j])
            j += 1
        elif j >= len(right):
            result.append(left[i])
            i += 1
        else:
            li = _index(server_order, left[i], key)
            ri = _index(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                result.append(left[i])
                i += 1
            else:
                result.append(right[j])
                j += 1
    return result


def _apply_set_element_order(original: dict, patch: dict, type_name: str | None) -> None:
    """Consume ``$setElementOrder/<field>`` directives, merging and ordering those lists."""
    for directive_key in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(directive_key)
        field = _split_directive(directive_key, _SET_ORDER, _ERR_SET_ORDER)
        if not isinstance(order, list):
            raise _bad(_ERR_SET_ORDER)
        meta = _lookup(type_name, field)
        if meta.strategy != MERGE:
            continue  # only merging lists have an order to set; the list merges as usual
        has_original, has_patch = field in original, field in patch
        if not has_original and not has_patch:
            continue
        current = original.get(field, [])
        incoming = patch.get(field, [])
        if not isinstance(current, list) or not isinstance(incoming, list):
            raise _bad(_ERR_SET_ORDER)
        kind = _element_kind(current, incoming, order)
        key = meta.key if kind == "map" else ""
        if kind == "map":
            for item in order:
                if key not in item:
                    raise _no_merge_key(item, key)
        _check_order(incoming, order, key)
        if has_original and has_patch:
            merged = _merge_list(current, incoming, meta)
        elif has_patch:
            merged = _clean_list(incoming, meta.type)
        else:
            merged = current
        patch_items, server_only = _partition(merged, order, key)
        original[field] = _normalize_order(patch_items, server_only, order, current, key, kind)
        patch.pop(field, None)


def _check_order(incoming: list, order: list, key: str) -> None:
    """The patch list, less its ``$patch: delete`` items, must follow the order list."""
    items = [x for x in incoming if not (isinstance(x, dict) and _DIRECTIVE in x)]
    if not items or not order:
        return
    p = 0
    for entry in order:
        if p < len(items) and _same(items[p], entry, key):
            p += 1
    if p < len(items):
        raise _bad(
            f"The order in patch list: {_gofmt(incoming)} doesn't match "
            f"{_SET_ORDER} list: {_gofmt(order)}"
        )
