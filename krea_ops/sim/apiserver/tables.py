"""Server-side printing: ``meta.k8s.io/v1`` Tables like the real API server sends them.

``kubectl get`` asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and
prints whatever columns and cells come back, so the columns here are the ones of
``pkg/printers/internalversion/printers.go`` (v1.32) for built-in kinds, generated with
``Wide: true`` as the server always does (``-o wide`` only unhides priority-1 columns), and
the ``apiextensions-apiserver`` table convertor for custom resources: Name, then the CRD
version's ``additionalPrinterColumns`` evaluated as JSONPath, or Name and Age when the
version declares none. Built-in kinds without a printer (CustomResourceDefinition) get the
generic convertor's Name and Created At.

Ages are ``duration.HumanDuration`` ("45s", "5m10s", "3h12m", "2d3h", "3y20d"...).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from krea_ops.kube import times as kube_times
from krea_ops.sim.apiserver.selectors import (
    BUILTIN_GROUPS,
    SelectorError,
    label_selector_from_spec,
)

__all__ = [
    "TableError",
    "column_definitions",
    "evaluate_jsonpath",
    "human_duration",
    "parse_time",
    "to_table",
    "translate_timestamp_since",
]


class TableError(ValueError):
    """A table request the server rejects (400); ``str()`` is the Status message."""


# -- time ----------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (or a datetime) as an aware datetime; None if absent or bad.

    The parsing is the product's (``krea_ops.kube.times``); the printers do their
    arithmetic on datetimes, as the Go printers do on ``time.Time``.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    seconds = kube_times.parse_time(value) if isinstance(value, str) else None
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _tdiv(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


def human_duration(d: timedelta) -> str:
    """``duration.HumanDuration``: ~2-3 significant figures of a duration."""
    ns = ((d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds) * 1000
    seconds = _tdiv(ns, 10**9)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60 * 2:
        return f"{seconds}s"
    minutes = ns // (60 * 10**9)
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = ns // (3600 * 10**9)
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def translate_timestamp_since(value: Any, now: datetime) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` when unset."""
    t = parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration(now - t)


def _rfc3339(value: Any) -> str:
    t = parse_time(value)
    if t is None:
        return "0001-01-01T00:00:00Z"
    return kube_times.rfc3339(t.timestamp())


# -- column descriptions (the SwaggerDoc strings the real server sends) --------------------

_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, "
    "although some resources may allow a client to request the generation of an "
    "appropriate name automatically. Name is primarily intended for creation "
    "idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object "
    "was created. It is not guaranteed to be set in happens-before order across "
    "separate operations. Clients may not set this value. It is represented in "
    "RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for "
    "lists. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#metadata"
)
_CONTAINERS_DESC = "Names of each container in the template."
_IMAGES_DESC = "Images referenced by each container in the template."
_SELECTOR_LS = (
    "More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/"
    "labels/#label-selectors"
)


def _col(
    name: str, type_: str = "string", description: str = "", *, priority: int = 0, format_: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "format": format_,
        "description": description,
        "priority": priority,
    }


_NAME = _col("Name", "string", _NAME_DESC, format_="name")
_AGE = _col("Age", "string", _AGE_DESC)
_CONTAINERS = _col("Containers", "string", _CONTAINERS_DESC, priority=1)
_IMAGES = _col("Images", "string", _IMAGES_DESC, priority=1)


def _selector_col(desc: str) -> dict[str, Any]:
    return _col("Selector", "string", desc, priority=1)


_COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("", "Pod"): [
        _NAME,
        _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", "string", "The aggregate status of the containers in this pod."),
        _col(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been "
            "restarted and when the last container in this pod has "
            "restarted.",
        ),
        _AGE,
        _col(
            "IP",
            "string",
            "podIP address allocated to the pod. Routable at least within the "
            "cluster. Empty if not yet allocated.",
            priority=1,
        ),
        _col(
            "Node",
            "string",
            "NodeName indicates in which node this pod is scheduled. If "
            "empty, this pod is a candidate for scheduling by the scheduler "
            "defined in schedulerName. Once this field is set, the kubelet "
            "for this node becomes responsible for the lifecycle of this "
            "pod. This field should not be used to express a desire for the "
            "pod to be scheduled on a specific node. https://kubernetes.io/"
            "docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
            priority=1,
        ),
        _col(
            "Nominated Node",
            "string",
            "nominatedNodeName is set only when this pod preempts "
            "other pods on the node, but it cannot be scheduled "
            "right away as preemption victims receive their "
            "graceful termination periods. This field does not "
            "guarantee that the pod will be scheduled on this "
            "node. Scheduler may decide to place the pod elsewhere "
            "if other nodes become available sooner. Scheduler may "
            "also decide to give the resources on this node to a "
            "higher priority pod that is created after preemption. "
            "As a result, this field may be different than "
            "PodSpec.nodeName when the pod is scheduled.",
            priority=1,
        ),
        _col(
            "Readiness Gates",
            "string",
            "If specified, all readiness gates will be evaluated "
            "for pod readiness. A pod is ready when all its "
            "containers are ready AND all conditions specified in "
            'the readiness gates have status equal to "True" '
            "More info: https://git.k8s.io/enhancements/keps/"
            "sig-network/580-pod-readiness-gates",
            priority=1,
        ),
    ],
    ("", "Node"): [
        _NAME,
        _col("Status", "string", "The status of the node"),
        _col("Roles", "string", "The roles of the node"),
        _AGE,
        _col("Version", "string", "Kubelet Version reported by the node."),
        _col(
            "Internal-IP",
            "string",
            "List of addresses reachable to the node. Queried from cloud provider, if available.",
            priority=1,
        ),
        _col(
            "External-IP",
            "string",
            "List of addresses reachable to the node. Queried from cloud provider, if available.",
            priority=1,
        ),
        _col(
            "OS-Image",
            "string",
            "OS Image reported by the node from /etc/os-release (e.g. "
            "Debian GNU/Linux 7 (wheezy)).",
            priority=1,
        ),
        _col(
            "Kernel-Version",
            "string",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            priority=1,
        ),
        _col(
            "Container-Runtime",
            "string",
            "ContainerRuntime Version reported by the node "
            "through runtime remote API (e.g. "
            "containerd://1.4.2).",
            priority=1,
        ),
    ],
    ("", "Namespace"): [_NAME, _col("Status", "string", "The status of the namespace"), _AGE],
    ("", "Event"): [
        _col(
            "Last Seen",
            "string",
            "The time at which the most recent occurrence of this event was recorded.",
        ),
        _col(
            "Type",
            "string",
            "Type of this event (Normal, Warning), new types could be added in the future",
        ),
        _col(
            "Reason",
            "string",
            "This should be a short, machine understandable string that "
            "gives the reason for the transition into the object's current "
            "status.",
        ),
        _col("Object", "string", "The object that this event is about."),
        _col(
            "Subobject",
            "string",
            "If referring to a piece of an object instead of an entire "
            "object, this string should contain a valid JSON/Go field "
            "access statement, such as "
            "desiredState.manifest.containers[2].",
            priority=1,
        ),
        _col(
            "Source",
            "string",
            "The component reporting this event. Should be a short machine understandable string.",
            priority=1,
        ),
        _col("Message", "string", "A human-readable description of the status of this operation."),
        _col(
            "First Seen",
            "string",
            "The time at which the event was first recorded. (Time of "
            "server receipt is in TypeMeta.)",
            priority=1,
        ),
        _col("Count", "string", "The number of times this event has occurred.", priority=1),
        {**_NAME, "priority": 1},
    ],
    ("", "ConfigMap"): [
        _NAME,
        _col(
            "Data",
            "string",
            "Data contains the configuration data. Each key must consist of "
            "alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 "
            "byte sequences must use the BinaryData field. The keys stored "
            "in Data must not overlap with the keys in the BinaryData field, "
            "this is enforced during validation process.",
        ),
        _AGE,
    ],
    ("", "Secret"): [
        _NAME,
        _col(
            "Type",
            "string",
            "Used to facilitate programmatic handling of secret data. More "
            "info: https://kubernetes.io/docs/concepts/configuration/secret/"
            "#secret-types",
        ),
        _col(
            "Data",
            "string",
            "Data contains the secret data. Each key must consist of "
            "alphanumeric characters, '-', '_' or '.'. The serialized form "
            "of the secret data is a base64 encoded string, representing the "
            "arbitrary (possibly non-string) data value here. Described in "
            "https://tools.ietf.org/html/rfc4648#section-4",
        ),
        _AGE,
    ],
    ("", "ServiceAccount"): [
        _NAME,
        _col(
            "Secrets",
            "string",
            "Secrets is a list of the secrets in the same namespace that "
            "pods running using this ServiceAccount are allowed to use.",
        ),
        _AGE,
    ],
    # pkg/printers/internalversion/printers.go roleBindingsColumnDefinitions and
    # clusterRoleBindingsColumnDefinitions (Roles and ClusterRoles have no printer: the
    # default Name/Created At columns).
    **{
        ("rbac.authorization.k8s.io", kind): [
            _NAME,
            _col("Role", "string", role_doc),
            _AGE,
            _col("Users", "string", f"Users in the {scope}", priority=1),
            _col("Groups", "string", f"Groups in the {scope}", priority=1),
            _col("ServiceAccounts", "string", f"ServiceAccounts in the {scope}", priority=1),
        ]
        for kind, scope, role_doc in (
            (
                "RoleBinding",
                "roleBinding",
                "RoleRef can reference a Role in the current namespace or a ClusterRole in "
                "the global namespace. If the RoleRef cannot be resolved, the Authorizer "
                "must return an error.",
            ),
            (
                "ClusterRoleBinding",
                "clusterRoleBinding",
                "RoleRef can only reference a ClusterRole in the global namespace. If the "
                "RoleRef cannot be resolved, the Authorizer must return an error.",
            ),
        )
    },
    ("", "Service"): [
        _NAME,
        _col(
            "Type",
            "string",
            "type determines how the Service is exposed. Defaults to "
            "ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, "
            "and LoadBalancer.",
        ),
        _col(
            "Cluster-IP",
            "string",
            "clusterIP is the IP address of the service and is usually assigned randomly.",
        ),
        _col(
            "External-IP",
            "string",
            "externalIPs is a list of IP addresses for which nodes in "
            "the cluster will also accept traffic for this service.",
        ),
        _col(
            "Port(s)",
            "string",
            "The list of ports that are exposed by this service. More "
            "info: https://kubernetes.io/docs/concepts/services-networking/"
            "service/#virtual-ips-and-service-proxies",
        ),
        _AGE,
        _col(
            "Selector",
            "string",
            "Route service traffic to pods with label keys and values "
            "matching this selector. If empty or not present, the service "
            "is assumed to have an external process managing its "
            "endpoints, which Kubernetes will not modify. Only applies to "
            "types ClusterIP, NodePort, and LoadBalancer. Ignored if type "
            "is ExternalName. More info: https://kubernetes.io/docs/"
            "concepts/services-networking/service/",
            priority=1,
        ),
    ],
    ("", "Endpoints"): [
        _NAME,
        _col("Endpoints", "string", "The set of all endpoints is the union of all subsets."),
        _AGE,
    ],
    ("policy", "PodDisruptionBudget"): [
        _NAME,
        _col("Min Available", "string", "The minimum number of pods that must be available."),
        _col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
        _col(
            "Allowed Disruptions",
            "integer",
            "Calculated number of pods that may be disrupted at this time.",
        ),
        _AGE,
    ],
    # printers.go networkPolicyColumnDefinitions (the description is extensions/v1beta1's).
    ("networking.k8s.io", "NetworkPolicy"): [
        _NAME,
        _col(
            "Pod-Selector",
            "string",
            "Selects the pods to which this NetworkPolicy object applies. The array of "
            "ingress rules is applied to any pods selected by this field. Multiple network "
            "policies can select the same set of pods. In this case, the ingress rules for "
            "each are combined additively. This field is NOT optional and follows standard "
            "label selector semantics. An empty podSelector matches all pods in this "
            "namespace.",
        ),
        _AGE,
    ],
    ("coordination.k8s.io", "Lease"): [
        _NAME,
        _col(
            "Holder",
            "string",
            "holderIdentity contains the identity of the holder of a "
            "current lease. If Coordinated Leader Election is used, the "
            "holder identity must be equal to the elected "
            "LeaseCandidate.metadata.name field.",
        ),
        _AGE,
    ],
    ("apps", "Deployment"): [
        _NAME,
        _col("Ready", "string", "Number of the pod with ready state"),
        _col(
            "Up-to-date",
            "string",
            "Total number of non-terminated pods targeted by this "
            "deployment that have the desired template spec.",
        ),
        _col(
            "Available",
            "string",
            "Total number of available pods (ready for at least "
            "minReadySeconds) targeted by this deployment.",
        ),
        _AGE,
        _CONTAINERS,
        _IMAGES,
        _selector_col(
            "Label selector for pods. Existing ReplicaSets whose pods are selected by "
            "this will be the ones affected by this deployment."
        ),
    ],
    ("apps", "ReplicaSet"): [
        _NAME,
        _col(
            "Desired",
            "integer",
            "Replicas is the number of desired replicas. This is a "
            "pointer to distinguish between explicit zero and "
            "unspecified. Defaults to 1.",
        ),
        _col("Current", "integer", "Replicas is the most recently observed number of replicas."),
        _col("Ready", "integer", "The number of ready replicas for this replica set."),
        _AGE,
        _CONTAINERS,
        _IMAGES,
        _selector_col(
            "Selector is a label query over pods that should match the replica count. "
            "If the selector is empty, it is defaulted to the labels present on the "
            "pod template. " + _SELECTOR_LS
        ),
    ],
    ("apps", "DaemonSet"): [
        _NAME,
        _col(
            "Desired",
            "integer",
            "The total number of nodes that should be running the daemon "
            "pod (including nodes correctly running the daemon pod).",
        ),
        _col(
            "Current",
            "integer",
            "The number of nodes that are running at least 1 daemon pod "
            "and are supposed to run the daemon pod.",
        ),
        _col(
            "Ready",
            "integer",
            "The number of nodes that should be running the daemon pod and "
            "have one or more of the daemon pod running and ready.",
        ),
        _col(
            "Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"
        ),
        _col(
            "Available",
            "integer",
            "The number of nodes that should be running the daemon "
            "pod and have one or more of the daemon pod running and "
            "available (ready for at least spec.minReadySeconds)",
        ),
        _col(
            "Node Selector",
            "string",
            "NodeSelector is a selector which must be true for the "
            "pod to fit on a node. Selector which must match a "
            "node's labels for the pod to be scheduled on that "
            "node.",
        ),
        _AGE,
        _CONTAINERS,
        _IMAGES,
        _selector_col(
            "A label query over pods that are managed by the daemon set. Must match "
            "in order to be controlled. It must match the pod template's labels. " + _SELECTOR_LS
        ),
    ],
    ("apps", "StatefulSet"): [
        _NAME,
        _col("Ready", "string", "Number of the pod with ready state"),
        _AGE,
        _CONTAINERS,
        _IMAGES,
    ],
    ("batch", "Job"): [
        _NAME,
        _col("Status", "string", "Status of the job."),
        _col("Completions", "string", "The number of pods which reached phase Succeeded."),
        _col("Duration", "string", "Time required to complete the job."),
        _AGE,
        _CONTAINERS,
        _IMAGES,
        _selector_col(
            "A label query over pods that should match the pod count. Normally, the "
            "system sets this field for you. " + _SELECTOR_LS
        ),
    ],
    ("batch", "CronJob"): [
        _NAME,
        _col(
            "Schedule",
            "string",
            "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
        ),
        _col(
            "Timezone",
            "string",
            "The time zone name for the given schedule, see "
            "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
        ),
        _col(
            "Suspend",
            "boolean",
            "This flag tells the controller to suspend subsequent "
            "executions, it does not apply to already started "
            "executions.  Defaults to false.",
        ),
        _col("Active", "integer", "A list of pointers to currently running jobs."),
        _col(
            "Last Schedule",
            "string",
            "Information when was the last time the job was successfully scheduled.",
        ),
        _AGE,
        _CONTAINERS,
        _IMAGES,
        _selector_col(
            "A label query over pods that should match the pod count. Normally, the "
            "system sets this field for you. " + _SELECTOR_LS
        ),
    ],
    ("scheduling.k8s.io", "PriorityClass"): [
        _NAME,
        _col(
            "Value",
            "integer",
            "value represents the integer value of this priority class. "
            "This is the actual priority that pods receive when they have "
            "the name of this class in their pod spec.",
        ),
        _col(
            "Global-Default",
            "boolean",
            "globalDefault specifies whether this PriorityClass "
            "should be considered as the default priority for "
            "pods that do not have any priority class.",
        ),
        _AGE,
        _col(
            "PreemptionPolicy",
            "string",
            "preemptionPolicy is the Policy for preempting pods "
            "with lower priority. One of Never, "
            "PreemptLowerPriority. Defaults to "
            "PreemptLowerPriority if unset.",
        ),
    ],
}
_COLUMNS[("events.k8s.io", "Event")] = _COLUMNS[("", "Event")]

