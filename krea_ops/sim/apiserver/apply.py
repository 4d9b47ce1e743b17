"""Server-side apply and ``metadata.managedFields`` for the simulated API server.

A port of the parts of ``sigs.k8s.io/structured-merge-diff`` (``merge/update.go``,
``typed/merge.go``, ``typed/compare.go``, ``typed/tofieldset.go``) and
``k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager`` that a kubectl or client-go
user notices:

* every write records who changed which fields: an ``Update`` entry per (manager,
  subresource) for create/update/patch, an ``Apply`` entry for an apply patch;
* ``PATCH`` with ``application/apply-patch+yaml`` creates or merges the applied
  configuration, takes ownership of its fields, removes the fields the manager stopped
  applying when nobody else owns them, and refuses with the real 409 when another manager
  owns a field whose value it would change (``force=true`` takes the field over).

Field sets are kept in their serialised form, the ``fieldsV1`` tree itself (``f:name``,
``k:{"name":"x"}``, ``v:"x"`` path elements, ``.`` marking a node that is itself a
member), so an entry never needs encoding; set operations copy only the spine they touch,
and an ``Update`` walks only the subtrees that differ (``==`` on a subtree is C speed),
which keeps the bookkeeping cheap on the status writes the simulated world does many
times a second.

List semantics: built-in kinds take ``x-kubernetes-list-type`` from the strategic-merge
table in :mod:`krea_ops.sim.apiserver.patch` (a ``patchMergeKey`` list is a map keyed by it, a
merge list without key is a set, every other list is atomic), with the key sets the
OpenAPI of ``k8s.io/api`` declares where they differ (container ports by
``containerPort`` and ``protocol``, ...). Custom resources follow their schema's
``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys`` / ``x-kubernetes-map-type``.
Past ten ``Update`` entries the oldest fold into ``ancient-changes``, as upstream. Not
modelled: unions, and the Go zero values of every built-in struct (a newly added nested
struct other than ``metadata``/``spec``/``status``/``template``/``strategy`` is marked
as a member, ``.``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from krea_ops.sim.apiserver import patch as smp

Tree = dict[str, Any]  # a fieldsV1 node
Entry = dict[str, Any]  # a managedFields entry

APPLY = "Apply"
UPDATE = "Update"
_MISSING: Any = object()
# stripmeta.go: the fields no manager ever owns.
_STRIPPED_META = frozenset(
    {
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)
# Non-pointer structs of the built-in Go types: present (zero) in the object a create
# compares against, so adding them does not make the struct itself a member.
_VALUE_STRUCTS = frozenset({"metadata", "spec", "status", "template", "strategy", "updateStrategy"})

# List keys that k8s.io/api's OpenAPI (x-kubernetes-list-map-keys) declares differently
# from the strategic merge key.
_SSA_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("Container", "ports"): ("containerPort", "protocol"),
    ("ServiceSpec", "ports"): ("port", "protocol"),
    ("PodSpec", "topologySpreadConstraints"): ("topologyKey", "whenUnsatisfiable"),
}
# Key fields the server defaults, so an applied item may leave them out.
_KEY_DEFAULTS = {"protocol": "TCP"}
# Maps that are x-kubernetes-map-type: atomic (LabelSelector, OwnerReference, ...).
_ATOMIC_FIELDS = frozenset(
    {
        ("DeploymentSpec", "selector"),
        ("WorkloadSpec", "selector"),
        ("PodDisruptionBudgetSpec", "selector"),
        ("NetworkPolicySpec", "podSelector"),
    }
)


# -- schemas ------------------------------------------------------------------------------


class Node:
    """How the value at one place of an object merges: the interface both schemas give."""

    atomic_map: bool = False
    list_kind: str = "atomic"  # "atomic" | "set" | "map"
    keys: tuple[str, ...] = ()

    def child(self, key: str) -> Node:  # pragma: no cover - overridden
        return _PLAIN

    def item(self) -> Node:  # pragma: no cover - overridden
        return _PLAIN


_PLAIN = Node()


class BuiltinNode(Node):
    """A place in a built-in kind, described by the strategic-merge table."""

    def __init__(
        self,
        type_name: str | None,
        list_kind: str = "atomic",
        keys: tuple[str, ...] = (),
        item_type: str | None = None,
        atomic_map: bool = False,
    ) -> None:
        self.type_name = type_name
        self.list_kind = list_kind
        self.keys = keys
        self.item_type = item_type
        self.atomic_map = atomic_map

    def child(self, key: str) -> Node:
        parent = self.type_name
        if parent is None:
            return _PLAIN_BUILTIN
        f = smp.schema_field(parent, key)
        atomic = (parent, key) in _ATOMIC_FIELDS or f.strategy == smp.REPLACE
        if f.strategy == smp.MERGE:
            if f.key:
                keys = _SSA_KEYS.get((parent, key), (f.key,))
                return BuiltinNode(f.type, "map", keys, f.type)
            return BuiltinNode(None, "set")
        return BuiltinNode(f.type, atomic_map=atomic)

    def item(self) -> Node:
        return BuiltinNode(self.item_type)


_PLAIN_BUILTIN = BuiltinNode(None)


class SchemaNode(Node):
    """A place in a custom resource, described by its OpenAPI v3 schema."""

    def __init__(self, schema: dict[str, Any] | None) -> None:
        s = schema or {}
        self.schema = s
        self.atomic_map = s.get("x-kubernetes-map-type") == "atomic"
        kind = s.get("x-kubernetes-list-type")
        self.list_kind = kind if kind in ("set", "map") else "atomic"
        self.keys = tuple(s.get("x-kubernetes-list-map-keys") or ())

    def child(self, key: str) -> Node:
        props = self.schema.get("properties") or {}
        if key in props:
            return SchemaNode(props[key])
        extra = self.schema.get("additionalProperties")
        return SchemaNode(extra if isinstance(extra, dict) else None)

    def item(self) -> Node:
        items = self.schema.get("items")
        return SchemaNode(items if isinstance(items, dict) else None)


class CustomRoot(SchemaNode):
    """A custom resource's root: its schema, but ObjectMeta as the built-in type."""

    def child(self, key: str) -> Node:
        if key == "metadata":
            return BuiltinNode("ObjectMeta")
        return super().child(key)


