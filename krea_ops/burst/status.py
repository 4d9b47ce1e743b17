"""Where inference has burst to: virtual nodes, the pods on them, providers and cost.

What is read, and why it stays cheap on a big cluster:

- virtual nodes: one label-selected node list per convention in
  ``krea_ops.burst.VIRTUAL_NODE_SELECTORS`` (``type=virtual-kubelet``, interLink's
  ``virtual-node.interlink/type=virtual-kubelet``, ``kubernetes.io/os=virtual-kubelet``,
  Liqo's ``liqo.io/type=virtual-node``), merged by name; ``detected_by`` says which
  selector found a node. A virtual node whose provider strips every one of these labels
  is not found (a full node list to look at taints is what this avoids);
- pods on each virtual node: one field-selected list ``spec.nodeName=<node>`` (never
  every pod of the cluster), terminated pods included so a provider's failures show;
- inference pods waiting for room: one list ``status.phase=Pending,spec.nodeName=``
  narrowed by the label ``krea.ai/workload=inference``.

GPU-hours of a pod are its GPUs times the time since it was placed (annotation
``burst.krea.ai/placed-at``, else ``status.startTime``) up to now, or up to
``burst.krea.ai/failed-at`` for a pod that ended; the cost multiplies them by the pod's
``burst.krea.ai/usd-per-gpu-hour`` (unknown price, unknown cost). Per-provider totals take
GPU-hours and cost from the node's ``burst.krea.ai/usage`` annotation when it has that
provider (it also counts pods that already left) and sum the current pods otherwise; the
``source`` field says which. Pod and GPU counts are always today's pods.

"Now" is the local clock, as for every age the product shows: the API server's stamps
follow the wall clock (the simulator's too, whatever its speed). A stamp a little ahead
of ours (clock skew) counts as no time passed, never as negative GPU-hours.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from krea_ops.burst import (
    ANN_FAILED_AT,
    ANN_PLACED_AT,
    ANN_PRICE,
    ANN_PROVIDER,
    ANN_USAGE,
    INFERENCE_SELECTOR,
    OUR_TAINT_PREFIX,
    PAUSE_TAINT_KEY,
    PAUSE_TAINT_VALUE,
    PAUSED_AT,
    PAUSED_BY,
    PAUSED_REASON,
    VIRTUAL_NODE_SELECTORS,
    VK_TAINT_KEY,
)
from krea_ops.kube.cluster import Cluster
from krea_ops.kube.rules import TERMINAL_PHASES
from krea_ops.kube.times import parse_time
from krea_ops.model import NodeInfo, PodInfo

SOURCE_USAGE = "usage-annotation"
SOURCE_PODS = "pods"
KUBERNETES_TAINT_PREFIXES = (
    "node.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "node-role.kubernetes.io/",
)
# Labels some providers use for their name when the node has no provider taint.
PROVIDER_LABELS = ("virtual-kubelet.io/provider", "alpha.virtual-kubelet.io/provider")


@dataclass(frozen=True)
class VirtualNodeTaint:
    """A taint on a virtual node and whose it is: ``krea`` (``krea.ai/*``, ours: the
    pause switch), ``kubernetes`` (``node.kubernetes.io/*``: unreachable, not-ready,
    unschedulable) or ``provider`` (everything else, e.g. ``virtual-kubelet.io/provider``)."""

    key: str
    value: str | None
    effect: str
    owner: str


@dataclass(frozen=True)
class BurstPod:
    """A pod bound to a virtual node. Times are Unix seconds, ages seconds."""

    namespace: str
    name: str
    owner: str | None  # "Deployment/x" when the ReplicaSet's name gives it away, else "Kind/name"
    phase: str | None
    gpus: int
    provider: str | None  # pod annotation, else the node's provider
    usd_per_gpu_hour: float | None
    placed_at: float | None  # annotation burst.krea.ai/placed-at, else status.startTime
    ended_at: float | None  # annotation burst.krea.ai/failed-at of a pod that ended
    gpu_hours: float | None  # so far; None when the start (or a finished pod's end) is unknown
    cost_usd: float | None  # gpu_hours x usd_per_gpu_hour; None when either is unknown
    age_s: float | None  # since the pod was created

    @property
    def active(self) -> bool:
        """Not finished: it holds (or is about to hold) GPUs at its provider."""
        return self.phase not in TERMINAL_PHASES


@dataclass(frozen=True)
class ProviderTotals:
    """One provider behind a virtual node."""

    provider: str
    pods: int  # active pods placed there now
    gpus_in_use: int  # their GPUs
    gpu_hours: float | None  # so far (see ``source``)
    cost_usd: float | None
    usd_per_gpu_hour: float | None
    capacity_gpus: int | None  # only the usage annotation knows it
    source: str  # "usage-annotation" or "pods"


@dataclass(frozen=True)
class VirtualNode:
    name: str
    detected_by: str  # the label selector that found it
    provider: str | None  # value of the virtual-kubelet.io/provider taint (or label)
    ready: bool | None  # None: condition missing or Unknown
    ready_reason: str | None
    cordoned: bool
    gpu_capacity: int | None
    gpu_allocatable: int | None
    taints: tuple[VirtualNodeTaint, ...]
    paused: bool  # our krea.ai/burst-paused taint is on it
    # why: annotation krea.ai/burst-paused-reason (``burst pause``), else the taint's value
    # when it is not just "true" (a pause set by hand); None when not paused or not said
    pause_reason: str | None
    providers: tuple[ProviderTotals, ...]
    pods: tuple[BurstPod, ...]
    usage_updated_at: float | None  # when the virtual kubelet last wrote its usage
    # who paused it and since when (annotations krea.ai/burst-paused-by|-at); None when
    # not paused or not recorded
    paused_by: str | None = None
    paused_at: float | None = None

    @property
    def our_taints(self) -> tuple[VirtualNodeTaint, ...]:
        return tuple(t for t in self.taints if t.owner == "krea")

    @property
    def provider_taints(self) -> tuple[VirtualNodeTaint, ...]:
        return tuple(t for t in self.taints if t.owner != "krea")


@dataclass(frozen=True)
class BurstStatus:
    collected_at: float  # the "now" ages and GPU-hours were computed at
    nodes: tuple[VirtualNode, ...]
    # inference pods Pending with no node yet (in-cluster full: waiting to burst or for
    # room); None when there are no virtual nodes and nothing was listed
    pending_inference_pods: int | None

    @property
    def paused(self) -> bool:
        return any(n.paused for n in self.nodes)


# -- reading ---------------------------------------------------------------------------


def find_virtual_nodes(cluster: Cluster) -> list[tuple[NodeInfo, str]]:
    """Virtual-kubelet nodes with the selector that found each, sorted by name."""
    found: dict[str, tuple[NodeInfo, str]] = {}
    for selector in VIRTUAL_NODE_SELECTORS:
        for node in cluster.nodes(label_selector=selector):
            found.setdefault(node.name, (node, selector))
    return [found[name] for name in sorted(found)]


def burst_status(
    cluster: Cluster,
    *,
    now: float | None = None,
    inference_selector: str = INFERENCE_SELECTOR,
) -> BurstStatus:
    """Read every virtual node, its pods and providers; ``now`` defaults to the clock
    rule in the module docstring."""
    found = find_virtual_nodes(cluster)
    if not found:
        return BurstStatus(
            collected_at=now if now is not None else time.time(),
            nodes=(),
            pending_inference_pods=None,
        )
    pods = {
        node.name: cluster.pods(field_selector=f"spec.nodeName={node.name}") for node, _ in found
    }
    pending = cluster.pods(
        label_selector=inference_selector, field_selector="status.phase=Pending,spec.nodeName="
    )
    if now is None:
        now = time.time()
    nodes = tuple(virtual_node(node, selector, pods[node.name], now) for node, selector in found)
    return BurstStatus(collected_at=now, nodes=nodes, pending_inference_pods=len(pending))


def virtual_node(
    node: NodeInfo, detected_by: str, pods: Iterable[PodInfo], now: float
) -> VirtualNode:
    """One virtual node's view from its NodeInfo and the pods bound to it."""
    provider = node_provider(node)
    burst_pods = tuple(
        sorted(
            (burst_pod(p, provider, now) for p in pods),
            key=lambda p: (p.namespace, p.name),
        )
    )
    usage = read_usage(node.annotations)
    taints = tuple(
        VirtualNodeTaint(t.key, t.value, t.effect, taint_owner(t.key)) for t in node.taints
    )
    pause = next((t for t in taints if t.key == PAUSE_TAINT_KEY), None)
    return VirtualNode(
        name=node.name,
        detected_by=detected_by,
        provider=provider,
        ready=node.ready,
        ready_reason=node.ready_reason,
        cordoned=node.unschedulable,
        gpu_capacity=node.gpu_capacity,
        gpu_allocatable=node.gpu_allocatable,
        taints=taints,
        paused=pause is not None,
        pause_reason=_pause_why(pause, node.annotations),
        providers=provider_totals(burst_pods, usage),
        pods=burst_pods,
        usage_updated_at=parse_time(_str(usage.get("updatedAt"))),
        paused_by=(node.annotations.get(PAUSED_BY) or None) if pause is not None else None,
        paused_at=parse_time(node.annotations.get(PAUSED_AT)) if pause is not None else None,
    )


def _pause_why(pause: VirtualNodeTaint | None, annotations: Mapping[str, str]) -> str | None:
    if pause is None:
        return None
    said = annotations.get(PAUSED_REASON)
    if said:
        return said
    return pause.value if pause.value and pause.value != PAUSE_TAINT_VALUE else None


# -- pieces ------------------------------------------------------------------------------


def taint_owner(key: str) -> str:
    if key.startswith(OUR_TAINT_PREFIX):
        return "krea"
    if key.startswith(KUBERNETES_TAINT_PREFIXES):
        return "kubernetes"
    return "provider"


def node_provider(node: NodeInfo) -> str | None:
    for taint in node.taints:
        if taint.key == VK_TAINT_KEY and taint.value:
            return taint.value
    for label in PROVIDER_LABELS:
        if node.labels.get(label):
            return node.labels[label]
    return None


def pause_reason(node: NodeInfo) -> str | None:
    """The value of the pause taint ("" when it has none), or None when not paused."""
    for taint in node.taints:
        if taint.key == PAUSE_TAINT_KEY:
            return taint.value or ""
    return None


def read_usage(annotations: Mapping[str, str]) -> dict[str, Any]:
    """The ``burst.krea.ai/usage`` annotation parsed; empty when absent or not JSON."""
    raw = annotations.get(ANN_USAGE)
    try:
        usage = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return usage if isinstance(usage, dict) else {}


def deployment_owner(pod: PodInfo) -> str | None:
    """``Deployment/<name>`` for a pod of a Deployment's ReplicaSet (named
    ``<deployment>-<pod-template-hash>``), else the pod's controller as ``Kind/name``."""
    owner = pod.owner
    if owner and owner.startswith("ReplicaSet/"):
        replica_set = owner.split("/", 1)[1]
        template_hash = pod.labels.get("pod-template-hash")
        if template_hash and replica_set.endswith(f"-{template_hash}"):
            return f"Deployment/{replica_set[: -len(template_hash) - 1]}"
    return owner


def burst_pod(pod: PodInfo, node_provider_name: str | None, now: float) -> BurstPod:
    annotations = pod.annotations
    price = _float(annotations.get(ANN_PRICE))
    placed_at = parse_time(annotations.get(ANN_PLACED_AT)) or pod.started_at
    terminal = pod.phase in TERMINAL_PHASES
    ended_at = parse_time(annotations.get(ANN_FAILED_AT)) if terminal else None
    end = ended_at if terminal else now
    gpu_hours: float | None = None
    if placed_at is not None and end is not None:
        gpu_hours = pod.gpus * max(end - placed_at, 0.0) / 3600.0
    cost = gpu_hours * price if gpu_hours is not None and price is not None else None
    return BurstPod(
        namespace=pod.namespace,
        name=pod.name,
        owner=deployment_owner(pod),
        phase=pod.phase,
        gpus=pod.gpus,
        provider=annotations.get(ANN_PROVIDER) or node_provider_name,
        usd_per_gpu_hour=price,
        placed_at=placed_at,
        ended_at=ended_at,
        gpu_hours=gpu_hours,
        cost_usd=cost,
        age_s=max(now - pod.created_at, 0.0) if pod.created_at is not None else None,
    )


def provider_totals(
    pods: Iterable[BurstPod], usage: Mapping[str, Any]
) -> tuple[ProviderTotals, ...]:
    """Per provider: live pod and GPU counts, GPU-hours and cost from the usage
    annotation where it has the provider, else summed over the pods."""
    by_provider: dict[str, list[BurstPod]] = {}
    for pod in pods:
        if pod.provider:
            by_provider.setdefault(pod.provider, []).append(pod)
    saved = usage.get("providers")
    saved = saved if isinstance(saved, dict) else {}
    out: list[ProviderTotals] = []
    for name in sorted(set(by_provider) | {str(k) for k in saved}):
        mine = by_provider.get(name, [])
        # In use: still active and already placed (a pod waiting for placement holds nothing).
        live = [p for p in mine if p.active and p.placed_at is not None]
        entry = saved.get(name)
        if isinstance(entry, dict):
            out.append(
                ProviderTotals(
                    provider=name,
                    pods=len(live),
                    gpus_in_use=sum(p.gpus for p in live),
                    gpu_hours=_float(entry.get("gpuHours")),
                    cost_usd=_float(entry.get("costUsd")),
                    usd_per_gpu_hour=_float(entry.get("usdPerGpuHour")),
                    capacity_gpus=_int(entry.get("capacityGpus")),
                    source=SOURCE_USAGE,
                )
            )
            continue
        hours = [p.gpu_hours for p in mine if p.gpu_hours is not None]
        costs = [p.cost_usd for p in mine if p.gpu_hours is not None]
        prices = {p.usd_per_gpu_hour for p in mine if p.usd_per_gpu_hour is not None}
        out.append(
            ProviderTotals(
                provider=name,
                pods=len(live),
                gpus_in_use=sum(p.gpus for p in live),
                gpu_hours=sum(hours) if hours else None,
                cost_usd=(
                    sum(c for c in costs if c is not None)
                    if costs and all(c is not None for c in costs)
                    else None
                ),
                usd_per_gpu_hour=prices.pop() if len(prices) == 1 else None,
                capacity_gpus=None,
                source=SOURCE_PODS,
            )
        )
    return tuple(out)


def cost_notes(report: BurstStatus) -> list[str]:
    """Where a provider's cost (from its usage annotation) is not the sum of the pods
    listed under it, why: the provider counts pods that have left and writes its usage
    now and then; one line per such provider, for ``burst status`` and the dashboard."""
    from krea_ops import units

    out: list[str] = []
    for node in report.nodes:
        for t in node.providers:
            if t.source != SOURCE_USAGE or t.cost_usd is None:
                continue
            mine = [p for p in node.pods if p.provider == t.provider]
            costs = [p.cost_usd for p in mine]
            if any(c is None for c in costs):
                listed = "unknown for the pods listed (a price or start time missing)"
            else:
                total = sum(c for c in costs if c is not None)
                if abs(total - t.cost_usd) < 0.01:
                    continue
                listed = f"{units.usd(total)} for the {units.counted(len(mine), 'pod')} listed"
            when = (
                f"as of {time.strftime('%H:%M:%S', time.gmtime(node.usage_updated_at))} UTC; "
                if node.usage_updated_at is not None
                else ""
            )
            out.append(
                f"{node.name}/{t.provider}: {units.usd(t.cost_usd)} by the provider's usage "
                f"({when}it counts pods that have left too), {listed}"
            )
    return out


# -- helpers ------------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN is unknown


def _int(value: Any) -> int | None:
    number = _float(value)
    return int(number) if number is not None else None