_DEFAULT_COLUMNS = [_NAME, _col("Created At", "date", _AGE_DESC)]


# -- helpers shared by the printers --------------------------------------------------------


def _m(obj: Any) -> Mapping[str, Any]:
    return obj if isinstance(obj, Mapping) else {}


def _lst(obj: Any) -> list[Any]:
    return obj if isinstance(obj, list) else []


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def _name(obj: Mapping[str, Any]) -> str:
    return str(_m(obj.get("metadata")).get("name") or "")


def _age(obj: Mapping[str, Any], now: datetime) -> str:
    return translate_timestamp_since(_m(obj.get("metadata")).get("creationTimestamp"), now)


def _format_labels(labels: Any) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, ``<none>`` when empty."""
    items = sorted(_m(labels).items())
    return ",".join(f"{k}={v}" for k, v in items) or "<none>"


def _selector_string(spec: Any) -> str:
    """``LabelSelectorAsSelector(s).String()``; ``<invalid>`` when it does not convert."""
    try:
        return str(label_selector_from_spec(spec if isinstance(spec, Mapping) else None))
    except SelectorError:
        return "<invalid>"


def _format_label_selector(spec: Any) -> str:
    """``metav1.FormatLabelSelector``."""
    try:
        s = str(label_selector_from_spec(spec if isinstance(spec, Mapping) else None))
    except SelectorError:
        return "<error>"
    return s or "<none>"


def _containers(template_spec: Any) -> tuple[str, str]:
    """``layoutContainerCells``: names and images joined by commas."""
    containers = [_m(c) for c in _lst(_m(template_spec).get("containers"))]
    return (
        ",".join(str(c.get("name") or "") for c in containers),
        ",".join(str(c.get("image") or "") for c in containers),
    )


def _pod_template_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _m(_m(_m(obj.get("spec")).get("template")).get("spec"))


def _condition_true(conditions: Any, type_: str) -> bool:
    """``hasJobCondition``: the first condition of that type, and whether it is True."""
    for c in _lst(conditions):
        if _m(c).get("type") == type_:
            return _m(c).get("status") == "True"
    return False


def _int_or_string(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(int(value))
    return str(value)


# -- built-in printers ---------------------------------------------------------------------

_POD_SUCCEEDED = [
    {
        "type": "Completed",
        "status": "True",
        "reason": "Succeeded",
        "message": "The pod has completed successfully.",
    }
]
_POD_FAILED = [
    {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}
]

Row = tuple[list[Any], list[dict[str, Any]] | None]


def _restartable(container: Any) -> bool:
    return container is not None and _m(container).get("restartPolicy") == "Always"


def _later(current: datetime | None, candidate: Any) -> datetime | None:
    t = parse_time(candidate)
    if t is not None and (current is None or current < t):
        return t
    return current


def _print_pod(pod: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(pod.get("spec")), _m(pod.get("status"))
    meta = _m(pod.get("metadata"))
    restarts = restartable_init_restarts = 0
    total = len(_lst(spec.get("containers")))
    ready = 0
    last_restart: datetime | None = None
    last_restartable_init_restart: datetime | None = None

    phase = str(status.get("phase") or "")
    reason = phase
    if status.get("reason"):
        reason = str(status["reason"])
    for cond in _lst(status.get("conditions")):
        c = _m(cond)
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    conditions = None
    if phase == "Succeeded":
        conditions = copy.deepcopy(_POD_SUCCEEDED)
    elif phase == "Failed":
        conditions = copy.deepcopy(_POD_FAILED)

    init_containers: dict[str, Any] = {}
    for c in _lst(spec.get("initContainers")):
        init_containers[str(_m(c).get("name"))] = c
        if _restartable(c):
            total += 1

    init_statuses = [_m(s) for s in _lst(status.get("initContainerStatuses"))]
    initializing = False
    for i, cs in enumerate(init_statuses):
        state, last = _m(cs.get("state")), _m(cs.get("lastState"))
        restarts += _int(cs.get("restartCount"))
        if last.get("terminated") is not None:
            last_restart = _later(last_restart, _m(last["terminated"]).get("finishedAt"))
        restartable = _restartable(init_containers.get(str(cs.get("name"))))
        if restartable:
            restartable_init_restarts += _int(cs.get("restartCount"))
            if last.get("terminated") is not None:
                last_restartable_init_restart = _later(
                    last_restartable_init_restart, _m(last["terminated"]).get("finishedAt")
                )
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated is not None and _int(_m(terminated).get("exitCode")) == 0:
            continue
        if restartable and cs.get("started") is True:
            if cs.get("ready"):
                ready += 1
            continue
        if terminated is not None:
            t = _m(terminated)
            if not t.get("reason"):
                if _int(t.get("signal")) != 0:
                    reason = f"Init:Signal:{_int(t.get('signal'))}"
                else:
                    reason = f"Init:ExitCode:{_int(t.get('exitCode'))}"
            else:
                reason = "Init:" + str(t["reason"])
        elif (
            waiting is not None
            and _m(waiting).get("reason")
            and _m(waiting).get("reason") != "PodInitializing"
        ):
            reason = "Init:" + str(_m(waiting)["reason"])
        else:
            reason = f"Init:{i}/{len(_lst(spec.get('initContainers')))}"
        initializing = True
        break

    if not initializing or _condition_true(status.get("conditions"), "Initialized"):
        restarts = restartable_init_restarts
        last_restart = last_restartable_init_restart
        has_running = False
        for cs in reversed([_m(s) for s in _lst(status.get("containerStatuses"))]):
            state, last = _m(cs.get("state")), _m(cs.get("lastState"))
            restarts += _int(cs.get("restartCount"))
            if last.get("terminated") is not None:
                last_restart = _later(last_restart, _m(last["terminated"]).get("finishedAt"))
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting is not None and _m(waiting).get("reason"):
                reason = str(_m(waiting)["reason"])
            elif terminated is not None and _m(terminated).get("reason"):
                reason = str(_m(terminated)["reason"])
            elif terminated is not None:
                t = _m(terminated)
                if _int(t.get("signal")) != 0:
                    reason = f"Signal:{_int(t.get('signal'))}"
                else:
                    reason = f"ExitCode:{_int(t.get('exitCode'))}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(status.get("conditions"), "Ready") else "NotReady"

    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    restarts_str = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_str = f"{restarts} ({human_duration(now - last_restart)} ago)"

    pod_ips = _lst(status.get("podIPs"))
    pod_ip = str(_m(pod_ips[0]).get("ip") or "") if pod_ips else str(status.get("podIP") or "")
    readiness_gates = "<none>"
    gates = _lst(spec.get("readinessGates"))
    if gates:
        true_conditions = 0
        for gate in gates:
            for cond in _lst(status.get("conditions")):
                if _m(cond).get("type") == _m(gate).get("conditionType"):
                    if _m(cond).get("status") == "True":
                        true_conditions += 1
                    break
        readiness_gates = f"{true_conditions}/{len(gates)}"
    cells = [
        _name(pod),
        f"{ready}/{total}",
        reason,
        restarts_str,
        _age(pod, now),
        pod_ip or "<none>",
        str(spec.get("nodeName") or "") or "<none>",
        str(status.get("nominatedNodeName") or "") or "<none>",
        readiness_gates,
    ]
    return cells, conditions


def _node_roles(labels: Mapping[str, Any]) -> list[str]:
    roles = set()
    for k, v in labels.items():
        if k.startswith("node-role.kubernetes.io/"):
            role = k[len("node-role.kubernetes.io/") :]
            if role:
                roles.add(role)
        elif k == "kubernetes.io/role" and v:
            roles.add(str(v))
    return sorted(roles)


def _print_node(node: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(node.get("spec")), _m(node.get("status"))
    conditions = {_m(c).get("type"): _m(c) for c in _lst(status.get("conditions"))}
    states = []
    if "Ready" in conditions:
        states.append("Ready" if conditions["Ready"].get("status") == "True" else "NotReady")
    if not states:
        states.append("Unknown")
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = ",".join(_node_roles(_m(_m(node.get("metadata")).get("labels")))) or "<none>"
    info = _m(status.get("nodeInfo"))

    def address(kind: str) -> str:
        for a in _lst(status.get("addresses")):
            if _m(a).get("type") == kind:
                return str(_m(a).get("address") or "")
        return "<none>"

    cells = [
        _name(node),
        ",".join(states),
        roles,
        _age(node, now),
        str(info.get("kubeletVersion") or ""),
        address("InternalIP"),
        address("ExternalIP"),
        str(info.get("osImage") or "") or "<unknown>",
        str(info.get("kernelVersion") or "") or "<unknown>",
        str(info.get("containerRuntimeVersion") or "") or "<unknown>",
    ]
    return cells, None


def _print_namespace(ns: Mapping[str, Any], now: datetime) -> Row:
    return [_name(ns), str(_m(ns.get("status")).get("phase") or ""), _age(ns, now)], None


def _core_event(ev: Mapping[str, Any]) -> Mapping[str, Any]:
    """An events.k8s.io/v1 Event in core/v1 field names (what the shared printer reads)."""
    if "regarding" not in ev and "note" not in ev and "deprecatedSource" not in ev:
        return ev
    return {
        "metadata": ev.get("metadata"),
        "involvedObject": ev.get("regarding"),
        "reason": ev.get("reason"),
        "message": ev.get("note"),
        "source": ev.get("deprecatedSource"),
        "firstTimestamp": ev.get("deprecatedFirstTimestamp"),
        "lastTimestamp": ev.get("deprecatedLastTimestamp"),
        "count": ev.get("deprecatedCount"),
        "type": ev.get("type"),
        "eventTime": ev.get("eventTime"),
        "series": ev.get("series"),
        "reportingComponent": ev.get("reportingController"),
        "reportingInstance": ev.get("reportingInstance"),
    }


def _print_event(event: Mapping[str, Any], now: datetime) -> Row:
    ev = _core_event(event)
    first = translate_timestamp_since(ev.get("firstTimestamp"), now)
    if parse_time(ev.get("firstTimestamp")) is None:
        first = translate_timestamp_since(ev.get("eventTime"), now)
    last = translate_timestamp_since(ev.get("lastTimestamp"), now)
    if parse_time(ev.get("lastTimestamp")) is None:
        last = first
    count = _int(ev.get("count"))
    series = ev.get("series")
    if series is not None:
        last = translate_timestamp_since(_m(series).get("lastObservedTime"), now)
        count = _int(_m(series).get("count"))
    elif count == 0:
        count = 1
    involved = _m(ev.get("involvedObject"))
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = _m(ev.get("source"))
    component = str(source.get("component") or "") or str(ev.get("reportingComponent") or "")
    instance = str(source.get("host") or "") or str(ev.get("reportingInstance") or "")
    source_str = component + ", " + instance if instance else component
    cells = [
        last,
        str(ev.get("type") or ""),
        str(ev.get("reason") or ""),
        target,
        str(involved.get("fieldPath") or ""),
        source_str,
        str(ev.get("message") or "").strip(),
        first,
        count,
        _name(event),
    ]
    return cells, None


def _print_configmap(cm: Mapping[str, Any], now: datetime) -> Row:
    n = len(_m(cm.get("data"))) + len(_m(cm.get("binaryData")))
    return [_name(cm), n, _age(cm, now)], None


def _print_secret(secret: Mapping[str, Any], now: datetime) -> Row:
    return [
        _name(secret),
        str(secret.get("type") or ""),
        len(_m(secret.get("data"))),
        _age(secret, now),
    ], None


def _print_service_account(sa: Mapping[str, Any], now: datetime) -> Row:
    return [_name(sa), len(_lst(sa.get("secrets"))), _age(sa, now)], None


def _print_role_binding(binding: Mapping[str, Any], now: datetime) -> Row:
    """printRoleBinding / printClusterRoleBinding: ``Kind/name`` of the role, then (wide)
    the subjects as rbac.SubjectsStrings splits them."""
    ref = _m(binding.get("roleRef"))
    users, groups, sas = [], [], []
    for subject in _lst(binding.get("subjects")):
        s = _m(subject)
        if s.get("kind") == "User":
            users.append(str(s.get("name") or ""))
        elif s.get("kind") == "Group":
            groups.append(str(s.get("name") or ""))
        elif s.get("kind") == "ServiceAccount":
            sas.append(f"{s.get('namespace') or ''}/{s.get('name') or ''}")
    return [
        _name(binding),
        f"{ref.get('kind') or ''}/{ref.get('name') or ''}",
        _age(binding, now),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(sas),
    ], None


def _service_external_ip(svc: Mapping[str, Any]) -> str:
    spec = _m(svc.get("spec"))
    external_ips = [str(ip) for ip in _lst(spec.get("externalIPs"))]
    svc_type = spec.get("type") or "ClusterIP"
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external_ips) or "<none>"
    if svc_type == "LoadBalancer":
        ingress = _lst(_m(_m(svc.get("status")).get("loadBalancer")).get("ingress"))
        found = set()
        for i in ingress:
            if _m(i).get("ip"):
                found.add(str(_m(i)["ip"]))
            elif _m(i).get("hostname"):
                found.add(str(_m(i)["hostname"]))
        lb_ips = ",".join(sorted(found))  # wide: never clipped server-side
        if external_ips:
            return ",".join([*(lb_ips.split(",") if lb_ips else []), *external_ips])
        return lb_ips or "<pending>"
    if svc_type == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _print_service(svc: Mapping[str, Any], now: datetime) -> Row:
    spec = _m(svc.get("spec"))
    cluster_ips = _lst(spec.get("clusterIPs")) or (
        [spec["clusterIP"]] if spec.get("clusterIP") else []
    )
    ports = []
    for p in _lst(spec.get("ports")):
        port = _m(p)
        proto = port.get("protocol") or "TCP"
        if _int(port.get("nodePort")) > 0:
            ports.append(f"{_int(port.get('port'))}:{_int(port.get('nodePort'))}/{proto}")
        else:
            ports.append(f"{_int(port.get('port'))}/{proto}")
    cells = [
        _name(svc),
        str(spec.get("type") or "ClusterIP"),
        str(cluster_ips[0]) if cluster_ips else "<none>",
        _service_external_ip(svc),
        ",".join(ports) or "<none>",
        _age(svc, now),
        _format_labels(spec.get("selector")),
    ]
    return cells, None


def _print_endpoints(ep: Mapping[str, Any], now: datetime) -> Row:
    subsets = _lst(ep.get("subsets"))
    if not subsets:
        return [_name(ep), "<none>", _age(ep, now)], None
    shown: list[str] = []
    limit, more, count = 3, False, 0
    for ss in map(_m, subsets):
        addresses = [_m(a) for a in _lst(ss.get("addresses"))]
        ports = [_m(p) for p in _lst(ss.get("ports"))]
        if not ports:
            count += len(addresses)
            for a in addresses:
                if len(shown) == limit:
                    more = True
                    break
                shown.append(str(a.get("ip") or ""))
            continue
        for port in ports:
            count += len(addresses)
            for a in addresses:
                if len(shown) == limit:
                    more = True
                    break
                ip = str(a.get("ip") or "")
                host = f"[{ip}]" if ":" in ip else ip
                shown.append(f"{host}:{_int(port.get('port'))}")
    text = ",".join(shown)
    if more:
        text = f"{text} + {count - limit} more..."
    return [_name(ep), text, _age(ep, now)], None


def _print_pdb(pdb: Mapping[str, Any], now: datetime) -> Row:
    spec = _m(pdb.get("spec"))
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    cells = [
        _name(pdb),
        "N/A" if min_available is None else _int_or_string(min_available),
        "N/A" if max_unavailable is None else _int_or_string(max_unavailable),
        _int(_m(pdb.get("status")).get("disruptionsAllowed")),
        _age(pdb, now),
    ]
    return cells, None


def _print_network_policy(policy: Mapping[str, Any], now: datetime) -> Row:
    """printNetworkPolicy: the pod selector as ``metav1.FormatLabelSelector`` writes it."""
    selector = _m(policy.get("spec")).get("podSelector")
    return [_name(policy), _format_label_selector(selector), _age(policy, now)], None


def _print_lease(lease: Mapping[str, Any], now: datetime) -> Row:
    holder = _m(lease.get("spec")).get("holderIdentity")
    return [_name(lease), str(holder or ""), _age(lease, now)], None


def _replicas(spec: Mapping[str, Any]) -> int:
    value = spec.get("replicas")
    return 1 if value is None else _int(value)


def _print_deployment(d: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(d.get("spec")), _m(d.get("status"))
    names, images = _containers(_pod_template_spec(d))
    cells = [
        _name(d),
        f"{_int(status.get('readyReplicas'))}/{_replicas(spec)}",
        _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")),
        _age(d, now),
        names,
        images,
        _selector_string(spec.get("selector")),
    ]
    return cells, None


def _print_replicaset(rs: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(rs.get("spec")), _m(rs.get("status"))
    names, images = _containers(_pod_template_spec(rs))
    cells = [
        _name(rs),
        _replicas(spec),
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(rs, now),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]
    return cells, None


def _print_daemonset(ds: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(ds.get("spec")), _m(ds.get("status"))
    template = _pod_template_spec(ds)
    names, images = _containers(template)
    cells = [
        _name(ds),
        _int(status.get("desiredNumberScheduled")),
        _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")),
        _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")),
        _format_labels(template.get("nodeSelector")),
        _age(ds, now),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]
    return cells, None


def _print_statefulset(sts: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(sts.get("spec")), _m(sts.get("status"))
    names, images = _containers(_pod_template_spec(sts))
    cells = [
        _name(sts),
        f"{_int(status.get('readyReplicas'))}/{_replicas(spec)}",
        _age(sts, now),
        names,
        images,
    ]
    return cells, None


def _print_job(job: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(job.get("spec")), _m(job.get("status"))
    succeeded = _int(status.get("succeeded"))
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{_int(spec['completions'])}"
    else:
        parallelism = _int(spec.get("parallelism"))
        completions = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    if start is None:
        duration = ""
    elif end is None:
        duration = human_duration(now - start)
    else:
        duration = human_duration(end - start)
    conditions = status.get("conditions")
    if _condition_true(conditions, "Complete"):
        state = "Complete"
    elif _condition_true(conditions, "Failed"):
        state = "Failed"
    elif _m(job.get("metadata")).get("deletionTimestamp"):
        state = "Terminating"
    elif _condition_true(conditions, "Suspended"):
        state = "Suspended"
    elif _condition_true(conditions, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    names, images = _containers(_pod_template_spec(job))
    cells = [
        _name(job),
        state,
        completions,
        duration,
        _age(job, now),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]
    return cells, None


def _print_cronjob(cj: Mapping[str, Any], now: datetime) -> Row:
    spec, status = _m(cj.get("spec")), _m(cj.get("status"))
    job_spec = _m(_m(spec.get("jobTemplate")).get("spec"))
    last = status.get("lastScheduleTime")
    suspend = spec.get("suspend")
    names, images = _containers(_m(_m(job_spec.get("template")).get("spec")))
    cells = [
        _name(cj),
        str(spec.get("schedule") or ""),
        "<none>" if spec.get("timeZone") is None else str(spec["timeZone"]),
        "<unset>" if suspend is None else ("True" if suspend else "False"),
        len(_lst(status.get("active"))),
        "<none>" if last is None else translate_timestamp_since(last, now),
        _age(cj, now),
        names,
        images,
        _format_label_selector(job_spec.get("selector")),
    ]
    return cells, None


def _print_priority_class(pc: Mapping[str, Any], now: datetime) -> Row:
    return [
        _name(pc),
        _int(pc.get("value")),
        bool(pc.get("globalDefault")),
        _age(pc, now),
        str(pc.get("preemptionPolicy") or ""),
    ], None


_PRINTERS = {
    ("", "Pod"): _print_pod,
    ("", "Node"): _print_node,
    ("", "Namespace"): _print_namespace,
    ("", "Event"): _print_event,
    ("events.k8s.io", "Event"): _print_event,
    ("", "ConfigMap"): _print_configmap,
    ("", "Secret"): _print_secret,
    ("", "ServiceAccount"): _print_service_account,
    ("rbac.authorization.k8s.io", "RoleBinding"): _print_role_binding,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _print_role_binding,
    ("", "Service"): _print_service,
    ("", "Endpoints"): _print_endpoints,
    ("policy", "PodDisruptionBudget"): _print_pdb,
    ("networking.k8s.io", "NetworkPolicy"): _print_network_policy,
    ("coordination.k8s.io", "Lease"): _print_lease,
    ("apps", "Deployment"): _print_deployment,
    ("apps", "ReplicaSet"): _print_replicaset,
    ("apps", "DaemonSet"): _print_daemonset,
    ("apps", "StatefulSet"): _print_statefulset,
    ("batch", "Job"): _print_job,
    ("batch", "CronJob"): _print_cronjob,
    ("scheduling.k8s.io", "PriorityClass"): _print_priority_class,
}


# -- JSONPath (the client-go subset CRD printer columns use) --------------------------------


class _JSONPathError(Exception):
    pass


def _parse_literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise _JSONPathError(f"unrecognized literal {text}") from None


def _tokenize_path(path: str) -> list[tuple[str, Any]]:
    """Split ``.a.b[0]['c.d'][*][?(@.x=='y')]`` into (kind, arg) steps."""
    steps: list[tuple[str, Any]] = []
    i, n = 0, len(path)
    if path.startswith(("$", "@")):
        i = 1
    while i < n:
        c = path[i]
        if c == ".":
            if path.startswith("..", i):
                raise _JSONPathError("recursive descent is not supported")
            i += 1
            start, name = i, []
            while i < n and path[i] not in ".[":
                if path[i] == "\\" and i + 1 < n:
                    name.append(path[i + 1])
                    i += 2
                    continue
                name.append(path[i])
                i += 1
            key = "".join(name)
            if i == start:
                continue  # a trailing or doubled dot adds nothing
            steps.append(("wildcard", None) if key == "*" else ("field", key))
        elif c == "[":
            depth, j, quote = 0, i, ""
            while j < n:
                ch = path[j]
                if quote:
                    if ch == quote:
                        quote = ""
                elif ch in "'\"":
                    quote = ch
                elif ch == "[":
                    depth += 1
                elif ch == "]":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                raise _JSONPathError("unterminated [")
            inner = path[i + 1 : j].strip()
            i = j + 1
            if inner == "*":
                steps.append(("wildcard", None))
            elif inner.startswith("?(") and inner.endswith(")"):
                steps.append(("filter", _parse_filter(inner[2:-1])))
            elif len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
                steps.append(("field", inner[1:-1]))
            else:
                parts = inner.split(":")
                if len(parts) > 3 or not all(re.fullmatch(r"\s*-?\d*\s*", p) for p in parts):
                    raise _JSONPathError(f"invalid array index {inner}")
                nums = [int(p) if p.strip() else None for p in parts]
                if len(nums) == 1:
                    if nums[0] is None:
                        raise _JSONPathError("empty index")
                    steps.append(("index", nums[0]))
                else:
                    steps.append(("slice", [*nums, None][:3]))
        else:
            raise _JSONPathError(f"unexpected {c!r} in {path}")
    return steps


_FILTER_RE = re.compile(r"^\s*(@[^=!<>]*?)\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*$")


def _parse_filter(expr: str) -> tuple[list[tuple[str, Any]], str, Any]:
    m = _FILTER_RE.match(expr)
    if m is None:
        left = expr.strip()
        if not left.startswith("@"):
            raise _JSONPathError(f"unsupported filter {expr}")
        return _tokenize_path(left), "exists", None
    left, op, right = m.groups()
    if right.startswith("@"):
        return _tokenize_path(left), op, ("path", _tokenize_path(right))
    return _tokenize_path(left), op, ("literal", _parse_literal(right))


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"  # Go's template comparison refuses int against float
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "other"


def _compare(left: Any, op: str, right: Any) -> bool:
    lk, rk = _kind_of(left), _kind_of(right)
    if lk != rk or lk == "other":
        raise _JSONPathError("incompatible types for comparison")
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if lk == "bool":
        raise _JSONPathError("invalid type for comparison")
    return bool(
        {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op]
    )


def _walk(values: list[Any], steps: list[tuple[str, Any]]) -> list[Any]:
    for kind, arg in steps:
        out: list[Any] = []
        for v in values:
            if v is None:
                continue
            if kind == "field":
                if isinstance(v, Mapping) and arg in v:
                    out.append(v[arg])
            elif kind == "wildcard":
                if isinstance(v, Mapping):
                    out.extend(v[k] for k in sorted(v))
                elif isinstance(v, list):
                    out.extend(v)
            elif kind in ("index", "slice"):
                if not isinstance(v, list):
                    raise _JSONPathError("not array or slice")
                length = len(v)
                if kind == "index":  # [n] is [n:n+1]
                    start = arg + length if arg < 0 else arg
                    end, step = start + 1, 1
                else:
                    start, end, step = arg
                    start = 0 if start is None else start + length if start < 0 else start
                    end = length if end is None else end + length if end < 0 else end
                if end == start:
                    continue  # zero elements requested
                if not 0 <= start < length or not 0 <= end <= length:
                    raise _JSONPathError("array index out of bounds")
                if start > end:
                    raise _JSONPathError("starting index is greater than ending index")
                if step is not None and step <= 0:
                    raise _JSONPathError("step must be > 0")
                out.extend(v[start : end : step or 1])
            elif kind == "filter":
                if not isinstance(v, list):
                    raise _JSONPathError("not array or slice and cannot be filtered")
                left_steps, op, right = arg
                for item in v:
                    lefts = _walk([item], left_steps)
                    if op == "exists":
                        if lefts:
                            out.append(item)
                        continue
                    if not lefts:
                        continue
                    if len(lefts) > 1:
                        raise _JSONPathError("can only compare one element at a time")
                    rights = [right[1]] if right[0] == "literal" else _walk([item], right[1])
                    if not rights:
                        continue
                    if len(rights) > 1:
                        raise _JSONPathError("can only compare one element at a time")
                    if _compare(lefts[0], op, rights[0]):
                        out.append(item)
        values = out
    return values


def evaluate_jsonpath(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` (a CRD column's ``jsonPath``) selects in ``obj``, missing keys
    allowed. Raises ``ValueError`` for a path or evaluation the real server errors on."""
    try:
        return _walk([obj], _tokenize_path(path.strip()))
    except _JSONPathError as exc:
        raise ValueError(str(exc)) from None


