"""Inference serving and bursting to external GPU providers.

Two actors, both ordinary clients of the simulated API server:

``InferenceAutoscaler`` (``inference-autoscaler``, every 15 s)
  Creates the inference Deployments (namespace ``inference``) with a PodDisruptionBudget
  each, then acts as their HPA: a seeded diurnal demand curve (requests/s) per Deployment
  gives a replica target between min and max, written to ``spec.replicas`` the way the
  HPA's scale path does (the simulator has no scale subresource). A Deployment takes part
  when it carries annotation ``sim.krea.ai/autoscale`` (JSON: ``min``, ``max``,
  ``rpsPerReplica``, ``peakRps``, ``troughRps``, ``periodS``, ``peakAtS``, ``noise``,
  ``cooldownS``, ``stabilizationS``); it writes ``sim.krea.ai/desired-replicas``,
  ``sim.krea.ai/demand-rps`` and ``sim.krea.ai/scaled-at`` back for dashboards.

``VirtualKubelet`` (``burst-vk``, every 10 s; every 2 s below 20x)
  Registers Node ``burst-vk`` (label ``type=virtual-kubelet``, taint
  ``virtual-kubelet.io/provider=burst:NoSchedule``, GPU capacity = the providers' total)
  with its Lease, and runs the pods bound to it: each pod is placed at an external
  provider (the cheapest with room, among those the pod allows), the choice is recorded
  in annotations ``burst.krea.ai/provider``, ``burst.krea.ai/usd-per-gpu-hour`` and
  ``burst.krea.ai/placed-at``; after a cold start the pod turns Running/Ready; providers
  fail pods at their rate (phase Failed, reason ``ProviderFailure``); deleted pods go
  away after their grace period. Per-provider usage (GPUs in use, GPU-hours, cost) is
  kept in the node annotation ``burst.krea.ai/usage`` (JSON). A taint
  ``krea.ai/burst-paused=<reason>:NoSchedule`` on the node stops new placements; running
  pods keep running.

Like the real virtual kubelet, the node's taints are written only when the node is
created: taints others add later (the pause switch) are never touched. Placed pods also
get ``controller.kubernetes.io/pod-deletion-cost: "-100"`` so scale-in removes offsite
pods first. A Deployment scaled to 0 by hand is left alone, as the HPA does.

Times: every stamp (placed-at, failed-at, scaled-at, ``startTime``, conditions, the Lease,
the usage's ``updatedAt``) is wall time, as the API server's are; the demand curve, the
autoscaler's window and cooldown, cold starts, provider failures and grace periods run on
simulated time. GPU-hours and cost are wall hours: ``krea-ops burst status`` counts them
from the stamps, and the usage annotation agrees with it.

``WorldConfig.extra["inference_services"]``: a sequence of ``InferenceService`` to create
instead of the defaults (``()`` creates none; the autoscaler still scales any Deployment
in ``inference`` that carries the autoscale annotation).
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from krea_ops.kube.quantity import as_float
from krea_ops.kube.times import micro_time, parse_time, rfc3339
from krea_ops.sim.common.actor import Actor, Provider, World
from krea_ops.sim.common.objects import whole_conditions

NAMESPACE = "inference"
VK_NODE = "burst-vk"
VK_PROVIDER = "burst"
VK_TAINT_KEY = "virtual-kubelet.io/provider"
PAUSE_TAINT_KEY = "krea.ai/burst-paused"
ANN_PAUSE_REASON = "krea.ai/burst-paused-reason"
KUBELET_VERSION = "v1.32.0-vk-krea"
PRIORITY_CLASS = "inference"
QUEUE = "inference"
ADMISSION_GATE = "kueue.x-k8s.io/admission"

# Pod annotations written by the virtual kubelet.
ANN_PROVIDER = "burst.krea.ai/provider"
ANN_PRICE = "burst.krea.ai/usd-per-gpu-hour"
ANN_PLACED_AT = "burst.krea.ai/placed-at"
ANN_FAILED_AT = "burst.krea.ai/failed-at"
# Pod annotations the virtual kubelet reads (optional): a comma-separated allow-list of
# providers in preference order, and a price ceiling.
ANN_ALLOWED_PROVIDERS = "burst.krea.ai/providers"
ANN_MAX_PRICE = "burst.krea.ai/max-usd-per-gpu-hour"
# Node annotation: per-provider usage (JSON).
ANN_USAGE = "burst.krea.ai/usage"
# Deployment annotations of the HPA-like autoscaler.
ANN_AUTOSCALE = "sim.krea.ai/autoscale"
ANN_DESIRED = "sim.krea.ai/desired-replicas"
ANN_DEMAND = "sim.krea.ai/demand-rps"
ANN_SCALED_AT = "sim.krea.ai/scaled-at"
# Offsite pods go first when a ReplicaSet scales in.
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

PROVIDER_FAILURE = "ProviderFailure"
PROVIDER_FAILED = "ProviderFailed"  # the real virtual kubelet's reason when CreatePod fails
BURST_PAUSED = "BurstPaused"

GPU = "nvidia.com/gpu"
VK_IP = "10.255.0.1"


# -- helpers ---------------------------------------------------------------------------


def _data(response: Any) -> Any:
    return json.loads(response.data)


def _body(obj: dict[str, Any]) -> Any:
    """A manifest as a request body: the client sends plain dicts as they are (typed
    ``Any`` because its stubs ask for model objects)."""
    return obj


def pod_gpus(pod: dict[str, Any]) -> int:
    """GPUs a pod asks for: the sum over its containers (requests, else limits)."""
    total = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = (c or {}).get("resources") or {}
        value = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        total += as_float(value)
    return math.ceil(total)


def _ignore_missing(exc: ApiException) -> None:
    if exc.status not in (404, 409):
        raise exc


def _hash(text: str) -> int:
    return zlib.crc32(text.encode())


# -- inference workloads --------------------------------------------------------------


@dataclass(frozen=True)
class InferenceService:
    """An inference Deployment and the demand its autoscaler follows."""

    name: str
    image: str
    cpu: str
    memory: str
    min_replicas: int
    max_replicas: int
    rps_per_replica: float
    peak_hour_utc: float
    gpus: int = 1
    trough_fraction: float = 0.25
    noise: float = 0.12

    def autoscale(self) -> dict[str, Any]:
        capacity = self.max_replicas * self.rps_per_replica
        peak = round(capacity * 0.85, 3)
        return {
            "min": self.min_replicas,
            "max": self.max_replicas,
            "rpsPerReplica": self.rps_per_replica,
            "peakRps": peak,
            "troughRps": round(peak * self.trough_fraction, 3),
            "periodS": 86400,
            "peakAtS": int(self.peak_hour_utc * 3600),
            "noise": self.noise,
        }


def default_services(nodes: int) -> tuple[InferenceService, ...]:
    """Krea-style serving: two DiT image models and an upscaler, sized to the cluster."""
    return (
        InferenceService(
            "dit-serve-xl",
            "ghcr.io/krea-ai/dit-serve:xl-2025.06.2",
            "12",
            "96Gi",
            min_replicas=2,
            max_replicas=max(4, round(nodes * 0.5)),
            rps_per_replica=0.8,
            peak_hour_utc=17,
        ),
        InferenceService(
            "dit-serve-base",
            "ghcr.io/krea-ai/dit-serve:base-2025.06.2",
            "8",
            "64Gi",
            min_replicas=2,
            max_replicas=max(4, round(nodes * 0.375)),
            rps_per_replica=2.5,
            peak_hour_utc=15.5,
        ),
        InferenceService(
            "upscaler",
            "ghcr.io/krea-ai/upscaler:2025.05.1",
            "6",
            "48Gi",
            min_replicas=1,
            max_replicas=max(2, round(nodes * 0.25)),
            rps_per_replica=4.0,
            peak_hour_utc=18,
        ),
    )


def inference_tolerations() -> list[dict[str, Any]]:
    """Inference pods may land on the virtual node, but never tolerate the pause taint."""
    return [{"key": VK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]


def deployment_manifest(service: InferenceService, replicas: int) -> dict[str, Any]:
    labels = {"app": service.name, "krea.ai/workload": "inference"}
    pod_labels = {
        **labels,
        "kueue.x-k8s.io/queue-name": QUEUE,
        "kueue.x-k8s.io/priority-class": PRIORITY_CLASS,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": service.name,
            "namespace": NAMESPACE,
            "labels": labels,
            "annotations": {ANN_AUTOSCALE: json.dumps(service.autoscale(), sort_keys=True)},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": service.name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "priorityClassName": PRIORITY_CLASS,
                    "schedulingGates": [{"name": ADMISSION_GATE}],
                    "tolerations": inference_tolerations(),
                    # the Kubernetes default: a server drains its requests in that time
                    "terminationGracePeriodSeconds": 30,
                    "affinity": {
                        # In-cluster first: the virtual node only when nothing else fits.
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "preference": {
                                        "matchExpressions": [
                                            {
                                                "key": "type",
                                                "operator": "NotIn",
                                                "values": ["virtual-kubelet"],
                                            }
                                        ]
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "server",
                            "image": service.image,
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "resources": {
                                "requests": {
                                    "cpu": service.cpu,
                                    "memory": service.memory,
                                    GPU: str(service.gpus),
                                },
                                "limits": {"memory": service.memory, GPU: str(service.gpus)},
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/healthz", "port": 8000},
                                "periodSeconds": 5,
                            },
                        }
                    ],
                },
            },
        },
    }


def pdb_manifest(service: InferenceService) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": service.name,
            "namespace": NAMESPACE,
            "labels": {"app": service.name, "krea.ai/workload": "inference"},
        },
        "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": service.name}}},
    }


class DemandCurve:
    """Requests/s of one Deployment at simulated time ``t``: a diurnal cosine between
    trough and peak, times a smooth seeded wobble. A pure function of ``t``."""

    def __init__(self, spec: dict[str, Any], seed: str) -> None:
        self.period = float(spec.get("periodS", 86400)) or 86400.0
        self.peak_at = float(spec.get("peakAtS", 17 * 3600))
        self.peak = float(spec.get("peakRps", 1.0))
        self.trough = float(spec.get("troughRps", self.peak * 0.25))
        noise = float(spec.get("noise", 0.1))
        rng = random.Random(seed)
        self.wobble = [
            (
                noise * w,
                self.period / rng.uniform(6.0, 48.0),
                rng.uniform(0, 2 * math.pi),
            )
            for w in (0.5, 0.3, 0.2)
        ]

    def __call__(self, t: float) -> float:
        phase = ((t - self.peak_at) % self.period) / self.period
        diurnal = 0.5 + 0.5 * math.cos(2 * math.pi * phase)
        base = self.trough + (self.peak - self.trough) * diurnal
        wobble = sum(a * math.sin(2 * math.pi * t / p + ph) for a, p, ph in self.wobble)
        return max(0.0, base * (1.0 + wobble))


class InferenceAutoscaler(Actor):
    """Creates the inference Deployments and scales them like an HPA on requests/s."""

    name = "inference-autoscaler"
    period_s = 15.0  # the HPA's sync period
    tolerance = 0.1
    default_cooldown_s = 180.0
    default_stabilization_s = 300.0
    demand_refresh_s = 60.0

    def __init__(self, world: World, services: Iterable[InferenceService] | None = None) -> None:
        super().__init__(world)
        self.services = tuple(
            services if services is not None else default_services(world.config.nodes)
        )
        self.apps = k8s.AppsV1Api(world.client)
        self._curves: dict[tuple[str, str], DemandCurve] = {}
        self._history: dict[str, list[tuple[float, int]]] = {}
        self._demand_written: dict[str, float] = {}

    # -- setup --------------------------------------------------------------------------

    def setup(self) -> None:
        core = k8s.CoreV1Api(self.world.client)
        try:
            core.create_namespace(
                _body({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
                _preload_content=False,
            )
        except ApiException as exc:
            _ignore_missing(exc)
        try:
            k8s.SchedulingV1Api(self.world.client).create_priority_class(
                _body(
                    {
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": PRIORITY_CLASS},
                        # Kueue's installation (kueue.py) creates the same class; who
                        # comes first must not change the pods' priority.
                        "value": 100,
                        "preemptionPolicy": "PreemptLowerPriority",
                        "description": "Inference serving",
                    }
                ),
                _preload_content=False,
            )
        except ApiException as exc:
            _ignore_missing(exc)
        policy = k8s.PolicyV1Api(self.world.client)
        now = self.clock.time()
        for service in self.services:
            spec = service.autoscale()
            demand = self._curve(f"{NAMESPACE}/{service.name}", spec)(now)
            replicas = self._recommend(spec, demand, None)
            try:
                self.apps.create_namespaced_deployment(
                    NAMESPACE, _body(deployment_manifest(service, replicas)), _preload_content=False
                )
            except ApiException as exc:
                _ignore_missing(exc)
            try:
                policy.create_namespaced_pod_disruption_budget(
                    NAMESPACE, _body(pdb_manifest(service)), _preload_content=False
                )
            except ApiException as exc:
                _ignore_missing(exc)

    # -- the loop -------------------------------------------------------------------------

    def _curve(self, key: str, spec: dict[str, Any]) -> DemandCurve:
        ident = (key, json.dumps(spec, sort_keys=True))
        curve = self._curves.get(ident)
        if curve is None:
            curve = DemandCurve(spec, f"{self.world.config.seed}:demand:{key}")
            self._curves[ident] = curve
        return curve

    def _recommend(self, spec: dict[str, Any], demand: float, current: int | None) -> int:
        low = max(int(spec.get("min", 1)), 0)
        high = max(int(spec.get("max", low)), low)
        per = float(spec.get("rpsPerReplica", 1.0)) or 1.0
        if current and abs(demand / (current * per) - 1.0) <= self.tolerance:
            return min(max(current, low), high)
        return min(max(math.ceil(demand / per), low), high)

    def tick(self) -> None:
        now = self.clock.time()
        items = _data(self.apps.list_namespaced_deployment(NAMESPACE, _preload_content=False))
        for dep in items.get("items") or []:
            self._scale(dep, now)

    def _scale(self, dep: dict[str, Any], now: float) -> None:
        """``now`` is simulated time: demand, its window and the cooldown follow the
        world's diurnal load; the scaled-at annotation is a wall stamp."""
        meta = dep["metadata"]
        annotations = meta.get("annotations") or {}
        try:
            spec = json.loads(annotations[ANN_AUTOSCALE])
        except (KeyError, ValueError):
            return
        if not isinstance(spec, dict):
            return
        key = f"{meta['namespace']}/{meta['name']}"
        current = int((dep.get("spec") or {}).get("replicas", 1))
        if current == 0:
            return  # like the HPA: scaling is disabled while the target is scaled to zero
        demand = self._curve(key, spec)(now)
        recommended = self._recommend(spec, demand, current)
        # Scale-down stabilization: the highest recommendation of the window wins.
        window = float(spec.get("stabilizationS", self.default_stabilization_s))
        history = [(t, r) for t, r in self._history.get(key, []) if now - t < window]
        history.append((now, recommended))
        self._history[key] = history
        desired = recommended
        if desired < current:
            desired = min(current, max(r for _, r in history))
        cooldown = float(spec.get("cooldownS", self.default_cooldown_s))
        wall = self.clock.wall()
        since_scaled = self.clock.to_sim(wall - (parse_time(annotations.get(ANN_SCALED_AT)) or 0.0))
        replicas = current
        if desired != current and since_scaled >= cooldown:
            replicas = desired
        patch_ann: dict[str, str] = {}
        if annotations.get(ANN_DESIRED) != str(desired):
            patch_ann[ANN_DESIRED] = str(desired)
        demand_text = f"{demand:.2f}"
        if (
            replicas != current
            or patch_ann
            or now - self._demand_written.get(key, 0.0) >= self.demand_refresh_s
        ) and annotations.get(ANN_DEMAND) != demand_text:
            patch_ann[ANN_DEMAND] = demand_text
        body: dict[str, Any] = {}
        if replicas != current:
            # to the microsecond: the cooldown is simulated seconds, less than one wall
            # second at high speed
            patch_ann[ANN_SCALED_AT] = micro_time(wall)
            body["spec"] = {"replicas": replicas}
        if patch_ann:
            body["metadata"] = {"annotations": patch_ann}
        if not body:
            return
        try:
            self.apps.patch_namespaced_deployment(
                meta["name"], meta["namespace"], body, _preload_content=False
            )
        except ApiException as exc:
            _ignore_missing(exc)
            return
        if ANN_DEMAND in patch_ann:
            self._demand_written[key] = now


