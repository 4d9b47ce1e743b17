"""Defaulting and validation of the built-in kinds, the parts clients rely on.

The real API server's defaulting is generated from Go types; here each built-in kind gets
the defaults that kubectl, the Python client and our own code read back (restartPolicy,
terminationGracePeriodSeconds, Job selectors and labels, Deployment strategy, Service
ports, PriorityClass preemption ...), and a structural validation of the fields whose
absence would make an object meaningless (a Pod without containers). Messages are worded
as the real server words them.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import random
import re
from collections.abc import Callable
from typing import Any

from krea_ops.sim.apiserver import errors
from krea_ops.sim.apiserver.validation import (
    FieldError,
    error_body,
    is_qualified_name,
    is_valid_label_value,
)

DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def _required(field: str) -> FieldError:
    return FieldError("FieldValueRequired", field, "Required value")


def _pod_spec_defaults(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            image = str(c.get("image", ""))
            tag = image.rsplit("/", 1)[-1]
            latest = ":" not in tag or tag.endswith(":latest")
            c.setdefault(
                "imagePullPolicy", "Always" if latest and "@" not in tag else "IfNotPresent"
            )
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            _volume_defaults(volume)


# pkg/apis/core/v1/defaults.go: SetDefaults_HostPathVolumeSource (type HostPathUnset, ""),
# and 0644 for the file modes of secret, configMap, projected and downwardAPI volumes
_VOLUME_MODES = ("secret", "configMap", "projected", "downwardAPI")


def _volume_defaults(volume: dict[str, Any]) -> None:
    host = volume.get("hostPath")
    if isinstance(host, dict):
        host.setdefault("type", "")
    for kind in _VOLUME_MODES:
        source = volume.get(kind)
        if isinstance(source, dict):
            source.setdefault("defaultMode", 0o644)


def _qos_class(spec: dict[str, Any]) -> str:
    requests_seen = limits_seen = False
    guaranteed = True
    for c in spec.get("containers") or []:
        res = (c or {}).get("resources") or {}
        limits = res.get("limits") or {}
        requests = {**limits, **(res.get("requests") or {})}
        requests_seen |= bool(requests)
        limits_seen |= bool(limits)
        for resource in ("cpu", "memory"):
            if resource not in limits or str(limits[resource]) != str(requests.get(resource)):
                guaranteed = False
    if not requests_seen and not limits_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_pod(obj: dict[str, Any], lookup: Lookup) -> None:
    spec = obj.setdefault("spec", {})
    _pod_spec_defaults(spec)
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not any(
            isinstance(t, dict)
            and t.get("key") == default["key"]
            and t.get("effect") == "NoExecute"
            for t in tolerations
        ):
            tolerations.append(dict(default))
    pc_name = spec.get("priorityClassName")
    if pc_name and "priority" not in spec:
        pc = lookup("scheduling.k8s.io/priorityclasses", "", pc_name)
        if pc is not None:
            spec["priority"] = pc.get("value", 0)
            spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
    elif "priority" not in spec:
        spec["priority"] = 0
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status["qosClass"] = _qos_class(spec)


def _default_namespace(obj: dict[str, Any], lookup: Lookup) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")
    labels = obj["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def _default_template(template: dict[str, Any]) -> None:
    _pod_spec_defaults(template.setdefault("spec", {}))


def _default_deployment(obj: dict[str, Any], lookup: Lookup) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        strategy.setdefault("rollingUpdate", {}).setdefault("maxUnavailable", "25%")
        strategy["rollingUpdate"].setdefault("maxSurge", "25%")
    _default_template(spec.setdefault("template", {}))


def _default_replicaset(obj: dict[str, Any], lookup: Lookup) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _default_template(spec.setdefault("template", {}))


def _default_daemonset(obj: dict[str, Any], lookup: Lookup) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("revisionHistoryLimit", 10)
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if strategy.get("type") == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", 1)
        ru.setdefault("maxSurge", 0)
    _default_template(spec.setdefault("template", {}))


def _default_job(obj: dict[str, Any], lookup: Lookup) -> None:
    spec = obj.setdefault("spec", {})
    parallelism = spec.setdefault("parallelism", 1)
    if spec.get("completionMode") == "Indexed" or "completions" not in spec:
        spec.setdefault(
            "completions", parallelism if spec.get("completionMode") == "Indexed" else 1
        )
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    # pkg/apis/batch/v1/defaults.go: Failed when a podFailurePolicy is set (the only value
    # validation then allows), else TerminatingOrFailed; onPodConditions' status is True
    policy = spec.get("podFailurePolicy")
    spec.setdefault("podReplacementPolicy", "Failed" if policy else "TerminatingOrFailed")
    for rule in (policy.get("rules") or []) if isinstance(policy, dict) else []:
        for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
            if isinstance(pattern, dict):
                pattern.setdefault("status", "True")
    template = spec.setdefault("template", {})
    _default_template(template)
    template["spec"].setdefault("restartPolicy", "Never")
    if not spec.get("manualSelector"):
        uid = obj["metadata"]["uid"]
        name = obj["metadata"]["name"]
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def _default_service(obj: dict[str, Any], lookup: Lookup) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec.get("clusterIP") is None:
        rng = random.Random(obj["metadata"]["uid"])
        ip = str(
            ipaddress.IPv4Address(
                int(ipaddress.IPv4Address("10.96.0.0")) + rng.randrange(10, 65000)
            )
        )
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    obj.setdefault("status", {}).setdefault("loadBalancer", {})


def _default_priorityclass(obj: dict[str, Any], lookup: Lookup) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def _default_event(obj: dict[str, Any], lookup: Lookup) -> None:
    """What a core/v1 Event reads back as after upstream's round trip through its Go
    type: ``source`` is a struct (``omitempty`` keeps it, ``{}``), and the three times are
    ``metav1.Time``/``MicroTime`` structs whose zero value is written ``null``."""
    obj.setdefault("involvedObject", {})
    obj.setdefault("reportingComponent", "")
    obj.setdefault("reportingInstance", "")
    obj.setdefault("source", {})
    for key in ("firstTimestamp", "lastTimestamp", "eventTime"):
        obj.setdefault(key, None)


def _default_pdb(obj: dict[str, Any], lookup: Lookup) -> None:
    obj.setdefault("spec", {})
    obj["status"] = {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
        "observedGeneration": 0,
    }


def _default_network_policy(obj: dict[str, Any], lookup: Lookup) -> None:
    """pkg/apis/networking/v1/defaults.go: "Any policy that does not specify policyTypes
    implies at least "Ingress"" (and Egress when it has egress rules); "Default any
    undefined Protocol fields to TCP". ``spec`` and ``spec.podSelector`` are Go structs
    without omitempty, so they are always written."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = obj["spec"] = {}
    if spec.get("podSelector") is None:
        spec["podSelector"] = {}
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or []:
            ports = rule.get("ports") if isinstance(rule, dict) else None
            for port in ports or []:
                if isinstance(port, dict) and port.get("protocol") is None:
                    port["protocol"] = "TCP"