def _go_float(f: float) -> str:
    """``fmt.Sprint(float64)``: shortest digits, exponent form outside [1e-4, 1e6)."""
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(f)).normalize().as_tuple()
    ds = "".join(map(str, digits))
    dp = len(ds) + int(exponent)  # position of the decimal point
    neg = "-" if sign else ""
    exp = dp - 1
    if exp < -4 or exp >= 6:  # strconv 'g' with the shortest precision uses 6 here
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if dp <= 0:
        return f"{neg}0.{'0' * -dp}{ds}"
    if dp >= len(ds):
        return neg + ds + "0" * (dp - len(ds))
    return f"{neg}{ds[:dp]}.{ds[dp:]}"


def _go_print(value: Any, top: bool = True) -> str:
    """``fmt.Fprint`` of a decoded JSON value, as kubectl's jsonpath prints it."""
    if value is None:
        return "<no value>" if top else "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_go_print(value[k], False)}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_print(v, False) for v in value) + "]"
    return str(value)


def _cell_for_json_value(type_: str, value: Any, now: datetime) -> Any:
    """apiextensions ``cellForJSONValue``."""
    if value is None:
        return None
    if type_ == "integer":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    elif type_ == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif type_ == "boolean":
        if isinstance(value, bool):
            return value
    elif type_ == "string":
        if isinstance(value, str):
            return value
    elif type_ == "date" and isinstance(value, str):
        if value in ("", "null"):
            return "<unknown>"
        t = parse_time(value)
        if t is None:
            return "<invalid>"
        return human_duration(now - t)
    return None


def _custom_columns(
    printer_columns: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[list[tuple[str, Any]]]]:
    if not printer_columns:
        printer_columns = [
            {
                "name": "Age",
                "type": "date",
                "description": _AGE_DESC,
                "jsonPath": ".metadata.creationTimestamp",
            }
        ]
    headers, paths = [_NAME], []
    for col in printer_columns:
        json_path = str(col.get("jsonPath") or "")
        try:
            steps = _tokenize_path(json_path.strip())
        except _JSONPathError:
            break  # the server keeps the columns before an unparsable one
        headers.append(
            _col(
                str(col.get("name") or ""),
                str(col.get("type") or ""),
                str(col.get("description") or "")
                or f"Custom resource definition column (in JSONPath format): {json_path}",
                priority=_int(col.get("priority")),
                format_=str(col.get("format") or ""),
            )
        )
        paths.append(steps)
    return headers, paths


def _custom_cells(
    obj: Mapping[str, Any],
    headers: list[dict[str, Any]],
    paths: list[list[tuple[str, Any]]],
    now: datetime,
) -> list[Any]:
    cells: list[Any] = [_name(obj)]
    for header, steps in zip(headers[1:], paths, strict=True):
        try:
            results = _walk([obj], steps)
        except _JSONPathError:
            cells.append(None)
            continue
        if not results:
            cells.append(None)
            continue
        value = results[0]
        if header["type"] == "string":
            cells.append(_go_print(value))
        else:
            cells.append(_cell_for_json_value(header["type"], value, now))
    return cells


