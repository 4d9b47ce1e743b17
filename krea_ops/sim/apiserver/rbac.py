"""RBAC on the simulated API server: stored Roles and bindings, enforced, and the reviews.

``RbacAuthorizer`` is plugin/pkg/auth/authorizer/rbac/rbac.go over the objects in the
store: the ClusterRoleBindings and the RoleBindings of the request's namespace whose
subjects name the user, one of its groups or (for a service account) its namespace and
name, and the rules of the (Cluster)Roles they reference. Rule matching is
pkg/apis/rbac/v1/evaluation_helpers.go: verbs, apiGroups, resources (``pods/log``,
``*/scale``, ``*``), resourceNames, nonResourceURLs (with a trailing ``*``). Aggregated
ClusterRoles are not computed: ``aggregationRule`` is stored but the role's own rules are
what count.

``BOOTSTRAP_ROLES``/``BOOTSTRAP_BINDINGS`` are the part of the real server's bootstrap
policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) that matters here:
``cluster-admin`` bound to ``system:masters``, ``system:discovery``,
``system:public-info-viewer`` and ``system:basic-user`` bound to every authenticated user,
and simplified ``admin``/``edit``/``view`` roles covering the kinds the simulator serves
(the real ones are aggregated from many more rules).

``AccessControl`` is the whole chain the API server calls: authentication (admin, static
and service-account tokens), impersonation, authorization (``system:masters``, ABAC,
RBAC), the privilege-escalation check on Role and binding writes, the TokenRequest API and
the reviews (SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
SelfSubjectReview), which are answered from the same authorizer and never stored.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from krea_ops.kube import times
from krea_ops.sim.apiserver import errors
from krea_ops.sim.apiserver.authz import (
    ADMIN,
    AUTHENTICATED,
    MASTERS,
    Attributes,
    Authorizer,
    UserInfo,
    forbidden,
)
from krea_ops.sim.apiserver.tokens import (
    DEFAULT_EXPIRATION_S,
    ISSUER,
    MAX_EXPIRATION_S,
    MIN_EXPIRATION_S,
    SA_PREFIX,
    ServiceAccountUser,
    TokenSigner,
    bound_objects,
    service_account_of,
)
from krea_ops.sim.apiserver.validation import FieldError

GROUP = "rbac.authorization.k8s.io"
CLUSTER_ROLES = f"{GROUP}/clusterroles"
CLUSTER_ROLE_BINDINGS = f"{GROUP}/clusterrolebindings"
ROLES = f"{GROUP}/roles"
ROLE_BINDINGS = f"{GROUP}/rolebindings"

Getter = Callable[[str, str, str], "dict[str, Any] | None"]
Lister = Callable[[str, "str | None"], "list[dict[str, Any]]"]

# -- rule evaluation (pkg/apis/rbac/v1/evaluation_helpers.go) --------------------------


def _has(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


def rule_allows(attrs: Attributes, rule: Mapping[str, Any]) -> bool:
    verbs = rule.get("verbs")
    if not _has(verbs, attrs.verb):
        return False
    if not attrs.resource_request:
        for url in rule.get("nonResourceURLs") or ():
            if url == "*" or url == attrs.path:
                return True
            if url.endswith("*") and attrs.path.startswith(url.rstrip("*")):
                return True
        return False
    if not _has(rule.get("apiGroups"), attrs.group):
        return False
    combined = attrs.combined_resource
    resources = rule.get("resources") or []
    if not any(
        r == "*" or r == combined or (attrs.subresource and r == f"*/{attrs.subresource}")
        for r in resources
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _applies(subject: Mapping[str, Any], user: UserInfo, binding_ns: str) -> bool:
    """rbac.go ``appliesToUser``."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.name == f"{SA_PREFIX}{ns}:{name}"
    return False


