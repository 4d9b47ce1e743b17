"""A Kubernetes-compatible API server for the simulator.

One generic set of handlers serves every kind in ``resources.BUILTIN`` and every custom
resource defined by a CustomResourceDefinition (the bundled Kueue and JobSet CRDs are
applied at start-up). It speaks the REST API that client-go, kubectl and the official
Python client use: discovery, get/list/watch with resourceVersions, label and field
selectors, pagination, create/update/patch/delete with optimistic concurrency, the
status/eviction/binding subresources, server-side Table output for kubectl, and
``Status`` errors with the real reasons and wording.

The HTTP layer (``serve``) is thin: ``ApiServer.handle`` takes a parsed ``Request`` and
returns a ``Response`` or a ``WatchStream``, so handlers are testable without sockets.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import random
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import yaml

from krea_ops.errors import BadInput as KreaBadInput
from krea_ops.kube import times
from krea_ops.sim.apiserver import apply as ssa
from krea_ops.sim.apiserver import builtins, errors
from krea_ops.sim.apiserver.authz import ADMIN, ANONYMOUS, UserInfo
from krea_ops.sim.apiserver.errors import ApiError
from krea_ops.sim.apiserver.fault_switch import (
    CONFIGMAP_KEY,
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    FaultSwitch,
)
from krea_ops.sim.apiserver.patch import (
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)
from krea_ops.sim.apiserver.proto import codec, gojson
from krea_ops.sim.apiserver.resources import BUILTIN, GROUP_ORDER, REVIEW_KINDS, ResourceType
from krea_ops.sim.apiserver.selectors import (
    FIELD_SELECTORS,
    FieldSelector,
    LabelSelector,
    SelectorError,
    crd_field_selectors,
    label_selector_from_spec,
    parse_field_selector,
    parse_label_selector,
)
from krea_ops.sim.apiserver.store import AlreadyExists, Conflict, Entry, Gone, Store
from krea_ops.sim.apiserver.tables import TableError, to_table
from krea_ops.sim.apiserver.validation import (
    FieldError,
    apply_defaults,
    go_quote,
    load_crd_versions,
    prune,
    prune_with_report,
    validate_custom_resource,
    validate_lease,
    validate_object_meta,
)
from krea_ops.sim.common import podlogs

MAX_BODY = 3 * 1024 * 1024  # the real server's limit for a request body
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-krea-sim",
    "gitCommit": "krea-ops",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
POD_TOPOLOGY_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def token_volume_source() -> dict[str, Any]:
    """The ServiceAccount admission's projected volume (``TokenVolumeSource``): the bound
    token (``WarnOnlyBoundTokenExpirationSeconds``, 3607), the cluster's CA and the
    namespace, mode 0644."""
    return {
        "defaultMode": 0o644,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    }  # fmt: skip
PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


def wall_clock() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def rfc3339(moment: dt.datetime) -> str:
    return times.rfc3339(moment.timestamp())


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    user: str = "system:admin"
    # Warnings for the response's ``Warning`` headers (unknown fields under
    # fieldValidation=Warn, as the real server's warning recorder).
    warnings: list[str] = field(default_factory=list)
    user_info: UserInfo = ADMIN  # who sent it, once authenticated (sim/authz.py)

    @classmethod
    def build(
        cls, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Request:
        path, _, qs = target.partition("?")
        query = {k: v[-1] for k, v in parse_qs(qs, keep_blank_values=True).items()}
        return cls(
            method.upper(), path, query, {k.lower(): v for k, v in (headers or {}).items()}, body
        )


@dataclass
class Response:
    code: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    # The fault switch's dropped connection: the HTTP front closes the socket and sends
    # nothing, not even a status line.
    drop: bool = False

    @classmethod
    def json(cls, code: int, obj: Any) -> Response:
        return cls(code, json.dumps(obj, separators=(",", ":")).encode())

    @classmethod
    def error(cls, exc: ApiError) -> Response:
        """A Status error; like the real server's ``ErrorNegotiated``, a Status that
        suggests a retry period also says it in a ``Retry-After`` header."""
        resp = cls.json(exc.code, exc.status())
        retry = (exc.details or {}).get("retryAfterSeconds")
        if isinstance(retry, int) and retry > 0:
            resp.headers["Retry-After"] = str(retry)
        return resp


@dataclass
class WatchStream:
    """A streaming watch response: iterate ``events()`` for newline-delimited JSON."""

    events: Any  # Callable[[], Iterator[bytes]]
    content_type: str = "application/json"  # text/plain for a followed log


# ---------------------------------------------------------------------------------------
# Registry of kinds and discovery documents


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._storage: dict[str, ResourceType] = {}
        self._crd_keys: dict[str, list[tuple[str, str, str]]] = {}
        for rt in BUILTIN:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._by_gvr[(rt.group, rt.version, rt.plural)] = rt
        if not rt.is_custom or rt.version == rt.storage_version:
            self._storage[rt.key] = rt

    def add_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        types = []
        for v in load_crd_versions(crd):
            if not v.served:
                continue
            subresources = ["status"] if v.status_subresource else []
            if v.scale_subresource:
                subresources.append("scale")
            types.append(
                ResourceType(
                    group=v.group,
                    version=v.version,
                    kind=v.kind,
                    plural=v.plural,
                    namespaced=v.namespaced,
                    short_names=tuple(v.short_names),
                    categories=tuple(v.categories),
                    subresources=tuple(subresources),
                    singular=v.singular,
                    schema=v.schema
                    or {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    status_schema=v.status_subresource,
                    printer_columns=tuple(v.printer_columns),
                    storage_version=next(x.version for x in load_crd_versions(crd) if x.storage),
                    served_versions=tuple(x.version for x in load_crd_versions(crd) if x.served),
                    crd_name=crd["metadata"]["name"],
                    extra={"selectable_fields": _selectable_fields(crd, v.version)},
                )
            )
        with self._lock:
            self._remove_crd(crd["metadata"]["name"])
            for rt in types:
                self._add(rt)
            self._crd_keys[crd["metadata"]["name"]] = [
                (t.group, t.version, t.plural) for t in types
            ]
        return types

    def _remove_crd(self, name: str) -> None:
        for gvr in self._crd_keys.pop(name, []):
            rt = self._by_gvr.pop(gvr, None)
            if rt is not None and self._storage.get(rt.key) is rt:
                del self._storage[rt.key]

    def remove_crd(self, name: str) -> None:
        with self._lock:
            self._remove_crd(name)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def storage(self, key: str) -> ResourceType | None:
        return self._storage.get(key)

    def all_storage(self) -> list[ResourceType]:
        return list(self._storage.values())

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        for rt in self._storage.values():
            if rt.group == group and rt.kind == kind:
                return rt
        return None

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions, preferred (storage) version first."""
        out: dict[str, list[str]] = {}
        for (group, version, _), _rt in sorted(self._by_gvr.items()):
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        for group, versions in out.items():
            storage = next(
                (
                    rt.storage_version
                    for rt in self._storage.values()
                    if rt.group == group and rt.storage_version
                ),
                None,
            )
            if storage in versions:
                versions.remove(storage)
                versions.insert(0, storage)
            else:
                versions.sort(key=_version_priority)
        order = {g: i for i, g in enumerate(GROUP_ORDER)}
        return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))

    def resources(self, group: str, version: str) -> list[ResourceType]:
        return sorted(
            (rt for (g, v, _), rt in self._by_gvr.items() if g == group and v == version),
            key=lambda rt: rt.plural,
        )


def _selectable_fields(crd: dict[str, Any], version: str) -> tuple[str, ...]:
    """The ``selectableFields`` jsonPaths a CRD version declares (field selectors on them
    are served, as by the apiextensions apiserver since 1.31)."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version:
            return tuple(
                str(f["jsonPath"]) for f in v.get("selectableFields") or [] if f.get("jsonPath")
            )
    return ()


def _version_priority(version: str) -> tuple[int, int, int]:
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    rank = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    return (rank, -int(m.group(1)), -int(m.group(3) or 0))


def _resource_entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular_name,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    if rt.is_custom:
        entry["storageVersionHash"] = base64.b64encode(
            f"{rt.group}/{rt.storage_version}/{rt.kind}".encode()
        ).decode()[:11]
    return entry


def _subresource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    out = []
    for sub in rt.subresources:
        entry: dict[str, Any] = {
            "name": f"{rt.plural}/{sub}",
            "singularName": "",
            "namespaced": rt.namespaced,
        }
        if sub == "status":
            entry.update(kind=rt.kind, verbs=["get", "patch", "update"])
        elif sub == "eviction":
            entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
        elif sub == "binding":
            entry.update(kind="Binding", verbs=["create"])
        elif sub == "token":
            entry.update(
                group="authentication.k8s.io", version="v1", kind="TokenRequest", verbs=["create"]
            )
        elif sub == "scale":
            entry.update(
                group="autoscaling", version="v1", kind="Scale", verbs=["get", "patch", "update"]
            )
        elif sub == "log":
            entry.update(kind="Pod", verbs=["get"])
        out.append(entry)
    return out


# ---------------------------------------------------------------------------------------
# Helpers


# What the real server's negotiated serializers accept as a request body
# (k8s.io/apiserver pkg/endpoints/handlers/negotiation: the codec factory's media types;
# custom resources have no protobuf form).
BUILTIN_MEDIA_TYPES = ("application/json", "application/yaml", codec.MEDIA_TYPE)
CUSTOM_MEDIA_TYPES = ("application/json", "application/yaml")


def _unsupported_body(accepted: Sequence[str]) -> ApiError:
    # k8s.io/apiserver pkg/endpoints/handlers/negotiation/errors.go, errUnsupportedMediaType
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def _check_custom_body(rt: ResourceType, body: Any, req: Request | None) -> None:
    """A client's custom resource must say its kind and apiVersion: it is decoded into an
    unstructured object, which takes neither from the URL as a built-in type's decoding
    does (k8s.io/apimachinery runtime/serializer/json Serializer.Decode: "Object 'Kind'
    is missing", which k8s.io/apiserver endpoints/handlers/rest.go transformDecodeError
    words; then create.go and update.go's AcceptsGroupVersion for an empty apiVersion)."""
    if req is None or not rt.is_custom or not isinstance(body, dict):
        return
    if not body.get("kind"):
        raw = req.body.decode("utf-8", "replace")
        # rest.go summarizeData(body, 30): JSON as text, anything else (YAML) in hex
        head = req.body[:30]
        summary = head.decode("utf-8", "replace") if head[:1] == b"{" else head.hex()
        summary += " ..." if len(req.body) > 30 else ""
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {rt.kind}): "
            f"Object 'Kind' is missing in '{raw}' ({summary})"
        )
    if not body.get("apiVersion"):
        raise errors.bad_request(
            "the API version in the data () does not match the expected API version "
            f"({rt.api_version})"
        )


def _parse_body(req: Request, rt: ResourceType | None = None) -> Any:
    """The request body as JSON data, from JSON, YAML or (built-in kinds) protobuf.
    With ``rt`` (create and update), a media type the kind is not served in is a 415."""
    if len(req.body) > MAX_BODY:
        raise ApiError(
            413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}"
        )
    ctype = req.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if rt is not None:
        accepted = CUSTOM_MEDIA_TYPES if rt.is_custom else BUILTIN_MEDIA_TYPES
        if ctype not in accepted:
            raise _unsupported_body(accepted)
    if not req.body.strip():
        raise errors.bad_request("the request body is empty")
    if ctype == codec.MEDIA_TYPE:
        try:
            return codec.decode(req.body)
        except codec.ProtoError as exc:
            if not str(exc).startswith("no kind "):
                raise errors.bad_request(
                    f"the body of the request could not be decoded: {exc}"
                ) from None
        # the access-control kinds (rbac, authentication, authorization), which the
        # generated schemas do not cover: decoded by their field numbers
        from krea_ops.sim.apiserver.protobody import decode

        return decode(req.body)
    try:
        if ctype in ("application/yaml", "application/apply-patch+yaml"):
            return yaml.safe_load(req.body)
        return json.loads(req.body, object_pairs_hook=gojson.JsonObject.from_pairs)
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise errors.bad_request(f"the body of the request could not be decoded: {first}") from None


def _accepts_only_protobuf(req: Request) -> bool:
    """An Accept header that names protobuf and nothing this server writes JSON for
    (kubectl's ``application/vnd.kubernetes.protobuf,application/json`` gets JSON)."""
    kinds = [
        part.split(";")[0].strip().lower()
        for part in req.headers.get("accept", "").split(",")
        if part.strip()
    ]
    if codec.MEDIA_TYPE not in kinds:
        return False
    return not any(k in ("application/json", "application/*", "*/*") for k in kinds)


def _warning(text: str) -> str:
    """One ``Warning`` header value as the real server writes it: code 299, no agent,
    the text quoted (k8s.io/apiserver pkg/endpoints/filters/warning.go)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def _as_protobuf(resp: Response) -> Response:
    """A JSON answer re-encoded for a client that accepts only protobuf; a kind with no
    protobuf form (custom resources) is 406 as upstream's errNotAcceptable."""
    try:
        obj = json.loads(resp.body)
        body = codec.encode(obj) if isinstance(obj, dict) else None
    except (ValueError, codec.ProtoError):
        body = None
    if body is None:
        err = ApiError(
            406,
            "NotAcceptable",
            "only the following media types are accepted: "
            + ", ".join(CUSTOM_MEDIA_TYPES),
        )
        return Response.error(err)
    return Response(resp.code, body, codec.MEDIA_TYPE, resp.headers)


def _too_large_resource_version(asked: int, current: int) -> ApiError:
    """A list at a resourceVersion the store has not reached: the watch cache's answer
    (k8s.io/apiserver pkg/storage/errors.go NewTooLargeResourceVersionError, through
    apierrors.NewTimeoutError; the cacher retries after resourceVersionTooHighRetrySeconds,
    1). The real cache first waits up to 3 s for the version to arrive; the simulator's
    store is always current, so a version past it will not come."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {asked}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def _int_param(query: dict[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"invalid value for {name}: {raw!r}") from None


def _rv_of(obj: dict[str, Any]) -> int | None:
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise errors.bad_request(f"invalid resourceVersion {raw!r}") from None


def _encode_continue(rv: int, last: tuple[str, str]) -> str:
    """As storage.EncodeContinue: the JSON token in unpadded URL-safe base64."""
    raw = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{last[0]}/{last[1]}"},
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


_B64URL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _go_char(c: int) -> str:
    """How encoding/json's scanner quotes a byte in its errors (quoteChar)."""
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    if 0x20 <= c < 0x7F:
        return "'" + chr(c) + "'"
    named = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r"}
    if c in named:
        return "'\\" + named[c] + "'"
    if c < 0x80:
        return "'\\x" + format(c, "02x") + "'"
    return "'\\u" + format(c, "04x") + "'"


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    """storage.DecodeContinue, with its errors as ValidateListOptions words them
    (``invalid continue token: ...``; the JSON errors as encoding/json's)."""

    def invalid(detail: str) -> ApiError:
        return errors.bad_request(f"invalid continue token: {detail}")

    generic = "continue key is not valid"
    bad = next((i for i, ch in enumerate(token) if ch not in _B64URL), None)
    if bad is None and len(token) % 4 == 1:
        bad = len(token) - 1
    if bad is not None:
        raise invalid(f"{generic}: illegal base64 data at input byte {bad}")
    data = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    try:
        parsed = json.loads(data)
    except ValueError:
        stripped = data.lstrip(b" \t\r\n")
        if not stripped:
            raise invalid(f"{generic}: unexpected end of JSON input") from None
        raise invalid(
            f"{generic}: invalid character {_go_char(stripped[0])} looking for beginning of value"
        ) from None
    if not isinstance(parsed, dict) or parsed.get("v") != "meta.k8s.io/v1":
        version = parsed.get("v", "") if isinstance(parsed, dict) else ""
        raise invalid(f"{generic}: server does not recognize this encoded version {version}")
    rv, start = parsed.get("rv"), parsed.get("start")
    if not isinstance(rv, int) or isinstance(rv, bool) or rv == 0:
        raise invalid(
            f"{generic}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    if not isinstance(start, str) or not start:
        raise invalid(f"{generic}: encoded start key empty (version meta.k8s.io/v1)")
    ns, _, name = start.partition("/")
    return rv, (ns, name)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _pod_ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _at_path(obj: dict[str, Any], path: str) -> Any:
    """The value at a simple JSON path (``.spec.replicas``), or None."""
    value: Any = obj
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = [p for p in path.split(".") if p]
    target = obj
    for part in parts[:-1]:
        nxt = target.get(part)
        if not isinstance(nxt, dict):
            nxt = target[part] = {}
        target = nxt
    target[parts[-1]] = value


def _field_manager(req: Request | None) -> str:
    """managerOrUserAgent (fieldmanager): ``?fieldManager=``, else the User-Agent up to
    its first ``/`` (the official Python client is ``OpenAPI-Generator``)."""
    if req is None:
        return "kube-apiserver"
    name = req.query.get("fieldManager")
    if name:
        return name
    return req.headers.get("user-agent", "").split("/")[0][:128]


def _same_but_version(new: dict[str, Any], stored: dict[str, Any]) -> bool:
    """``new`` (an update's result, without a resourceVersion) is the stored object: the
    storage layer's GuaranteedUpdate then writes nothing and the version stays."""
    if new.keys() != stored.keys():
        return False
    for key, value in stored.items():
        if key == "metadata":
            meta = new.get("metadata") or {}
            rest = {k: v for k, v in value.items() if k != "resourceVersion"}
            if {k: v for k, v in meta.items() if k != "resourceVersion"} != rest:
                return False
        elif new[key] != value:
            return False
    return True


def _copy_keeping_managed(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` that shares its ``metadata.managedFields`` (many small dicts,
    never changed in place: an update builds a new list), which would otherwise cost more
    to copy than the rest of a pod."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return copy.deepcopy(obj)
    managed = meta["managedFields"]
    rest = {k: v for k, v in meta.items() if k != "managedFields"}
    out = copy.deepcopy({**obj, "metadata": rest})
    out["metadata"]["managedFields"] = managed
    return out


def _patch_refused(exc: PatchError) -> ApiError:
    """A patch that cannot be applied. A malformed one is a 400 with the library's text; a
    JSON patch whose operations do not apply (a failed ``test``, a missing path) is
    ``NewGenericServerResponse(422, ...)`` in handlers/patch.go (applyJSPatch), whose
    message is the generic one: the library's text reaches no client."""
    if exc.reason == "Invalid":
        return ApiError(
            422, "Invalid", "the server rejected our request due to an error in our request"
        )
    return ApiError(400, exc.reason, str(exc))


def _mentions_managed_fields(kind: str, patch: Any) -> bool:
    """Whether a patch writes ``metadata.managedFields`` (else the patch is applied to the
    object without them: the stored entries are the base of the new ones)."""
    if kind == "json":
        return any(
            isinstance(op, dict)
            and any(str(op.get(k, "")).startswith("/metadata") for k in ("path", "from"))
            for op in (patch if isinstance(patch, list) else [])
        )
    meta = patch.get("metadata") if isinstance(patch, dict) else None
    return isinstance(meta, dict) and "managedFields" in meta


def _set_managed(obj: dict[str, Any], managed: list[dict[str, Any]] | None) -> None:
    meta = _meta(obj)
    if managed:
        meta["managedFields"] = managed
    else:
        meta.pop("managedFields", None)


def _patch_options_invalid(field_path: str, detail: str, kind: str = "Required") -> ApiError:
    """ValidatePatchOptions' error: ``PatchOptions.meta.k8s.io "" is invalid: ...``."""
    reason = {"Required": "FieldValueRequired", "Forbidden": "FieldValueForbidden"}[kind]
    message = f"{field_path}: {kind}{' value' if kind == 'Required' else ''}: {detail}"
    return ApiError(
        422,
        "Invalid",
        f'PatchOptions.meta.k8s.io "" is invalid: {message}',
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [{"reason": reason, "message": message.split(": ", 1)[1],
                        "field": field_path}],
        },
    )


# What a binding or an eviction that was carried out answers (a Status, not the object).
_CREATED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _budget_refusal(pdb_name: str, why: str, retry_after_s: int = 0) -> ApiError:
    """eviction.go's 429: a Status with a DisruptionBudget cause naming the budget (and,
    while the budget's status is stale, a 10 s retry hint)."""
    details: dict[str, Any] = {
        "causes": [
            {"reason": "DisruptionBudget", "message": f"The disruption budget {pdb_name} {why}"}
        ]
    }
    if retry_after_s:
        details["retryAfterSeconds"] = retry_after_s
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details,
    )


def _int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        import math

        pct = int(text[:-1])
        raw = pct * total / 100
        return math.ceil(raw) if round_up else math.floor(raw)
    return int(text)


# ---------------------------------------------------------------------------------------


class ApiServer:
    """The resource server. ``handle`` is the whole API; ``serve`` puts it on a socket."""

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        crds: list[dict[str, Any]] | None = None,
        token: str | None = None,
        history: int = 100_000,
        bookmark_interval_s: float = 60.0,
        clock: Any = None,
        users: Mapping[str, tuple[str, Sequence[str]]] | None = None,
        policies: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """``users`` (token -> user, groups), a ``tokens.csv`` token file in the state
        directory and ``policies`` (ABAC) add credentials besides the admin ``token``;
        see ``krea_ops.sim.apiserver.authz``."""
        # Every timestamp the server writes comes from clock() (a UTC datetime): the wall
        # clock, as on a real server (the simulated world's speed never changes it), or a
        # fixed one where a test needs the same bytes every run.
        self.clock = clock or wall_clock
        db = None if state_dir is None else Path(state_dir) / "objects.db"
        static: dict[str, tuple[str, Sequence[str]] | UserInfo] = dict(users or {})
        if db is not None and (db.parent / "tokens.csv").exists():
            from krea_ops.sim.apiserver.authz import read_token_file

            static.update(read_token_file(db.parent / "tokens.csv"))
        self.store = Store(db, history=history)
        self.registry = Registry()
        self.token = token
        from krea_ops.sim.apiserver.authz import Authorizer
        from krea_ops.sim.apiserver.rbac import AccessControl
        from krea_ops.sim.apiserver.tokens import TokenSigner

        self.authorizer = Authorizer(static, policies or [])
        self.access = AccessControl(
            token,
            self.authorizer,
            TokenSigner(None if db is None else db.parent / "pki" / "sa.key", self.clock),
            self._lookup,
            lambda key, ns: [e.obj for e in self.store.list(key, ns)[0]],
            self.clock,
        )
        self.bookmark_interval_s = bookmark_interval_s
        self._closing = threading.Event()
        self._rng = random.Random()
        # Injected refusals, latency, hang-ups and watch ends (krea_ops.sim.apiserver.fault_switch).
        self.faults = FaultSwitch()
        from krea_ops.sim.standins.kcm import ControllerManager

        # Container logs: the world's actors write them (krea_ops.sim.common.podlogs);
        # pods/log reads them.
        self.logs = podlogs.for_state(state_dir)
        self._state_dir = state_dir
        self.controllers = ControllerManager(self)
        self._bootstrap(crds)
        self._load_fault_configmap()
        self.controllers.start()

    # -- start-up -----------------------------------------------------------------------

    def _bootstrap(self, crds: list[dict[str, Any]] | None) -> None:
        crd_key = "apiextensions.k8s.io/customresourcedefinitions"
        for entry in self.store.list(crd_key)[0]:
            self.registry.add_crd(entry.obj)
        for ns in SYSTEM_NAMESPACES:
            if self.store.get("/namespaces", "", ns) is None:
                self._create_internal(
                    "",
                    "v1",
                    "namespaces",
                    "",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                )
        from krea_ops.sim.apiserver.rbac import BOOTSTRAP_BINDINGS, BOOTSTRAP_ROLES

        for policy in (*BOOTSTRAP_ROLES, *BOOTSTRAP_BINDINGS):
            plural = policy["kind"].lower() + "s"
            key = f"rbac.authorization.k8s.io/{plural}"
            if self.store.get(key, "", policy["metadata"]["name"]) is None:
                self._create_internal(
                    "rbac.authorization.k8s.io", "v1", plural, "", copy.deepcopy(policy)
                )
        for crd in crds or []:
            name = crd["metadata"]["name"]
            existing = self.store.get(crd_key, "", name)
            if existing is None:
                self._create_internal(
                    "apiextensions.k8s.io",
                    "v1",
                    "customresourcedefinitions",
                    "",
                    copy.deepcopy(crd),
                )

    def _create_internal(
        self, group: str, version: str, plural: str, ns: str, obj: dict[str, Any]
    ) -> dict[str, Any]:
        rt = self.registry.lookup(group, version, plural)
        assert rt is not None
        return self._create(rt, ns, obj, dry_run=False)

    def close(self) -> None:
        self._closing.set()
        self.controllers.stop()
        self.store.wake_watchers()
        self.logs.wake()
        podlogs.forget(self._state_dir)
        self.store.close()

    # -- entry point ----------------------------------------------------------------------

    def handle(self, req: Request) -> Response | WatchStream:
        result: Response | WatchStream
        try:
            self._authenticate(req)
            fault = self._fault(req) if self.faults.active else None
            if fault is not None and (fault.drop or fault.status):
                result = self._fault_answer(req, fault)
            else:
                result = self._route(req)
                if fault is not None and isinstance(result, WatchStream):
                    result = _closing_after(result, fault.close_watch_after)
        except ApiError as exc:
            result = Response.error(exc)
        except (TableError, SelectorError) as exc:
            result = Response.json(400, errors.bad_request(str(exc)).status())
        except Exception as exc:  # a simulator bug: answer like a real server would
            traceback.print_exc(file=sys.stderr)
            err = ApiError(500, "InternalError", f"Internal error occurred: {exc!r}")
            result = Response.json(500, err.status())
        if isinstance(result, Response):
            if req.warnings:
                result.headers["Warning"] = ", ".join(_warning(w) for w in req.warnings)
            if _accepts_only_protobuf(req) and result.content_type == "application/json":
                result = _as_protobuf(result)
        return result

    # -- the fault switch (krea_ops.sim.apiserver.fault_switch) ----------------------------

    def _fault(self, req: Request) -> Any:
        from krea_ops.sim.apiserver.authz import attributes

        attrs = attributes(req.method, req.path, req.query)
        if not attrs.resource_request:
            return None
        fault = self.faults.decide(
            attrs.verb, attrs.group, attrs.resource, attrs.subresource, attrs.namespace,
            attrs.name,
        )  # fmt: skip
        if fault is not None and fault.latency_s:
            self._closing.wait(fault.latency_s)
        return fault

    def _fault_answer(self, req: Request, fault: Any) -> Response:
        """The injected answer, worded as the real server words it (sim/faults.py)."""
        from krea_ops.sim.apiserver.authz import attributes
        from krea_ops.sim.apiserver.fault_switch import (
            INTERNAL_DETAIL,
            TOO_MANY_REQUESTS,
            UNAVAILABLE,
        )

        if fault.drop:
            return Response(0, b"", drop=True)
        rule = fault.rule
        attrs = attributes(req.method, req.path, req.query)
        if rule.status == 409:
            raise errors.conflict(attrs.group, attrs.resource, attrs.name)
        if rule.status == 429:
            retry = rule.retry_after_s if rule.retry_after_s is not None else 1
            if rule.body == "status":
                raise ApiError(
                    429,
                    "TooManyRequests",
                    rule.message or TOO_MANY_REQUESTS,
                    {"retryAfterSeconds": retry} if retry else None,
                )
            # max-in-flight / priority-and-fairness: http.Error, plain text
            return Response(
                429,
                (rule.message or TOO_MANY_REQUESTS).encode() + b"\n",
                "text/plain; charset=utf-8",
                {"Retry-After": str(retry), "X-Content-Type-Options": "nosniff"},
            )
        if rule.status == 500:
            detail = rule.message or INTERNAL_DETAIL
            raise ApiError(
                500,
                "InternalError",
                f"Internal error occurred: {detail}",
                {"causes": [{"message": detail}]},
            )
        retry_details = {"retryAfterSeconds": rule.retry_after_s} if rule.retry_after_s else None
        raise ApiError(503, "ServiceUnavailable", rule.message or UNAVAILABLE, retry_details)

    def _load_fault_configmap(self) -> None:
        entry = self.store.get("/configmaps", CONFIGMAP_NAMESPACE, CONFIGMAP_NAME)
        if entry is not None:
            self._fault_configmap(entry.obj, deleted=False)

    def _fault_configmap(self, obj: dict[str, Any], deleted: bool) -> None:
        if deleted or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self.faults.clear("configmap")
            return
        text = (obj.get("data") or {}).get(CONFIGMAP_KEY) or ""
        where = f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} key {CONFIGMAP_KEY}"
        try:
            self.faults.load(text, where, "configmap")
        except KreaBadInput:  # stored before this check existed: no rules from it
            self.faults.clear("configmap")

    @staticmethod
    def _is_fault_configmap(rt: ResourceType, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return (
            rt.kind == "ConfigMap"
            and not rt.group
            and meta.get("namespace") == CONFIGMAP_NAMESPACE
            and meta.get("name") == CONFIGMAP_NAME
        )

    def _authenticate(self, req: Request) -> None:
        """Who sent the request (401 for credentials nobody knows; no credentials at all is
        ``system:anonymous``) and whether they may (403)."""
        if self.token is None:
            return
        if req.path in ("/healthz", "/readyz", "/livez", "/version"):
            return
        from krea_ops.sim.apiserver.authz import attributes, forbidden

        auth = req.headers.get("authorization", "")
        user = self.access.authenticate(auth[7:].strip() if auth[:7].lower() == "bearer " else "")
        if user is None and not auth:
            user = ANONYMOUS  # --anonymous-auth (on by default): no credentials at all
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        user = self.access.impersonate(user, req.headers)
        req.user, req.user_info = user.name, user
        attrs = attributes(req.method, req.path, req.query)
        if not self.access.authorize(user, attrs)[0]:
            raise forbidden(user.name, attrs)

    def _route(self, req: Request) -> Response | WatchStream:
        parts = [p for p in req.path.split("/") if p]
        if not parts:
            return Response.json(
                200, {"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz"]}
            )
        if parts[0] in ("healthz", "readyz", "livez"):
            return Response(200, b"ok", "text/plain")
        if parts == ["version"]:
            return Response.json(200, SERVER_VERSION)
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi_v3(parts[2:])
        if parts[0] == "api":
            if len(parts) == 1:
                return Response.json(
                    200,
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
                        ],
                    },
                )
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return Response.json(200, self._group_list())
            if len(parts) == 2:
                return Response.json(200, self._group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            if req.method != "GET":
                raise errors.method_not_allowed()
            return Response.json(200, self._resource_list(group, version))
        return self._resource_request(req, group, version, rest)

    # -- discovery --------------------------------------------------------------------

    def _group(self, group: str) -> dict[str, Any]:
        versions = self.registry.group_versions().get(group)
        if not versions or not group:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": gvs,
            "preferredVersion": gvs[0],
        }

    def _group_list(self) -> dict[str, Any]:
        groups = []
        for group in self.registry.group_versions():
            if group:
                g = self._group(group)
                g.pop("kind")
                g.pop("apiVersion")
                groups.append(g)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        types = self.registry.resources(group, version)
        if not types:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resources = []
        for rt in types:
            resources.append(_resource_entry(rt))
            resources.extend(_subresource_entries(rt))
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    # -- OpenAPI v3 (what kubectl reads to pick patch types and server-side validation) --

    def _openapi_v3(self, rest: list[str]) -> Response:
        gvs = [(g, v) for g, versions in self.registry.group_versions().items() for v in versions]
        if not rest:
            paths = {}
            for group, version in gvs:
                key = f"apis/{group}/{version}" if group else f"api/{version}"
                paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={self.store.rv}"}
            return Response.json(200, {"paths": paths})
        if rest[0] == "api" and len(rest) == 2:
            group, version = "", rest[1]
        elif rest[0] == "apis" and len(rest) == 3:
            group, version = rest[1], rest[2]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        types = self.registry.resources(group, version)
        if not types:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return Response.json(200, _openapi_document(group, version, types))

    # -- resource routing -------------------------------------------------------------

    def _resource_request(
        self, req: Request, group: str, version: str, rest: list[str]
    ) -> Response | WatchStream:
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        ns = ""
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and (nrt := self.registry.lookup(group, version, rest[2])) is not None
            and nrt.namespaced
        ):
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rt = self.registry.lookup(group, version, rest[0])
        if rt is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3 or (sub and sub not in rt.subresources):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rt.namespaced and name and not ns:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        method = req.method
        if rt.kind in REVIEW_KINDS and not rt.is_custom:
            if method != "POST" or name:
                raise errors.method_not_allowed()
            review = self.access.review(rt.kind, rt.api_version, _parse_body(req), req.user_info)
            return Response.json(201, review)
        if sub == "token" and rt.kind == "ServiceAccount":
            if method != "POST":
                raise errors.method_not_allowed()
            return Response.json(201, self.access.token_request(ns, name, _parse_body(req)))
        if not name:
            if method == "GET":
                if watch_path or req.query.get("watch") in ("1", "true", "True"):
                    return self._watch(req, rt, ns)
                return self._list(req, rt, ns)
            if method == "POST":
                if ns and self.store.get("/namespaces", "", ns) is None:
                    raise errors.not_found("", "namespaces", ns)
                body = _parse_body(req, rt)
                created = self._create(rt, ns, body, dry_run=self._dry_run(req), req=req)
                return self._respond(req, rt, 201, created)
            if method == "DELETE":
                return self._delete_collection(req, rt, ns)
            raise errors.method_not_allowed()
        if watch_path:
            req.query["fieldSelector"] = f"metadata.name={name}"
            return self._watch(req, rt, ns)
        if sub == "eviction":
            if method != "POST":
                raise errors.method_not_allowed()
            return self._evict(req, rt, ns, name)
        if sub == "binding":
            if method != "POST":
                raise errors.method_not_allowed()
            return self._bind(req, rt, ns, name)
        if sub == "scale":
            return self._scale(req, rt, ns, name)
        if sub == "log":
            return self._pod_log(req, rt, ns, name)
        if method == "GET":
            entry = self._get_entry(rt, ns, name)
            return self._respond(req, rt, 200, entry.obj)
        if method == "PUT":
            body = _parse_body(req, rt)
            updated = self._update(
                rt, ns, name, body, status=sub == "status", dry_run=self._dry_run(req), req=req
            )
            return self._respond(req, rt, 200, updated)
        if method == "PATCH":
            patched, was_created = self._patch(req, rt, ns, name, status=sub == "status")
            return self._respond(req, rt, 201 if was_created else 200, patched)
        if method == "DELETE":
            if sub:
                raise errors.method_not_allowed()
            return self._delete_request(req, rt, ns, name)
        raise errors.method_not_allowed()

    @staticmethod
    def _dry_run(req: Request) -> bool:
        value = req.query.get("dryRun")
        if value in (None, ""):
            return False
        if value != "All":
            raise errors.bad_request(f"Invalid dry run value: {value}; supported: All")
        return True

    def _get_entry(self, rt: ResourceType, ns: str, name: str) -> Entry:
        entry = self.store.get(rt.key, ns, name)
        if entry is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return entry

    # -- output -----------------------------------------------------------------------

    def _as_version(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        if obj.get("apiVersion") != rt.api_version:
            obj = dict(obj)
            obj["apiVersion"] = rt.api_version
        return obj

    def _wants_table(self, req: Request) -> bool:
        return "as=Table" in req.headers.get("accept", "")

    def _table(
        self,
        req: Request,
        rt: ResourceType,
        objects: list[dict[str, Any]],
        list_meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        include = req.query.get("includeObject", "Metadata")
        return to_table(
            [self._as_version(rt, o) for o in objects],
            group=rt.group,
            kind=rt.kind,
            printer_columns=list(rt.printer_columns) or None,
            include_object=include,
            list_meta=list_meta,
            now=self.clock(),
        )

    def _respond(self, req: Request, rt: ResourceType, code: int, obj: dict[str, Any]) -> Response:
        if self._wants_table(req):
            return Response.json(code, self._table(req, rt, [obj]))
        return Response.json(code, self._as_version(rt, obj))

    # -- list -------------------------------------------------------------------------

    def _selectors(self, req: Request, rt: ResourceType) -> tuple[LabelSelector, FieldSelector]:
        supported: Any = FIELD_SELECTORS.get((rt.group, rt.kind))
        if supported is None:
            supported = crd_field_selectors(
                rt.group,
                rt.kind,
                namespaced=rt.namespaced,
                selectable_fields=rt.extra.get("selectable_fields", ()),
            )
        try:
            labels = parse_label_selector(req.query.get("labelSelector", ""))
            fields = parse_field_selector(req.query.get("fieldSelector", ""), supported)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        return labels, fields

    def _matching(
        self,
        rt: ResourceType,
        ns: str,
        labels: LabelSelector,
        fields: FieldSelector,
        after: tuple[str, str] | None = None,
    ) -> tuple[list[Entry], int]:
        name = fields.exact("metadata.name")
        if name is not None and ns:
            entry = self.store.get(rt.key, ns, name)
            if entry is not None and after is not None and (ns, name) <= after:
                entry = None
            entries, rv = ([entry] if entry else []), self.store.rv
        else:
            entries, rv = self.store.list(rt.key, ns or None, after=after)
        if labels.empty and fields.empty:
            return entries, rv
        return [
            e
            for e in entries
            if labels.matches((e.obj.get("metadata") or {}).get("labels")) and fields.matches(e.obj)
        ], rv

    def _list(self, req: Request, rt: ResourceType, ns: str) -> Response:
        labels, fields = self._selectors(req, rt)
        limit = _int_param(req.query, "limit")
        token = req.query.get("continue")
        start = token_rv = None
        if token:
            token_rv, start = _decode_continue(token)
        entries, rv = self._matching(rt, ns, labels, fields, after=start)
        asked = req.query.get("resourceVersion")
        if not token and asked and asked.isdigit() and int(asked) > rv:
            raise _too_large_resource_version(int(asked), rv)
        list_meta: dict[str, Any] = {"resourceVersion": str(token_rv or rv)}
        if limit and limit > 0 and len(entries) > limit:
            remaining = len(entries) - limit
            entries = entries[:limit]
            list_meta["continue"] = _encode_continue(
                int(list_meta["resourceVersion"]), _key_of(entries[-1].obj)
            )
            list_meta["remainingItemCount"] = remaining
        if self._wants_table(req):
            return Response.json(200, self._table(req, rt, [e.obj for e in entries], list_meta))
        if rt.is_custom and rt.version != rt.storage_version:
            items = ",".join(
                json.dumps(self._as_version(rt, e.obj), separators=(",", ":")) for e in entries
            )
        else:
            items = ",".join(e.text for e in entries)
        head = json.dumps(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": list_meta},
            separators=(",", ":"),
        )
        return Response(200, (head[:-1] + ',"items":[' + items + "]}").encode())

    # -- create -----------------------------------------------------------------------

    def _check_type(self, rt: ResourceType, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if kind is not None and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        if api_version is not None and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rt.api_version})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        return obj

    def _service_account_admission(self, ns: str, pod: dict[str, Any]) -> None:
        """The ServiceAccount admission plugin on a pod being created
        (plugin/pkg/admission/serviceaccount): ``serviceAccountName`` defaults to
        ``default``, and unless the pod (or else its ServiceAccount) says
        ``automountServiceAccountToken: false`` a projected volume
        ``kube-api-access-<5 random>`` (the bound token, ``kube-root-ca.crt``'s ``ca.crt``
        and the namespace) is mounted read-only at the token path in every container that
        mounts nothing there. A mirror pod is left alone. Not modelled: the refusal of a
        pod whose ServiceAccount does not exist (nothing here makes the ``default`` ones)."""
        if MIRROR_POD_ANNOTATION in (_meta(pod).get("annotations") or {}):
            return
        spec = pod.setdefault("spec", {})
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = account
        spec.setdefault("serviceAccount", account)  # the deprecated alias, kept in step
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            found = self.store.get("/serviceaccounts", ns, account)
            said = found.obj.get("automountServiceAccountToken") if found else None
            automount = said is not False
        if not automount:
            return
        volumes = spec.setdefault("volumes", [])
        name = next(
            (str(v.get("name")) for v in volumes
             if isinstance(v, dict) and str(v.get("name", "")).startswith("kube-api-access-")),
            "",
        )  # fmt: skip
        has_volume = bool(name)
        name = name or "kube-api-access-" + "".join(
            self._rng.choice(GENERATE_ALPHABET) for _ in range(5)
        )
        mount = {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}
        needed = False
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                mounts = container.setdefault("volumeMounts", [])
                if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                    mounts.append(dict(mount))
                    needed = True
        if needed and not has_volume:
            volumes.append({"name": name, "projected": token_volume_source()})

    def _lookup(self, key: str, ns: str, name: str) -> dict[str, Any] | None:
        entry = self.store.get(key, ns, name)
        return entry.obj if entry else None

    def _prepare(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Defaulting (and pruning for custom resources)."""
        if rt.is_custom:
            assert rt.schema is not None
            obj = prune(obj, rt.schema)
            obj = apply_defaults(obj, rt.schema)
        else:
            obj = builtins.apply_defaults(rt.group, rt.kind, obj, self._lookup)
        return obj

    def _validate(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        meta = _meta(obj)
        problems: list[FieldError] = validate_object_meta(meta, rt.name_rule, rt.namespaced)
        if rt.is_custom:
            assert rt.schema is not None
            problems += validate_custom_resource(obj, rt.schema, old)
        else:
            problems += builtins.validate(rt.group, rt.kind, obj)
            if rt.group == "coordination.k8s.io" and rt.kind == "Lease":
                problems += validate_lease(obj)
            if self._is_fault_configmap(rt, obj):
                # like a validating webhook: a switch that cannot be read is refused
                from krea_ops.sim.apiserver.fault_switch import parse_text

                text = (obj.get("data") or {}).get(CONFIGMAP_KEY) or ""
                try:
                    parse_text(text, "fault rules")
                except KreaBadInput as exc:
                    problems.append(
                        FieldError("FieldValueInvalid", f"data[{CONFIGMAP_KEY}]", str(exc))
                    )
        if problems:
            raise errors.invalid(rt.group, rt.kind, meta.get("name") or "", problems)
        if rt.group == "jobset.x-k8s.io" and rt.kind == "JobSet":
            self._jobset_webhook(rt, obj)

    @staticmethod
    def _jobset_webhook(rt: ResourceType, obj: dict[str, Any]) -> None:
        """What JobSet's validating webhook (``vjobset.kb.io``) refuses beyond the CRD's
        schema, as far as it matters here: the ``RestartJob`` actions while the controller's
        alpha feature gate ``RestartJob`` is off, as it is by default
        (pkg/webhooks/jobset_webhook.go; the API server prefixes the webhook's answer)."""
        rules = ((obj.get("spec") or {}).get("failurePolicy") or {}).get("rules") or ()
        gated = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
        if not any(isinstance(r, dict) and r.get("action") in gated for r in rules):
            return
        message = (
            "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not "
            "allowed when RestartJob feature gate is disabled"
        )
        cause = FieldError("InternalError", "<nil>", f"Internal error: {message}")
        denied = errors.invalid(rt.group, rt.kind, _meta(obj).get("name") or "", [cause])
        denied.message = f'admission webhook "vjobset.kb.io" denied the request: {denied.message}'
        raise denied

    def _strict_fields(
        self, req: Request | None, rt: ResourceType, obj: dict[str, Any]
    ) -> dict[str, Any]:
        """Read the body as the real server does (k8s.io/apiserver
        pkg/endpoints/handlers/create.go): a built-in kind through its Go struct (wrong
        types are a 400, unknown fields are dropped), and ``fieldValidation`` says what
        an unknown or duplicate field is: ``Strict`` (kubectl's) an error, ``Warn`` (the
        default) a warning, ``Ignore`` nothing."""
        if req is None:
            return obj  # the simulator's own writes
        directive = req.query.get("fieldValidation") or "Warn"
        if directive not in ("Ignore", "Warn", "Strict"):
            # k8s.io/apiserver pkg/endpoints/handlers/rest.go, validation of the options
            raise errors.bad_request(
                f"fieldValidation: Unsupported value: {go_quote(directive)}: supported "
                'values: "Ignore", "Strict", "Warn"'
            )

        def cannot_handle(why: str) -> ApiError:
            # rest.go, transformDecodeError
            return errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {why}'
            )

        problems: list[str] = []
        message = None if rt.is_custom else gojson.message_for(rt.api_version, rt.kind)
        if rt.is_custom:
            assert rt.schema is not None
            _, unknown = prune_with_report(obj, rt.schema)
            problems = [f"unknown field {go_quote(f)}" for f in unknown]
        elif message is not None:
            try:
                decoded = gojson.decode(obj, message)
            except gojson.GoDecodeError as exc:
                raise cannot_handle(str(exc)) from None
            obj, problems = decoded.obj, decoded.strict
        if problems and directive == "Strict":
            raise cannot_handle("strict decoding error: " + ", ".join(problems))
        if directive == "Warn":
            req.warnings.extend(problems)
        return obj

    def _create(
        self,
        rt: ResourceType,
        ns: str,
        body: Any,
        *,
        dry_run: bool,
        req: Request | None = None,
        managed: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """``managed``: the managedFields an apply computed (else an Update is recorded)."""
        _check_custom_body(rt, body, req)
        obj = self._check_type(rt, body)
        obj = self._strict_fields(req, rt, obj)
        meta = _meta(obj)
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise errors.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            meta["namespace"] = ns
            ns_entry = self.store.get("/namespaces", "", ns)
            if ns_entry is not None and (ns_entry.obj.get("metadata") or {}).get(
                "deletionTimestamp"
            ):
                raise errors.forbidden(
                    rt.group,
                    rt.plural,
                    meta.get("name") or "",
                    f"unable to create new content in namespace {ns} "
                    "because it is being terminated",
                )
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = str(meta["generateName"]) + "".join(
                self._rng.choice(GENERATE_ALPHABET) for _ in range(5)
            )
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._stamp()
        meta["generation"] = 1
        if rt.is_custom and rt.status_schema:
            obj.pop("status", None)
        obj = self._prepare(rt, obj)
        if rt.group == "" and rt.kind == "Pod":
            self._service_account_admission(ns, obj)
        node_name = (obj.get("spec") or {}).get("nodeName") if rt.kind == "Pod" else None
        if rt.group == "" and node_name:  # PodTopologyLabels' admitPod: created bound
            topology = self._topology_labels(str(node_name))
            if topology:
                obj["metadata"].setdefault("labels", {}).update(topology)
        self._validate(rt, obj)
        if req is not None:  # RBAC escalation check (sim/rbac.py)
            self.access.admit(rt.group, rt.kind, obj, req.user_info)
        if rt.kind == "CustomResourceDefinition":
            obj = self._accept_crd(obj)
        if managed is None:
            managed = self._managed_update(req, rt, None, obj, "")
        _set_managed(obj, managed)
        if dry_run:
            return obj
        name = obj["metadata"]["name"]
        try:
            entry = self.store.create(rt.key, ns, name, obj)
        except AlreadyExists:
            raise errors.already_exists(rt.group, rt.plural, name) from None
        self._written(rt, entry.obj)
        return entry.obj

    def _stamp(self) -> str:
        return rfc3339(self.clock())

    def _written(self, rt: ResourceType, obj: dict[str, Any], deleted: bool = False) -> None:
        """After every committed write: keep served CRDs current, wake the controllers."""
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            if deleted:
                self.registry.remove_crd(obj["metadata"]["name"])
            elif not obj["metadata"].get("deletionTimestamp"):
                self.registry.add_crd(obj)
        if self._is_fault_configmap(rt, obj):
            self._fault_configmap(obj, deleted)
        self.controllers.notify(rt, obj, deleted=deleted)

    def _accept_crd(self, crd: dict[str, Any]) -> dict[str, Any]:
        try:
            versions = load_crd_versions(crd)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.invalid(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                crd["metadata"].get("name", ""),
                [FieldError("FieldValueInvalid", "spec", f"Invalid value: {exc}")],
            ) from None
        names = crd.get("spec", {}).get("names", {})
        stamp = self._stamp()
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [v.version for v in versions if v.storage],
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": stamp,
                },
            ],
        }
        return crd

    # -- update and patch -------------------------------------------------------------

    def _update(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        body: Any,
        *,
        status: bool,
        dry_run: bool,
        expect_rv: int | None = None,
        req: Request | None = None,
        subresource: str | None = None,
        managed: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """``subresource`` names the one written (default: status or none) for the
        managedFields entry; ``managed`` is what an apply computed."""
        if subresource is None:
            subresource = "status" if status else ""
        _check_custom_body(rt, body, req)
        obj = self._check_type(rt, body)
        obj = self._strict_fields(req, rt, obj)
        meta = _meta(obj)
        if meta.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        if rt.namespaced and meta.get("namespace") not in (None, "", ns):
            raise errors.bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        if expect_rv is None:
            expect_rv = _rv_of(obj)
        with self.store.lock:
            current = self._get_entry(rt, ns, name)
            if expect_rv is not None and expect_rv != current.rv:
                raise errors.conflict(rt.group, rt.plural, name)
            new = self._merge_update(rt, current.obj, obj, status=status)
            if managed is None:
                managed = self._managed_update(req, rt, current.obj, new, subresource)
            _set_managed(new, managed)
            if _same_but_version(new, current.obj):
                return current.obj  # no-op updates do not bump the resourceVersion
            self._validate(rt, new, current.obj)
            if req is not None:  # RBAC escalation check (sim/rbac.py)
                self.access.admit(rt.group, rt.kind, new, req.user_info)
            if rt.kind == "CustomResourceDefinition":
                new = self._accept_crd(new)
            if dry_run:
                # what the storage layer's dry run answers: the stored object's version
                new["metadata"]["resourceVersion"] = str(current.rv)
                return new
            finalizing = bool(new["metadata"].get("deletionTimestamp")) and not new["metadata"].get(
                "finalizers"
            )
            try:
                if finalizing and not self._graceful_pending(rt, new):
                    entry = self.store.delete(rt.key, ns, name, expect_rv=current.rv)
                    self._written(rt, entry.obj, deleted=True)
                    return entry.obj
                entry = self.store.update(rt.key, ns, name, new, expect_rv=current.rv)
            except Conflict:
                raise errors.conflict(rt.group, rt.plural, name) from None
            self._written(rt, entry.obj)
            return entry.obj

    def _managed_update(
        self,
        req: Request | None,
        rt: ResourceType,
        old: dict[str, Any] | None,
        new: dict[str, Any],
        subresource: str,
    ) -> list[dict[str, Any]] | None:
        """The managedFields after a create/update/patch: an Update entry for its manager."""
        return ssa.record_update(
            old,
            new,
            manager=_field_manager(req),
            subresource=subresource,
            api_version=rt.api_version,
            now=self._stamp(),
            node=ssa.root_node(rt.group, rt.kind, rt.schema),
            has_status=rt.has_status,
        )

    def _graceful_pending(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        """A pod whose kubelet still has to finish its graceful termination: as the
        generic registry's ``shouldDeleteDuringUpdate``, an object whose last finalizer
        goes is deleted only when its deletion grace period is 0."""
        return (
            rt.kind == "Pod"
            and rt.group == ""
            and bool(obj["metadata"].get("deletionGracePeriodSeconds"))
        )

    def _merge_update(
        self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], *, status: bool
    ) -> dict[str, Any]:
        old_meta = old["metadata"]
        if status:
            merged = _copy_keeping_managed(old)
            merged["status"] = copy.deepcopy(new.get("status"))
            if merged["status"] is None:
                merged.pop("status")
            if rt.is_custom:
                assert rt.schema is not None
                merged = prune(merged, rt.schema)
            return merged
        merged = _copy_keeping_managed(new)
        meta = _meta(merged)
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["name"] = old_meta["name"]
        meta.pop("resourceVersion", None)
        if rt.has_status:
            if "status" in old:
                merged["status"] = copy.deepcopy(old["status"])
            else:
                merged.pop("status", None)
        if rt.is_custom:
            assert rt.schema is not None
            merged = apply_defaults(prune(merged, rt.schema), rt.schema)
            meta = _meta(merged)
        elif rt.kind == "Pod" and rt.group == "":
            problems = builtins.pod_spec_update_errors(old, merged)
            if problems:
                raise errors.invalid("", "Pod", old_meta["name"], problems)
        elif rt.kind == "Job" and rt.group == "batch":
            merged.setdefault("spec", {})
            for key in ("selector", "completionMode", "template"):
                if key in (old.get("spec") or {}) and key not in merged["spec"]:
                    merged["spec"][key] = old["spec"][key]
        problems = builtins.update_errors(rt.group, rt.kind, old, merged)  # Secret, bindings
        if problems:
            raise errors.invalid(rt.group, rt.kind, old_meta["name"], problems)
        body_old = {k: v for k, v in old.items() if k not in ("metadata", "status")}
        body_new = {k: v for k, v in merged.items() if k not in ("metadata", "status")}
        if body_old != body_new:
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if old_meta.get("deletionTimestamp"):
            # Finalizers may only be removed from an object being deleted.
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.forbidden(
                    rt.group,
                    rt.plural,
                    old_meta["name"],
                    "no new finalizers can be added if the object is being deleted",
                )
        return merged

    def _patch(
        self, req: Request, rt: ResourceType, ns: str, name: str, *, status: bool
    ) -> tuple[dict[str, Any], bool]:
        """The patched object, and whether the patch created it (an apply can)."""
        ctype = req.headers.get("content-type", "").split(";")[0].strip()
        kind = PATCH_TYPES.get(ctype)
        accepted = [t for t, k in PATCH_TYPES.items() if k != "strategic" or not rt.is_custom]
        if kind is None or ctype not in accepted:
            raise errors.unsupported_media_type(accepted)
        if kind == "apply":
            return self._apply(req, rt, ns, name, subresource="status" if status else "")
        if req.query.get("force") not in (None, ""):
            raise _patch_options_invalid(
                "force", "may not be specified for non-apply patch", "Forbidden"
            )
        patch = _parse_body(req)
        with self.store.lock:
            current = self._get_entry(rt, ns, name)
            base = json.loads(current.text)
            base["apiVersion"] = rt.api_version
            if not _mentions_managed_fields(kind, patch):
                base["metadata"].pop("managedFields", None)
            try:
                if kind == "json":
                    patched = json_patch(base, patch)
                elif kind == "merge":
                    patched = json_merge_patch(base, patch)
                else:
                    if not isinstance(patch, dict):
                        raise errors.bad_request("the body of the request was not a JSON object")
                    patched = strategic_merge_patch(base, patch, rt.kind, rt.group)
            except PatchError as exc:
                raise _patch_refused(exc) from None
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            expect = None
            if isinstance(patch, dict):
                expect = _rv_of(patch)
            return self._update(
                rt,
                ns,
                name,
                patched,
                status=status,
                dry_run=self._dry_run(req),
                expect_rv=expect if expect is not None else current.rv,
                req=req,
            ), False

    def _apply(
        self, req: Request, rt: ResourceType, ns: str, name: str, *, subresource: str
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply (the apply patcher of k8s.io/apiserver's patch.go): create the
        object when it does not exist, else merge the applied configuration by field
        manager; the result goes through the same defaulting and validation as an update.
        Returns (the object, whether it was created)."""
        manager = req.query.get("fieldManager", "")
        if not manager:
            # k8s.io/apimachinery .../apis/meta/v1/validation ValidatePatchOptions
            raise _patch_options_invalid("fieldManager", "is required for apply patch")
        force_raw = req.query.get("force", "")
        if force_raw not in ("", "true", "false", "1", "0"):
            raise errors.bad_request(f"invalid value for force: {force_raw!r}")
        force = force_raw in ("true", "1")
        config = _parse_body(req)
        if not isinstance(config, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        if config.get("apiVersion") != rt.api_version:
            # structuredmerge.go: the applied object must be of the endpoint's version
            raise errors.bad_request(
                "Incorrect version specified in apply patch. Specified patch version: "
                f"{config.get('apiVersion') or ''}, expected: {rt.api_version}"
            )
        config = self._check_type(rt, config)
        self._strict_fields(req, rt, config)
        meta = _meta(config)
        if meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        if meta.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        meta["name"] = name
        node = ssa.root_node(rt.group, rt.kind, rt.schema)
        dry_run = self._dry_run(req)
        with self.store.lock:
            entry = self.store.get(rt.key, ns, name)
            live = None if entry is None else entry.obj
            try:
                merged, managed = ssa.apply(
                    live,
                    config,
                    manager=manager,
                    force=force,
                    subresource=subresource,
                    api_version=rt.api_version,
                    now=self._stamp(),
                    node=node,
                    has_status=rt.has_status,
                )
            except ssa.ApplyConflict as exc:
                raise ApiError(409, "Conflict", str(exc), {"causes": exc.causes()}) from None
            except ssa.TypedError as exc:
                # structuredmerge.go returns a plain error: ErrorToAPIStatus makes it a
                # 500 with no reason, which kubectl prints as "Error from server: ...".
                group = f"{rt.group}/{rt.version}" if rt.group else rt.version
                raise ApiError(
                    500,
                    "",
                    f"failed to create typed patch object ({group}, Kind={rt.kind}): {exc}",
                ) from None
            if entry is None:
                if subresource:
                    raise errors.not_found(rt.group, rt.plural, name)
                if ns and self.store.get("/namespaces", "", ns) is None:
                    raise errors.not_found("", "namespaces", ns)
                created = self._create(rt, ns, merged, dry_run=dry_run, req=req, managed=managed)
                return created, True
            # The real server defaults every object it decodes: what the apply pruned and
            # has a default comes back as the default.
            merged = self._prepare(rt, merged)
            updated = self._update(
                rt,
                ns,
                name,
                merged,
                status=subresource == "status",
                dry_run=dry_run,
                expect_rv=_rv_of(config) if meta.get("resourceVersion") else entry.rv,
                req=req,
                subresource=subresource,
                managed=managed,
            )
            return updated, False

    # -- delete -----------------------------------------------------------------------

    def _delete_options(self, req: Request) -> dict[str, Any]:
        """DeleteOptions from the body when there is one, else from the query string: the
        real handler (handlers/delete.go) decodes one or the other, so a query parameter
        beside a body (``?gracePeriodSeconds=0`` with preconditions) is ignored."""
        options: dict[str, Any] = {}
        if req.body:
            body = _parse_body(req)
            if isinstance(body, dict):
                options.update(body)
            return self._check_delete_options(options)
        grace = _int_param(req.query, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if req.query.get("propagationPolicy"):
            options["propagationPolicy"] = req.query["propagationPolicy"]
        if req.query.get("orphanDependents") in ("true", "false"):
            options["orphanDependents"] = req.query["orphanDependents"] == "true"
        return self._check_delete_options(options)

    @staticmethod
    def _check_delete_options(options: dict[str, Any]) -> dict[str, Any]:
        policy = options.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.bad_request(f"unsupported propagationPolicy {policy!r}")
        return options

    def _delete_request(self, req: Request, rt: ResourceType, ns: str, name: str) -> Response:
        options = self._delete_options(req)
        result = self.delete(rt, ns, name, options, dry_run=self._dry_run(req))
        return self._respond(req, rt, 200, result)

    def delete(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        options: dict[str, Any],
        *,
        dry_run: bool = False,
        expect_rv: int | None = None,
    ) -> dict[str, Any]:
        """Delete per Kubernetes semantics: finalizers, grace periods, propagation."""
        with self.store.lock:
            current = self._get_entry(rt, ns, name)
            precondition = options.get("preconditions") or {}
            uid = current.obj["metadata"].get("uid")
            if precondition.get("uid") and precondition["uid"] != uid:
                raise errors.precondition_failed(
                    rt.group,
                    rt.plural,
                    ns,
                    name,
                    f"UID in precondition: {precondition['uid']}, UID in object meta: {uid}",
                )
            if precondition.get("resourceVersion"):
                wanted = str(precondition["resourceVersion"])
                if wanted != str(current.rv):
                    raise errors.precondition_failed(
                        rt.group,
                        rt.plural,
                        ns,
                        name,
                        f"ResourceVersion in precondition: {wanted}, ResourceVersion in "
                        f"object meta: {current.rv}",
                    )
            if expect_rv is not None and expect_rv != current.rv:
                raise errors.conflict(rt.group, rt.plural, name)
            obj = copy.deepcopy(current.obj)
            meta = obj["metadata"]
            policy = options.get("propagationPolicy")
            if policy is None and "orphanDependents" in options:
                policy = "Orphan" if options["orphanDependents"] else "Background"
            policy = policy or rt.default_propagation
            finalizers = list(meta.get("finalizers") or [])
            if policy == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if policy == "Orphan" and "orphan" not in finalizers:
                finalizers.append("orphan")
            grace = 0
            if rt.kind == "Pod" and rt.group == "":
                requested = options.get("gracePeriodSeconds")
                if requested is None:
                    requested = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                grace = int(requested)
                grace = max(int(grace), 0)
                # The pod strategy's CheckGracefulDelete (pkg/registry/core/pod/strategy.go):
                # "if the pod is not scheduled, delete immediately", and "if the pod is
                # already terminated, delete immediately". A pod on a node whose kubelet
                # has stopped still waits for it (the pod GC or a forced delete ends it).
                phase = (obj.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed") or not (obj.get("spec") or {}).get("nodeName"):
                    grace = 0
            if rt.kind == "Namespace" and rt.group == "":
                finalizers = finalizers or []
            already = bool(meta.get("deletionTimestamp"))
            if already and grace and meta.get("deletionGracePeriodSeconds") is not None:
                grace = min(grace, int(meta["deletionGracePeriodSeconds"]))
            namespace_pending = (
                rt.kind == "Namespace"
                and rt.group == ""
                and bool(self.store.namespaces_in_use(name))
            )
            if not finalizers and grace == 0 and not namespace_pending:
                if dry_run:
                    return obj
                entry = self.store.delete(rt.key, ns, name)
                self._written(rt, entry.obj, deleted=True)
                return entry.obj
            if not already:
                meta["deletionTimestamp"] = self._stamp()
            meta["deletionGracePeriodSeconds"] = grace
            meta["finalizers"] = finalizers
            if rt.kind == "Namespace" and rt.group == "":
                obj.setdefault("status", {})["phase"] = "Terminating"
            if dry_run:
                return obj
            if not finalizers and grace == 0 and not namespace_pending:
                entry = self.store.delete(rt.key, ns, name)
                self._written(rt, entry.obj, deleted=True)
                return entry.obj
            entry = self.store.update(rt.key, ns, name, obj)
            self._written(rt, entry.obj)
            return entry.obj

    def _delete_collection(self, req: Request, rt: ResourceType, ns: str) -> Response:
        labels, fields = self._selectors(req, rt)
        options = self._delete_options(req)
        entries, _ = self._matching(rt, ns, labels, fields)
        for entry in entries:
            meta = entry.obj["metadata"]
            try:
                self.delete(
                    rt, meta.get("namespace", ""), meta["name"], options, dry_run=self._dry_run(req)
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return Response.json(
            200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        )

    # -- subresources -------------------------------------------------------------------

    def _topology_labels(self, node_name: str) -> dict[str, str]:
        """The labels the PodTopologyLabels admission plugin (on by default since 1.35)
        copies from a node onto a pod bound to it, or created bound to it (kubernetes
        plugin/pkg/admission/podtopologylabels/admission.go: "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region"; none when there is no such node)."""
        entry = self.store.get("/nodes", "", node_name)
        labels = (entry.obj["metadata"].get("labels") or {}) if entry is not None else {}
        return {k: str(labels[k]) for k in POD_TOPOLOGY_LABELS if k in labels}

    def _bind(self, req: Request, rt: ResourceType, ns: str, name: str) -> Response:
        body = _parse_body(req)
        target = (body or {}).get("target") or {}
        node = target.get("name")
        if not node:
            raise errors.invalid(
                "",
                "Binding",
                name,
                [FieldError("FieldValueRequired", "target.name", "Required value")],
            )
        with self.store.lock:
            current = self._get_entry(rt, ns, name)
            pod = copy.deepcopy(current.obj)
            if pod["metadata"].get("deletionTimestamp"):
                raise errors.conflict("", "pods", name)
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod '
                    f'{name} is already assigned to node "{bound}"',
                    {"name": name, "kind": "pods/binding"},
                )
            pod.setdefault("spec", {})["nodeName"] = node
            # The Binding's annotations and labels go onto the pod, the node's topology
            # labels among them (setPodNodeAndMetadata in kubernetes
            # pkg/registry/core/pod/storage/storage.go, after the PodTopologyLabels
            # admission plugin copied them onto a Binding whose target is a Node)
            binding_meta = (body or {}).get("metadata") or {}
            if binding_meta.get("annotations"):
                pod["metadata"].setdefault("annotations", {}).update(binding_meta["annotations"])
            labels = dict(binding_meta.get("labels") or {})
            if target.get("kind") == "Node":
                labels.update(self._topology_labels(node))
            if labels:
                pod["metadata"].setdefault("labels", {}).update(labels)
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": self._stamp(),
                    "lastProbeTime": None,
                }
            )
            if not self._dry_run(req):
                entry = self.store.update(rt.key, ns, name, pod, expect_rv=current.rv)
                self._written(rt, entry.obj)
        return Response.json(201, _CREATED)

    def _scale_paths(self, rt: ResourceType) -> tuple[str, str, str]:
        """(specReplicasPath, statusReplicasPath, labelSelectorPath); for a built-in
        kind the selector path is empty: it is formatted from ``spec.selector``."""
        if rt.is_custom:
            crd = self.store.get("apiextensions.k8s.io/customresourcedefinitions", "", rt.crd_name)
            for v in load_crd_versions(crd.obj) if crd else []:
                if v.version == rt.version and v.scale_subresource is not None:
                    scale = v.scale_subresource
                    return (
                        str(scale.get("specReplicasPath") or ""),
                        str(scale.get("statusReplicasPath") or ""),
                        str(scale.get("labelSelectorPath") or ""),
                    )
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return ".spec.replicas", ".status.replicas", ""

    def _to_scale(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The autoscaling/v1 Scale of an object (scaleFromDeployment in apps' storage,
        scaleFromCustomResource in apiextensions' for custom resources)."""
        spec_path, status_path, selector_path = self._scale_paths(rt)
        meta = obj["metadata"]
        scale_meta = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        }
        replicas = _at_path(obj, spec_path)
        status: dict[str, Any] = {"replicas": int(_at_path(obj, status_path) or 0)}
        if selector_path:
            selector = _at_path(obj, selector_path)
            if isinstance(selector, str) and selector:
                status["selector"] = selector
        else:
            status["selector"] = str(
                label_selector_from_spec((obj.get("spec") or {}).get("selector"))
            )
        spec = {"replicas": int(replicas)} if replicas else {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": spec,
            "status": status,
        }

    def _scale(self, req: Request, rt: ResourceType, ns: str, name: str) -> Response:
        """GET/PUT/PATCH of ``.../{name}/scale``: the Scale view of the object; a write
        sets the object's spec replicas (recorded for its manager with subresource scale)."""
        if req.method == "GET":
            return Response.json(200, self._to_scale(rt, self._get_entry(rt, ns, name).obj))
        if req.method not in ("PUT", "PATCH"):
            raise errors.method_not_allowed()
        with self.store.lock:
            entry = self._get_entry(rt, ns, name)
            current = self._to_scale(rt, entry.obj)
            put = req.method == "PUT"
            wanted = _parse_body(req) if put else self._patch_scale(req, current)
            if not isinstance(wanted, dict) or wanted.get("kind", "Scale") != "Scale":
                raise errors.bad_request("the body of the request was not a Scale")
            wmeta = wanted.get("metadata") or {}
            if wmeta.get("name") not in (None, name):
                raise errors.bad_request(
                    f"the name of the object ({wmeta.get('name')}) does not match the name on "
                    f"the URL ({name})"
                )
            replicas = (wanted.get("spec") or {}).get("replicas", 0)
            if not isinstance(replicas, int) or isinstance(replicas, bool):
                raise errors.bad_request(
                    "json: cannot unmarshal string into Go struct field ScaleSpec.spec.replicas "
                    "of type int32"
                )
            if replicas < 0:
                # ValidateScale in k8s.io/kubernetes pkg/apis/autoscaling/validation
                raise errors.invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    [
                        FieldError(
                            "FieldValueInvalid",
                            "spec.replicas",
                            f"Invalid value: {replicas}: must be greater than or equal to 0",
                        )
                    ],
                )
            expect = _rv_of(wanted)
            if expect is not None and expect != entry.rv:
                raise errors.conflict(rt.group, rt.plural, name)
            updated = copy.deepcopy(entry.obj)
            spec_path = self._scale_paths(rt)[0]
            _set_path(updated, spec_path, replicas)
            result = self._update(
                rt,
                ns,
                name,
                updated,
                status=False,
                dry_run=self._dry_run(req),
                expect_rv=entry.rv,
                req=req,
                subresource="scale",
            )
        return Response.json(200, self._to_scale(rt, result))

    def _patch_scale(self, req: Request, current: dict[str, Any]) -> Any:
        ctype = req.headers.get("content-type", "").split(";")[0].strip()
        kind = PATCH_TYPES.get(ctype)
        if kind is None:
            raise errors.unsupported_media_type(list(PATCH_TYPES))
        patch = _parse_body(req)
        try:
            if kind == "json":
                return json_patch(current, patch)
            if kind == "merge" or kind == "apply":
                if kind == "apply" and not req.query.get("fieldManager"):
                    raise _patch_options_invalid("fieldManager", "is required for apply patch")
                return json_merge_patch(current, patch)
            if not isinstance(patch, dict):
                raise errors.bad_request("the body of the request was not a JSON object")
            return strategic_merge_patch(current, patch, "Scale", "autoscaling")
        except PatchError as exc:
            raise _patch_refused(exc) from None

    def _pod_log(
        self, req: Request, rt: ResourceType, ns: str, name: str
    ) -> Response | WatchStream:
        """``GET .../pods/{name}/log``: the apiserver's PodLogOptions checks and container
        choice (pkg/registry/core/pod/strategy.go LogLocation), then the kubelet's
        (validateContainerLogStatus in pkg/kubelet/kubelet_pods.go, in
        :func:`krea_ops.sim.common.podlogs.container_log`, shared with the simulated kubelet's
        ``/containerLogs``), over the log store."""
        if req.method != "GET":
            raise errors.method_not_allowed()
        pod = self._get_entry(rt, ns, name).obj
        spec = pod.get("spec") or {}
        q = req.query
        containers = [str(c.get("name")) for c in spec.get("containers") or []]
        inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
        container = q.get("container", "")
        if not container:
            if len(containers) == 1:
                container = containers[0]
            elif not containers:
                raise errors.bad_request(f"a container name must be specified for pod {name}")
            else:
                why = (
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(containers)}]"
                )
                if inits:
                    why += f" or one of the init containers: [{' '.join(inits)}]"
                raise errors.bad_request(why)
        elif container not in containers + inits:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        tail = _int_param(q, "tailLines")
        limit = _int_param(q, "limitBytes")
        since_s = _int_param(q, "sinceSeconds")
        since_time = q.get("sinceTime") or None
        problems = []

        def invalid(path: str, value: int, why: str) -> None:
            problems.append(FieldError("FieldValueInvalid", path, f"Invalid value: {value}: {why}"))

        if tail is not None and tail < 0:
            invalid("tailLines", tail, "must be greater than or equal to 0")
        if limit is not None and limit < 1:
            invalid("limitBytes", limit, "must be greater than 0")
        if since_s is not None and since_time is not None:
            problems.append(
                FieldError(
                    "FieldValueForbidden",
                    "",
                    "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
                )
            )
        elif since_s is not None and since_s < 1:
            invalid("sinceSeconds", since_s, "must be greater than 0")
        if problems:
            # ValidatePodLogOptions (pkg/apis/core/validation)
            raise errors.invalid("", "PodLogOptions", name, problems)
        if not spec.get("nodeName"):
            return Response(200, b"", "text/plain")  # no host yet: an empty log
        options = podlogs.LogOptions(
            previous=q.get("previous") in ("true", "1"),
            since_seconds=since_s,
            since_time=since_time,
            timestamps=q.get("timestamps") in ("true", "1"),
            tail_lines=tail,
            limit_bytes=limit,
            follow=q.get("follow") in ("true", "1"),
        )

        def current() -> dict[str, Any] | None:
            entry = self.store.get(rt.key, ns, name)
            return entry.obj if entry else None

        try:
            log = podlogs.container_log(
                self.logs, pod, container, options, current=current, closing=self._closing
            )
        except podlogs.ContainerLogError as exc:
            raise errors.bad_request(str(exc)) from None
        if isinstance(log, bytes):
            return Response(200, log, "text/plain")
        return WatchStream(lambda: log, content_type="text/plain")

    def pdb_status(self, pdb: dict[str, Any]) -> dict[str, Any]:
        """What the disruption controller would write into a budget's status now."""
        ns = pdb["metadata"]["namespace"]
        spec = pdb.get("spec") or {}
        selector = label_selector_from_spec(spec.get("selector"))
        pods = [
            e.obj
            for e in self.store.list("/pods", ns)[0]
            if selector.matches((e.obj.get("metadata") or {}).get("labels"))
        ]
        expected = len(pods)
        healthy = sum(1 for p in pods if _pod_ready(p))
        if "minAvailable" in spec:
            desired = _int_or_percent(spec["minAvailable"], expected, round_up=True)
        elif "maxUnavailable" in spec:
            desired = expected - _int_or_percent(spec["maxUnavailable"], expected, round_up=True)
        else:
            desired = expected
        desired = max(desired, 0)
        disrupted = dict((pdb.get("status") or {}).get("disruptedPods") or {})
        live = {
            (p.get("metadata") or {}).get("name")
            for p in pods
            if not (p.get("metadata") or {}).get("deletionTimestamp")
        }
        disrupted = {k: v for k, v in disrupted.items() if k in live}
        allowed = max(healthy - desired - len(disrupted), 0)
        status = {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if allowed > 0 else "False",
                    "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                    "message": "",
                    "observedGeneration": pdb["metadata"].get("generation", 1),
                    "lastTransitionTime": self._stamp(),
                }
            ],
        }
        if disrupted:
            status["disruptedPods"] = disrupted
        return status

    def _evict(self, req: Request, rt: ResourceType, ns: str, name: str) -> Response:
        body = _parse_body(req)
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
            raise errors.bad_request("the body of the request was not an Eviction")
        if (body.get("metadata") or {}).get("name") not in (None, name):
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        dry_run = self._dry_run(req) or "All" in (options.get("dryRun") or [])
        pdb_rt = self.registry.by_kind("policy", "PodDisruptionBudget")
        assert pdb_rt is not None
        with self.store.lock:
            pod = self._get_entry(rt, ns, name).obj
            phase = (pod.get("status") or {}).get("phase")
            terminal = phase in ("Succeeded", "Failed", "Pending") or bool(
                pod["metadata"].get("deletionTimestamp")
            )
            labels = (pod.get("metadata") or {}).get("labels") or {}
            budgets = [
                e
                for e in self.store.list(pdb_rt.key, ns)[0]
                if label_selector_from_spec((e.obj.get("spec") or {}).get("selector")).matches(
                    labels
                )
            ]
            if len(budgets) > 1:
                raise ApiError(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the "
                    "eviction subresource does not support.",
                )
            if budgets and not terminal:
                pdb = budgets[0].obj
                pdb_name = pdb["metadata"]["name"]
                status = self.pdb_status(pdb)
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
                # An unready pod does not count as healthy, so deleting it takes nothing
                # from the budget: allowed without a decrement under AlwaysAllow, and under
                # the default IfHealthyBudget while the application is not disrupted.
                unready_ok = not _pod_ready(pod) and (
                    policy == "AlwaysAllow"
                    or 0 < status["desiredHealthy"] <= status["currentHealthy"]
                )
                stored = pdb.get("status") or {}
                if unready_ok:
                    pass
                elif int(stored.get("observedGeneration") or 0) < int(
                    pdb["metadata"].get("generation") or 1
                ):
                    raise _budget_refusal(
                        pdb_name, "is still being processed by the server.", retry_after_s=10
                    )
                elif status["disruptionsAllowed"] <= 0:
                    raise _budget_refusal(
                        pdb_name,
                        f"needs {status['desiredHealthy']} healthy pods and has "
                        f"{status['currentHealthy']} currently",
                    )
                elif not dry_run:
                    status["disruptedPods"] = {
                        **status.get("disruptedPods", {}),
                        name: self._stamp(),
                    }
                    status["disruptionsAllowed"] -= 1
                    updated = copy.deepcopy(pdb)
                    updated["status"] = status
                    self.store.update(pdb_rt.key, ns, pdb_name, updated, expect_rv=budgets[0].rv)
            if not dry_run:
                options = self._mark_disruption_target(rt, ns, name, options)
            self.delete(rt, ns, name, options, dry_run=dry_run)
        return Response.json(201, _CREATED)

    def _mark_disruption_target(
        self, rt: ResourceType, ns: str, name: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The API server's ``addConditionAndDeletePod``
        (pkg/registry/core/pod/storage/eviction.go): before an evicted pod is deleted, its
        status gets ``DisruptionTarget`` (reason ``EvictionByEvictionAPI``, message
        ``Eviction API: evicting``), so its controller (a Job's ``podFailurePolicy``) can tell
        a disruption from a failure. The delete's preconditions are checked against the pod
        first, and a resourceVersion precondition then names the version this update wrote.
        Returns the delete options to use."""
        entry = self._get_entry(rt, ns, name)
        pod = copy.deepcopy(entry.obj)
        pre = options.get("preconditions") or {}
        uid = pod["metadata"].get("uid")
        if pre.get("uid") and pre["uid"] != uid:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition '
                f"({pre['uid']}) does not match the UID in record ({uid}). The object might "
                "have been deleted and then recreated",
                {"name": name, "kind": "Pod"},
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != str(entry.rv):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{name}": the ResourceVersion in the '
                f"precondition ({pre['resourceVersion']}) does not match the ResourceVersion "
                f"in record ({entry.rv}). The object might have been modified",
                {"name": name, "kind": "Pod"},
            )
        status = pod.setdefault("status", {})
        conditions = status.setdefault("conditions", [])
        wanted = {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": self._stamp(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
        for i, cond in enumerate(conditions):
            if cond.get("type") == "DisruptionTarget":
                if cond.get("status") == "True" and cond.get("lastTransitionTime"):
                    wanted["lastTransitionTime"] = cond["lastTransitionTime"]
                conditions[i] = wanted
                break
        else:
            conditions.append(wanted)
        updated = self._update(rt, ns, name, pod, status=True, dry_run=False, expect_rv=entry.rv)
        if pre.get("resourceVersion"):
            rv = updated["metadata"].get("resourceVersion")
            options = {**options, "preconditions": {**pre, "resourceVersion": rv}}
        return options

    # -- watch ------------------------------------------------------------------------

    def _watch(self, req: Request, rt: ResourceType, ns: str) -> WatchStream:
        labels, fields = self._selectors(req, rt)
        raw_rv = req.query.get("resourceVersion", "")
        try:
            start_rv = int(raw_rv) if raw_rv not in ("", "0") else None
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {raw_rv!r}") from None
        timeout = _int_param(req.query, "timeoutSeconds")
        bookmarks = req.query.get("allowWatchBookmarks") in ("true", "1")
        initial = req.query.get("sendInitialEvents") in ("true", "1")
        table = self._wants_table(req)

        def matches(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                return False
            meta = obj.get("metadata") or {}
            if ns and meta.get("namespace") != ns:
                return False
            return labels.matches(meta.get("labels")) and fields.matches(obj)

        reuse_text = not table and (not rt.is_custom or rt.version == rt.storage_version)

        def encode(event_type: str, obj: dict[str, Any], text: str | None = None) -> bytes:
            if text is not None and reuse_text:
                # The stored JSON is already the served form: splice it, don't re-encode.
                return f'{{"type":"{event_type}","object":{text}}}\n'.encode()
            out = (
                self._table(req, rt, [obj])
                if table and event_type != "BOOKMARK"
                else self._as_version(rt, obj)
            )
            return (
                json.dumps({"type": event_type, "object": out}, separators=(",", ":")).encode()
                + b"\n"
            )

        def events() -> Iterator[bytes]:
            deadline = time.monotonic() + timeout if timeout else None
            if start_rv is None or initial:
                entries, rv = self.store.list(rt.key, ns or None)
                if start_rv is None or initial:
                    for entry in entries:
                        if matches(entry.obj):
                            yield encode("ADDED", entry.obj, entry.text)
                    if initial:
                        yield encode(
                            "BOOKMARK",
                            {
                                "kind": rt.kind,
                                "apiVersion": rt.api_version,
                                "metadata": {
                                    "resourceVersion": str(rv),
                                    "annotations": {"k8s.io/initial-events-end": "true"},
                                },
                            },
                        )
                last = rv
            else:
                last = start_rv
            last_bookmark = time.monotonic()
            while not self._closing.is_set():
                try:
                    changes = self.store.changes_since(last)
                except Gone as exc:
                    err = errors.gone(str(exc))
                    yield json.dumps({"type": "ERROR", "object": err.status()}).encode() + b"\n"
                    return
                for change in changes:
                    last = change.rv
                    if change.rkey != rt.key:
                        continue
                    now_in, was_in = matches(change.obj), matches(change.prev)
                    if change.type == "ADDED" and now_in:
                        yield encode("ADDED", change.obj, change.text)
                    elif change.type == "DELETED" and (now_in or was_in):
                        yield encode("DELETED", change.obj, change.text)
                    elif change.type == "MODIFIED":
                        if now_in and was_in:
                            yield encode("MODIFIED", change.obj, change.text)
                        elif now_in:
                            yield encode("ADDED", change.obj, change.text)
                        elif was_in:
                            yield encode("DELETED", change.obj, change.text)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return
                if bookmarks and now - last_bookmark >= self.bookmark_interval_s:
                    last_bookmark = now
                    yield encode(
                        "BOOKMARK",
                        {
                            "kind": rt.kind,
                            "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(last)},
                        },
                    )
                wait = 1.0 if deadline is None else max(min(1.0, deadline - now), 0.01)
                if bookmarks:
                    wait = min(wait, max(self.bookmark_interval_s - (now - last_bookmark), 0.01))
                self.store.wait_for_change(last, wait)
                yield b""  # lets the HTTP layer notice a client that went away

        return WatchStream(events)


def _closing_after(watch: WatchStream, events: int | None) -> WatchStream:
    """The watch, ended after ``events`` events (the fault switch's ``closeWatchAfter``):
    the stream finishes cleanly, as a server that restarts ends its watches."""
    if events is None:
        return watch
    source = watch.events

    def limited() -> Iterator[bytes]:
        sent = 0
        if sent >= events:
            return
        for chunk in source():
            yield chunk
            if chunk:
                sent += 1
                if sent >= events:
                    return

    return WatchStream(limited, watch.content_type)


_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _openapi_document(group: str, version: str, types: list[ResourceType]) -> dict[str, Any]:
    """A minimal OpenAPI v3 document for one group/version: every item path with its PATCH
    operation, its group-version-kind, the patch media types it accepts and the
    ``fieldValidation`` parameter (so kubectl validates on the server, as with a real
    cluster). Component schemas are left out: kubectl then computes strategic merge
    patches from its compiled-in types and JSON merge patches for custom resources."""
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths: dict[str, Any] = {}
    for rt in types:
        base = (
            f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
            if rt.namespaced
            else f"{prefix}/{rt.plural}"
        )
        media = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
        if not rt.is_custom:
            media.insert(2, "application/strategic-merge-patch+json")
        gvk = {"group": group, "version": version, "kind": rt.kind}
        params = [{"name": n, "in": "query", "schema": {"type": "string"}} for n in _QUERY_PARAMS]
        patch = {
            "operationId": f"patch{rt.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "requestBody": {
                "content": {m: {"schema": {"type": "object"}} for m in media},
                "required": True,
            },
            "responses": {"200": {"description": "OK"}},
        }
        post = {
            "operationId": f"create{rt.kind}",
            "x-kubernetes-action": "post",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "responses": {"201": {"description": "Created"}},
        }
        paths[base] = {"post": post}
        paths[f"{base}/{{name}}"] = {"patch": patch}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def _key_of(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")