def root_node(group: str, kind: str, schema: dict[str, Any] | None) -> Node:
    if schema is not None:
        return CustomRoot(schema)
    return BuiltinNode(smp.root_type(group, kind))


# -- path elements ------------------------------------------------------------------------


def _item_pe(item: Any, node: Node) -> str:
    if node.list_kind == "map" and isinstance(item, dict):
        key = {k: item.get(k, _KEY_DEFAULTS.get(k)) for k in sorted(node.keys)}
        return "k:" + json.dumps(
            {k: v for k, v in key.items() if v is not None}, separators=(",", ":")
        )
    return "v:" + json.dumps(item, separators=(",", ":"), sort_keys=True)


def render_path(elements: list[str]) -> str:
    """fieldpath.Path.String(): ``.spec.containers[name="x"].image``."""
    out = []
    for pe in elements:
        tag, body = pe[:2], pe[2:]
        if tag == "f:":
            out.append("." + body)
        elif tag == "k:":
            fields = json.loads(body)
            out.append(
                "["
                + ",".join(
                    f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in fields.items()
                )
                + "]"
            )
        elif tag == "v:":
            out.append(f"[={body}]")
        else:
            out.append(f"[{body}]")
    return "".join(out)


# -- field sets ---------------------------------------------------------------------------


def _member(t: Tree) -> bool:
    return not t or "." in t


def _norm(out: Tree, member: bool) -> Tree | None:
    if member:
        return {".": {}, **out} if out else {}
    return out or None


def union(a: Tree | None, b: Tree | None) -> Tree | None:
    """Members of either; untouched subtrees are shared, never copied."""
    if a is None:
        return b
    if b is None:
        return a
    member = _member(a) or _member(b)
    out = {k: v for k, v in a.items() if k != "."}
    for k, v in b.items():
        if k == ".":
            continue
        out[k] = union(out[k], v) if k in out else v
    return _norm(out, member)