def _describe_subject(subject: Mapping[str, Any], binding_ns: str) -> str:
    """rbac.go ``describeSubject``."""
    if subject.get("kind") == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return f'ServiceAccount "{subject.get("name")}/{ns}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class RbacAuthorizer:
    """Reads the stored RBAC objects on every decision, so a new binding counts at once."""

    def __init__(self, get: Getter, list_: Lister) -> None:
        self._get = get
        self._list = list_

    def _role_rules(self, ref: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            role = self._get(CLUSTER_ROLES, "", name)
        elif kind == "Role" and namespace:
            role = self._get(ROLES, namespace, name)
        else:
            role = None
        return [r for r in (role or {}).get("rules") or () if isinstance(r, Mapping)]

    def visit(self, user: UserInfo, namespace: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(source, rule) of every rule that applies to ``user`` in ``namespace`` (or at the
        cluster scope when it is empty), in the real ``VisitRulesFor`` order."""
        for crb in self._list(CLUSTER_ROLE_BINDINGS, None):
            ref = crb.get("roleRef") or {}
            if ref.get("kind") != "ClusterRole":
                continue
            for subject in crb.get("subjects") or ():
                if not _applies(subject, user, ""):
                    continue
                source = (
                    f'ClusterRoleBinding "{crb["metadata"]["name"]}" of ClusterRole '
                    f'"{ref.get("name")}" to {_describe_subject(subject, "")}'
                )
                for rule in self._role_rules(ref, ""):
                    yield source, rule
                break
        if not namespace:
            return
        for rb in self._list(ROLE_BINDINGS, namespace):
            ref = rb.get("roleRef") or {}
            for subject in rb.get("subjects") or ():
                if not _applies(subject, user, namespace):
                    continue
                source = (
                    f'RoleBinding "{rb["metadata"]["name"]}/{namespace}" of '
                    f'{ref.get("kind")} "{ref.get("name")}" to '
                    f"{_describe_subject(subject, namespace)}"
                )
                for rule in self._role_rules(ref, namespace):
                    yield source, rule
                break

    def decide(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason) as the RBAC authorizer gives them."""
        for source, rule in self.visit(user, attrs.namespace):
            if rule_allows(attrs, rule):
                return True, f"RBAC: allowed by {source}"
        return False, ""

    def rules(self, user: UserInfo, namespace: str) -> tuple[list[dict[str, Any]], list[Any]]:
        """SelfSubjectRulesReview's resourceRules and nonResourceRules."""
        resource_rules: list[dict[str, Any]] = []
        non_resource: list[dict[str, Any]] = []
        for _, rule in self.visit(user, namespace):
            if rule.get("nonResourceURLs"):
                non_resource.append(
                    {
                        "verbs": list(rule.get("verbs") or []),
                        "nonResourceURLs": list(rule["nonResourceURLs"]),
                    }
                )
            if rule.get("resources") or rule.get("apiGroups"):
                out: dict[str, Any] = {"verbs": list(rule.get("verbs") or [])}
                for key in ("apiGroups", "resources", "resourceNames"):
                    if rule.get(key):
                        out[key] = list(rule[key])
                resource_rules.append(out)
        return resource_rules, non_resource


# -- bootstrap policy ----------------------------------------------------------------------

_BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_VIEW_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": [
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "pods",
            "replicationcontrollers",
            "serviceaccounts",
            "services",
        ],
        "verbs": _READ,
    },
    {
        "apiGroups": [""],
        "resources": ["events", "limitranges", "namespaces", "pods/log", "pods/status"],
        "verbs": _READ,
    },
    {
        "apiGroups": ["apps"],
        "resources": ["daemonsets", "deployments", "replicasets", "statefulsets"],
        "verbs": _READ,
    },
    {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": _READ},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _READ},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses", "ingresses/status", "networkpolicies"],
        "verbs": _READ,
    },
]
_EDIT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": [
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "pods",
            "pods/eviction",
            "replicationcontrollers",
            "secrets",
            "serviceaccounts",
            "services",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": _READ},
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
    {
        "apiGroups": ["apps"],
        "resources": [
            "daemonsets",
            "deployments",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
            "statefulsets",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": _WRITE},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _WRITE},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses", "networkpolicies"],
        "verbs": _WRITE,
    },
    *_VIEW_RULES,
]
_ADMIN_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [GROUP],
        "resources": ["rolebindings", "roles"],
        "verbs": [*_READ, *_WRITE],
    },
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["localsubjectaccessreviews"],
        "verbs": ["create"],
    },
    *_EDIT_RULES,
]
_DISCOVERY_URLS = [
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
]
_PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, **copy.deepcopy(_BOOTSTRAP_META)},
        "rules": copy.deepcopy(rules),
    }


def _cluster_binding(name: str, role: str, *groups: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, **copy.deepcopy(_BOOTSTRAP_META)},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
    }