# -- the virtual kubelet -------------------------------------------------------------


@dataclass
class ProviderUsage:
    name: str
    usd_per_gpu_hour: float
    capacity_gpus: int
    failures_per_1000_pod_hours: float
    gpus_in_use: int = 0
    pods: int = 0
    gpu_hours: float = 0.0
    cost_usd: float = 0.0
    placements: int = 0
    failures: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "usdPerGpuHour": self.usd_per_gpu_hour,
            "capacityGpus": self.capacity_gpus,
            "failuresPer1000PodHours": self.failures_per_1000_pod_hours,
            "gpusInUse": self.gpus_in_use,
            "pods": self.pods,
            "gpuHours": round(self.gpu_hours, 4),
            "costUsd": round(self.cost_usd, 4),
            "placements": self.placements,
            "failures": self.failures,
        }


def read_usage(node: dict[str, Any]) -> dict[str, Any]:
    """The usage annotation of a virtual node, parsed (empty when absent or broken)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANN_USAGE)
    try:
        usage = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return usage if isinstance(usage, dict) else {}


def pause_reason(node: dict[str, Any]) -> str | None:
    """Why placement is paused ("" if nobody said), else None: the annotation
    ``krea.ai/burst-paused-reason`` that ``krea-ops burst pause`` writes beside its
    ``krea.ai/burst-paused=true`` taint, else the taint's value (a pause set by hand)."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if (taint or {}).get("key") == PAUSE_TAINT_KEY:
            said = ((node.get("metadata") or {}).get("annotations") or {}).get(ANN_PAUSE_REASON)
            return str(said or taint.get("value") or "")
    return None