def difference(a: Tree | None, b: Tree | None) -> Tree | None:
    """Members of ``a`` that are not members of ``b`` (fieldpath.Set.Difference)."""
    if a is None or b is None:
        return a
    member = _member(a) and not _member(b)
    out: Tree = {}
    changed = False
    for k, v in a.items():
        if k == ".":
            continue
        if k in b:
            d = difference(v, b[k])
            changed = changed or d is not v
            if d is not None:
                out[k] = d
        else:
            out[k] = v
    if not changed and member == _member(a):
        return a
    return _norm(out, member)


def without_subtrees(a: Tree | None, r: Tree | None) -> Tree | None:
    """``a`` less everything at or under a member of ``r`` (fields that were removed)."""
    if a is None or not r:
        return a
    out: Tree = {}
    changed = False
    for k, v in a.items():
        if k == ".":
            continue
        if k in r:
            changed = True
            sub = r[k]
            if _member(sub):
                continue
            d = without_subtrees(v, sub)
            if d is not None:
                out[k] = d
        else:
            out[k] = v
    if not changed:
        return a
    return _norm(out, _member(a))


def member_paths(a: Tree | None, b: Tree, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    """The paths that are members of both trees (fieldpath.Set.Intersection, listed)."""
    if a is None:
        return []
    out: list[list[str]] = []
    if prefix and _member(a) and _member(b):
        out.append(list(prefix))
    for k, v in b.items():
        if k != "." and k in a:
            out.extend(member_paths(a[k], v, (*prefix, k)))
    return out


# -- walking objects ----------------------------------------------------------------------


def fieldset(obj: dict[str, Any], node: Node) -> Tree:
    """typed.ToFieldSet of an applied configuration: its leaves and list items."""
    out: Tree = {}
    for k, v in obj.items():
        sub = _value_set(v, node.child(k), added=False)
        if sub is not None:
            out["f:" + k] = sub
    return out


def _value_set(v: Any, node: Node, *, added: bool, key: str = "") -> Tree | None:
    if isinstance(v, dict):
        if not v or node.atomic_map:
            return {}
        out: Tree = {}
        for k, item in v.items():
            sub = _value_set(item, node.child(k), added=added, key=k)
            if sub is not None:
                out["f:" + k] = sub
        if added and out and not (isinstance(node, BuiltinNode) and key in _VALUE_STRUCTS):
            return {".": {}, **out}
        return out or {}
    if isinstance(v, list):
        if node.list_kind == "atomic":
            return {}
        if not v:
            return None
        items: Tree = {}
        inode = node.item()
        for element in v:
            pe = _item_pe(element, node)
            if node.list_kind == "map" and isinstance(element, dict):
                items[pe] = _item_set(element, inode, added)
            else:
                items[pe] = {}
        return items
    return {}


def _item_set(element: dict[str, Any], node: Node, added: bool) -> Tree:
    """The fields of one item of an associative list; the item itself is a member."""
    out: Tree = {".": {}}
    for k, x in element.items():
        sub = _value_set(x, node.child(k), added=added, key=k)
        if sub is not None:
            out["f:" + k] = sub
    return out


def _same_value(a: Any, b: Any, node: Node) -> bool:
    """Whether typed.Compare finds nothing changed between ``a`` and ``b``: at a leaf (a
    scalar, or an atomic map or list, compared whole) that is structured-merge-diff's
    value.Equals (an int equals the same float, a bool is never a number); a map or list
    it would walk is unchanged when ``==`` says so. Maps are maps whatever mapping type
    decoded them: a stored object read from a request body holds ``gojson.JsonObject``
    maps where a merged one holds plain dicts. ``==`` first, at C speed; only a leaf
    that is equal by it is checked again (a bool and a number inside a walked map are
    not told apart)."""
    if a != b:
        return False
    if isinstance(a, dict):
        return isinstance(b, dict) and (not node.atomic_map or smp.json_equal(a, b))
    if isinstance(a, list):
        return isinstance(b, list) and (node.list_kind != "atomic" or smp.json_equal(a, b))
    return smp.json_equal(a, b)


def compare(old: dict[str, Any], new: dict[str, Any], node: Node) -> tuple[Tree, Tree]:
    """(added or modified, removed) between two maps, as typed.Compare finds them."""
    changed: Tree = {}
    removed: Tree = {}
    for k, b in new.items():
        a = old.get(k, _MISSING)
        if a is b:
            continue
        child = node.child(k)
        if a is not _MISSING and _same_value(a, b, child):
            continue
        if a is _MISSING or a is None:
            sub = _value_set(b, child, added=True, key=k)
            if sub is not None:
                changed["f:" + k] = sub
            continue
        if a == {} and isinstance(b, dict) and b and not child.atomic_map:
            # An empty map that gains fields: they are added, the map itself was there.
            sub = _value_set(b, child, added=True, key=k) or {}
            changed["f:" + k] = {f: t for f, t in sub.items() if f != "."} or {}
            continue
        c, r = _compare_value(a, b, child)
        if c is not None:
            changed["f:" + k] = c
        if r:
            removed["f:" + k] = r
    for k in old:
        if k not in new:
            removed["f:" + k] = {}
    return changed, removed


def _compare_value(a: Any, b: Any, node: Node) -> tuple[Tree | None, Tree | None]:
    if isinstance(a, dict) and isinstance(b, dict) and a and b and not node.atomic_map:
        c, r = compare(a, b, node)
        return c or None, r or None
    if (
        isinstance(a, list)
        and isinstance(b, list)
        and node.list_kind != "atomic"
        and b
        and all(isinstance(x, dict) for x in a + b) == (node.list_kind == "map")
    ):
        inode = node.item()
        before = {_item_pe(x, node): x for x in a}
        changed: Tree = {}
        removed: Tree = {}
        for x in b:
            pe = _item_pe(x, node)
            y = before.get(pe, _MISSING)
            if y is _MISSING:
                if node.list_kind == "map":
                    changed[pe] = _item_set(x, inode, True)
                else:
                    changed[pe] = {}
            elif y != x and node.list_kind == "map":
                c, r = compare(y, x, inode)
                if c:
                    changed[pe] = c
                if r:
                    removed[pe] = r
        after = {_item_pe(x, node) for x in b}
        for pe in before:
            if pe not in after:
                removed[pe] = {}
        return changed or None, removed or None
    return {}, None


def merge(live: dict[str, Any], config: dict[str, Any], node: Node) -> dict[str, Any]:
    """typed.Merge: the applied configuration merged into the live object (new dicts
    along the merged paths; the inputs are not changed)."""
    out = dict(live)
    for k, v in config.items():
        child = node.child(k)
        current = out.get(k)
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(current, dict) and not child.atomic_map:
            out[k] = merge(current, v, child)
        elif isinstance(v, list) and isinstance(current, list) and child.list_kind == "map":
            merged = list(current)
            index = {_item_pe(x, child): i for i, x in enumerate(merged)}
            for x in v:
                pe = _item_pe(x, child)
                if pe in index and isinstance(x, dict):
                    merged[index[pe]] = merge(merged[index[pe]], x, child.item())
                else:
                    index[pe] = len(merged)
                    merged.append(_copy(x))
            out[k] = merged
        elif isinstance(v, list) and isinstance(current, list) and child.list_kind == "set":
            out[k] = list(current) + [x for x in v if x not in current]
        else:
            out[k] = _copy(v)
    return out


def _copy(v: Any) -> Any:
    return json.loads(json.dumps(v)) if isinstance(v, dict | list) else v


def prune(obj: dict[str, Any], remove: Tree, keep: Tree | None, node: Node) -> dict[str, Any]:
    """Remove the fields in ``remove`` (what the applier owned and stopped applying) that
    nothing in ``keep`` (its new set and every other manager's) still reaches."""
    out = dict(obj)
    for pe, sub in remove.items():
        if not pe.startswith("f:"):
            continue
        k = pe[2:]
        if k not in out:
            continue
        kept = keep.get(pe) if keep else None
        if _member(sub) and kept is None:
            del out[k]
            continue
        value, child = out[k], node.child(k)
        if isinstance(value, dict):
            out[k] = prune(value, sub, kept, child)
        elif isinstance(value, list) and child.list_kind != "atomic":
            items = []
            for x in value:
                xpe = _item_pe(x, child)
                xsub = sub.get(xpe)
                xkept = kept.get(xpe) if kept else None
                if xsub is None:
                    items.append(x)
                elif _member(xsub) and xkept is None:
                    continue
                elif isinstance(x, dict):
                    items.append(prune(x, xsub, xkept, child.item()))
                else:
                    items.append(x)
            if items or not value:
                out[k] = items
            else:
                del out[k]  # every item pruned: the list goes (omitempty in the Go types)
    return out


class TypedError(Exception):
    """The applied object does not fit its type (typed.ObjectToTyped's ValidationError)."""


def check_keys(value: Any, node: Node, path: str = "") -> None:
    """An item of an associative list must carry every key field (or the key must have
    a default): sigs.k8s.io/structured-merge-diff typed/helpers.go keyedAssociativeList
    ItemToPathElement, reported as ``<list path>: element <i>: ...``."""
    if isinstance(value, dict):
        if node.atomic_map:
            return
        for k, v in value.items():
            check_keys(v, node.child(k), f"{path}.{k}")
    elif isinstance(value, list) and node.list_kind == "map":
        inode = node.item()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise TypedError(
                    f"{path}: element {i}: associative list with keys may not have non-map "
                    "elements"
                )
            for key in node.keys:
                if key not in item and key not in _KEY_DEFAULTS:
                    raise TypedError(
                        f"{path}: element {i}: associative list with keys has an element "
                        f'that omits key field "{key}" (and doesn\'t have default value)'
                    )
            check_keys(item, inode, path + render_path([_item_pe(item, node)]))


# -- managedFields ------------------------------------------------------------------------


def scoped(obj: dict[str, Any], subresource: str, has_status: bool) -> dict[str, Any]:
    """The part of an object a write's managers can own: no apiVersion/kind or
    server-set metadata; ``status`` only through the status subresource, and only it."""
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    if not has_status and "status" in obj:
        out["status"] = obj["status"]
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k not in _STRIPPED_META}
        if kept:
            out["metadata"] = kept
        else:
            out.pop("metadata", None)
    return out