BOOTSTRAP_ROLES: tuple[dict[str, Any], ...] = (
    _cluster_role(
        "cluster-admin",
        [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    ),
    _cluster_role("admin", _ADMIN_RULES),
    _cluster_role("edit", _EDIT_RULES),
    _cluster_role("view", _VIEW_RULES),
    _cluster_role("system:discovery", [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}]),
    _cluster_role(
        "system:public-info-viewer", [{"nonResourceURLs": _PUBLIC_URLS, "verbs": ["get"]}]
    ),
    _cluster_role(
        "system:basic-user",
        [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["selfsubjectreviews"],
                "verbs": ["create"],
            },
        ],
    ),
)
BOOTSTRAP_BINDINGS: tuple[dict[str, Any], ...] = (
    _cluster_binding("cluster-admin", "cluster-admin", MASTERS),
    _cluster_binding("system:discovery", "system:discovery", AUTHENTICATED),
    _cluster_binding(
        "system:public-info-viewer",
        "system:public-info-viewer",
        AUTHENTICATED,
        "system:unauthenticated",
    ),
    _cluster_binding("system:basic-user", "system:basic-user", AUTHENTICATED),
)


# -- validation (pkg/apis/rbac/validation/validation.go) ----------------------------------


def validate(kind: str, obj: dict[str, Any]) -> list[Any]:
    """The checks without which a role or binding would mean nothing."""
    problems: list[FieldError] = []
    if kind in ("Role", "ClusterRole"):
        for i, rule in enumerate(obj.get("rules") or []):
            path = f"rules[{i}]"
            if not isinstance(rule, dict):
                problems.append(FieldError("FieldValueTypeInvalid", path, "must be an object"))
                continue
            if not rule.get("verbs"):
                problems.append(FieldError("FieldValueRequired", f"{path}.verbs", "Required value"))
            if rule.get("nonResourceURLs"):
                if kind == "Role":
                    problems.append(
                        FieldError(
                            "FieldValueInvalid",
                            f"{path}.nonResourceURLs",
                            "Invalid value: "
                            + _go_list(rule["nonResourceURLs"])
                            + ": namespaced rules cannot apply to non-resource URLs",
                        )
                    )
                if rule.get("resources") or rule.get("apiGroups"):
                    problems.append(
                        FieldError(
                            "FieldValueInvalid",
                            f"{path}.nonResourceURLs",
                            "Invalid value: "
                            + _go_list(rule["nonResourceURLs"])
                            + ": rules cannot apply to both regular resources and "
                            "non-resource URLs",
                        )
                    )
                continue
            if not rule.get("apiGroups"):
                problems.append(
                    FieldError(
                        "FieldValueRequired",
                        f"{path}.apiGroups",
                        "Required value: resource rules must supply at least one api group",
                    )
                )
            if not rule.get("resources"):
                problems.append(
                    FieldError(
                        "FieldValueRequired",
                        f"{path}.resources",
                        "Required value: resource rules must supply at least one resource",
                    )
                )
    else:
        ref = obj.get("roleRef")
        if not isinstance(ref, dict) or not ref.get("name"):
            problems.append(FieldError("FieldValueRequired", "roleRef.name", "Required value"))
        else:
            allowed = ["ClusterRole"] if kind == "ClusterRoleBinding" else ["Role", "ClusterRole"]
            if ref.get("kind") not in allowed:
                problems.append(
                    FieldError(
                        "FieldValueNotSupported",
                        "roleRef.kind",
                        f'Unsupported value: "{ref.get("kind") or ""}": supported values: '
                        + ", ".join(f'"{k}"' for k in allowed),
                    )
                )
            if ref.get("apiGroup") != GROUP:
                problems.append(
                    FieldError(
                        "FieldValueNotSupported",
                        "roleRef.apiGroup",
                        f'Unsupported value: "{ref.get("apiGroup") or ""}": supported values: '
                        f'"{GROUP}"',
                    )
                )
        for i, subject in enumerate(obj.get("subjects") or []):
            path = f"subjects[{i}]"
            if not isinstance(subject, dict) or not subject.get("name"):
                problems.append(FieldError("FieldValueRequired", f"{path}.name", "Required value"))
                continue
            kind_ = subject.get("kind")
            if kind_ not in ("ServiceAccount", "User", "Group"):
                problems.append(
                    FieldError(
                        "FieldValueNotSupported",
                        f"{path}.kind",
                        f'Unsupported value: "{kind_ or ""}": supported values: '
                        '"ServiceAccount", "User", "Group"',
                    )
                )
            elif (
                kind_ == "ServiceAccount"
                and kind == "ClusterRoleBinding"
                and not subject.get("namespace")
            ):
                problems.append(
                    FieldError("FieldValueRequired", f"{path}.namespace", "Required value")
                )
    return problems


