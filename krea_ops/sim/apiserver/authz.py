"""Who may do what on the simulated API server: identities, request attributes, ABAC.

Authentication (``ApiServer._authenticate``) turns a bearer token into a ``UserInfo``: the
admin token of the kubeconfig the simulator writes is ``kubernetes-admin`` in the
``system:masters`` group (as kubeadm's admin.conf was), static tokens (the real
``--token-auth-file``) map to the users and groups given, and bound service-account tokens
are verified by ``sim/tokens.py``. Every authenticated user is in ``system:authenticated``.

Authorization is the real server's chain: ``system:masters`` may do anything (the
privileged-group authorizer), then ABAC (``abac.authorization.kubernetes.io/v1beta1``
Policy lines given at start-up) and RBAC (``sim/rbac.py``, the stored Roles and bindings);
any one allowing is enough. Denials carry the real server's wording.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krea_ops.sim.apiserver.errors import ApiError

READ_VERBS = {"get", "list", "watch"}
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict, compare=False, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """authentication.k8s.io/v1 UserInfo (what SelfSubjectReview returns)."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ADMIN = UserInfo("kubernetes-admin", (MASTERS, AUTHENTICATED))
# What the real server's anonymous authenticator makes of a request without credentials.
ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # plural, without the subresource
    namespace: str
    name: str
    resource_request: bool
    subresource: str = ""
    path: str = ""

    @property
    def combined_resource(self) -> str:
        """``pods/eviction``: what RBAC rules and the Forbidden message name."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


# apiserver/pkg/endpoints/request/requestinfo.go: ``namespaces/{name}/{status,finalize}``
# are subresources of the namespace, anything else after a namespace a resource in it.
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The authorizer attributes of a request, as ``RequestInfoFactory`` derives them."""
    parts = [p for p in path.split("/") if p]
    m = method.upper()
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return Attributes(m.lower(), "", "", "", "", False, path=path)
    watch = False
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return Attributes(m.lower(), "", "", "", "", False, path=path)
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if m in ("GET", "HEAD"):
        if watch or query.get("watch") in ("1", "true", "True"):
            verb = "watch"
        else:
            verb = "get" if name else "list"
    elif m == "POST":
        verb = "create"
    elif m == "PUT":
        verb = "update"
    elif m == "PATCH":
        verb = "patch"
    elif m == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = m.lower()
    return Attributes(verb, group, resource, namespace, name, True, subresource, path)


def forbidden(user: str, attrs: Attributes) -> ApiError:
    """The 403 of a denied request, worded as
    staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
    ``forbiddenMessage`` and apimachinery's ``NewForbidden`` word it."""
    if not attrs.resource_request:
        return ApiError(
            403,
            "Forbidden",
            f'forbidden: User "{user}" cannot {attrs.verb} path "{attrs.path}"',
            {},
        )
    shown = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    named = f'{shown} "{attrs.name}"' if attrs.name else shown
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    message = (
        f'{named} is forbidden: User "{user}" cannot {attrs.verb} resource '
        f'"{attrs.combined_resource}" in API group "{attrs.group}" {scope}'
    )
    # StatusDetails' fields are omitempty: a core resource's Status names no group.
    details = {"name": attrs.name, "group": attrs.group, "kind": attrs.resource}
    return ApiError(403, "Forbidden", message, {k: v for k, v in details.items() if v})


def _matches(value: str, pattern: Any) -> bool:
    return pattern == "*" or pattern == value