def _key(entry: Entry) -> tuple[str, str, str]:
    return (
        str(entry.get("manager", "")),
        str(entry.get("operation", "")),
        str(entry.get("subresource", "")),
    )


def _sorted(entries: list[Entry]) -> list[Entry]:
    """sortEncodedManagedFields: Apply before Update, then by time, manager, version."""
    return sorted(
        entries,
        key=lambda e: (
            e.get("operation", ""),
            e.get("time", ""),
            e.get("manager", ""),
            e.get("apiVersion", ""),
            e.get("subresource", ""),
        ),
    )


def _entry(
    manager: str, operation: str, api_version: str, now: str, fields: Tree, subresource: str
) -> Entry:
    entry: Entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    subresource: str,
    api_version: str,
    now: str,
    node: Node,
    has_status: bool,
) -> list[Entry] | None:
    """The managedFields after a create (``old`` None) or an update by ``manager``
    (fieldmanager.Update). The base is the request's own managedFields when it sets some
    (a client may rewrite them, as kubectl's client-side-apply upgrade does), else the
    stored ones. None: the object has no managed fields at all."""
    stored = ((old or {}).get("metadata") or {}).get("managedFields") or []
    given = (new.get("metadata") or {}).get("managedFields")
    base: list[Entry] = stored
    if given and not subresource and isinstance(given, list):
        base = [e for e in given if isinstance(e, dict)]
    before = scoped(old, subresource, has_status) if old is not None else {}
    changed, removed = compare(before, scoped(new, subresource, has_status), node)
    if not changed and not removed:
        return base or None
    me = (manager, UPDATE, subresource)
    out: list[Entry] = []
    mine: Entry | None = None
    for entry in base:
        if _key(entry) == me:
            mine = entry
            continue
        fields = entry.get("fieldsV1")
        if not isinstance(fields, dict):
            out.append(entry)
            continue
        left = without_subtrees(difference(fields, changed or None), removed or None)
        if left is fields:
            out.append(entry)
        elif left:
            out.append({**entry, "fieldsV1": left})
    if changed:
        own = without_subtrees((mine or {}).get("fieldsV1"), removed or None)
        out.append(
            _entry(manager, UPDATE, api_version, now, union(own, changed) or {}, subresource)
        )
    elif mine is not None:
        own = without_subtrees(mine.get("fieldsV1"), removed or None)
        if own:
            out.append({**mine, "fieldsV1": own})
    return _sorted(_cap_updaters(out)) or None