def _go_list(values: Any) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values or []) + "}"


def default_subjects(obj: dict[str, Any]) -> None:
    """rbac/v1 defaulting: a User or Group subject's apiGroup is the RBAC group."""
    for subject in obj.get("subjects") or []:
        if isinstance(subject, dict) and subject.get("kind") in ("User", "Group"):
            subject.setdefault("apiGroup", GROUP)


# -- reviews -------------------------------------------------------------------------------


def access_attributes(spec: Mapping[str, Any], kind: str) -> Attributes:
    """The attributes a (Self)SubjectAccessReview asks about, checked as
    pkg/apis/authorization/validation does (exactly one kind of attributes)."""
    res = spec.get("resourceAttributes")
    non = spec.get("nonResourceAttributes")
    problems = []
    if isinstance(res, dict) and isinstance(non, dict):
        # field.Invalid dereferences the pointer and prints the Go struct (%#v)
        shown = (
            f'authorization.NonResourceAttributes{{Path:"{non.get("path") or ""}", '
            f'Verb:"{non.get("verb") or ""}"}}'
        )
        problems.append(
            FieldError(
                "FieldValueInvalid",
                "spec.nonResourceAttributes",
                f"Invalid value: {shown}: cannot be specified in combination with "
                "resourceAttributes",
            )
        )
    if not isinstance(res, dict) and not isinstance(non, dict):
        problems.append(
            FieldError(
                "FieldValueInvalid",
                "spec.resourceAttributes",
                'Invalid value: "null": exactly one of nonResourceAttributes or '
                "resourceAttributes must be specified",
            )
        )
    if problems:
        raise errors.invalid("authorization.k8s.io", kind, "", problems)
    if isinstance(res, dict):
        return Attributes(
            verb=str(res.get("verb") or ""),
            group=str(res.get("group") or ""),
            resource=str(res.get("resource") or ""),
            namespace=str(res.get("namespace") or ""),
            name=str(res.get("name") or ""),
            resource_request=True,
            subresource=str(res.get("subresource") or ""),
        )
    assert isinstance(non, dict)
    return Attributes(
        verb=str(non.get("verb") or ""),
        group="",
        resource="",
        namespace="",
        name="",
        resource_request=False,
        path=str(non.get("path") or ""),
    )


# -- the whole chain -----------------------------------------------------------------------