# -- the Table -----------------------------------------------------------------------------


def column_definitions(
    group: str, kind: str, printer_columns: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The ``columnDefinitions`` the server sends for this kind."""
    if printer_columns is not None or (
        (group, kind) not in _COLUMNS and group not in BUILTIN_GROUPS
    ):
        return copy.deepcopy(_custom_columns(printer_columns or [])[0])
    return copy.deepcopy(_COLUMNS.get((group, kind), _DEFAULT_COLUMNS))


_INCLUDE = {"": "Metadata", "Metadata": "Metadata", "None": "None", "Object": "Object"}


def to_table(
    objects: Sequence[Mapping[str, Any]],
    *,
    group: str,
    kind: str,
    printer_columns: Sequence[Mapping[str, Any]] | None = None,
    include_object: str = "Metadata",
    now: datetime | None = None,
    list_meta: Mapping[str, Any] | None = None,
    no_headers: bool = False,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects`` (one for a GET, the items for a LIST).

    ``printer_columns`` is the served CRD version's ``additionalPrinterColumns``; given (even
    empty) the custom-resource convertor is used: Name, then those columns, or Name and Age
    when there are none (the server adds Age only then). Otherwise built-in kinds get their
    ``pkg/printers`` columns, built-ins without a printer the generic Name and Created At,
    and kinds of non-built-in groups the custom-resource default (Name, Age).

    ``include_object`` is the ``includeObject`` query parameter: ``Metadata`` (default) puts
    a ``PartialObjectMetadata`` in each row, ``Object`` the object itself (not copied),
    ``None`` leaves ``object`` out. ``list_meta`` supplies ``resourceVersion``,
    ``continue`` and ``remainingItemCount``; ``no_headers`` drops the column definitions as
    the server does for watch events after the first.
    """
    if include_object not in _INCLUDE:
        raise TableError(
            f'includeObject: Invalid value: "{include_object}": must be '
            f"'Metadata', 'Object', 'None', or empty"
        )
    include = _INCLUDE[include_object]
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)

    custom = printer_columns is not None or (
        (group, kind) not in _PRINTERS and group not in BUILTIN_GROUPS
    )
    rows: list[dict[str, Any]] = []
    if custom:
        headers, paths = _custom_columns(printer_columns or [])
    else:
        headers = _COLUMNS.get((group, kind), _DEFAULT_COLUMNS)
        paths = []
    printer = None if custom else _PRINTERS.get((group, kind))
    for obj in objects:
        conditions = None
        if custom:
            cells = _custom_cells(obj, headers, paths, now)
        elif printer is not None:
            cells, conditions = printer(obj, now)
        else:
            meta = _m(obj.get("metadata"))
            cells = [_name(obj), _rfc3339(meta.get("creationTimestamp"))]
        row: dict[str, Any] = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        if include == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": copy.deepcopy(dict(_m(obj.get("metadata")))),
            }
        elif include == "Object":
            row["object"] = obj
        rows.append(row)

    metadata: dict[str, Any] = {}
    for key in ("resourceVersion", "continue", "remainingItemCount"):
        value = (list_meta or {}).get(key)
        if value not in (None, ""):
            metadata[key] = value
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": None if no_headers else copy.deepcopy(headers),
        "rows": rows,
    }