MAX_UPDATE_MANAGERS = 10
ANCIENT = "ancient-changes"


def _cap_updaters(entries: list[Entry]) -> list[Entry]:
    """capManagersManager (fieldmanager/internal/capmanagers.go): past ten Update entries,
    the oldest are merged, per apiVersion, into one ``ancient-changes`` entry."""
    updaters = [e for e in entries if e.get("operation") == UPDATE]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return entries
    updaters.sort(key=lambda e: (str(e.get("time", "")), _identifier(e)))
    gone: set[int] = set()
    first: dict[str, Entry] = {}
    buckets: dict[str, Entry] = {}
    length = len(updaters)
    for e in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        version = str(e.get("apiVersion", ""))
        if version not in first:
            first[version] = e
            continue
        bucket = buckets.get(version)
        if bucket is None:
            seed = first[version]
            gone.add(id(seed))
            bucket = buckets[version] = {
                "manager": ANCIENT,
                "operation": UPDATE,
                "apiVersion": version,
                "time": seed.get("time"),
                "fieldsType": "FieldsV1",
                "fieldsV1": seed.get("fieldsV1") or {},
            }
        bucket["fieldsV1"] = union(e.get("fieldsV1") or {}, bucket["fieldsV1"]) or {}
        bucket["time"] = e.get("time")  # the merged update's, the more recent
        gone.add(id(e))
        length -= 1
    return [e for e in entries if id(e) not in gone] + list(buckets.values())