class AccessControl:
    """Authentication and authorization of the simulated API server, in one place.

    ``authenticate`` knows the admin token, the static tokens and the service-account
    tokens; ``authorize`` is the privileged group, then ABAC, then RBAC; ``review`` and
    ``token_request`` answer the authorization/authentication APIs."""

    def __init__(
        self,
        admin_token: str | None,
        static: Authorizer,  # static tokens and ABAC policies
        signer: TokenSigner,
        get: Getter,
        list_: Lister,
        clock: Callable[[], Any],
    ) -> None:
        self.admin_token = admin_token
        self.static = static
        self.signer = signer
        self.rbac = RbacAuthorizer(get, list_)
        self._get = get
        self._clock = clock

    # -- authentication --------------------------------------------------------------------

    def authenticate(self, token: str) -> UserInfo | None:
        if not token:
            return None
        if self.admin_token is not None and token == self.admin_token:
            return ADMIN
        static = self.static.user(token)
        if static is not None:
            return static
        if token.count(".") != 2:
            return None
        claims = self.signer.claims(token, [ISSUER])
        named = None if claims is None else service_account_of(claims)
        if claims is None or named is None:
            return None
        ns, name, uid, jti = named
        sa = self._get("/serviceaccounts", ns, name)
        meta = (sa or {}).get("metadata") or {}
        # pkg/serviceaccount/claims.go: the ServiceAccount must still exist, with the uid
        # the token was issued for, and not be on its way out.
        if sa is None or meta.get("uid") != uid or meta.get("deletionTimestamp"):
            return None
        pod = None
        for kind, obj_name, obj_uid in bound_objects(claims):
            obj = self._get(f"/{kind}s", ns, obj_name)
            obj_meta = (obj or {}).get("metadata") or {}
            if obj is None or obj_meta.get("uid") != obj_uid:
                return None
            gone_at = obj_meta.get("deletionTimestamp")
            if gone_at and gone_at <= times.rfc3339(self._clock().timestamp()):
                return None
            if kind == "pod":
                pod = (obj_name, obj_uid)
        who = ServiceAccountUser(ns, name, uid, jti, pod)
        return UserInfo(who.username, tuple(who.groups), uid, who.extra)

    def impersonate(self, user: UserInfo, headers: Mapping[str, str]) -> UserInfo:
        """``Impersonate-User``/``-Group``/``-Uid`` (kubectl ``--as``, ``--as-group``), as
        staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go: each asked-for
        identity needs the ``impersonate`` verb on users, groups, uids or (for
        ``system:serviceaccount:NS:NAME``) that ServiceAccount."""
        name = headers.get("impersonate-user")
        # The HTTP front keeps one value per header name: of several --as-group flags the
        # last counts (fewer groups, never more rights).
        groups = [headers["impersonate-group"]] if headers.get("impersonate-group") else []
        uid = headers.get("impersonate-uid", "")
        if name is None:
            if groups or uid:
                raise errors.bad_request(
                    "requested impersonation of groups or a uid without impersonating a user"
                )
            return user
        # Only what the headers ask for is checked; a ServiceAccount's own groups follow
        # from its name.
        checks = [Attributes("impersonate", "", "groups", "", g, True) for g in groups]
        if name.startswith(SA_PREFIX) and name.count(":") == 3:
            _, _, sa_ns, sa_name = name.split(":")
            checks.insert(0, Attributes("impersonate", "", "serviceaccounts", sa_ns, sa_name, True))
            if not groups:
                groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}"]
        else:
            checks.insert(0, Attributes("impersonate", "", "users", "", name, True))
        if uid:
            checks.append(Attributes("impersonate", "authentication.k8s.io", "uids", "", uid, True))
        for attrs in checks:
            if not self.authorize(user, attrs)[0]:
                raise forbidden(user.name, attrs)
        if name != "system:anonymous" and not {AUTHENTICATED, "system:unauthenticated"} & set(
            groups
        ):
            groups.append(AUTHENTICATED)
        return UserInfo(name, tuple(groups), uid)

    # -- authorization ---------------------------------------------------------------------

    def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        if MASTERS in user.groups:
            return True, ""
        if self.static.allowed(user, attrs):
            return True, ""
        return self.rbac.decide(user, attrs)

    # -- the review APIs -------------------------------------------------------------------

    def review(self, kind: str, api_version: str, body: Any, user: UserInfo) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        raw = body.get("spec")
        spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
        out: dict[str, Any] = {
            "kind": kind,
            "apiVersion": api_version,
            "metadata": {"creationTimestamp": None},
            "spec": copy.deepcopy(spec),
        }
        if kind == "SelfSubjectReview":
            out.pop("spec")
            out["status"] = {"userInfo": user.as_dict()}
        elif kind == "SelfSubjectAccessReview":
            ok, reason = self.authorize(user, access_attributes(spec, kind))
            out["status"] = {"allowed": ok, **({"reason": reason} if reason else {})}
        elif kind == "SubjectAccessReview":
            if not spec.get("user") and not spec.get("groups"):
                raise errors.invalid(
                    "authorization.k8s.io",
                    "SubjectAccessReview",
                    "",
                    [_invalid_user()],
                )
            subject = UserInfo(
                str(spec.get("user") or ""),
                tuple(spec.get("groups") or ()),
                str(spec.get("uid") or ""),
            )
            ok, reason = self.authorize(subject, access_attributes(spec, kind))
            out["status"] = {"allowed": ok, **({"reason": reason} if reason else {})}
        elif kind == "SelfSubjectRulesReview":
            namespace = str(spec.get("namespace") or "")
            resource_rules, non_resource = self.rbac.rules(user, namespace)
            if MASTERS in user.groups and not resource_rules:
                resource_rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
            out["status"] = {
                "resourceRules": resource_rules,
                "nonResourceRules": non_resource,
                # ABAC policies are not listed: say the list may be incomplete, as the
                # real server does for authorizers that cannot enumerate rules.
                "incomplete": bool(self.static.policies),
            }
        else:
            raise errors.method_not_allowed()
        return out

    def token_request(self, ns: str, name: str, body: Any) -> dict[str, Any]:
        """POST serviceaccounts/{name}/token (pkg/registry/core/serviceaccount/storage/
        token.go): a signed token for an existing ServiceAccount."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        sa = self._get("/serviceaccounts", ns, name)
        if sa is None:
            raise errors.not_found("", "serviceaccounts", name)
        spec = dict(body.get("spec") or {})
        expiration = spec.get("expirationSeconds")
        if expiration in (None, 0):
            expiration = DEFAULT_EXPIRATION_S
        if not isinstance(expiration, int):
            raise errors.bad_request("spec.expirationSeconds must be an integer")
        # pkg/apis/authentication/validation/validation.go ValidateTokenRequest
        problems = []
        if expiration < MIN_EXPIRATION_S:
            problems.append(
                FieldError(
                    "FieldValueInvalid",
                    "spec.expirationSeconds",
                    f"Invalid value: {expiration}: may not specify a duration less than 10 minutes",
                )
            )
        if expiration > MAX_EXPIRATION_S:
            problems.append(
                FieldError(
                    "FieldValueInvalid",
                    "spec.expirationSeconds",
                    f"Invalid value: {expiration}: may not specify a duration larger than "
                    "2^32 seconds",
                )
            )
        if problems:
            raise errors.invalid("authentication.k8s.io", "TokenRequest", "", problems)
        audiences = [str(a) for a in spec.get("audiences") or []] or [ISSUER]
        bound = self._bound_object(ns, name, spec.get("boundObjectRef"))
        token, exp = self.signer.issue(
            ns, name, str(sa["metadata"]["uid"]), audiences, int(expiration), bound
        )
        if bound is not None:
            spec["boundObjectRef"] = {**spec["boundObjectRef"], "uid": bound[2]}

        spec.update(audiences=audiences, expirationSeconds=expiration)
        spec.setdefault("boundObjectRef", None)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            # token.go fills in the name and namespace; a TokenRequest is never stored, so
            # it has no creationTimestamp.
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": times.rfc3339(float(exp))},
        }

    def _bound_object(self, ns: str, sa_name: str, ref: Any) -> tuple[str, str, str] | None:
        """What a TokenRequest's boundObjectRef binds the token to (token.go ``Create``)."""
        if not isinstance(ref, dict) or not ref:
            return None
        kind, api_version = str(ref.get("kind") or ""), str(ref.get("apiVersion") or "")
        obj_name, want_uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
        if api_version != "v1" or kind not in ("Pod", "Secret"):
            group, _, version = api_version.rpartition("/")
            raise errors.bad_request(
                f"cannot bind token to object of type {group}/{version}, Kind={kind}"
            )
        plural = kind.lower() + "s"
        obj = self._get(f"/{plural}", ns, obj_name)
        if obj is None:
            raise errors.not_found("", plural, obj_name)
        if kind == "Pod" and ((obj.get("spec") or {}).get("serviceAccountName") or "default") != (
            sa_name
        ):
            raise errors.bad_request(
                f'cannot bind token for serviceaccount "{sa_name}" to pod running with '
                "different serviceaccount name."
            )
        uid = str(obj["metadata"]["uid"])
        if want_uid and want_uid != uid:
            raise errors.ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind} "{obj_name}": the UID in the bound '
                f"object reference ({want_uid}) does not match the UID in record. The object "
                "might have been deleted and then recreated",
                {"name": obj_name, "kind": kind},
            )
        return kind.lower(), obj_name, uid

    def admit(self, group: str, kind: str, obj: Mapping[str, Any], user: UserInfo) -> None:
        """Refuse a Role or binding write that grants more than its author holds, unless
        the author may ``escalate`` (roles) or ``bind`` (the referenced role), as the
        real RBAC storage does; ``system:masters`` is exempt."""
        if group != GROUP or MASTERS in user.groups:
            return
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        plural = kind.lower() + "s"
        if kind in ("Role", "ClusterRole"):
            if self.authorize(user, _rbac_attrs("escalate", plural, ns, name))[0]:
                return
            rules = [r for r in obj.get("rules") or () if isinstance(r, Mapping)]
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = obj.get("roleRef") or {}
            ref_plural = str(ref.get("kind") or "").lower() + "s"
            ref_name = str(ref.get("name") or "")
            if self.authorize(user, _rbac_attrs("bind", ref_plural, ns, ref_name))[0]:
                return
            rules = self.rbac._role_rules(ref, ns)
        else:
            return
        owner = [rule for _, rule in self.rbac.visit(user, ns)]
        missing = missing_rights(owner, rules)
        if missing:
            groups = "[" + " ".join(json.dumps(g) for g in user.groups) + "]"
            raise errors.forbidden(
                GROUP,
                plural,
                name,
                f"user {json.dumps(user.name)} (groups={groups}) is attempting to grant RBAC "
                "permissions not currently held:\n" + "\n".join(missing),
            )


