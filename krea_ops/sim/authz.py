"""Who may do what on the simulated API server: static tokens and ABAC policies.

The real kube-apiserver's ``--token-auth-file`` (token -> user, groups) and
``--authorization-mode=ABAC`` (``abac.authorization.kubernetes.io/v1beta1`` Policy
lines) are enough to test what RBAC-limited credentials see: a reader that may not list
nodes, a controller that may only patch them. The admin token bypasses authorization, as
``system:masters`` does. Discovery and ``/version`` are open to every authenticated user
(``system:discovery``). Denials carry the real server's wording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from krea_ops.sim.errors import ApiError

READ_VERBS = {"get", "list", "watch"}


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # plural, with "/subresource" when there is one
    namespace: str
    name: str
    resource_request: bool


def attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return Attributes(method.lower(), "", "", "", "", False)
    if not rest:
        return Attributes(method.lower(), group, "", "", "", False)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    m = method.upper()
    if m == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("1", "true") else "list")
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
    return Attributes(verb, group, resource, namespace, name, True)


def _matches(value: str, pattern: Any) -> bool:
    return pattern == "*" or pattern == value


class Authorizer:
    """``users``: token -> (user, groups); ``policies``: ABAC Policy objects."""

    def __init__(
        self,
        users: Mapping[str, tuple[str, Sequence[str]]],
        policies: Sequence[Mapping[str, Any]],
    ) -> None:
        self.users = dict(users)
        self.policies = [dict(p.get("spec") or {}) for p in policies]

    def user(self, token: str) -> tuple[str, Sequence[str]] | None:
        return self.users.get(token)

    def allowed(self, user: str, groups: Sequence[str], attrs: Attributes) -> bool:
        for spec in self.policies:
            who = spec.get("user")
            grp = spec.get("group")
            if not (
                (who is not None and _matches(user, who))
                or (grp is not None and (grp == "*" or grp in groups))
            ):
                continue
            if spec.get("readonly") and attrs.verb not in READ_VERBS:
                continue
            if not attrs.resource_request:
                if _matches(attrs.resource or "", spec.get("nonResourcePath", "")):
                    return True
                continue
            base = attrs.resource.split("/")[0]
            if not (
                _matches(attrs.resource, spec.get("resource"))
                or _matches(base, spec.get("resource"))
            ):
                continue
            if not _matches(attrs.group, spec.get("apiGroup", "")):
                continue
            if not _matches(attrs.namespace, spec.get("namespace", "*") or "*"):
                continue
            return True
        return False

    def check(self, user: str, groups: Sequence[str], attrs: Attributes) -> None:
        if not attrs.resource_request or self.allowed(user, groups, attrs):
            return
        base = attrs.resource.split("/")[0]
        shown = f"{base}.{attrs.group}" if attrs.group else base
        named = f'{shown} "{attrs.name}"' if attrs.name else shown
        scope = (
            f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        )
        message = (
            f'{named} is forbidden: User "{user}" cannot {attrs.verb} resource '
            f'"{attrs.resource}" in API group "{attrs.group}" {scope}'
        )
        raise ApiError(
            403,
            "Forbidden",
            message,
            {"name": attrs.name, "group": attrs.group, "kind": base},
        )


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