Lookup = Callable[[str, str, str], "dict[str, Any] | None"]

# apimachinery/pkg/util/validation/validation.go IsConfigMapKey (the doubled spaces are
# the real message's, from its RegexError helper).
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)


def _default_secret(obj: dict[str, Any], lookup: Lookup) -> None:
    """core/v1 Secret as the server stores it: ``stringData`` folded into ``data`` (base64)
    and dropped, ``type`` Opaque unless given. The values are never echoed in errors."""
    data = obj.get("data")
    if data is not None and not isinstance(data, dict):
        raise errors.bad_request(
            'Secret in version "v1" cannot be handled as a Secret: json: cannot unmarshal '
            "into Go struct field Secret.data of type map[string][]uint8"
        )
    data = dict(data or {})
    for value in data.values():
        if not isinstance(value, str):
            raise errors.bad_request(
                'Secret in version "v1" cannot be handled as a Secret: json: cannot unmarshal '
                "into Go struct field Secret.data of type []uint8"
            )
        compact = value.replace("\r", "").replace("\n", "")
        try:
            base64.b64decode(compact, validate=True)
        except (binascii.Error, ValueError):
            bad = next((i for i, ch in enumerate(compact) if ch not in _B64_ALPHABET), len(compact))
            raise errors.bad_request(
                'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
                f"input byte {bad}"
            ) from None
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    if data or "data" in obj:
        obj["data"] = data
    obj.setdefault("type", "Opaque")