def _rbac_attrs(verb: str, plural: str, ns: str, name: str) -> Attributes:
    return Attributes(verb, GROUP, plural, ns, name, True)


def _invalid_user() -> Any:
    return FieldError(
        "FieldValueInvalid",
        "spec.user",
        'Invalid value: "": at least one of user or group must be specified',
    )


# -- privilege escalation (pkg/registry/rbac/{role,clusterrole,rolebinding,
# clusterrolebinding}/policybased and pkg/registry/rbac/validation/rule.go) ----------------


def _atoms(rule: Mapping[str, Any]) -> list[dict[str, list[str]]]:
    """``BreakdownRule``: one rule per group, resource, verb (and resource name)."""
    out: list[dict[str, list[str]]] = []
    verbs = list(rule.get("verbs") or [])
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in verbs:
                names = rule.get("resourceNames") or []
                for name in names or [None]:
                    atom = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    if name is not None:
                        atom["resourceNames"] = [name]
                    out.append(atom)
    for url in rule.get("nonResourceURLs") or []:
        for verb in verbs:
            out.append({"nonResourceURLs": [url], "verbs": [verb]})
    return out


def _resources_cover(owner: list[str], wanted: list[str]) -> bool:
    if "*" in owner:
        return True
    for resource in wanted:
        if resource in owner:
            continue
        _, sep, sub = resource.partition("/")
        if not (sep and f"*/{sub}" in owner):
            return False
    return True


