"""Small helpers over the API's JSON objects that the cluster actors share.

Field access that tolerates a missing or malformed part (an object read from the API may
lack any field), conditions, pod phases, controller references and ``pod-template-hash``.
Timestamps and quantities are the product's (``krea_ops.kube.times``, ``.quantity``).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from krea_ops.kube.times import parse_time

GPU = "nvidia.com/gpu"
# The node taints of the node lifecycle controller and of a cordon.
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
# A simulated machine that failed says so on its Node (``<cause>``): its kubelet stops,
# and the embedded node lifecycle stand-in reads it as a kubelet gone at once.
FAILED_ANNOTATION = "sim.krea.ai/failed"
# The conditions a kubelet posts on its Node (Ready last).
NODE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")


def time_or(value: Any, default: float) -> float:
    """A timestamp field as epoch seconds; ``default`` when it is absent or not RFC 3339."""
    parsed = parse_time(value) if isinstance(value, str) else None
    return default if parsed is None else parsed


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def meta_of(obj: dict[str, Any]) -> dict[str, Any]:
    return as_dict(obj.get("metadata"))


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return as_dict(obj.get("spec"))


def status_of(obj: dict[str, Any]) -> dict[str, Any]:
    return as_dict(obj.get("status"))


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return as_dict(meta_of(obj).get("labels"))


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return as_dict(meta_of(obj).get("annotations"))


def condition_of(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in status_of(obj).get("conditions") or []:
        if as_dict(c).get("type") == kind:
            return c
    return None


def is_terminal(pod: dict[str, Any]) -> bool:
    return status_of(pod).get("phase") in ("Succeeded", "Failed")


def is_active(pod: dict[str, Any]) -> bool:
    """Counted by controllers: neither finished nor being deleted."""
    return not is_terminal(pod) and not meta_of(pod).get("deletionTimestamp")


def pod_ready(pod: dict[str, Any]) -> bool:
    c = condition_of(pod, "Ready")
    return c is not None and c.get("status") == "True"


def controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in meta_of(obj).get("ownerReferences") or []:
        if as_dict(ref).get("controller"):
            return str(ref.get("uid"))
    return None


def sha256_hex(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Any) -> str:
    """``pod-template-hash`` the way the controllers spell it: FNV-32a of the template,
    its decimal digits mapped through ``rand.SafeEncodeString``'s alphabet."""
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(h))


def int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        frac = float(value[:-1]) * total / 100.0
        return math.ceil(frac) if round_up else math.floor(frac)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def whole_conditions(conditions: Any) -> Any:
    """Pod conditions for a kubelet's status patch, each whole: a reason or message it
    does not have is null, so the patch clears the one an earlier status wrote. The
    kubelet patches a two-way strategic merge of the old status and the new
    (``PatchPodStatus`` in kubernetes pkg/util/pod/pod.go), and a condition it generates
    Ready has neither (``GeneratePodReadyCondition``, pkg/kubelet/status/generate.go)."""
    if not conditions:
        return conditions
    return [{"reason": None, "message": None, **c} for c in conditions]


def pod_condition(
    kind: str, status: str, stamp: str, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": stamp,
    }
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def node_ready(node: dict[str, Any]) -> bool:
    c = condition_of(node, "Ready")
    return c is not None and c.get("status") == "True"
