"""The cluster itself: GPU nodes, their kubelets, the scheduler and the workload controllers.

Everything here is an ordinary client of the simulated API server (``world.client``):

- :func:`bootstrap` (run by :func:`actors`, synchronously, so every other module's actors
  find the nodes in place when they start) creates the namespaces, ``--nodes`` GPU nodes
  with their labels, capacity, conditions and Leases in ``kube-node-lease``, and the
  ``krea-ops-exporter`` and ``nvidia-device-plugin`` DaemonSets in ``kube-system``.
- :class:`Kubelet`, one actor for every real node (nodes labelled
  ``type=virtual-kubelet`` belong to the virtual kubelet): renews Leases, heartbeats node
  status, runs bound pods through their phases, finishes graceful deletions and plays a
  node's failure and repair (annotation ``sim.krea.ai/failed``), including the node
  lifecycle controller's part (``Ready=Unknown``, the ``unreachable`` taints).
- :class:`Scheduler`, the default scheduler: binds through ``pods/<name>/binding``.
- :class:`Controllers`: the DaemonSet, Deployment and ReplicaSet controllers and the
  taint manager (NoExecute evictions).

Pods the simulation should complete carry annotations the kubelet reads:

``sim.krea.ai/run-seconds``
    simulated seconds the containers run (from their start) before they exit, for pods
    whose ``restartPolicy`` is ``Never`` or ``OnFailure`` (``Always`` pods run until
    deleted);
``sim.krea.ai/exit-code``
    the exit code then (default 0: ``Succeeded``/``Completed``; otherwise ``Failed`` with
    container reason ``Error``, also for ``OnFailure``: the simulated kubelet does not
    restart containers);
``sim.krea.ai/ready-seconds``
    simulated seconds a started container stays unready (a model loading, say).

A pod on a failed node that had started is marked ``phase: Failed``, ``reason:
NodeFailure``, message ``Node <node> failed (<cause>): the kubelet stopped and the pod's
containers were lost``, with a ``DisruptionTarget`` condition (reason
``TerminationByKubelet``) and its containers ``terminated`` with reason
``ContainerStatusUnknown``, exit code 137 (what Kubernetes writes for containers lost
with their node, so ``kubectl get pods`` shows ``ContainerStatusUnknown``). Pods bound
to a failed node that had not started stay ``Pending`` until it is repaired.

Deletion: a pod with ``deletionTimestamp`` that had started is stopped once
``deletionTimestamp + deletionGracePeriodSeconds`` (simulated) has passed: its
containers are reported ``terminated`` (exit 143, phase ``Failed``), then it is deleted
with grace 0; one that never started goes at once. A pod held by finalizers is left
terminal for their owner to release. The taint manager marks pods it evicts with
``DisruptionTarget`` (reason ``DeletionByTaintManager``) and deletes them.

Periods and traffic. Periods are simulated seconds, stretched so that no actor ticks more
than twice a wall second: kubelet ``max(2, speed/2)``, scheduler ``max(1, speed/2)``,
controllers ``max(2, speed/2)``. The actors share one list of pods and one of nodes
(:class:`ClusterView`, ``world.services["cluster-view"]``, relisted at most every half
wall second or after the reader's own writes); the controllers add one list each of
DaemonSets, Deployments and ReplicaSets a tick, the scheduler lists nothing more and
writes nothing while no pod waits. Writes are strategic merge patches of what changed:
two per pod start, one per completion or failure, one or two per deletion, a binding and
an Event per scheduled pod. Lease renewals, the bulk of the steady-state writes, come
every ``max(10, speed * max(0.5, nodes / LEASE_WRITES_PER_WALL_S))`` simulated seconds
per node, spread over the nodes, with ``leaseDurationSeconds`` four times that (at least
40); node status heartbeats every ``max(300, 5 x renewal)``. At 64 nodes and ``--speed
60`` that is 32 Lease and 6.4 node-status writes a wall second, about 4 shared lists a
second, and about a tenth of one core for these actors and the API server together with
224 running pods.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from krea_ops.sim.world.actor import Actor, World

FAILED_ANNOTATION = "sim.krea.ai/failed"
RUN_SECONDS_ANNOTATION = "sim.krea.ai/run-seconds"
EXIT_CODE_ANNOTATION = "sim.krea.ai/exit-code"
READY_SECONDS_ANNOTATION = "sim.krea.ai/ready-seconds"

NAMESPACES = ("training", "inference", "krea-sim", "krea-ops")
NODES_PER_RACK = 8
RACKS_PER_SPINE = 4
GPU = "nvidia.com/gpu"
NODE_PREFIX = "gpu-node-"
VIRTUAL_KUBELET_LABEL = ("type", "virtual-kubelet")
GANG_LABELS = ("jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name")

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NODE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
HEALTHY_CONDITIONS = {
    "MemoryPressure": (
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
}

# Lease renewals are the bulk of the steady-state writes: keep them near this many per
# wall second however fast the clock runs (64 nodes at --speed 60: one renewal per node
# every 120 simulated seconds, leaseDurationSeconds 480).
LEASE_WRITES_PER_WALL_S = 32.0
VIEW_TTL_WALL_S = 0.5

KUBELET_VERSION = "v1.32.0"
OS_IMAGE = "Ubuntu 22.04.5 LTS"
KERNEL_VERSION = "5.15.0-131-generic"
CONTAINER_RUNTIME = "containerd://1.7.24"


# -- small helpers ---------------------------------------------------------------------------


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


def _is_virtual(node: dict[str, Any]) -> bool:
    return _labels(node).get(VIRTUAL_KUBELET_LABEL[0]) == VIRTUAL_KUBELET_LABEL[1]


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


class Api:
    """The typed APIs of the official client, called without model deserialisation."""

    def __init__(self, api_client: Any) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.coord = k8s.CoordinationV1Api(api_client)

    @staticmethod
    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` with ``_preload_content=False``: the JSON body as dicts (reading
        it all also returns the connection to the pool)."""
        resp = fn(*args, _preload_content=False, **kwargs)
        data = resp.data
        return json.loads(data) if data else None

    def quiet(
        self, fn: Callable[..., Any], *args: Any, ok: Iterable[int] = (404, 409), **kwargs: Any
    ) -> Any:
        """Like :meth:`call`; a status in ``ok`` (gone, conflict) returns None."""
        try:
            return self.call(fn, *args, **kwargs)
        except ApiException as exc:
            if exc.status in tuple(ok):
                return None
            raise

    def merge_patch(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.quiet(fn, *args, _content_type="application/merge-patch+json")


class ClusterView:
    """One list of pods and one of nodes shared by the actors of this module.

    ``pods(fresh_after=t)`` lists again when the cached list is older than the TTL or was
    started before ``t`` (a reader passes the monotonic time of its own last write to see
    it). The returned objects are shared: never mutate them.
    """

    def __init__(self, api: Api, ttl_wall_s: float = VIEW_TTL_WALL_S) -> None:
        self.api = api
        self.ttl = ttl_wall_s
        self._locks = {"pods": threading.Lock(), "nodes": threading.Lock()}
        self._cache: dict[str, tuple[float, float, list[dict[str, Any]]]] = {}
        self.lists = 0

    def _get(self, kind: str, fetch: Callable[[], Any], fresh_after: float) -> list[Any]:
        with self._locks[kind]:
            at, _, items = self._cache.get(kind, (-math.inf, -math.inf, []))
            now = time.monotonic()
            if at < fresh_after or now - at > self.ttl:
                result = fetch()
                items = list((result or {}).get("items") or [])
                self._cache[kind] = (now, time.monotonic(), items)
                self.lists += 1
            return items

    def fetched(self, kind: str) -> float:
        """When the cached list of ``kind`` ("pods" or "nodes") came back (monotonic)."""
        return self._cache.get(kind, (-math.inf, -math.inf, []))[1]

    def pods(self, fresh_after: float = 0.0) -> list[dict[str, Any]]:
        return self._get(
            "pods", lambda: self.api.call(self.api.core.list_pod_for_all_namespaces), fresh_after
        )

    def nodes(self, fresh_after: float = 0.0) -> list[dict[str, Any]]:
        return self._get("nodes", lambda: self.api.call(self.api.core.list_node), fresh_after)


class Events:
    """Writes core/v1 Events the way the components they speak for do."""

    def __init__(self, api: Api, world: World, component: str) -> None:
        self.api = api
        self.clock = world.clock
        self.component = component
        self._seq = 0

    def emit(
        self,
        obj: dict[str, Any],
        kind: str,
        type_: str,
        reason: str,
        message: str,
        *,
        host: str | None = None,
        api_version: str = "v1",
    ) -> None:
        meta = _meta(obj)
        name = str(meta.get("name"))
        ns = meta.get("namespace") or "default"
        t = self.clock.time()
        self._seq += 1
        stamp = rfc3339(t)
        source: dict[str, Any] = {"component": self.component}
        if host:
            source["host"] = host
        body = {
            "metadata": {"name": f"{name}.{int(t * 1e9) + self._seq:x}", "namespace": ns},
            "involvedObject": {
                "kind": kind,
                "namespace": meta.get("namespace") or "",
                "name": name,
                "uid": meta.get("uid") or name,
                "apiVersion": api_version,
                "resourceVersion": meta.get("resourceVersion") or "",
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": source,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": host or self.component,
        }
        with contextlib.suppress(ApiException):  # an event is best effort, as in Kubernetes
            self.api.call(self.api.core.create_namespaced_event, ns, body)


# -- the nodes ---------------------------------------------------------------------------------


def node_name(i: int) -> str:
    return f"{NODE_PREFIX}{i:03d}"


def node_ip(i: int) -> str:
    return f"10.1.{i // 200}.{i % 200 + 10}"


def pod_cidr(i: int) -> str:
    return f"10.{64 + i // 256}.{i % 256}.0/24"


def node_labels(i: int, gpus: int) -> dict[str, str]:
    rack = i // NODES_PER_RACK
    spine = rack // RACKS_PER_SPINE
    name = node_name(i)
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"gpu-h200-{gpus}x",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver-version.full": "570.124.06",
        "krea.ai/pool": "h200",
        "krea.ai/rack": f"rack-{rack:02d}",
        "krea.ai/spine": f"spine-{spine}",
        "topology.kubernetes.io/region": "us-east",
        "topology.kubernetes.io/zone": "us-east-1a",
    }


def _conditions(t: float, heartbeat: float | None = None) -> list[dict[str, Any]]:
    hb = rfc3339(heartbeat if heartbeat is not None else t)
    out = []
    for kind in NODE_CONDITIONS:
        status, reason, message = HEALTHY_CONDITIONS[kind]
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": hb,
                "lastTransitionTime": rfc3339(t),
            }
        )
    return out