@dataclass
class FieldConflict:
    manager: Entry
    path: list[str]


def describe_manager(entry: Entry) -> str:
    """printManager in fieldmanager/internal/conflict.go (the time is never part of it)."""
    text = json.dumps(entry.get("manager", ""))
    if entry.get("subresource"):
        text += f" with subresource {json.dumps(entry['subresource'])}"
    if entry.get("operation") == UPDATE:
        text += f" using {entry.get('apiVersion', '')}"
    return text


def _identifier(entry: Entry) -> str:
    """BuildManagerIdentifier: the entry less time and fields (and, for an applier, its
    apiVersion), JSON-encoded in ManagedFieldsEntry's field order."""
    ident: dict[str, Any] = {
        "manager": entry.get("manager", ""),
        "operation": entry.get("operation"),
    }
    if entry.get("operation") != APPLY:
        ident["apiVersion"] = entry.get("apiVersion")
    if entry.get("subresource"):
        ident["subresource"] = entry["subresource"]
    return json.dumps(ident, separators=(",", ":"))


def conflict_message(conflicts: list[FieldConflict]) -> str:
    """getConflictMessage in k8s.io/apiserver .../fieldmanager/internal/conflict.go."""
    if len(conflicts) == 1:
        c = conflicts[0]
        return (
            f"Apply failed with 1 conflict: conflict with {describe_manager(c.manager)}: "
            f"{render_path(c.path)}"
        )
    by: dict[str, tuple[str, list[str]]] = {}
    for c in sorted(conflicts, key=lambda c: c.path):
        ident = _identifier(c.manager)
        by.setdefault(ident, (describe_manager(c.manager), []))[1].append(render_path(c.path))
    lines = []
    for ident in sorted(by):  # by the managers' identifiers, as sort.Strings there
        who, paths = by[ident]
        lines.append(f"conflicts with {who}:")
        lines.extend(f"- {p}" for p in paths)
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


