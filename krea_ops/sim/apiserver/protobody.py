"""Protobuf request bodies of the access-control kinds, decoded to the JSON a client
would have sent.

kubectl's typed clients (``kubectl create serviceaccount|role|rolebinding|secret|token``,
``kubectl auth can-i``, ``kubectl auth whoami``) send ``application/vnd.kubernetes.protobuf``:
the magic ``k8s\\x00`` and a ``runtime.Unknown`` whose ``raw`` is the object's message
(k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go). This decodes the wire
format directly with the field numbers of the upstream ``generated.proto`` files
(k8s.io/api core/v1, rbac/v1, authentication/v1, authorization/v1 and apimachinery
meta/v1) for just these kinds, and applies ``encoding/json``'s ``omitempty``: gogo-protobuf
writes every non-pointer field, empty or not, while pointer fields are written only when
set (those are marked to keep even when false or zero).
"""

from __future__ import annotations

import base64
from typing import Any

from krea_ops.sim.apiserver.errors import ApiError

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

# A schema maps a field number to (JSON name, type, flags). Types: "s" string, "b" bytes
# (JSON base64), "i" varint integer, "?" bool, a nested schema, or ("map", value type).
# Flags: "*" repeated, "!" a Go pointer (kept even when empty).
Schema = dict[int, tuple[str, Any, str]]

_STR_MAP = ("map", "s")
_OWNER: Schema = {
    5: ("apiVersion", "s", ""),
    1: ("kind", "s", ""),
    3: ("name", "s", ""),
    4: ("uid", "s", ""),
    6: ("controller", "?", "!"),
    7: ("blockOwnerDeletion", "?", "!"),
}
_META: Schema = {
    1: ("name", "s", ""),
    2: ("generateName", "s", ""),
    3: ("namespace", "s", ""),
    5: ("uid", "s", ""),
    6: ("resourceVersion", "s", ""),
    7: ("generation", "i", ""),
    11: ("labels", _STR_MAP, ""),
    12: ("annotations", _STR_MAP, ""),
    13: ("ownerReferences", _OWNER, "*"),
    14: ("finalizers", "s", "*"),
}
_OBJECT_REF: Schema = {
    1: ("kind", "s", ""),
    2: ("namespace", "s", ""),
    3: ("name", "s", ""),
    4: ("uid", "s", ""),
    5: ("apiVersion", "s", ""),
    6: ("resourceVersion", "s", ""),
    7: ("fieldPath", "s", ""),
}
_POLICY_RULE: Schema = {
    1: ("verbs", "s", "*"),
    2: ("apiGroups", "s", "*"),
    3: ("resources", "s", "*"),
    4: ("resourceNames", "s", "*"),
    5: ("nonResourceURLs", "s", "*"),
}
_SUBJECT: Schema = {
    1: ("kind", "s", ""),
    2: ("apiGroup", "s", ""),
    3: ("name", "s", ""),
    4: ("namespace", "s", ""),
}
_ROLE_REF: Schema = {1: ("apiGroup", "s", ""), 2: ("kind", "s", ""), 3: ("name", "s", "")}
_BINDING: Schema = {
    1: ("metadata", _META, ""),
    2: ("subjects", _SUBJECT, "*"),
    3: ("roleRef", _ROLE_REF, ""),
}
_RESOURCE_ATTRS: Schema = {
    1: ("namespace", "s", ""),
    2: ("verb", "s", ""),
    3: ("group", "s", ""),
    4: ("version", "s", ""),
    5: ("resource", "s", ""),
    6: ("subresource", "s", ""),
    7: ("name", "s", ""),
}
_NON_RESOURCE_ATTRS: Schema = {1: ("path", "s", ""), 2: ("verb", "s", "")}
_EXTRA_VALUE: Schema = {1: ("items", "s", "*")}
_LABEL_SELECTOR: Schema = {
    1: ("matchLabels", _STR_MAP, ""),
    2: (
        "matchExpressions",
        {1: ("key", "s", ""), 2: ("operator", "s", ""), 3: ("values", "s", "*")},
        "*",
    ),
}

KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "ServiceAccount"): {
        1: ("metadata", _META, ""),
        2: ("secrets", _OBJECT_REF, "*"),
        3: ("imagePullSecrets", {1: ("name", "s", "")}, "*"),
        4: ("automountServiceAccountToken", "?", "!"),
    },
    ("v1", "Secret"): {
        1: ("metadata", _META, ""),
        5: ("immutable", "?", "!"),
        2: ("data", ("map", "b"), ""),
        4: ("stringData", _STR_MAP, ""),
        3: ("type", "s", ""),
    },
    ("rbac.authorization.k8s.io/v1", "Role"): {
        1: ("metadata", _META, ""),
        2: ("rules", _POLICY_RULE, "*"),
    },
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): {
        1: ("metadata", _META, ""),
        2: ("rules", _POLICY_RULE, "*"),
        3: ("aggregationRule", {1: ("clusterRoleSelectors", _LABEL_SELECTOR, "*")}, "!"),
    },
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _BINDING,
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", _META, ""),
        2: (
            "spec",
            {
                1: ("audiences", "s", "*"),
                4: ("expirationSeconds", "i", "!"),
                3: (
                    "boundObjectRef",
                    {
                        1: ("kind", "s", ""),
                        2: ("apiVersion", "s", ""),
                        3: ("name", "s", ""),
                        4: ("uid", "s", ""),
                    },
                    "!",
                ),
            },
            "",
        ),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", _META, "")},
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _META, ""),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRS, "!"),
                2: ("nonResourceAttributes", _NON_RESOURCE_ATTRS, "!"),
            },
            "",
        ),
    },
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): {
        1: ("metadata", _META, ""),
        2: ("spec", {1: ("namespace", "s", "")}, ""),
    },
    ("authorization.k8s.io/v1", "SubjectAccessReview"): {
        1: ("metadata", _META, ""),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRS, "!"),
                2: ("nonResourceAttributes", _NON_RESOURCE_ATTRS, "!"),
                3: ("user", "s", ""),
                4: ("groups", "s", "*"),
                5: ("extra", ("map", _EXTRA_VALUE), ""),
                6: ("uid", "s", ""),
            },
            "",
        ),
    },
}

_UNKNOWN: Schema = {
    1: ("typeMeta", {1: ("apiVersion", "s", ""), 2: ("kind", "s", "")}, ""),
    2: ("raw", "raw", ""),
    3: ("contentEncoding", "s", ""),
    4: ("contentType", "s", ""),
}


class _Malformed(Exception):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) in order; length-delimited values as bytes."""
    out = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _Malformed("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise _Malformed(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _scalar(kind: Any, wire: int, value: Any) -> Any:
    if isinstance(kind, dict):
        return _message(value, kind)
    if kind == "s":
        return bytes(value).decode()
    if kind == "b":
        return base64.b64encode(bytes(value)).decode()
    if kind == "raw":
        return bytes(value)
    if kind == "i":
        if wire != 0:
            raise _Malformed("integer not a varint")
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == "?":
        return bool(value)
    raise _Malformed(f"type {kind}")


def _empty(value: Any) -> bool:
    return value in ("", 0, False, None) or value == {} or value == []


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    keep: set[str] = set()
    for number, wire, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue  # a field this decoder does not carry (times, managedFields ...)
        name, kind, flags = spec
        if isinstance(kind, tuple):  # map<string, V>: repeated entries {1: key, 2: value}
            entry = {n: (w, v) for n, w, v in _fields(value)}
            key = bytes(entry.get(1, (2, b""))[1]).decode()
            w, v = entry.get(2, (2, b""))
            out.setdefault(name, {})[key] = _scalar(kind[1], w, v)
        elif "*" in flags:
            out.setdefault(name, []).append(_scalar(kind, wire, value))
        else:
            out[name] = _scalar(kind, wire, value)
        if "!" in flags:
            keep.add(name)
    return {k: v for k, v in out.items() if k in keep or not _empty(v)}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON object a protobuf body carries; 415 for kinds this module does not know."""
    if not body.startswith(MAGIC):
        raise ApiError(
            400, "BadRequest", "the body of the request could not be decoded: missing magic"
        )
    try:
        unknown = _message(body[len(MAGIC) :], _UNKNOWN)
        meta = unknown.get("typeMeta") or {}
        api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
        schema = KINDS.get((api_version, kind))
        if schema is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json, application/yaml (the simulator does not decode "
                f"{kind or 'this kind'} from {MEDIA_TYPE})",
            )
        obj = _message(unknown.get("raw", b""), schema)
    except (_Malformed, UnicodeDecodeError) as exc:
        raise ApiError(
            400, "BadRequest", f"the body of the request could not be decoded: {exc}"
        ) from None
    return {"apiVersion": api_version, "kind": kind, **obj}
