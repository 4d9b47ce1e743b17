"""Small helpers over the API's JSON objects that the cluster actors share.

Field access that tolerates a missing or malformed part (an object read from the API may
lack any field), conditions, pod phases, controller references, ``pod-template-hash``,
timestamps and resource quantities.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
from typing import Any


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@functools.lru_cache(maxsize=8192)
def parse_time(value: str) -> float:
    """An RFC 3339 timestamp (``Z`` or offset, optional fraction) as epoch seconds."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _time_or(value: Any, default: float) -> float:
    if not value:
        return default
    try:
        return parse_time(str(value))
    except ValueError:
        return default


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_DECIMAL.update({"P": 1e15, "E": 1e18})


@functools.lru_cache(maxsize=4096)
def quantity(value: str) -> float:
    """A Kubernetes resource quantity (``100m``, ``2Ti``, ``1e3``, ``8``) as a float."""
    s = str(value).strip()
    if not s:
        return 0.0
    if s[-2:] in _BINARY:
        return float(s[:-2]) * _BINARY[s[-2:]]
    if s[-1] in _DECIMAL and not s[-2:-1].isalpha():
        return float(s[:-1]) * _DECIMAL[s[-1]]
    return float(s)


def _m(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _m(obj.get("metadata"))


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return _m(obj.get("spec"))


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return _m(obj.get("status"))


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return _m(_meta(obj).get("labels"))


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return _m(_meta(obj).get("annotations"))


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in _status(obj).get("conditions") or []:
        if _m(c).get("type") == kind:
            return c
    return None


def _terminal(pod: dict[str, Any]) -> bool:
    return _status(pod).get("phase") in ("Succeeded", "Failed")


def _active(pod: dict[str, Any]) -> bool:
    """Counted by controllers: neither finished nor being deleted."""
    return not _terminal(pod) and not _meta(pod).get("deletionTimestamp")


def _pod_ready(pod: dict[str, Any]) -> bool:
    c = _condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


def _controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if _m(ref).get("controller"):
            return str(ref.get("uid"))
    return None


def _sha(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Any) -> str:
    """``pod-template-hash`` the way the controllers spell it: FNV-32a of the template,
    its decimal digits mapped through ``rand.SafeEncodeString``'s alphabet."""
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(h))


def _int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        frac = float(value[:-1]) * total / 100.0
        return math.ceil(frac) if round_up else math.floor(frac)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _cond(
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
