"""The kinds the simulated API server serves, built-in and from CRDs.

A ``ResourceType`` says everything the generic handlers need: where it lives in the URL
space, its discovery entry (verbs, short names, subresources), how names are validated,
which fields carry status, and for custom resources the schema to validate against.
Storage is keyed by group and plural, so one object is served in every version of its
group (custom resources convert with the ``None`` strategy: only ``apiVersion`` changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Kinds that are answered, never stored: a POST gets the review back with its status.
REVIEW_KINDS = frozenset(
    {
        "SelfSubjectAccessReview",
        "SelfSubjectRulesReview",
        "SubjectAccessReview",
        "SelfSubjectReview",
    }
)

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()  # "status", "eviction", "binding", "scale", "log"
    name_rule: str = "dns1123-subdomain"
    singular: str = ""
    # Custom resources only
    schema: dict[str, Any] | None = None
    status_schema: bool = False
    printer_columns: tuple[dict[str, Any], ...] = ()
    storage_version: str = ""
    served_versions: tuple[str, ...] = ()
    crd_name: str = ""
    # Garbage collection default when a delete names no propagation policy
    default_propagation: str = "Background"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """Storage key, the same across the versions of a group."""
        return f"{self.group}/{self.plural}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def is_custom(self) -> bool:
        return self.schema is not None

    def at_version(self, version: str) -> ResourceType:
        from dataclasses import replace

        return replace(self, version=version)


def _core(kind: str, plural: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(
        group="", version="v1", kind=kind, plural=plural, namespaced=namespaced, **kw
    )


BUILTIN: tuple[ResourceType, ...] = (
    _core(
        "Namespace",
        "namespaces",
        False,
        short_names=("ns",),
        subresources=("status",),
        name_rule="dns1123-label",
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    _core("Node", "nodes", False, short_names=("no",), subresources=("status",)),
    _core(
        "Pod",
        "pods",
        True,
        short_names=("po",),
        categories=("all",),
        subresources=("status", "eviction", "binding", "log"),
    ),
    _core("Event", "events", True, short_names=("ev",)),
    _core("ConfigMap", "configmaps", True, short_names=("cm",)),
    _core("Secret", "secrets", True),
    # ``token`` is the TokenRequest subresource (``kubectl create token``), see sim/tokens.py.
    _core("ServiceAccount", "serviceaccounts", True, short_names=("sa",), subresources=("token",)),
    _core(
        "Service",
        "services",
        True,
        short_names=("svc",),
        categories=("all",),
        subresources=("status",),
        name_rule="dns1035-label",
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
    ),
    ResourceType(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        True,
        short_names=("pdb",),
        subresources=("status",),
    ),
    # No status subresource: NetworkPolicyStatus left networking.k8s.io/v1 in 1.28.
    ResourceType(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        True,
        short_names=("netpol",),
    ),
    ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True),
    # RBAC, stored and enforced (sim/rbac.py); kubectl prints roles with the default
    # Name/Created At columns and bindings with Name/Role/Age.
    # Their names are path segments (ValidateRBACName): "system:discovery" is one.
    *(
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            kind,
            kind.lower() + "s",
            not kind.startswith("Cluster"),
            name_rule="path-segment",
        )
        for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    ),
    # Reviews: create-only, answered and never stored (sim/rbac.py).
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        True,
        short_names=("deploy",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    ResourceType(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        True,
        short_names=("rs",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    ResourceType(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        True,
        short_names=("ds",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType(
        "batch",
        "v1",
        "Job",
        "jobs",
        True,
        categories=("all",),
        subresources=("status",),
        default_propagation="Orphan",
    ),
    ResourceType(
        "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, short_names=("pc",)
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        short_names=("crd", "crds"),
        subresources=("status",),
    ),
)

# Groups that exist in a real cluster's discovery in this order (kubectl prints them so).
GROUP_ORDER = (
    "",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "batch",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "coordination.k8s.io",
    "scheduling.k8s.io",
    "apiextensions.k8s.io",
)