_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def _validate_secret(obj: dict[str, Any]) -> list[FieldError]:
    problems = []
    for key in obj.get("data") or {}:
        if not _CONFIG_KEY.fullmatch(key):
            problems.append(
                FieldError(
                    "FieldValueInvalid",
                    f"data[{key}]",
                    f'Invalid value: "{key}": ' + _CONFIG_KEY_MSG,
                )
            )
    return problems


def _secret_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """An update folds ``stringData`` as a create does; ``type`` cannot change and an
    immutable Secret's data cannot (ValidateSecretUpdate)."""
    _default_secret(new, lambda *_: None)
    problems = []
    if new.get("type") != old.get("type"):
        problems.append(
            FieldError(
                "FieldValueInvalid",
                "type",
                f'Invalid value: "{new.get("type")}": field is immutable',
            )
        )
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            problems.append(
                FieldError(
                    "FieldValueForbidden",
                    "immutable",
                    "Forbidden: field is immutable when `immutable` is set",
                )
            )
        if new.get("data") != old.get("data"):
            problems.append(
                FieldError(
                    "FieldValueForbidden",
                    "data",
                    "Forbidden: field is immutable when `immutable` is set",
                )
            )
    return problems


def _binding_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """ValidateRoleBindingUpdate: the roleRef of a binding never changes (the value is
    printed as the internal Go struct, as the real message prints it)."""
    old_ref, ref = old.get("roleRef") or {}, new.get("roleRef") or {}
    if old_ref == ref:
        return []
    shown = (
        f'rbac.RoleRef{{APIGroup:"{ref.get("apiGroup") or ""}", Kind:"{ref.get("kind") or ""}", '
        f'Name:"{ref.get("name") or ""}"}}'
    )
    return [
        FieldError("FieldValueInvalid", "roleRef", f"Invalid value: {shown}: cannot change roleRef")
    ]


UPDATE_CHECKS: dict[
    tuple[str, str], Callable[[dict[str, Any], dict[str, Any]], list[FieldError]]
] = {
    ("", "Secret"): _secret_update,
    ("rbac.authorization.k8s.io", "RoleBinding"): _binding_update,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _binding_update,
}


def update_errors(
    group: str, kind: str, old: dict[str, Any], new: dict[str, Any]
) -> list[FieldError]:
    """What an update of a kind may not change (``new`` may be normalised in place)."""
    check = UPDATE_CHECKS.get((group, kind))
    return check(old, new) if check else []


def _default_binding(obj: dict[str, Any], lookup: Lookup) -> None:
    from krea_ops.sim.apiserver import rbac

    rbac.default_subjects(obj)


def _rbac_validator(kind: str) -> Callable[[dict[str, Any]], list[FieldError]]:
    def check(obj: dict[str, Any]) -> list[FieldError]:
        from krea_ops.sim.apiserver import rbac

        return rbac.validate(kind, obj)

    return check


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any], Lookup], None]] = {
    ("", "Secret"): _default_secret,
    ("rbac.authorization.k8s.io", "RoleBinding"): _default_binding,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _default_binding,
    ("", "Pod"): _default_pod,
    ("", "Namespace"): _default_namespace,
    ("", "Service"): _default_service,
    ("", "Event"): _default_event,
    ("apps", "Deployment"): _default_deployment,
    ("apps", "ReplicaSet"): _default_replicaset,
    ("apps", "DaemonSet"): _default_daemonset,
    ("batch", "Job"): _default_job,
    ("policy", "PodDisruptionBudget"): _default_pdb,
    ("networking.k8s.io", "NetworkPolicy"): _default_network_policy,
    ("scheduling.k8s.io", "PriorityClass"): _default_priorityclass,
}

# Kinds whose status a create request may not set (the controllers own it).
STATUS_RESET_ON_CREATE = {
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
}