class ApplyConflict(Exception):
    def __init__(self, conflicts: list[FieldConflict]) -> None:
        super().__init__(conflict_message(conflicts))
        self.conflicts = conflicts

    def causes(self) -> list[dict[str, str]]:
        return [
            {
                "reason": "FieldManagerConflict",
                "message": f"conflict with {describe_manager(c.manager)}",
                "field": render_path(c.path),
            }
            for c in self.conflicts
        ]


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _has(tree: Tree | None, path: list[str]) -> bool:
    for element in path:
        if tree is None or element not in tree:
            return False
        tree = tree[element]
    return tree is not None and _member(tree)


def _upgradable(live: dict[str, Any], api_version: str, node: Node) -> Tree | None:
    """The fields ``kubectl apply --server-side`` may take over from client-side apply
    without ``--force-conflicts`` (lastAppliedManager in k8s.io/apimachinery
    .../managedfields/internal/lastappliedmanager.go): those of the last-applied
    annotation whose value the live object still has. None where there is no annotation
    or it is of another apiVersion."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return None
    try:
        last = json.loads(text)
    except ValueError:
        return None
    if not isinstance(last, dict) or last.get("apiVersion") != api_version:
        return None
    changed, removed = compare(last, live, node)
    return difference(difference(fieldset(last, node), changed), removed)


def apply(
    live: dict[str, Any] | None,
    config: dict[str, Any],
    *,
    manager: str,
    force: bool,
    subresource: str,
    api_version: str,
    now: str,
    node: Node,
    has_status: bool,
) -> tuple[dict[str, Any], list[Entry]]:
    """Updater.Apply: (the merged object, its managedFields); raises ApplyConflict, or
    TypedError for a configuration that does not fit the type."""
    check_keys(config, node)
    entries: list[Entry] = list(((live or {}).get("metadata") or {}).get("managedFields") or [])
    live_obj = dict(live or {})
    if live is not None:
        live_obj["metadata"] = {
            k: v for k, v in live["metadata"].items() if k != "managedFields"
        }
    me = (manager, APPLY, subresource)
    last = next((e for e in entries if _key(e) == me), None)
    others = [e for e in entries if _key(e) != me]
    applied = fieldset(scoped(config, subresource, has_status), node)
    merged = merge(live_obj, config, node)
    if last is not None and isinstance(last.get("fieldsV1"), dict):
        keep: Tree | None = applied
        for e in others:
            keep = union(keep, e.get("fieldsV1") if isinstance(e.get("fieldsV1"), dict) else None)
        stale = difference(last["fieldsV1"], keep)
        if stale:
            merged = prune(merged, stale, keep, node)
    changed, removed = compare(
        scoped(live_obj, subresource, has_status), scoped(merged, subresource, has_status), node
    )
    conflicts: list[FieldConflict] = []
    kept: list[Entry] = []
    for e in others:
        fields = e.get("fieldsV1")
        if not isinstance(fields, dict):
            kept.append(e)
            continue
        clash = member_paths(fields, changed)
        conflicts.extend(FieldConflict(e, p) for p in clash)
        left = without_subtrees(difference(fields, changed) if clash else fields, removed or None)
        if left:
            kept.append(e if left is fields else {**e, "fieldsV1": left})
    if conflicts and not force:
        # kubectl's own apply may take over its client-side fields: worked out once, and
        # only when there is a conflict to forgive
        allowed = _upgradable(live_obj, api_version, node) if manager == "kubectl" else None
        if not all(_has(allowed, c.path) for c in conflicts):
            raise ApplyConflict(conflicts)
    unchanged = live is not None and merged == live_obj and last is not None
    stamp = str(last.get("time", now)) if unchanged and last is not None else now
    kept.append(_entry(manager, APPLY, api_version, stamp, applied, subresource))
    return merged, _sorted(kept)