def read_token_file(path: Path) -> dict[str, UserInfo]:
    """A ``--token-auth-file``: CSV lines ``token,user,uid[,"group1,group2"]``, as
    staging/src/k8s.io/apiserver/pkg/authentication/token/tokenfile/tokenfile.go reads it
    (a line with an empty first column is skipped, fewer than three columns is an error)."""
    users: dict[str, UserInfo] = {}
    with path.open(newline="") as fh:
        for record in csv.reader(fh):
            if not record or not record[0]:
                continue
            if len(record) < 3:
                raise ValueError(
                    f"token file '{path}' must have at least 3 columns (token, user name, "
                    f"user uid), found {len(record)}"
                )
            groups = (
                [g.strip() for g in record[3].split(",") if g.strip()] if len(record) > 3 else []
            )
            users[record[0]] = UserInfo(
                record[1], tuple(dict.fromkeys([*groups, AUTHENTICATED])), record[2]
            )
    return users


class Authorizer:
    """``users``: static tokens (token -> user, groups, or a ``UserInfo`` as a token file
    gives it); ``policies``: ABAC Policy objects."""

    def __init__(
        self,
        users: Mapping[str, tuple[str, Sequence[str]] | UserInfo],
        policies: Sequence[Mapping[str, Any]],
    ) -> None:
        self.users = {
            token: (
                found
                if isinstance(found, UserInfo)
                else UserInfo(found[0], tuple(dict.fromkeys([*found[1], AUTHENTICATED])))
            )
            for token, found in users.items()
        }
        self.policies = [dict(p.get("spec") or {}) for p in policies]

    def user(self, token: str) -> UserInfo | None:
        return self.users.get(token)

    def allowed(self, user: UserInfo, attrs: Attributes) -> bool:
        """Whether an ABAC policy line allows the request (pkg/auth/authorizer/abac)."""
        for spec in self.policies:
            who = spec.get("user")
            grp = spec.get("group")
            if not (
                (who is not None and _matches(user.name, who))
                or (grp is not None and (grp == "*" or grp in user.groups))
            ):
                continue
            if spec.get("readonly") and attrs.verb not in READ_VERBS:
                continue
            if not attrs.resource_request:
                path = spec.get("nonResourcePath", "")
                if _matches(attrs.path, path) or (
                    isinstance(path, str)
                    and path.endswith("*")
                    and attrs.path.startswith(path[:-1])
                ):
                    return True
                continue
            if not (
                _matches(attrs.combined_resource, spec.get("resource"))
                or _matches(attrs.resource, spec.get("resource"))
            ):
                continue
            if not _matches(attrs.group, spec.get("apiGroup", "")):
                continue
            if not _matches(attrs.namespace, spec.get("namespace", "*") or "*"):
                continue
            return True
        return False


def policies_from_rbac(docs: Sequence[Mapping[str, Any]], group: str) -> list[dict[str, Any]]:
    """ABAC policies granting ``group`` what the (Cluster)Roles bound to it grant.

    ABAC knows only "read-only" or "everything", so a rule whose verbs are all reads
    becomes a read-only policy and any other rule a read-write one; ``resourceNames`` are
    not expressible and widen to the whole resource. Good enough to prove a role is
    *sufficient*; the manifests' own tests check that it is *least*."""
    roles: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for d in docs:
        if d.get("kind") in ("ClusterRole", "Role"):
            meta = d.get("metadata") or {}
            roles[(d["kind"], meta.get("namespace", ""), meta["name"])] = d
    out: list[dict[str, Any]] = []
    for d in docs:
        if d.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(
            s.get("kind") == "Group" and s.get("name") == group for s in d.get("subjects") or ()
        ):
            continue
        ref = d["roleRef"]
        namespace = (d.get("metadata") or {}).get("namespace", "")
        role = roles.get((ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"]))
        if role is None:
            continue
        for rule in role.get("rules") or ():
            readonly = set(rule.get("verbs") or ()) <= READ_VERBS
            for api_group in rule.get("apiGroups") or ():
                for resource in rule.get("resources") or ():
                    out.append(
                        {
                            "apiVersion": "abac.authorization.kubernetes.io/v1beta1",
                            "kind": "Policy",
                            "spec": {
                                "group": group,
                                "apiGroup": api_group,
                                "resource": resource,
                                "namespace": namespace or "*",
                                "readonly": readonly,
                            },
                        }
                    )
    return out