def make_node(i: int, gpus: int, t: float) -> dict[str, Any]:
    name = node_name(i)
    machine = _sha("machine", name)[:32]
    capacity = {
        "cpu": "224",
        "memory": "2147483648Ki",  # 2 TiB
        GPU: str(gpus),
        "pods": "110",
        "ephemeral-storage": "7499362304Ki",  # 7 TiB of local NVMe
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    allocatable = dict(capacity)
    allocatable.update(
        {"cpu": "222", "memory": "2130706432Ki", "ephemeral-storage": "6911361305364"}
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(i, gpus),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)]},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": _conditions(t),
            "addresses": [
                {"type": "InternalIP", "address": node_ip(i)},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": machine,
                "systemUUID": f"{machine[:8]}-{machine[8:12]}-{machine[12:16]}-"
                f"{machine[16:20]}-{machine[20:32]}",
                "bootID": _sha("boot", name)[:36],
                "kernelVersion": KERNEL_VERSION,
                "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINER_RUNTIME,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "phase": "Running",
        },
    }


def _system_pod_spec(containers: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> Any:
    return {
        "priorityClassName": "system-node-critical",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"operator": "Exists"}],
        "containers": containers,
        "volumes": volumes,
    }


def daemonsets() -> list[dict[str, Any]]:
    """The system DaemonSets every GPU node runs."""
    exporter_labels = {
        "app.kubernetes.io/name": "krea-ops-exporter",
        "app.kubernetes.io/part-of": "krea-ops",
        "krea.ai/workload": "system",
    }
    plugin_labels = {
        "app.kubernetes.io/name": "nvidia-device-plugin",
        "krea.ai/workload": "system",
    }
    exporter = {
        "name": "exporter",
        "image": "ghcr.io/krea-ai/krea-ops:0.1.0",
        "args": ["exporter", "run", "--listen=$(POD_IP):9400", "--sysfs=/host/sys"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "sys", "mountPath": "/host/sys", "readOnly": True}],
    }
    plugin = {
        "name": "nvidia-device-plugin-ctr",
        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
    }
    out = []
    for name, labels, container, volumes in (
        (
            "krea-ops-exporter",
            exporter_labels,
            exporter,
            [{"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}}],
        ),
        (
            "nvidia-device-plugin",
            plugin_labels,
            plugin,
            [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
        ),
    ):
        selector = {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": "kube-system", "labels": dict(labels)},
                "spec": {
                    "selector": {"matchLabels": selector},
                    "updateStrategy": {
                        "type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": "10%"},
                    },
                    "template": {
                        "metadata": {"labels": dict(labels)},
                        "spec": _system_pod_spec([container], volumes),
                    },
                },
            }
        )
    return out


def lease_body(name: str, node_uid: str | None, t: float, duration: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "kube-node-lease"}
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(t),
        },
    }


def bootstrap(world: World, api: Api, lease_duration_s: int) -> None:
    """Namespaces, nodes, their Leases and the system DaemonSets; what exists is kept."""
    for ns in NAMESPACES:
        api.quiet(api.core.create_namespace, {"metadata": {"name": ns}}, ok=(409,))
    t = world.clock.time()
    gpus = world.config.gpus_per_node
    for i in range(world.config.nodes):
        created = api.quiet(api.core.create_node, make_node(i, gpus, t), ok=(409,))
        uid = _meta(created).get("uid") if created else None
        api.quiet(
            api.coord.create_namespaced_lease,
            "kube-node-lease",
            lease_body(node_name(i), uid, t, lease_duration_s),
            ok=(409,),
        )
    for ds in daemonsets():
        api.quiet(api.apps.create_namespaced_daemon_set, "kube-system", ds, ok=(409,))


# -- scheduling predicates (shared by the scheduler, the DaemonSet controller and the
#    taint manager) ------------------------------------------------------------------------


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    key = toleration.get("key")
    if not key:
        return op == "Exists"
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(
    taints: Iterable[dict[str, Any]],
    tolerations: list[dict[str, Any]],
    effects: tuple[str, ...] = ("NoSchedule", "NoExecute"),
) -> dict[str, Any] | None:
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(_m(t), taint) for t in tolerations):
            return taint
    return None


def _expression_matches(expr: dict[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_matches_pod(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """``spec.nodeSelector`` and required node affinity."""
    labels = _labels(node)
    for k, v in _m(spec.get("nodeSelector")).items():
        if labels.get(k) != v:
            return False
    required = _m(
        _m(_m(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = required.get("nodeSelectorTerms")
    if not required or terms is None:
        return True
    name = _meta(node).get("name")
    for term in terms:
        term = _m(term)
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches no node
        if all(_expression_matches(_m(e), labels.get(_m(e).get("key", ""))) for e in exprs) and all(
            _expression_matches(_m(f), name if _m(f).get("key") == "metadata.name" else None)
            for f in fields
        ):
            return True
    return False


def preferred_affinity_score(spec: dict[str, Any], node: dict[str, Any]) -> int:
    """The summed weights of the preferred node-affinity terms the node matches."""
    preferred = _m(_m(spec.get("affinity")).get("nodeAffinity")).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    )
    if not preferred:
        return 0
    labels = _labels(node)
    score = 0
    for term in preferred:
        pref = _m(_m(term).get("preference"))
        exprs = pref.get("matchExpressions") or []
        if exprs and all(
            _expression_matches(_m(e), labels.get(_m(e).get("key", ""))) for e in exprs
        ):
            score += int(_m(term).get("weight") or 0)
    return score


_requests_cache: dict[str, dict[str, float]] = {}


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    """What a pod asks of its node: containers' requests (or limits where a request is
    unset) summed, init containers' taken at their peak, plus the overhead."""
    uid = str(_meta(pod).get("uid") or "")
    cached = _requests_cache.get(uid) if uid else None
    if cached is not None:
        return cached
    spec = _spec(pod)

    def one(c: dict[str, Any]) -> dict[str, float]:
        res = _m(c.get("resources"))
        merged = {**_m(res.get("limits")), **_m(res.get("requests"))}
        out = {}
        for k, v in merged.items():
            try:
                out[k] = quantity(str(v))
            except ValueError:
                continue
        return out

    total: dict[str, float] = defaultdict(float)
    for c in spec.get("containers") or []:
        for k, v in one(_m(c)).items():
            total[k] += v
    for c in spec.get("initContainers") or []:
        for k, v in one(_m(c)).items():
            total[k] = max(total[k], v)
    for k, v in _m(spec.get("overhead")).items():
        total[k] += quantity(str(v))
    result = {k: v for k, v in total.items() if v}
    if uid:
        if len(_requests_cache) > 20000:
            _requests_cache.clear()
        _requests_cache[uid] = result
    return result


def _allocatable(node: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in _m(_status(node).get("allocatable")).items():
        try:
            out[k] = quantity(str(v))
        except ValueError:
            continue
    return out


def _node_ready(node: dict[str, Any]) -> bool:
    c = _condition(node, "Ready")
    return c is not None and c.get("status") == "True"


def _effective_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's taints, plus ``not-ready`` for a node not Ready that carries none of the
    node lifecycle taints yet."""
    taints = [_m(t) for t in _spec(node).get("taints") or []]
    if not _node_ready(node) and not any(t.get("key") in (UNREACHABLE, NOT_READY) for t in taints):
        taints.append({"key": NOT_READY, "effect": "NoSchedule"})
    return taints


# -- the kubelet ------------------------------------------------------------------------------


_BIG_IMAGES = ("pytorch", "nemo", "vllm", "cuda", "tensorrt", "triton", "sglang")


class Kubelet(Actor):
    """Every real node's kubelet (and the node lifecycle controller's view of it)."""

    name = "kubelet"

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world)
        speed = world.config.speed
        nodes = max(1, world.config.nodes)
        self.view = view
        self.api = api
        self.events = Events(api, world, "kubelet")
        self.node_events = Events(api, world, "node-controller")
        self.period_s = max(2.0, 0.5 * speed)
        self.renew_s = max(10.0, speed * max(0.5, nodes / LEASE_WRITES_PER_WALL_S))
        self.lease_duration_s = int(max(40, math.ceil(4 * self.renew_s)))
        self.status_s = max(300.0, 5 * self.renew_s)
        self.writes = 0
        self._wrote = 0.0
        self._next_renew: dict[str, float] = {}
        self._next_status: dict[str, float] = {}
        self._due: dict[str, float] = {}  # pod uid -> when its containers start
        self._ready_at: dict[str, float] = {}  # pod uid -> when its containers turn ready
        self._images: dict[str, set[str]] = defaultdict(set)  # node -> pulled images
        self._ip_next: dict[str, int] = defaultdict(lambda: 2)
        self._killing: set[str] = set()

    # -- the loop -----------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.time()
        nodes = self.view.nodes(self._wrote)
        pods = self.view.pods(self._wrote)
        mine = {_meta(n)["name"]: n for n in nodes if not _is_virtual(n)}
        failed: set[str] = set()
        for i, (name, node) in enumerate(sorted(mine.items())):
            if self._sync_node(node, now, i, len(mine)):
                failed.add(name)
        by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            node_name_ = str(_spec(pod).get("nodeName") or "")
            if node_name_ in mine:
                by_node[node_name_].append(pod)
        live: set[str] = set()
        for name, node_pods in by_node.items():
            node = mine[name]
            if name in failed:
                cause = _annotations(node).get(FAILED_ANNOTATION, "")
                for pod in node_pods:
                    self._fail_pod(pod, name, cause, now)
                continue
            used_ips = {_status(p).get("podIP") for p in node_pods if _status(p).get("podIP")}
            for pod in node_pods:
                live.add(str(_meta(pod).get("uid")))
                self._sync_pod(pod, node, now, used_ips)
        for memo in (self._due, self._ready_at):
            for uid in [u for u in memo if u not in live]:
                del memo[uid]
        self._killing &= live

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        try:
            return self.api.quiet(fn, *args, **kwargs)
        finally:
            self._wrote = time.monotonic()

    # -- nodes --------------------------------------------------------------------------

    def _sync_node(self, node: dict[str, Any], now: float, index: int, count: int) -> bool:
        """Lease, heartbeat, failure and repair of one node; True while it is failed."""
        name = _meta(node)["name"]
        cause = _annotations(node).get(FAILED_ANNOTATION)
        ready = _condition(node, "Ready") or {}
        taints = [_m(t) for t in _spec(node).get("taints") or []]
        ours = [t for t in taints if t.get("key") == UNREACHABLE]
        if cause is not None:
            if ready.get("status") != "Unknown" or len(ours) < 2:
                self._mark_failed(node, cause, now, taints)
            self._next_renew.pop(name, None)
            return True
        if ready.get("status") != "True" or ours:
            self._mark_ready(node, now, taints)
            self._renew(node, now)
            return False
        if name not in self._next_renew:
            # Spread the renewals of all nodes over one period.
            self._next_renew[name] = now + self.renew_s * index / max(count, 1)
            self._next_status.setdefault(name, now + self.status_s * (index + 0.5) / count)
        if now >= self._next_renew[name]:
            self._renew(node, now)
        if now >= self._next_status.get(name, now):
            self._heartbeat(node, now)
        return False

    def _renew(self, node: dict[str, Any], now: float) -> None:
        name = _meta(node)["name"]
        self._next_renew[name] = now + self.renew_s
        body = {
            "spec": {
                "holderIdentity": name,
                "renewTime": micro_time(now),
                "leaseDurationSeconds": self.lease_duration_s,
            }
        }
        self.writes += 1
        try:
            self.api.call(
                self.api.coord.patch_namespaced_lease,
                name,
                "kube-node-lease",
                body,
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.api.quiet(
                self.api.coord.create_namespaced_lease,
                "kube-node-lease",
                lease_body(name, _meta(node).get("uid"), now, self.lease_duration_s),
                ok=(409,),
            )

    def _heartbeat(self, node: dict[str, Any], now: float) -> None:
        name = _meta(node)["name"]
        self._next_status[name] = now + self.status_s
        conditions = []
        for kind in NODE_CONDITIONS:
            current = _condition(node, kind)
            status, reason, message = HEALTHY_CONDITIONS[kind]
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": rfc3339(now),
                    "lastTransitionTime": (current or {}).get("lastTransitionTime") or rfc3339(now),
                }
            )
        self.writes += 1
        self.api.quiet(
            self.api.core.patch_node_status, name, {"status": {"conditions": conditions}}
        )

    def _set_taints(self, node: dict[str, Any], taints: list[dict[str, Any]]) -> None:
        meta = _meta(node)
        self._write(
            self.api.core.patch_node,
            meta["name"],
            {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "spec": {"taints": taints},
            },
            _content_type="application/merge-patch+json",
        )

    def _mark_failed(
        self, node: dict[str, Any], cause: str, now: float, taints: list[dict[str, Any]]
    ) -> None:
        """What the node lifecycle controller does once the kubelet stops posting status.

        The taints go first: their patch carries the node's resourceVersion, which the
        status patch would change."""
        name = _meta(node)["name"]
        if sum(1 for t in taints if t.get("key") == UNREACHABLE) < 2:
            kept = [t for t in taints if t.get("key") not in (UNREACHABLE, NOT_READY)]
            stamp = rfc3339(now)
            self._set_taints(
                node,
                [
                    *kept,
                    {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": stamp},
                    {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": stamp},
                ],
            )
        if (_condition(node, "Ready") or {}).get("status") == "Unknown":
            return
        conditions = []
        for kind in NODE_CONDITIONS:
            current = _condition(node, kind) or {}
            conditions.append(
                {
                    "type": kind,
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": current.get("lastHeartbeatTime") or rfc3339(now),
                    "lastTransitionTime": rfc3339(now),
                }
            )
        self._write(self.api.core.patch_node_status, name, {"status": {"conditions": conditions}})
        self.node_events.emit(
            node, "Node", "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady"
        )

    def _mark_ready(self, node: dict[str, Any], now: float, taints: list[dict[str, Any]]) -> None:
        name = _meta(node)["name"]
        kept = [t for t in taints if t.get("key") not in (UNREACHABLE, NOT_READY)]
        if len(kept) != len(taints):
            self._set_taints(node, kept)
        if not _node_ready(node):
            self._write(
                self.api.core.patch_node_status, name, {"status": {"conditions": _conditions(now)}}
            )
            self.events.emit(
                node,
                "Node",
                "Normal",
                "NodeReady",
                f"Node {name} status is now: NodeReady",
                host=name,
            )
            self._next_status[name] = now + self.status_s

    # -- pods ---------------------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = _meta(pod)
        self._write(
            self.api.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {"status": status},
        )

    def _sync_pod(
        self, pod: dict[str, Any], node: dict[str, Any], now: float, used_ips: set[Any]
    ) -> None:
        meta, status = _meta(pod), _status(pod)
        uid = str(meta.get("uid"))
        phase = status.get("phase") or "Pending"
        if meta.get("deletionTimestamp"):
            self._terminate(pod, node, now)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if phase == "Pending":
            if not status.get("containerStatuses"):
                self._create_containers(pod, node, now)
            elif now >= self._due.get(uid, _time_or(status.get("startTime"), now) + 4.0):
                self._start_containers(pod, node, now, used_ips)
            return
        # Running
        annotations = _annotations(pod)
        started = self._started_at(pod, now)
        ready_after = self._ready_at.get(uid)
        if ready_after is None and READY_SECONDS_ANNOTATION in annotations:
            ready_after = started + _float(annotations[READY_SECONDS_ANNOTATION])
        if ready_after is not None and not _pod_ready(pod) and now >= ready_after:
            self._set_ready(pod, now)
        runs = _spec(pod).get("restartPolicy", "Always") != "Always" and (
            RUN_SECONDS_ANNOTATION in annotations
        )
        if runs and now >= started + _float(annotations[RUN_SECONDS_ANNOTATION]):
            code = int(_float(annotations.get(EXIT_CODE_ANNOTATION, "0")))
            self._finish(pod, now, code)

    def _started_at(self, pod: dict[str, Any], default: float) -> float:
        for cs in _status(pod).get("containerStatuses") or []:
            running = _m(_m(_m(cs).get("state")).get("running"))
            if running.get("startedAt"):
                return _time_or(running["startedAt"], default)
        return _time_or(_status(pod).get("startTime"), default)

    @staticmethod
    def _host_ip(node: dict[str, Any]) -> str:
        for a in _status(node).get("addresses") or []:
            if _m(a).get("type") == "InternalIP":
                return str(a.get("address"))
        return ""

    @staticmethod
    def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
        return [_m(c) for c in _spec(pod).get("containers") or []]

    def _create_containers(self, pod: dict[str, Any], node: dict[str, Any], now: float) -> None:
        uid = str(_meta(pod).get("uid"))
        node_name_ = _meta(node)["name"]
        pulled = self._images[node_name_]
        delay = 0.0
        for c in self._containers(pod) + [_m(c) for c in _spec(pod).get("initContainers") or []]:
            image = str(c.get("image", ""))
            if image in pulled:
                delay = max(delay, self.rng.uniform(1.0, 3.0))
            elif any(b in image for b in _BIG_IMAGES):
                delay = max(delay, self.rng.uniform(20.0, 90.0))
            else:
                delay = max(delay, self.rng.uniform(2.0, 8.0))
        self._due[uid] = now + delay
        stamp = rfc3339(now)
        names = [str(c.get("name")) for c in self._containers(pod)]
        inits = [_m(c) for c in _spec(pod).get("initContainers") or []]
        conditions: list[dict[str, Any]] = [
            _cond("PodReadyToStartContainers", "False", stamp),
            _cond(
                "Ready",
                "False",
                stamp,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(names)}]",
            ),
            _cond(
                "ContainersReady",
                "False",
                stamp,
                "ContainersNotReady",
                f"containers with unready status: [{' '.join(names)}]",
            ),
        ]
        if inits:
            init_names = " ".join(str(c.get("name")) for c in inits)
            conditions.append(
                _cond(
                    "Initialized",
                    "False",
                    stamp,
                    "ContainersNotInitialized",
                    f"containers with incomplete status: [{init_names}]",
                )
            )
        else:
            conditions.append(_cond("Initialized", "True", stamp))
        if _condition(pod, "PodScheduled") is None:
            conditions.append(_cond("PodScheduled", "True", stamp))
        host_ip = self._host_ip(node)
        status: dict[str, Any] = {
            "phase": "Pending",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": stamp,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": str(c.get("name")),
                    "image": str(c.get("image")),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "lastState": {},
                    "state": {
                        "waiting": {"reason": "PodInitializing" if inits else "ContainerCreating"}
                    },
                }
                for c in self._containers(pod)
            ],
        }
        if inits:
            status["initContainerStatuses"] = [
                {
                    "name": str(c.get("name")),
                    "image": str(c.get("image")),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "lastState": {},
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
                for c in inits
            ]
        self._patch_status(pod, status)

    def _pod_ip(self, pod: dict[str, Any], node: dict[str, Any], used: set[Any]) -> str:
        if _spec(pod).get("hostNetwork"):
            return self._host_ip(node)
        cidr = str(_spec(node).get("podCIDR") or "")
        prefix = cidr.rsplit(".", 1)[0] if cidr.count(".") == 3 else "10.244.0"
        name = _meta(node)["name"]
        for _ in range(253):
            octet = self._ip_next[name]
            self._ip_next[name] = octet + 1 if octet < 254 else 2
            ip = f"{prefix}.{octet}"
            if ip not in used:
                used.add(ip)
                return ip
        return f"{prefix}.{self.rng.randrange(2, 255)}"

    def _image_id(self, image: str) -> str:
        repo = image.split("@", 1)[0]
        tag_sep = repo.rfind(":")
        if tag_sep > repo.rfind("/"):
            repo = repo[:tag_sep]
        return f"{repo}@sha256:{_sha('image', image)}"

    def _start_containers(
        self, pod: dict[str, Any], node: dict[str, Any], now: float, used_ips: set[Any]
    ) -> None:
        meta = _meta(pod)
        uid = str(meta.get("uid"))
        node_name_ = _meta(node)["name"]
        stamp = rfc3339(now)
        annotations = _annotations(pod)
        ready_delay = _float(annotations.get(READY_SECONDS_ANNOTATION, "0"))
        ready = ready_delay <= 0
        if not ready:
            self._ready_at[uid] = now + ready_delay
        names = [str(c.get("name")) for c in self._containers(pod)]
        ip = _status(pod).get("podIP") or self._pod_ip(pod, node, used_ips)
        statuses = []
        for c in self._containers(pod):
            image = str(c.get("image"))
            self._images[node_name_].add(image)
            statuses.append(
                {
                    "name": str(c.get("name")),
                    "image": image,
                    "imageID": self._image_id(image),
                    "containerID": "containerd://" + _sha("container", uid, str(c.get("name"))),
                    "ready": ready,
                    "restartCount": 0,
                    "started": True,
                    "lastState": {},
                    "state": {"running": {"startedAt": stamp}},
                }
            )
        unready = (
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(names)}]",
        )
        conditions = [
            _cond("PodReadyToStartContainers", "True", stamp),
            _cond("Initialized", "True", stamp),
            _cond(
                "ContainersReady", "True" if ready else "False", stamp, *(() if ready else unready)
            ),
            _cond("Ready", "True" if ready else "False", stamp, *(() if ready else unready)),
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": conditions,
            "containerStatuses": statuses,
        }
        inits = [_m(c) for c in _spec(pod).get("initContainers") or []]
        if inits:
            status["initContainerStatuses"] = [
                {
                    "name": str(c.get("name")),
                    "image": str(c.get("image")),
                    "imageID": self._image_id(str(c.get("image"))),
                    "containerID": "containerd://" + _sha("init", uid, str(c.get("name"))),
                    "ready": True,
                    "restartCount": 0,
                    "started": False,
                    "lastState": {},
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": _status(pod).get("startTime") or stamp,
                            "finishedAt": stamp,
                        }
                    },
                }
                for c in inits
            ]
        self._patch_status(pod, status)
        self._due.pop(uid, None)
        self.events.emit(
            pod,
            "Pod",
            "Normal",
            "Started",
            f"Started container {', '.join(names)}",
            host=node_name_,
        )

    def _set_ready(self, pod: dict[str, Any], now: float) -> None:
        stamp = rfc3339(now)
        statuses = []
        for cs in _status(pod).get("containerStatuses") or []:
            cs = dict(_m(cs))
            cs["ready"] = True
            statuses.append(cs)
        self._patch_status(
            pod,
            {
                "conditions": [
                    _cond("ContainersReady", "True", stamp),
                    _cond("Ready", "True", stamp),
                ],
                "containerStatuses": statuses,
            },
        )
        self._ready_at.pop(str(_meta(pod).get("uid")), None)

    def _terminated_statuses(
        self, pod: dict[str, Any], now: float, code: int, reason: str, message: str | None = None
    ) -> list[dict[str, Any]]:
        stamp = rfc3339(now)
        out = []
        for cs in _status(pod).get("containerStatuses") or []:
            cs = dict(_m(cs))
            running = _m(_m(cs.get("state")).get("running"))
            terminated: dict[str, Any] = {
                "exitCode": code,
                "reason": reason,
                "startedAt": running.get("startedAt"),
                "finishedAt": stamp,
            }
            if cs.get("containerID"):
                terminated["containerID"] = cs["containerID"]
            if message:
                terminated["message"] = message
            cs.update({"ready": False, "started": False, "state": {"terminated": terminated}})
            out.append(cs)
        return out

    def _finish(self, pod: dict[str, Any], now: float, code: int) -> None:
        """The containers exited by themselves (``sim.krea.ai/run-seconds``)."""
        stamp = rfc3339(now)
        ok = code == 0
        reason = "PodCompleted" if ok else "PodFailed"
        self._patch_status(
            pod,
            {
                "phase": "Succeeded" if ok else "Failed",
                "conditions": [
                    _cond("Ready", "False", stamp, reason),
                    _cond("ContainersReady", "False", stamp, reason),
                    _cond("PodReadyToStartContainers", "False", stamp),
                ],
                "containerStatuses": self._terminated_statuses(
                    pod, now, code, "Completed" if ok else "Error"
                ),
            },
        )

    def _terminate(self, pod: dict[str, Any], node: dict[str, Any], now: float) -> None:
        """Graceful deletion: stop the containers once the grace period is over, report the
        pod terminal (containers exit 143 after SIGTERM) where finalizers will keep it
        around or it had started, then delete it with grace 0."""
        meta, status = _meta(pod), _status(pod)
        uid = str(meta.get("uid"))
        grace = meta.get("deletionGracePeriodSeconds")
        finalizers = bool(meta.get("finalizers"))
        deadline = _time_or(meta.get("deletionTimestamp"), now) + float(grace or 0)
        started = status.get("phase") == "Running"
        if started and uid not in self._killing:
            self._killing.add(uid)
            names = [str(c.get("name")) for c in self._containers(pod)]
            self.events.emit(
                pod,
                "Pod",
                "Normal",
                "Killing",
                f"Stopping container {', '.join(names)}",
                host=_meta(node)["name"],
            )
        if started and now < deadline:
            return
        if not _terminal(pod) and (started or finalizers):
            stamp = rfc3339(now)
            self._patch_status(
                pod,
                {
                    "phase": "Failed",
                    "conditions": [
                        _cond("Ready", "False", stamp, "PodFailed"),
                        _cond("ContainersReady", "False", stamp, "PodFailed"),
                        _cond("PodReadyToStartContainers", "False", stamp),
                    ],
                    "containerStatuses": self._terminated_statuses(pod, now, 143, "Error"),
                },
            )
        if grace == 0 and finalizers:
            return  # the final delete was asked for; the finalizers hold the pod
        self._write(
            self.api.core.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            grace_period_seconds=0,
            body={"preconditions": {"uid": uid}},
        )

    def _fail_pod(self, pod: dict[str, Any], node_name_: str, cause: str, now: float) -> None:
        """The node died under a pod that had started."""
        status = _status(pod)
        if _terminal(pod):
            return
        if status.get("phase") != "Running" and not status.get("containerStatuses"):
            return  # never started: it waits for the node to come back
        stamp = rfc3339(now)
        message = (
            f"Node {node_name_} failed ({cause}): the kubelet stopped and the pod's "
            "containers were lost"
        )
        self._patch_status(
            pod,
            {
                "phase": "Failed",
                "reason": "NodeFailure",
                "message": message,
                "conditions": [
                    _cond("DisruptionTarget", "True", stamp, "TerminationByKubelet", message),
                    _cond("Ready", "False", stamp, "PodFailed"),
                    _cond("ContainersReady", "False", stamp, "PodFailed"),
                    _cond("PodReadyToStartContainers", "False", stamp),
                ],
                "containerStatuses": self._terminated_statuses(
                    pod,
                    now,
                    137,
                    "ContainerStatusUnknown",
                    "The container could not be located when the pod was terminated",
                ),
            },
        )


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


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


# -- the scheduler ----------------------------------------------------------------------------


@dataclass
class _NodeInfo:
    name: str
    node: dict[str, Any]
    alloc: dict[str, float]
    taints: list[dict[str, Any]]
    unschedulable: bool
    rack: str
    spine: str
    used: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    pods: int = 0


@dataclass
class _Gang:
    racks: Counter[str] = field(default_factory=Counter)
    spines: Counter[str] = field(default_factory=Counter)


def _gang_key(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    labels = _labels(pod)
    for key in GANG_LABELS:
        if labels.get(key):
            return (_meta(pod).get("namespace") or "", key, labels[key])
    return None


_PREEMPTION_USELESS = "Preemption is not helpful for scheduling"
_NO_VICTIMS = "No preemption victims found for incoming pod"


class Scheduler(Actor):
    """``default-scheduler``: filters, scores and binds through ``pods/<name>/binding``.

    Filters, in the real plugins' order (the first failing one names the node's reason):
    cordon, taints (NoSchedule/NoExecute; a node not Ready counts as ``not-ready``
    tainted), nodeSelector and required node affinity, then resources (requests, or
    limits where unset, against allocatable minus the pods bound there and not finished).
    Scores, in order: preferred node affinity weights; for a gang (pods sharing a
    ``jobset.sigs.k8s.io/jobset-name`` or ``batch.kubernetes.io/job-name``), peers in
    the node's rack, then in its spine, then free GPUs in the rack; then GPUs most
    allocated (packing), then CPU most allocated; ties go to the first node by name."""

    name = "scheduler"
    RETRY_S = 300.0

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world)
        self.view = view
        self.api = api
        self.events = Events(api, world, "default-scheduler")
        self.period_s = max(1.0, 0.5 * world.config.speed)
        self.writes = 0
        self._wrote = 0.0
        self._assumed: dict[str, tuple[str, dict[str, float], dict[str, Any]]] = {}
        self._tried: dict[str, tuple[int, float, str]] = {}  # uid -> (signature, when, message)

    def tick(self) -> None:
        pods = self.view.pods(self._wrote)
        pending = [p for p in pods if self._wants_scheduling(p)]
        if not pending and not self._assumed:
            self._tried.clear()
            return
        # A pod seen for the first time may have been created right after a node was
        # cordoned or tainted: decide on nodes listed after the pods were.
        new = any(str(_meta(p).get("uid")) not in self._tried for p in pending)
        nodes = self.view.nodes(self.view.fetched("pods") if new else 0.0)
        infos = self._node_infos(nodes)
        gangs: dict[tuple[str, str, str], _Gang] = defaultdict(_Gang)
        seen: set[str] = set()
        active_bound = []
        for pod in pods:
            uid = str(_meta(pod).get("uid"))
            seen.add(uid)
            name = _spec(pod).get("nodeName")
            if not name or _terminal(pod):
                continue
            active_bound.append(uid)
            self._assumed.pop(uid, None)
            self._account(infos.get(name), pod_requests(pod), _gang_key(pod), gangs)
        for uid, (name, reqs, pod) in list(self._assumed.items()):
            if uid not in seen:
                del self._assumed[uid]
                continue
            self._account(infos.get(name), reqs, _gang_key(pod), gangs)
        if not pending:
            return
        signature = hash(
            (
                tuple(self._node_fingerprint(i) for i in infos.values()),
                frozenset(active_bound),
            )
        )
        now = self.clock.time()
        pending_uids = {str(_meta(p).get("uid")) for p in pending}
        for uid in [u for u in self._tried if u not in pending_uids]:
            del self._tried[uid]
        # The active queue: priority, then arrival (creation, the resourceVersion within
        # the second creationTimestamp resolves).
        pending.sort(
            key=lambda p: (
                -int(_spec(p).get("priority") or 0),
                _meta(p).get("creationTimestamp") or "",
                int(_meta(p).get("resourceVersion") or 0),
            )
        )
        rack_free = self._rack_free(infos)
        for pod in pending:
            uid = str(_meta(pod).get("uid"))
            if uid in self._assumed:
                continue
            tried = self._tried.get(uid)
            if tried and tried[0] == signature and now - tried[1] < self.RETRY_S:
                continue
            self._schedule(pod, infos, gangs, rack_free, signature, now)

    @staticmethod
    def _wants_scheduling(pod: dict[str, Any]) -> bool:
        spec = _spec(pod)
        return (
            not spec.get("nodeName")
            and (spec.get("schedulerName") or "default-scheduler") == "default-scheduler"
            and not spec.get("schedulingGates")
            and not _meta(pod).get("deletionTimestamp")
            and (_status(pod).get("phase") or "Pending") == "Pending"
        )

    @staticmethod
    def _node_infos(nodes: list[dict[str, Any]]) -> dict[str, _NodeInfo]:
        infos = {}
        for node in nodes:
            labels = _labels(node)
            name = _meta(node)["name"]
            infos[name] = _NodeInfo(
                name=name,
                node=node,
                alloc=_allocatable(node),
                taints=_effective_taints(node),
                unschedulable=bool(_spec(node).get("unschedulable")),
                rack=labels.get("krea.ai/rack", ""),
                spine=labels.get("krea.ai/spine", ""),
            )
        return infos

    @staticmethod
    def _node_fingerprint(info: _NodeInfo) -> tuple[Any, ...]:
        return (
            info.name,
            repr(info.taints),
            info.unschedulable,
            repr(sorted(info.alloc.items())),
            repr(sorted(_labels(info.node).items())),
        )

    @staticmethod
    def _account(
        info: _NodeInfo | None,
        reqs: dict[str, float],
        gang: tuple[str, str, str] | None,
        gangs: dict[tuple[str, str, str], _Gang],
    ) -> None:
        if info is None:
            return
        for k, v in reqs.items():
            info.used[k] += v
        info.pods += 1
        if gang is not None:
            gangs[gang].racks[info.rack] += 1
            gangs[gang].spines[info.spine] += 1

    @staticmethod
    def _rack_free(infos: dict[str, _NodeInfo]) -> dict[str, float]:
        free: dict[str, float] = defaultdict(float)
        for info in infos.values():
            if info.unschedulable or any(
                t.get("effect") in ("NoSchedule", "NoExecute") for t in info.taints
            ):
                continue
            free[info.rack] += max(0.0, info.alloc.get(GPU, 0.0) - info.used.get(GPU, 0.0))
        return free

    @staticmethod
    def filter(pod: dict[str, Any], reqs: dict[str, float], info: _NodeInfo) -> list[str]:
        """Why the pod can't go to the node, in the scheduler's words ([] if it can)."""
        spec = _spec(pod)
        tolerations = [_m(t) for t in spec.get("tolerations") or []]
        if info.unschedulable and not any(
            tolerates(t, {"key": UNSCHEDULABLE, "effect": "NoSchedule"}) for t in tolerations
        ):
            return ["node(s) were unschedulable"]
        taint = untolerated_taint(info.taints, tolerations)
        if taint is not None:
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
            ]
        if not node_matches_pod(spec, info.node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        reasons = []
        if info.pods + 1 > info.alloc.get("pods", 110.0):
            reasons.append("Too many pods")
        for k, v in reqs.items():
            if v > 0 and info.used.get(k, 0.0) + v > info.alloc.get(k, 0.0) + 1e-9:
                reasons.append(f"Insufficient {k}")
        return reasons

    def _schedule(
        self,
        pod: dict[str, Any],
        infos: dict[str, _NodeInfo],
        gangs: dict[tuple[str, str, str], _Gang],
        rack_free: dict[str, float],
        signature: int,
        now: float,
    ) -> None:
        reqs = pod_requests(pod)
        gang_key = _gang_key(pod)
        gang = gangs.get(gang_key) if gang_key else None
        best: tuple[Any, ...] | None = None
        best_info: _NodeInfo | None = None
        reasons: Counter[str] = Counter()
        preemption: Counter[str] = Counter()
        gpu_req = reqs.get(GPU, 0.0)
        for info in infos.values():
            why = self.filter(pod, reqs, info)
            if why:
                reasons.update(why)
                resource = all(w.startswith(("Insufficient", "Too many")) for w in why)
                preemption[_NO_VICTIMS if resource else _PREEMPTION_USELESS] += 1
                continue
            gpu_cap = info.alloc.get(GPU, 0.0)
            cpu_cap = info.alloc.get("cpu", 0.0)
            score = (
                preferred_affinity_score(_spec(pod), info.node),
                gang.racks[info.rack] if gang else 0,
                gang.spines[info.spine] if gang else 0,
                rack_free.get(info.rack, 0.0) if gang_key else 0.0,
                (info.used.get(GPU, 0.0) + gpu_req) / gpu_cap if gpu_cap and gpu_req else 0.0,
                (info.used.get("cpu", 0.0) + reqs.get("cpu", 0.0)) / cpu_cap if cpu_cap else 0.0,
            )
            if best is None or score > best:
                best, best_info = score, info
        if best_info is None:
            self._unschedulable(pod, len(infos), reasons, preemption, signature, now)
            return
        self._bind(pod, best_info, reqs, gang_key, gangs, rack_free)

    def _bind(
        self,
        pod: dict[str, Any],
        info: _NodeInfo,
        reqs: dict[str, float],
        gang_key: tuple[str, str, str] | None,
        gangs: dict[tuple[str, str, str], _Gang],
        rack_free: dict[str, float],
    ) -> None:
        meta = _meta(pod)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": info.name},
        }
        self.writes += 1
        try:
            self.api.call(
                self.api.core.create_namespaced_pod_binding, meta["name"], meta["namespace"], body
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return
            raise
        finally:
            self._wrote = time.monotonic()
        uid = str(meta.get("uid"))
        self._assumed[uid] = (info.name, reqs, pod)
        self._tried.pop(uid, None)
        self._account(info, reqs, gang_key, gangs)
        rack_free[info.rack] = max(0.0, rack_free.get(info.rack, 0.0) - reqs.get(GPU, 0.0))
        self.events.emit(
            pod,
            "Pod",
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {info.name}",
        )

    def _unschedulable(
        self,
        pod: dict[str, Any],
        count: int,
        reasons: Counter[str],
        preemption: Counter[str],
        signature: int,
        now: float,
    ) -> None:
        if count == 0:
            message = "no nodes available to schedule pods"
        else:
            parts = ", ".join(sorted(f"{v} {k}" for k, v in reasons.items()))
            pre = ", ".join(sorted(f"{v} {k}" for k, v in preemption.items()))
            message = (
                f"0/{count} nodes are available: {parts}. "
                f"preemption: 0/{count} nodes are available: {pre}."
            )
        uid = str(_meta(pod).get("uid"))
        self._tried[uid] = (signature, now, message)
        current = _condition(pod, "PodScheduled") or {}
        if current.get("status") == "False" and current.get("message") == message:
            return
        meta = _meta(pod)
        self.writes += 1
        self.api.quiet(
            self.api.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {
                "status": {
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                            "lastProbeTime": None,
                            "lastTransitionTime": rfc3339(now),
                        }
                    ]
                }
            },
        )
        self._wrote = time.monotonic()
        self.events.emit(pod, "Pod", "Warning", "FailedScheduling", message)


# -- the controllers --------------------------------------------------------------------------

_DS_TOLERATIONS = (
    {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"},
    {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
)

REVISION = "deployment.kubernetes.io/revision"


def _owner_ref(obj: dict[str, Any], kind: str, api_version: str = "apps/v1") -> dict[str, Any]:
    meta = _meta(obj)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_rank(pod: dict[str, Any]) -> tuple[Any, ...]:
    """Which pod of a ReplicaSet goes first when it scales down (ActivePodsWithRanks):
    unscheduled, then pending, then not ready, then the more restarted, then the newer."""
    status = _status(pod)
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(status.get("phase") or "", 0)
    restarts = sum(
        int(_m(c).get("restartCount") or 0) for c in status.get("containerStatuses") or []
    )
    return (
        1 if _spec(pod).get("nodeName") else 0,
        phase_rank,
        1 if _pod_ready(pod) else 0,
        -restarts,
        # newer first: negate the creation time
        -_time_or(_meta(pod).get("creationTimestamp"), 0.0),
    )


class Controllers(Actor):
    """The DaemonSet, Deployment and ReplicaSet controllers and the taint manager."""

    name = "controllers"

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world)
        self.view = view
        self.api = api
        self.period_s = max(2.0, 0.5 * world.config.speed)
        self.ds_events = Events(api, world, "daemonset-controller")
        self.rs_events = Events(api, world, "replicaset-controller")
        self.deploy_events = Events(api, world, "deployment-controller")
        self.taint_events = Events(api, world, "taint-eviction-controller")
        self.writes = 0
        self._wrote = 0.0
        self._evicted: set[str] = set()

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        try:
            return self.api.quiet(fn, *args, **kwargs)
        finally:
            self._wrote = time.monotonic()

    def tick(self) -> None:
        now = self.clock.time()
        nodes = self.view.nodes(self._wrote)
        pods = self.view.pods(self._wrote)
        owned: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            uid = _controller_uid(pod)
            if uid:
                owned[uid].append(pod)
        # One list of ReplicaSets for both controllers: the Deployment controller's scaling
        # (and the ReplicaSets it creates) reach the ReplicaSet controller in the same tick.
        steps: list[Callable[[], None]] = [lambda: self._daemonsets(nodes, owned)]
        try:
            sets = self._items(self.api.apps.list_replica_set_for_all_namespaces)
        except ApiException:
            pass  # no ReplicaSets to go by: those two controllers wait for the next tick
        else:
            steps += [lambda: self._deployments(sets, now), lambda: self._replicasets(sets, owned)]
        steps.append(lambda: self._taint_manager(nodes, pods, now))
        for step in steps:
            self._guard(step)

    # -- DaemonSets ---------------------------------------------------------------------

    def _daemonsets(
        self, nodes: list[dict[str, Any]], owned: dict[str, list[dict[str, Any]]]
    ) -> None:
        for ds in self._items(self.api.apps.list_daemon_set_for_all_namespaces):
            if not _meta(ds).get("deletionTimestamp"):
                self._sync_daemonset(ds, nodes, owned.get(_meta(ds)["uid"], []))

    def _ds_eligible(self, ds: dict[str, Any], node: dict[str, Any]) -> bool:
        spec = _m(_m(_spec(ds).get("template")).get("spec"))
        tolerations = [_m(t) for t in spec.get("tolerations") or []] + list(_DS_TOLERATIONS)
        if untolerated_taint([_m(t) for t in _spec(node).get("taints") or []], tolerations):
            return False
        return node_matches_pod(spec, node)

    def _sync_daemonset(
        self, ds: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> None:
        meta, spec = _meta(ds), _spec(ds)
        generation = int(meta.get("generation") or 1)
        template = _m(spec.get("template"))
        revision = template_hash(template)
        eligible = {_meta(n)["name"]: n for n in nodes if self._ds_eligible(ds, n)}
        by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            by_node[str(_spec(pod).get("nodeName") or "")].append(pod)
        max_unavailable = max(
            1,
            _int_or_percent(
                _m(_m(spec.get("updateStrategy")).get("rollingUpdate")).get("maxUnavailable", 1),
                len(eligible),
                round_up=True,
            ),
        )
        unavailable = 0
        outdated: list[dict[str, Any]] = []
        status = Counter[str]()
        for name, node_pods in by_node.items():
            if name not in eligible:
                for pod in node_pods:
                    if _active(pod):
                        status["misscheduled"] += 1
                        self._delete_pod(pod, self.ds_events, "DaemonSet", ds)
        for name in eligible:
            node_pods = by_node.get(name, [])
            for pod in node_pods:
                if _status(pod).get("phase") == "Failed" and not _meta(pod).get(
                    "deletionTimestamp"
                ):
                    self.ds_events.emit(
                        ds,
                        "DaemonSet",
                        "Warning",
                        "FailedDaemonPod",
                        f"Found failed daemon pod {_meta(pod)['namespace']}/{_meta(pod)['name']} "
                        f"on node {name}, will try to kill it",
                        api_version="apps/v1",
                    )
                    self._delete_pod(pod, self.ds_events, "DaemonSet", ds)
            active = [p for p in node_pods if _active(p)]
            if not active:
                if not any(_meta(p).get("deletionTimestamp") for p in node_pods):
                    self._create_daemon_pod(ds, template, name, revision, generation)
                unavailable += 1
                continue
            active.sort(key=lambda p: _meta(p).get("creationTimestamp") or "")
            for extra in active[1:]:
                self._delete_pod(extra, self.ds_events, "DaemonSet", ds)
            pod = active[0]
            status["current"] += 1
            if _pod_ready(pod):
                status["ready"] += 1
            else:
                unavailable += 1
            if _labels(pod).get("pod-template-generation") == str(generation) or (
                _labels(pod).get("controller-revision-hash") == revision
            ):
                status["updated"] += 1
            else:
                outdated.append(pod)
        if (
            outdated
            and _m(spec.get("updateStrategy")).get("type", "RollingUpdate") == "RollingUpdate"
        ):
            outdated.sort(key=lambda p: (_pod_ready(p), _meta(p).get("name")))
            for pod in outdated[: max(0, max_unavailable - unavailable)]:
                self._delete_pod(pod, self.ds_events, "DaemonSet", ds)
        new_status = {
            "currentNumberScheduled": status["current"],
            "desiredNumberScheduled": len(eligible),
            "numberMisscheduled": status["misscheduled"],
            "numberReady": status["ready"],
            "numberAvailable": status["ready"],
            "numberUnavailable": max(0, len(eligible) - status["ready"]),
            "updatedNumberScheduled": status["updated"],
            "observedGeneration": generation,
        }
        old = _status(ds)
        if any((old.get(k) or 0) != v for k, v in new_status.items()):
            self._write(
                self.api.apps.patch_namespaced_daemon_set_status,
                meta["name"],
                meta["namespace"],
                {"status": new_status},
            )

    def _create_daemon_pod(
        self,
        ds: dict[str, Any],
        template: dict[str, Any],
        node: str,
        revision: str,
        generation: int,
    ) -> None:
        meta = _meta(ds)
        pod_meta = _m(template.get("metadata"))
        spec = json.loads(json.dumps(_m(template.get("spec"))))
        tolerations = list(spec.get("tolerations") or [])
        for t in _DS_TOLERATIONS:
            if not any(
                _m(x).get("key") == t["key"] and _m(x).get("effect") == t["effect"]
                for x in tolerations
            ):
                tolerations.append(dict(t))
        spec["tolerations"] = tolerations
        affinity = _m(spec.get("affinity"))
        node_affinity = _m(affinity.get("nodeAffinity"))
        required = _m(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
        terms = [dict(_m(t)) for t in required.get("nodeSelectorTerms") or []] or [{}]
        name_req = {"key": "metadata.name", "operator": "In", "values": [node]}
        for term in terms:
            term["matchFields"] = [name_req]
        spec["affinity"] = {
            **affinity,
            "nodeAffinity": {
                **node_affinity,
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            },
        }
        spec["nodeName"] = node
        labels = dict(_m(pod_meta.get("labels")))
        labels.update(
            {"controller-revision-hash": revision, "pod-template-generation": str(generation)}
        )
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict(_m(pod_meta.get("annotations"))),
                "ownerReferences": [_owner_ref(ds, "DaemonSet")],
            },
            "spec": spec,
        }
        created = self._write(self.api.core.create_namespaced_pod, meta["namespace"], body)
        if created:
            self.ds_events.emit(
                ds,
                "DaemonSet",
                "Normal",
                "SuccessfulCreate",
                f"Created pod: {_meta(created)['name']}",
                api_version="apps/v1",
            )

    def _delete_pod(
        self, pod: dict[str, Any], events: Events, kind: str, owner: dict[str, Any]
    ) -> None:
        meta = _meta(pod)
        if meta.get("deletionTimestamp"):
            return
        deleted = self._write(
            self.api.core.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            body={"preconditions": {"uid": meta.get("uid")}},
        )
        if deleted is not None:
            events.emit(
                owner,
                kind,
                "Normal",
                "SuccessfulDelete",
                f"Deleted pod: {meta['name']}",
                api_version="apps/v1",
            )

    # -- ReplicaSets --------------------------------------------------------------------

    def _items(self, fn: Callable[..., Any]) -> list[dict[str, Any]]:
        return list((self.api.call(fn) or {}).get("items") or [])

    def _replicasets(
        self, sets: list[dict[str, Any]], owned: dict[str, list[dict[str, Any]]]
    ) -> None:
        for rs in list(sets):
            if not _meta(rs).get("deletionTimestamp"):
                self._sync_replicaset(rs, owned.get(_meta(rs)["uid"], []))

    def _sync_replicaset(self, rs: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = _meta(rs), _spec(rs)
        want = _replicas(spec)
        active = [p for p in pods if _active(p)]
        diff = len(active) - want
        if diff < 0:
            for _ in range(min(-diff, 500)):
                created = self._create_rs_pod(rs)
                if created is None:
                    break
                active.append(created)
        elif diff > 0:
            active.sort(key=_pod_rank)
            for pod in active[:diff]:
                self._delete_pod(pod, self.rs_events, "ReplicaSet", rs)
            active = active[diff:]
        ready = sum(1 for p in active if _pod_ready(p))
        min_ready = int(spec.get("minReadySeconds") or 0)
        now = self.clock.time()
        available = 0
        for p in active:
            cond = _condition(p, "Ready")
            if (
                cond
                and cond.get("status") == "True"
                and (now - _time_or(cond.get("lastTransitionTime"), now) >= min_ready)
            ):
                available += 1
        new_status: dict[str, Any] = {
            "replicas": len(active),
            "fullyLabeledReplicas": len(active),
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": int(meta.get("generation") or 1),
        }
        old = _status(rs)
        if any((old.get(k) or 0) != v for k, v in new_status.items()):
            self._write(
                self.api.apps.patch_namespaced_replica_set_status,
                meta["name"],
                meta["namespace"],
                {"status": new_status},
            )

    def _create_rs_pod(self, rs: dict[str, Any]) -> dict[str, Any] | None:
        meta = _meta(rs)
        template = _m(_spec(rs).get("template"))
        pod_meta = _m(template.get("metadata"))
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": dict(_m(pod_meta.get("labels"))),
                "annotations": dict(_m(pod_meta.get("annotations"))),
                "ownerReferences": [_owner_ref(rs, "ReplicaSet")],
            },
            "spec": _m(template.get("spec")),
        }
        self.writes += 1
        try:
            created = self.api.call(self.api.core.create_namespaced_pod, meta["namespace"], body)
        except ApiException as exc:
            self._wrote = time.monotonic()
            if exc.status in (403, 404, 409, 422):
                self.rs_events.emit(
                    rs,
                    "ReplicaSet",
                    "Warning",
                    "FailedCreate",
                    f"Error creating: {exc.reason}",
                    api_version="apps/v1",
                )
                return None
            raise
        self._wrote = time.monotonic()
        self.rs_events.emit(
            rs,
            "ReplicaSet",
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {_meta(created)['name']}",
            api_version="apps/v1",
        )
        return dict(created)

    # -- Deployments --------------------------------------------------------------------

    def _deployments(self, sets: list[dict[str, Any]], now: float) -> None:
        deploys = self._items(self.api.apps.list_deployment_for_all_namespaces)
        if not deploys:
            return
        by_owner: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rs in sets:
            uid = _controller_uid(rs)
            if uid:
                by_owner[uid].append(rs)
        for d in deploys:
            if not _meta(d).get("deletionTimestamp"):
                self._guard(
                    lambda d=d: self._sync_deployment(
                        d, by_owner.get(_meta(d)["uid"], []), sets, now
                    )
                )

    def _scale(self, d: dict[str, Any], rs: dict[str, Any], replicas: int) -> None:
        meta = _meta(rs)
        old = int(_spec(rs).get("replicas") or 0)
        if old == replicas:
            return
        result = self._write(
            self.api.apps.patch_namespaced_replica_set,
            meta["name"],
            meta["namespace"],
            {
                "metadata": {
                    "annotations": {
                        "deployment.kubernetes.io/desired-replicas": str(
                            _spec(d).get("replicas", 1)
                        ),
                    }
                },
                "spec": {"replicas": replicas},
            },
        )
        if result is not None:
            rs.setdefault("spec", {})["replicas"] = replicas
            direction = "up" if replicas > old else "down"
            self.deploy_events.emit(
                d,
                "Deployment",
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {direction} replica set {meta['name']} from {old} to {replicas}",
                api_version="apps/v1",
            )

    def _sync_deployment(
        self,
        d: dict[str, Any],
        sets: list[dict[str, Any]],
        all_sets: list[dict[str, Any]],
        now: float,
    ) -> None:
        meta, spec = _meta(d), _spec(d)
        replicas = _replicas(spec)
        template = _m(spec.get("template"))
        h = template_hash(template)
        new_rs = next((rs for rs in sets if _labels(rs).get("pod-template-hash") == h), None)
        old_sets = [rs for rs in sets if rs is not new_rs]
        revisions = [int(_annotations(rs).get(REVISION, "0") or 0) for rs in sets]
        created_new = False
        strategy = _m(spec.get("strategy"))
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        surge = _int_or_percent(
            _m(strategy.get("rollingUpdate")).get("maxSurge", "25%"), replicas, round_up=True
        )
        unavailable = _int_or_percent(
            _m(strategy.get("rollingUpdate")).get("maxUnavailable", "25%"), replicas, round_up=False
        )
        if rolling and surge == 0 and unavailable == 0:
            unavailable = 1
        if not rolling:
            surge, unavailable = 0, replicas
        old_total = sum(int(_spec(rs).get("replicas") or 0) for rs in old_sets)
        if new_rs is None and not spec.get("paused"):
            new_rs = self._create_new_rs(
                d, template, h, replicas, old_total, surge, rolling, revisions
            )
            created_new = new_rs is not None
            if new_rs is not None:
                all_sets.append(new_rs)  # its pods come in this tick
        if new_rs is not None and not spec.get("paused"):
            self._rollout(d, new_rs, old_sets, replicas, surge, unavailable, rolling)
            self._cleanup(d, old_sets)
        if new_rs is not None:
            rev = _annotations(new_rs).get(REVISION)
            if rev and _annotations(d).get(REVISION) != rev:
                self._write(
                    self.api.apps.patch_namespaced_deployment,
                    meta["name"],
                    meta["namespace"],
                    {"metadata": {"annotations": {REVISION: rev}}},
                )
        self._deployment_status(d, new_rs, old_sets, replicas, unavailable, created_new, now)

    def _create_new_rs(
        self,
        d: dict[str, Any],
        template: dict[str, Any],
        h: str,
        replicas: int,
        old_total: int,
        surge: int,
        rolling: bool,
        revisions: list[int],
    ) -> dict[str, Any] | None:
        meta, spec = _meta(d), _spec(d)
        labels = {**_m(_m(template.get("metadata")).get("labels")), "pod-template-hash": h}
        tmpl = json.loads(json.dumps(template))
        tmpl.setdefault("metadata", {})["labels"] = labels
        selector = json.loads(json.dumps(_m(spec.get("selector"))))
        selector.setdefault("matchLabels", {})["pod-template-hash"] = h
        if old_total == 0:
            start = replicas
        elif rolling:
            start = max(0, min(replicas, replicas + surge - old_total))
        else:
            start = 0
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{h}",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": {
                    REVISION: str(max(revisions, default=0) + 1),
                    "deployment.kubernetes.io/desired-replicas": str(replicas),
                    "deployment.kubernetes.io/max-replicas": str(replicas + surge),
                },
                "ownerReferences": [_owner_ref(d, "Deployment")],
            },
            "spec": {
                "replicas": start,
                "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": tmpl,
            },
        }
        created = self._write(self.api.apps.create_namespaced_replica_set, meta["namespace"], body)
        if created is None:
            return None
        self.deploy_events.emit(
            d,
            "Deployment",
            "Normal",
            "ScalingReplicaSet",
            f"Scaled up replica set {_meta(created)['name']} from 0 to {start}",
            api_version="apps/v1",
        )
        return dict(created)

    def _rollout(
        self,
        d: dict[str, Any],
        new_rs: dict[str, Any],
        old_sets: list[dict[str, Any]],
        replicas: int,
        surge: int,
        unavailable: int,
        rolling: bool,
    ) -> None:
        def count(rs: dict[str, Any]) -> int:
            return int(_spec(rs).get("replicas") or 0)

        old_active = [rs for rs in old_sets if count(rs) > 0]
        if not old_active:
            self._scale(d, new_rs, replicas)
            return
        if not rolling:  # Recreate: the old pods go first, then the new ones come
            for rs in old_active:
                self._scale(d, rs, 0)
            if all(int(_status(rs).get("replicas") or 0) == 0 for rs in old_sets):
                self._scale(d, new_rs, replicas)
            return
        total = count(new_rs) + sum(count(rs) for rs in old_active)
        if total < replicas + surge and count(new_rs) < replicas:
            self._scale(d, new_rs, min(replicas, count(new_rs) + replicas + surge - total))
        elif count(new_rs) > replicas:
            self._scale(d, new_rs, replicas)
        # scaleDownOldReplicaSetsForRollingUpdate: first the old pods that aren't available
        # (as far as the new ones' unavailability allows), then as many as keep
        # replicas - maxUnavailable available.
        min_available = replicas - unavailable
        new_unavailable = max(0, count(new_rs) - int(_status(new_rs).get("availableReplicas") or 0))
        all_pods = count(new_rs) + sum(count(rs) for rs in old_active)
        cleanup = all_pods - min_available - new_unavailable
        if cleanup <= 0:
            return
        oldest_first = sorted(old_active, key=lambda r: _meta(r).get("creationTimestamp") or "")
        for rs in oldest_first:
            unhealthy = count(rs) - int(_status(rs).get("availableReplicas") or 0)
            step = min(cleanup, unhealthy)
            if step > 0:
                self._scale(d, rs, count(rs) - step)
                cleanup -= step
        available = sum(
            int(_status(rs).get("availableReplicas") or 0) for rs in [new_rs, *old_sets]
        )
        budget = available - min_available
        for rs in oldest_first:
            if budget <= 0:
                break
            step = min(count(rs), budget)
            if step > 0:
                self._scale(d, rs, count(rs) - step)
                budget -= step

    def _cleanup(self, d: dict[str, Any], old_sets: list[dict[str, Any]]) -> None:
        limit = int(_spec(d).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in old_sets
            if int(_spec(rs).get("replicas") or 0) == 0
            and int(_status(rs).get("replicas") or 0) == 0
            and not _meta(rs).get("deletionTimestamp")
        ]
        idle.sort(key=lambda r: int(_annotations(r).get(REVISION, "0") or 0))
        for rs in idle[: max(0, len(idle) - limit)]:
            self._write(
                self.api.apps.delete_namespaced_replica_set,
                _meta(rs)["name"],
                _meta(rs)["namespace"],
            )

    def _deployment_status(
        self,
        d: dict[str, Any],
        new_rs: dict[str, Any] | None,
        old_sets: list[dict[str, Any]],
        replicas: int,
        max_unavailable: int,
        created_new: bool,
        now: float,
    ) -> None:
        meta, spec, old = _meta(d), _spec(d), _status(d)
        sets = ([new_rs] if new_rs else []) + old_sets

        def total(key: str) -> int:
            return sum(int(_status(rs).get(key) or 0) for rs in sets)

        spec_total = sum(int(_spec(rs).get("replicas") or 0) for rs in sets)
        available = total("availableReplicas")
        updated = int(_status(new_rs).get("replicas") or 0) if new_rs else 0
        counts = {
            "replicas": total("replicas"),
            "updatedReplicas": updated,
            "readyReplicas": total("readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, spec_total - available),
        }
        stamp = rfc3339(now)
        conditions = {c.get("type"): dict(_m(c)) for c in old.get("conditions") or []}

        def set_condition(
            kind: str, status: str, reason: str, message: str, progress: bool
        ) -> None:
            current = conditions.get(kind) or {}
            cond = {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastUpdateTime": current.get("lastUpdateTime") or stamp,
                "lastTransitionTime": current.get("lastTransitionTime") or stamp,
            }
            if current.get("status") != status:
                cond["lastTransitionTime"] = stamp
            if progress or current.get("reason") != reason or current.get("message") != message:
                cond["lastUpdateTime"] = stamp
            conditions[kind] = cond

        if available >= replicas - max_unavailable:
            set_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                False,
            )
        else:
            set_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                False,
            )
        rs_name = _meta(new_rs)["name"] if new_rs else meta["name"]
        old_pods = sum(int(_status(rs).get("replicas") or 0) for rs in old_sets)
        complete = (
            updated == replicas
            and available >= replicas
            and old_pods == 0
            and (counts["replicas"] == replicas)
        )
        progressed = any(
            (old.get(k) or 0) != counts[k]
            for k in ("updatedReplicas", "readyReplicas", "availableReplicas")
        )
        progressing = conditions.get("Progressing") or {}
        deadline = int(spec.get("progressDeadlineSeconds") or 600)
        if complete:
            set_condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
                False,
            )
        elif created_new:
            set_condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                f'Created new replica set "{rs_name}"',
                True,
            )
        elif progressed or not progressing:
            set_condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" is progressing.',
                True,
            )
        elif progressing.get("reason") != "ProgressDeadlineExceeded" and (
            now - _time_or(progressing.get("lastUpdateTime"), now) > deadline
        ):
            set_condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{rs_name}" has timed out progressing.',
                False,
            )
        new_status: dict[str, Any] = {
            **{k: v for k, v in counts.items()},
            "observedGeneration": int(meta.get("generation") or 1),
            "conditions": [conditions[k] for k in ("Available", "Progressing") if k in conditions],
        }
        if any(old.get(k) != v for k, v in new_status.items() if k != "conditions") or (
            _strip_times(old.get("conditions")) != _strip_times(new_status["conditions"])
            or progressed
        ):
            self._write(
                self.api.apps.patch_namespaced_deployment_status,
                meta["name"],
                meta["namespace"],
                {"status": new_status},
            )

    # -- the taint manager --------------------------------------------------------------

    def _taint_manager(
        self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], now: float
    ) -> None:
        tainted = {}
        for node in nodes:
            taints = [
                _m(t) for t in _spec(node).get("taints") or [] if _m(t).get("effect") == "NoExecute"
            ]
            if taints:
                tainted[_meta(node)["name"]] = taints
        if not tainted:
            self._evicted.clear()
            return
        for pod in pods:
            node_taints = tainted.get(str(_spec(pod).get("nodeName") or ""))
            if not node_taints or not _active(pod):
                continue
            uid = str(_meta(pod).get("uid"))
            if uid in self._evicted:
                continue
            tolerations = [_m(t) for t in _spec(pod).get("tolerations") or []]
            evict = False
            for taint in node_taints:
                matching = [t for t in tolerations if tolerates(t, taint)]
                if not matching:
                    evict = True
                    break
                if any(t.get("tolerationSeconds") is None for t in matching):
                    continue
                seconds = min(float(t["tolerationSeconds"]) for t in matching)
                deadline = _time_or(taint.get("timeAdded"), now) + seconds
                if deadline <= now:
                    evict = True
                    break
            if evict:
                self._evict(pod, now)

    def _evict(self, pod: dict[str, Any], now: float) -> None:
        meta = _meta(pod)
        self._evicted.add(str(meta.get("uid")))
        self._write(
            self.api.core.patch_namespaced_pod_status,
            meta["name"],
            meta["namespace"],
            {
                "status": {
                    "conditions": [
                        _cond(
                            "DisruptionTarget",
                            "True",
                            rfc3339(now),
                            "DeletionByTaintManager",
                            "Taint manager: deleting due to NoExecute taint",
                        )
                    ]
                }
            },
        )
        self.taint_events.emit(
            pod,
            "Pod",
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
        )
        self._write(
            self.api.core.delete_namespaced_pod,
            meta["name"],
            meta["namespace"],
            body={"preconditions": {"uid": meta.get("uid")}},
        )


def _replicas(spec: dict[str, Any]) -> int:
    value = spec.get("replicas")
    return 1 if value is None else int(value)


def _strip_times(conditions: Any) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in _m(c).items() if k not in ("lastUpdateTime", "lastTransitionTime")}
        for c in conditions or []
    ]


def actors(world: World) -> list[Actor]:
    """The cluster's actors; creates the nodes and system DaemonSets first (synchronously)."""
    api = Api(world.client)
    view = ClusterView(api)
    world.services["cluster-view"] = view
    kubelet = Kubelet(world, view, api)
    bootstrap(world, api, kubelet.lease_duration_s)
    return [kubelet, Scheduler(world, view, api), Controllers(world, view, api)]