# Status fields without omitempty in the Go types: clients require them to be present.
EMPTY_STATUS: dict[tuple[str, str], dict[str, Any]] = {
    ("apps", "ReplicaSet"): {"replicas": 0},
    ("apps", "DaemonSet"): {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
}


def apply_defaults(group: str, kind: str, obj: dict[str, Any], lookup: Lookup) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if (group, kind) in STATUS_RESET_ON_CREATE:
        out["status"] = copy.deepcopy(EMPTY_STATUS.get((group, kind), {}))
    defaulter = DEFAULTERS.get((group, kind))
    if defaulter is not None:
        defaulter(out, lookup)
    return out


def _validate_pod_spec(spec: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        return [_required(path)]
    containers = spec.get("containers")
    if not containers:
        errors.append(_required(f"{path}.containers"))
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            where = f"{path}.{key}[{i}]"
            if not isinstance(c, dict):
                errors.append(
                    FieldError("FieldValueTypeInvalid", where, "Invalid value: must be an object")
                )
                continue
            name = c.get("name")
            if not name:
                errors.append(_required(f"{where}.name"))
            elif name in seen:
                errors.append(
                    FieldError("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"')
                )
            else:
                seen.add(name)
            if not c.get("image"):
                errors.append(_required(f"{where}.image"))
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                f"{path}.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                f"{path}.terminationGracePeriodSeconds",
                f"Invalid value: {grace}: must be >= 0",
            )
        )
    for i, t in enumerate(spec.get("tolerations") or []):
        op = (t or {}).get("operator", "Equal")
        if op not in ("Equal", "Exists"):
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{path}.tolerations[{i}].operator",
                    f'Unsupported value: "{op}": supported values: "Equal", "Exists"',
                )
            )
    return errors


def _validate_pod(obj: dict[str, Any]) -> list[FieldError]:
    return _validate_pod_spec(obj.get("spec"), "spec")


def _validate_template_owner(obj: dict[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, dict):
        return [_required("spec.template")]
    return _validate_pod_spec(template.get("spec"), "spec.template.spec")


def _validate_selector_matches_template(obj: dict[str, Any]) -> list[FieldError]:
    errors = _validate_template_owner(obj)
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if not selector:
        errors.append(_required("spec.selector"))
        return errors
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            errors.append(
                FieldError(
                    "FieldValueInvalid",
                    "spec.template.metadata.labels",
                    f"Invalid value: {_go_map(labels)}: `selector` does not match template "
                    "`labels`",
                )
            )
            break
    return errors


def _go_map(labels: dict[str, str]) -> str:
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in labels.items()) + "}"


def _validate_node(obj: dict[str, Any]) -> list[FieldError]:
    errors = []
    for i, t in enumerate((obj.get("spec") or {}).get("taints") or []):
        effect = (t or {}).get("effect")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"spec.taints[{i}].effect",
                    f'Unsupported value: "{effect}": supported values: "NoSchedule", '
                    '"PreferNoSchedule", "NoExecute"',
                )
            )
        if not (t or {}).get("key"):
            errors.append(_required(f"spec.taints[{i}].key"))
        # a taint's value is a label value ("provider outage drill" is refused):
        # validateNodeTaints, pkg/apis/core/validation/validation.go, whose path is
        # metadata.taints (ValidateNode passes it the "metadata" path)
        value = str((t or {}).get("value") or "")
        if bad := is_valid_label_value(value):
            errors.append(_invalid(f"metadata.taints[{i}].value", value, ";".join(bad)))
    return errors