class VirtualKubelet(Actor):
    """The ``burst-vk`` node: places its pods at external providers and runs them there."""

    name = "burst-vk"
    period_s = 10.0  # virtual-kubelet's ping interval (simulated seconds)
    # The node's Lease and status are the API's business: wall seconds, virtual-kubelet's
    # defaults (a 40 s Lease renewed every quarter of it) and the kubelet's
    # nodeStatusReportFrequency.
    lease_renew_s = 10.0
    lease_duration_s = 40
    status_report_s = 300.0
    usage_report_s = 60.0  # the usage annotation's refresh, in simulated seconds
    # A provider that just failed a pod is tried last, for this many simulated seconds.
    failure_cooldown_s = 600.0

    def __init__(self, world: World, providers: Iterable[Provider] | None = None) -> None:
        super().__init__(world)
        # Pods are placed as they come (the real one watches them), so at low speed the
        # loop runs every 2 s; at high speed the ping interval bounds it as before.
        self.period_s = max(2.0, min(self.period_s, 0.5 * world.config.speed))
        self.providers = tuple(providers if providers is not None else world.config.providers)
        self.core = k8s.CoreV1Api(world.client)
        self.coordination = k8s.CoordinationV1Api(world.client)
        self.usage: dict[str, ProviderUsage] = {
            p.name: ProviderUsage(
                p.name, p.usd_per_gpu_hour, p.capacity_gpus, p.failures_per_1000_pod_hours
            )
            for p in self.providers
        }
        self._last_tick: float | None = None
        self._last_lease = -math.inf
        self._last_status = -math.inf
        self._last_usage = -math.inf
        self._reported: str | None = None
        # Wall times this VK saw a pod's deletion and placed a pod: finer than the stamps'
        # whole seconds, which stand in after a restart of the world.
        self._deleting_seen: dict[str, float] = {}
        self._placed: dict[str, float] = {}
        self._recent_failure: dict[str, float] = {}

    @property
    def capacity_gpus(self) -> int:
        return sum(p.capacity_gpus for p in self.providers)

    # -- node and lease -----------------------------------------------------------------

    def _node_status(self, now: float) -> dict[str, Any]:
        gpus = self.capacity_gpus
        resources = {
            "cpu": str(max(gpus, 1) * 16),
            "memory": f"{max(gpus, 1) * 128}Gi",
            "ephemeral-storage": f"{max(gpus, 1) * 512}Gi",
            "pods": "10000",
            GPU: str(gpus),
        }
        stamp = rfc3339(now)

        def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }

        return {
            "capacity": resources,
            "allocatable": dict(resources),
            "conditions": [
                condition("Ready", "True", "KubeletReady", "virtual kubelet is ready"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": VK_IP},
                {"type": "Hostname", "address": VK_NODE},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "vk-krea://1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _labels(self) -> dict[str, str]:
        return {
            "type": "virtual-kubelet",
            "kubernetes.io/role": "agent",
            "kubernetes.io/hostname": VK_NODE,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "krea.ai/pool": "burst",
            "node.kubernetes.io/exclude-from-external-load-balancers": "true",
        }

    def _usage_json(self, now: float) -> str:
        gpus = sum(u.gpus_in_use for u in self.usage.values())
        return json.dumps(
            {
                "updatedAt": rfc3339(now),
                "providers": {name: u.to_json() for name, u in self.usage.items()},
                "totals": {
                    "gpusInUse": gpus,
                    "pods": sum(u.pods for u in self.usage.values()),
                    "gpuHours": round(sum(u.gpu_hours for u in self.usage.values()), 4),
                    "costUsd": round(sum(u.cost_usd for u in self.usage.values()), 4),
                },
            }
        )

    def _load_usage(self, node: dict[str, Any]) -> None:
        """Carry GPU-hours and cost over a restart of the world."""
        for name, saved in (read_usage(node).get("providers") or {}).items():
            if not isinstance(saved, dict):
                continue
            usage = self.usage.get(name)
            if usage is None:
                usage = self.usage[name] = ProviderUsage(
                    name,
                    float(saved.get("usdPerGpuHour", 0.0)),
                    0,
                    float(saved.get("failuresPer1000PodHours", 0.0)),
                )
            usage.gpu_hours = float(saved.get("gpuHours", 0.0))
            usage.cost_usd = float(saved.get("costUsd", 0.0))
            usage.placements = int(saved.get("placements", 0))
            usage.failures = int(saved.get("failures", 0))

    def register(self) -> dict[str, Any]:
        """Create the node (or refresh labels and status of an existing one) and its lease."""
        now = self.clock.wall()
        try:
            node = _data(self.core.read_node(VK_NODE, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise
            node = None
        if node is None:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": VK_NODE,
                    "labels": self._labels(),
                    "annotations": {
                        "alpha.service-controller.kubernetes.io/exclude-balancer": "true",
                        ANN_USAGE: self._usage_json(now),
                    },
                },
                "spec": {
                    "taints": [{"key": VK_TAINT_KEY, "value": VK_PROVIDER, "effect": "NoSchedule"}]
                },
                "status": self._node_status(now),
            }
            try:
                node = _data(self.core.create_node(_body(body), _preload_content=False))
            except ApiException as exc:
                if exc.status != 409:
                    raise
                node = _data(self.core.read_node(VK_NODE, _preload_content=False))
        else:
            self._load_usage(node)
            labels = (node["metadata"].get("labels") or {}).copy()
            if any(labels.get(k) != v for k, v in self._labels().items()):
                self.core.patch_node(
                    VK_NODE, {"metadata": {"labels": self._labels()}}, _preload_content=False
                )
        # The status subresource: capacity follows the configured providers.
        node = _data(
            self.core.patch_node_status(
                VK_NODE, {"status": self._node_status(now)}, _preload_content=False
            )
        )
        self._last_status = now
        self._renew_lease(now, node)
        return node

    def _renew_lease(self, now: float, node: dict[str, Any] | None = None) -> None:
        renew = micro_time(now)
        try:
            self.coordination.patch_namespaced_lease(
                VK_NODE,
                "kube-node-lease",
                {"spec": {"renewTime": renew, "holderIdentity": VK_NODE}},
                _preload_content=False,
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            meta: dict[str, Any] = {"name": VK_NODE, "namespace": "kube-node-lease"}
            if node is not None:
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": VK_NODE,
                        "uid": node["metadata"]["uid"],
                    }
                ]
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": meta,
                "spec": {
                    "holderIdentity": VK_NODE,
                    "leaseDurationSeconds": self.lease_duration_s,
                    "renewTime": renew,
                },
            }
            try:
                self.coordination.create_namespaced_lease(
                    "kube-node-lease", _body(lease), _preload_content=False
                )
            except ApiException as exc2:
                _ignore_missing(exc2)
        self._last_lease = now

    def setup(self) -> None:
        self.register()

    # -- the loop -------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.wall()  # stamps, Lease and reports; the providers' processes
        try:  # (cold starts, failures) take simulated time, converted where they meet
            node = _data(self.core.read_node(VK_NODE, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise
            node = self.register()  # deleted under us: come back with the startup taints
        if now - self._last_lease >= self.lease_renew_s:
            self._renew_lease(now, node)
        if now - self._last_status >= self.status_report_s:
            self.core.patch_node_status(
                VK_NODE, {"status": self._node_status(now)}, _preload_content=False
            )
            self._last_status = now
        paused = pause_reason(node)
        pods = (
            _data(
                self.core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={VK_NODE}", _preload_content=False
                )
            ).get("items")
            or []
        )
        # GPU-hours are billed in wall hours: the product counts them from the placed-at
        # stamps to now, and the usage annotation must agree with it.
        dt_s = 0.0 if self._last_tick is None else max(now - self._last_tick, 0.0)
        self._last_tick = now
        self._run_pods(pods, now, dt_s, paused)
        self._report_usage(node, now)

    def _run_pods(
        self, pods: list[dict[str, Any]], now: float, dt_s: float, paused: str | None
    ) -> None:
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        # What each provider is running now (placed, not terminal, deleting included).
        in_use = {name: 0 for name in self.usage}
        pod_count = {name: 0 for name in self.usage}
        for pod in pods:
            provider = self._provider_of(pod)
            if provider is not None and not self._terminal(pod):
                in_use[provider] = in_use.get(provider, 0) + pod_gpus(pod)
                pod_count[provider] = pod_count.get(provider, 0) + 1
        for name, gpus in in_use.items():
            usage = self._usage_for(name)
            hours = gpus * dt_s / 3600.0
            usage.gpu_hours += hours
            usage.cost_usd += hours * usage.usd_per_gpu_hour
        seen_deleting: set[str] = set()
        seen_pods: set[str] = set()
        for pod in pods:
            meta = pod["metadata"]
            provider = self._provider_of(pod)
            gpus = pod_gpus(pod)
            seen_pods.add(meta["uid"])
            if meta.get("deletionTimestamp"):
                seen_deleting.add(meta["uid"])
                if self._finish_deletion(pod, now) and provider and not self._terminal(pod):
                    in_use[provider] -= gpus
                    pod_count[provider] -= 1
                continue
            if self._terminal(pod):
                continue
            if provider is None:
                chosen = self._place(pod, now, in_use, paused)
                if chosen is not None:
                    in_use[chosen] = in_use.get(chosen, 0) + gpus
                    pod_count[chosen] = pod_count.get(chosen, 0) + 1
                continue
            if self._maybe_fail(pod, provider, now, self.clock.to_sim(dt_s)):
                in_use[provider] -= gpus
                pod_count[provider] -= 1
                continue
            if (pod.get("status") or {}).get("phase") == "Pending":
                self._maybe_start(pod, provider, now)
        self._deleting_seen = {
            uid: t for uid, t in self._deleting_seen.items() if uid in seen_deleting
        }
        self._placed = {uid: t for uid, t in self._placed.items() if uid in seen_pods}
        for name, usage in self.usage.items():
            usage.gpus_in_use = max(in_use.get(name, 0), 0)
            usage.pods = max(pod_count.get(name, 0), 0)

    def _usage_for(self, name: str) -> ProviderUsage:
        usage = self.usage.get(name)
        if usage is None:  # a provider no longer configured still has pods there
            usage = self.usage[name] = ProviderUsage(name, 0.0, 0, 0.0)
        return usage

    @staticmethod
    def _terminal(pod: dict[str, Any]) -> bool:
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    @staticmethod
    def _provider_of(pod: dict[str, Any]) -> str | None:
        value = ((pod["metadata"].get("annotations") or {}).get(ANN_PROVIDER)) or None
        return str(value) if value else None

    def _report_usage(self, node: dict[str, Any], now: float) -> None:
        shape = json.dumps(
            {n: (u.gpus_in_use, u.pods, u.placements, u.failures) for n, u in self.usage.items()}
        )
        if shape == self._reported:
            idle = not any(u.gpus_in_use for u in self.usage.values())
            if idle or self.clock.to_sim(now - self._last_usage) < self.usage_report_s:
                return  # GPU-hours grow only while something runs: once a simulated minute
        text = self._usage_json(now)
        self.core.patch_node(
            VK_NODE, {"metadata": {"annotations": {ANN_USAGE: text}}}, _preload_content=False
        )
        self._reported = shape
        self._last_usage = now

    # -- pod lifecycle ----------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        if "conditions" in status:
            status = {**status, "conditions": whole_conditions(status["conditions"])}
        try:
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": status}, _preload_content=False
            )
        except ApiException as exc:
            _ignore_missing(exc)
            return False
        return True

    def _finish_deletion(self, pod: dict[str, Any], now: float) -> bool:
        """Delete a terminating pod once its grace period is over; True when gone."""
        meta = pod["metadata"]
        uid = meta["uid"]
        first = self._deleting_seen.setdefault(uid, now)
        # The pod takes its whole grace period to stop from when this VK saw the deletion,
        # in simulated seconds (no longer than the grace period on the wall clock), as on
        # the cluster's kubelet.
        grace_s = float(meta.get("deletionGracePeriodSeconds") or 0)
        deadline = first + min(grace_s, self.clock.to_wall(grace_s))
        running = self._provider_of(pod) is not None and not self._terminal(pod)
        if running and now < deadline:
            return False
        try:
            self.core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body=_body({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}),
                _preload_content=False,
            )
        except ApiException as exc:
            _ignore_missing(exc)
        self._deleting_seen.pop(uid, None)
        return True

    def _allowed(self, pod: dict[str, Any]) -> list[Provider]:
        annotations = pod["metadata"].get("annotations") or {}
        candidates = list(self.providers)
        allowed = [s.strip() for s in str(annotations.get(ANN_ALLOWED_PROVIDERS, "")).split(",")]
        allowed = [s for s in allowed if s]
        if allowed:
            order = {name: i for i, name in enumerate(allowed)}
            candidates = [p for p in candidates if p.name in order]
        ceiling = annotations.get(ANN_MAX_PRICE)
        if ceiling:
            try:
                limit = float(ceiling)
            except ValueError:
                limit = math.inf
            candidates = [p for p in candidates if p.usd_per_gpu_hour <= limit]
        return candidates

    def choose(self, pod: dict[str, Any], in_use: dict[str, int], now: float) -> Provider | None:
        """The provider for a pod: among those it allows with room for its GPUs, the
        cheapest, except that a provider which failed a pod recently (``now`` is
        simulated time) goes last."""
        gpus = pod_gpus(pod)
        fits = [p for p in self._allowed(pod) if p.capacity_gpus - in_use.get(p.name, 0) >= gpus]
        if not fits:
            return None

        def key(p: Provider) -> tuple[bool, float, float, str]:
            recent = now - self._recent_failure.get(p.name, -math.inf) < self.failure_cooldown_s
            return (recent, p.usd_per_gpu_hour, p.failures_per_1000_pod_hours, p.name)

        return min(fits, key=key)

    def _place(
        self, pod: dict[str, Any], now: float, in_use: dict[str, int], paused: str | None
    ) -> str | None:
        status = pod.get("status") or {}
        if (pod.get("spec") or {}).get("schedulingGates"):
            return None
        if paused is not None:
            message = f"burst placement is paused ({paused or 'no reason given'})"
            if status.get("reason") != BURST_PAUSED or status.get("message") != message:
                self._patch_status(pod, {"reason": BURST_PAUSED, "message": message})
            return None
        provider = self.choose(pod, in_use, self.clock.time())
        if provider is None:
            gpus = pod_gpus(pod)
            free = ", ".join(
                f"{p.name} {p.capacity_gpus - in_use.get(p.name, 0)}/{p.capacity_gpus}"
                for p in self.providers
            )
            message = f"no allowed provider has {gpus} free GPU(s) (free: {free or 'none'})"
            if status.get("reason") != PROVIDER_FAILED:
                self._patch_status(pod, {"reason": PROVIDER_FAILED, "message": message})
            return None
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod(
                meta["name"],
                meta["namespace"],
                {
                    "metadata": {
                        "annotations": {
                            ANN_PROVIDER: provider.name,
                            ANN_PRICE: f"{provider.usd_per_gpu_hour:.2f}",
                            ANN_PLACED_AT: rfc3339(now),
                            DELETION_COST: "-100",
                        }
                    }
                },
                _preload_content=False,
            )
        except ApiException as exc:
            _ignore_missing(exc)
            return None
        containers = (pod.get("spec") or {}).get("containers") or []
        self._patch_status(
            pod,
            {
                "phase": "Pending",
                "reason": None,
                "message": None,
                "hostIP": VK_IP,
                "hostIPs": [{"ip": VK_IP}],
                "startTime": rfc3339(now),
                "conditions": [
                    self._condition("Initialized", "True", now),
                    self._condition("Ready", "False", now, "ContainersNotReady"),
                    self._condition("ContainersReady", "False", now, "ContainersNotReady"),
                ],
                "containerStatuses": [
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "state": {
                            "waiting": {
                                "reason": "ContainerCreating",
                                "message": f"starting at {provider.name}",
                            }
                        },
                        "lastState": {},
                    }
                    for c in containers
                ],
            },
        )
        self._usage_for(provider.name).placements += 1
        self._placed[meta["uid"]] = now
        return provider.name

    @staticmethod
    def _condition(
        kind: str, status: str, now: float, reason: str | None = None, message: str | None = None
    ) -> dict[str, Any]:
        cond: dict[str, Any] = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(now),
        }
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        return cond

    def startup_s(self, pod: dict[str, Any], provider: str) -> float:
        """Cold start at a remote provider: instance, image pull and model load. Each
        provider has its own base (15-45 s) and each pod a jitter (0-45 s)."""
        base = 15 + _hash(provider) % 31
        jitter = _hash(pod["metadata"].get("uid", "")) % 46
        return float(base + jitter)

    def _maybe_start(self, pod: dict[str, Any], provider: str, now: float) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        placed = self._placed.get(pod["metadata"].get("uid", ""))
        if placed is None:
            placed = parse_time(annotations.get(ANN_PLACED_AT)) or now
        if now < placed + self.clock.to_wall(self.startup_s(pod, provider)):
            return
        started = rfc3339(now)
        uid = pod["metadata"].get("uid", "")
        h = _hash(uid)
        ip = f"100.96.{(h >> 8) % 256}.{h % 254 + 1}"
        self._patch_status(
            pod,
            {
                "phase": "Running",
                "reason": None,
                "message": None,
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [
                    self._condition("Ready", "True", now),
                    self._condition("ContainersReady", "True", now),
                ],
                "containerStatuses": [
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "imageID": c.get("image", ""),
                        "containerID": f"vk://{provider}/{uid}/{c.get('name', '')}",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": started}},
                        "lastState": {},
                    }
                    for c in (pod.get("spec") or {}).get("containers") or []
                ],
            },
        )

    def _maybe_fail(self, pod: dict[str, Any], provider: str, now: float, dt_s: float) -> bool:
        """Fail the pod at its provider's rate over the last ``dt_s`` simulated seconds."""
        usage = self._usage_for(provider)
        rate = usage.failures_per_1000_pod_hours / 1000.0 / 3600.0
        if rate <= 0 or dt_s <= 0:
            return False
        if self.rng.random() >= 1.0 - math.exp(-rate * dt_s):
            return False
        meta = pod["metadata"]
        message = f"provider {provider} lost the instance running this pod"
        finished = rfc3339(now)
        ok = self._patch_status(
            pod,
            {
                "phase": "Failed",
                "reason": PROVIDER_FAILURE,
                "message": message,
                "conditions": [
                    self._condition("Ready", "False", now, "PodFailed"),
                    self._condition("ContainersReady", "False", now, "PodFailed"),
                ],
                "containerStatuses": [
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "imageID": c.get("image", ""),
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": PROVIDER_FAILURE,
                                "message": message,
                                "finishedAt": finished,
                            }
                        },
                        "lastState": {},
                    }
                    for c in (pod.get("spec") or {}).get("containers") or []
                ],
            },
        )
        if not ok:
            return False
        try:
            self.core.patch_namespaced_pod(
                meta["name"],
                meta["namespace"],
                {"metadata": {"annotations": {ANN_FAILED_AT: finished}}},
                _preload_content=False,
            )
        except ApiException as exc:
            _ignore_missing(exc)
        usage.failures += 1
        self._recent_failure[provider] = self.clock.time()
        return True