def _urls_cover(owner: list[str], wanted: list[str]) -> bool:
    for url in wanted:
        if not any(
            o == "*" or o == url or (o.endswith("*") and url.startswith(o.rstrip("*")))
            for o in owner
        ):
            return False
    return True


def _covers(owner: Mapping[str, Any], atom: Mapping[str, list[str]]) -> bool:
    """``ruleCovers``."""
    o_verbs = list(owner.get("verbs") or [])
    o_groups = list(owner.get("apiGroups") or [])
    o_names = list(owner.get("resourceNames") or [])
    verbs = "*" in o_verbs or set(atom.get("verbs", [])) <= set(o_verbs)
    groups = "*" in o_groups or set(atom.get("apiGroups", [])) <= set(o_groups)
    resources = _resources_cover(list(owner.get("resources") or []), atom.get("resources", []))
    urls = _urls_cover(list(owner.get("nonResourceURLs") or []), atom.get("nonResourceURLs", []))
    names = not o_names or (
        bool(atom.get("resourceNames")) and set(atom["resourceNames"]) <= set(o_names)
    )
    return verbs and groups and resources and urls and names


def _go_quote_list(values: list[str]) -> str:
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _compact_string(rule: Mapping[str, list[str]]) -> str:
    """``rbacv1helpers.CompactString``."""
    parts = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ):
        if rule.get(key):
            parts.append(f"{label}:{_go_quote_list(list(rule[key]))}")
    return "{" + ", ".join(parts) + "}"


def missing_rights(
    owner_rules: list[Mapping[str, Any]], rules: list[Mapping[str, Any]]
) -> list[str]:
    """``Covers`` then ``CompactRules``: the rights ``rules`` grant that the owner lacks,
    described and sorted as the real message lists them."""
    missing = [
        atom
        for rule in rules
        for atom in _atoms(rule)
        if not any(_covers(owner, atom) for owner in owner_rules)
    ]
    simple: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    compacted: list[Mapping[str, list[str]]] = []
    for atom in missing:
        if atom.get("resources"):
            key = (
                atom["apiGroups"][0],
                atom["resources"][0],
                (atom.get("resourceNames") or [""])[0],
            )
            if key in simple:
                simple[key]["verbs"] = simple[key]["verbs"] + atom["verbs"]
            else:
                simple[key] = {k: list(v) for k, v in atom.items()}
        else:
            compacted.append(atom)
    compacted.extend(simple.values())
    return sorted({_compact_string(r) for r in compacted})