def _validate_pdb(obj: dict[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    if "minAvailable" in spec and "maxUnavailable" in spec:
        return [
            FieldError(
                "FieldValueInvalid",
                "spec",
                "Invalid value: ...: minAvailable and maxUnavailable cannot be both set",
            )
        ]
    return []


def _invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, error_body("FieldValueInvalid", value, detail))


def _not_supported(path: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    """field.NotSupported: ``Unsupported value: "X": supported values: "A", "B"``."""
    listed = ", ".join(f'"{s}"' for s in supported)
    return FieldError(
        "FieldValueNotSupported",
        path,
        error_body("FieldValueNotSupported", value, f"supported values: {listed}"),
    )


_PROTOCOLS = ("TCP", "UDP", "SCTP")


_PORT_NAME_CHARSET = re.compile(r"[-a-z0-9]+")


def _port_name_errors(name: str) -> list[str]:
    """apimachinery validation.IsValidPortName, its messages in its order."""
    out = []
    if len(name) > 15:
        out.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARSET.fullmatch(name):
        out.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", name):
        out.append("must contain at least one letter (a-z)")
    if "--" in name:
        out.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        out.append("must not begin or end with a hyphen")
    return out


def _validate_network_policy_port(port: Any, path: str) -> list[FieldError]:
    """ValidateNetworkPolicyPort (pkg/apis/networking/validation/validation.go)."""
    if not isinstance(port, dict):
        return []
    out = []
    protocol = port.get("protocol")
    if protocol is not None and protocol not in _PROTOCOLS:
        out.append(_not_supported(f"{path}.protocol", protocol, _PROTOCOLS))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int) and not isinstance(number, bool):
        if not 1 <= number <= 65535:
            out.append(_invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive"))
        if isinstance(end, int) and end < number:
            out.append(
                _invalid(f"{path}.endPort", number, "must be greater than or equal to `port`")
            )
        if isinstance(end, int) and not 1 <= end <= 65535:
            out.append(_invalid(f"{path}.endPort", end, "must be between 1 and 65535, inclusive"))
    elif number is not None:
        if end is not None:
            out.append(
                _invalid(f"{path}.endPort", end, "may not be specified when `port` is non-numeric")
            )
        out += [_invalid(f"{path}.port", number, m) for m in _port_name_errors(str(number))]
    elif number is None and end is not None:
        out.append(
            _invalid(f"{path}.endPort", end, "may not be specified when `port` is not specified")
        )
    return out


def _validate_network_policy_peer(peer: Any, path: str) -> list[FieldError]:
    """ValidateNetworkPolicyPeer: one peer at least, and an ipBlock alone."""
    peer = peer if isinstance(peer, dict) else {}
    given = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
    if not given:
        return [FieldError("FieldValueRequired", path, "Required value: must specify a peer")]
    if len(given) > 1 and "ipBlock" in given:
        return [
            FieldError(
                "FieldValueForbidden",
                path,
                "Forbidden: may not specify both ipBlock and another peer",
            )
        ]
    block = peer.get("ipBlock")
    if isinstance(block, dict):
        cidr = block.get("cidr")
        if not cidr:
            return [_required(f"{path}.ipBlock.cidr")]
        try:
            ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            return [_invalid(f"{path}.ipBlock.cidr", str(cidr), "not a valid CIDR")]
    return []


def _validate_network_policy(obj: dict[str, Any]) -> list[FieldError]:
    """ValidateNetworkPolicySpec: ports, peers and policyTypes, in its order."""
    raw = obj.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out: list[FieldError] = []
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            rule = rule if isinstance(rule, dict) else {}
            where = f"spec.{direction}[{i}]"
            for j, port in enumerate(rule.get("ports") or []):
                out += _validate_network_policy_port(port, f"{where}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers) or []):
                out += _validate_network_policy_peer(peer, f"{where}.{peers}[{j}]")
    types = spec.get("policyTypes") or []
    if len(types) > 2:
        out.append(_invalid("spec.policyTypes", types, "may not specify more than two policyTypes"))
        return out
    for i, kind in enumerate(types):
        if kind not in ("Ingress", "Egress"):
            out.append(_not_supported(f"spec.policyTypes[{i}]", kind, ("Ingress", "Egress")))
    return out


def _validate_priorityclass(obj: dict[str, Any]) -> list[FieldError]:
    value = obj.get("value")
    if not isinstance(value, int):
        return [_required("value")]
    if value > 1_000_000_000 and not obj["metadata"]["name"].startswith("system-"):
        return [
            FieldError(
                "FieldValueForbidden",
                "value",
                "Forbidden: maximum allowed value of a user defined priority is 1000000000",
            )
        ]
    return []


def _validate_configmap(obj: dict[str, Any]) -> list[FieldError]:
    errors = []
    for key, value in (obj.get("data") or {}).items():
        if not isinstance(value, str):
            errors.append(
                FieldError(
                    "FieldValueTypeInvalid", f"data[{key}]", "Invalid value: must be a string"
                )
            )
    return errors


def _event_invalid(field: str, value: str, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, error_body("FieldValueInvalid", value, detail))


# pkg/apis/core/validation/events.go: ReportingInstanceLengthLimit, ActionLengthLimit,
# ReasonLengthLimit, NoteLengthLimit
_EVENT_LIMITS = (("reportingInstance", 128), ("action", 128), ("reason", 128))
_NOTE_LIMIT = 1024


def _validate_event(obj: dict[str, Any]) -> list[FieldError]:
    """``legacyValidateEvent``, what a core/v1 Event must satisfy on create and update.

    Without ``eventTime`` (the old style kubelets write) the event lives in its object's
    namespace, or in ``default`` for a cluster-scoped object. With ``eventTime`` (the
    events.k8s.io style) the reporter, action and reason are required, and an event
    about a cluster-scoped object lives in ``default`` or ``kube-system``. (A core/v1
    request names the reporter ``reportingComponent``, as the real server's errors do.)
    """
    errors: list[FieldError] = []
    namespace = str((obj.get("metadata") or {}).get("namespace") or "")
    involved = str((obj.get("involvedObject") or {}).get("namespace") or "")
    mismatch = _event_invalid(
        "involvedObject.namespace", involved, "does not match event.namespace"
    )
    if not obj.get("eventTime"):
        if (not involved and namespace not in ("", "default")) or (
            involved and namespace != involved
        ):
            errors.append(mismatch)
        return errors
    if not involved and namespace not in ("default", "kube-system"):
        errors.append(mismatch)
    controller = str(obj.get("reportingComponent") or "")
    if not controller:
        errors.append(_required("reportingComponent"))
    errors.extend(
        _event_invalid("reportingComponent", controller, msg)
        for msg in is_qualified_name(controller)
    )
    for key, limit in _EVENT_LIMITS:
        value = str(obj.get(key) or "")
        if not value:
            errors.append(_required(key))
        if len(value.encode()) > limit:
            errors.append(_event_invalid(key, "", f"can have at most {limit} characters"))
    if len(str(obj.get("message") or "").encode()) > _NOTE_LIMIT:
        errors.append(_event_invalid("message", "", f"can have at most {_NOTE_LIMIT} characters"))
    return errors


VALIDATORS: dict[tuple[str, str], Callable[[dict[str, Any]], list[FieldError]]] = {
    ("", "Secret"): _validate_secret,
    **{
        ("rbac.authorization.k8s.io", kind): _rbac_validator(kind)
        for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    },
    ("", "Pod"): _validate_pod,
    ("", "Node"): _validate_node,
    ("", "ConfigMap"): _validate_configmap,
    ("", "Event"): _validate_event,
    ("apps", "Deployment"): _validate_selector_matches_template,
    ("apps", "ReplicaSet"): _validate_selector_matches_template,
    ("apps", "DaemonSet"): _validate_selector_matches_template,
    ("batch", "Job"): _validate_template_owner,
    ("policy", "PodDisruptionBudget"): _validate_pdb,
    ("networking.k8s.io", "NetworkPolicy"): _validate_network_policy,
    ("scheduling.k8s.io", "PriorityClass"): _validate_priorityclass,
}


def validate(group: str, kind: str, obj: dict[str, Any]) -> list[FieldError]:
    validator = VALIDATORS.get((group, kind))
    return validator(obj) if validator else []


# Fields of a running pod that an update may not change (the API server's "spec is
# immutable" rule keeps clients from editing a scheduled pod into another shape).
def pod_spec_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    old_spec, new_spec = dict(old.get("spec") or {}), dict(new.get("spec") or {})
    mutable = ("activeDeadlineSeconds", "tolerations", "schedulingGates")
    gated = bool(old_spec.get("schedulingGates"))
    for key in mutable:
        old_spec.pop(key, None)
        new_spec.pop(key, None)
    if gated:
        # A pod held by scheduling gates may still gain node selectors and have its node
        # affinity narrowed (how Kueue steers an admitted pod to its flavor's nodes).
        old_selector = old_spec.pop("nodeSelector", None) or {}
        new_selector = new_spec.pop("nodeSelector", None) or {}
        changed = {k for k, v in old_selector.items() if new_selector.get(k) != v}
        if changed:
            return [
                FieldError(
                    "FieldValueForbidden",
                    "spec.nodeSelector",
                    "Forbidden: only additions to spec.nodeSelector are allowed "
                    "(no mutations or deletions)",
                )
            ]
        old_spec.pop("affinity", None)
        new_spec.pop("affinity", None)
    # Images may change; everything else may not.
    for spec in (old_spec, new_spec):
        spec["containers"] = [
            {k: v for k, v in (c or {}).items() if k != "image"}
            for c in spec.get("containers") or []
        ]
    if old_spec.get("nodeName") and not new_spec.get("nodeName"):
        new_spec["nodeName"] = old_spec["nodeName"]
    if old_spec != new_spec:
        return [
            FieldError(
                "FieldValueForbidden",
                "spec",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
                "to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []
