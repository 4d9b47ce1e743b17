"""The embedded control plane's node lifecycle controller (kube-controller-manager's
``node-lifecycle-controller``, pkg/controller/nodelifecycle), as far as the world needs it.

Upstream, the controller reads a node whose kubelet stopped posting status and renewing
its Lease as gone once ``--node-monitor-grace-period`` has passed: it sets every condition
the kubelet posted to ``Unknown`` (reason ``NodeStatusUnknown``, message "Kubelet stopped
posting node status."), records ``NodeNotReady``, and taints the node
``node.kubernetes.io/unreachable`` with ``NoSchedule`` and ``NoExecute`` (each with its
``timeAdded``; the taint eviction controller then acts on the second); once the kubelet
posts ``Ready=True`` again it takes the ``unreachable`` and ``not-ready`` taints off.

Here the grace period is zero: a simulated machine that fails says so on its Node
(``sim.krea.ai/failed``) and its kubelet stops at once, and this stand-in reads that
announcement where the real controller would wait out the Lease. The simulated world
runs faster than wall time while Leases are renewed in wall seconds, so waiting out a
40-second grace would stretch every failure by minutes of simulated time. On the
upstream control plane the real controller runs, waits its grace period and reads the
Leases the kubelets stopped renewing; this stand-in does not run there.
"""

from __future__ import annotations

from typing import Any

from krea_ops.kube.times import rfc3339
from krea_ops.sim.common.actor import World
from krea_ops.sim.common.api import Api, ClusterView, Events, ViewActor
from krea_ops.sim.common.objects import (
    FAILED_ANNOTATION,
    NODE_CONDITIONS,
    NOT_READY,
    UNREACHABLE,
    annotations_of,
    as_dict,
    condition_of,
    meta_of,
    spec_of,
)


class NodeLifecycle(ViewActor):
    """Marks a failed node's conditions ``Unknown`` and taints it ``unreachable``; lifts
    the ``unreachable`` and ``not-ready`` taints once its kubelet reports Ready."""

    name = "node-lifecycle"

    def __init__(self, world: World, view: ClusterView, api: Api) -> None:
        super().__init__(world, view, api)
        self.events = Events(api, world, "node-controller")
        self.period_s = max(2.0, 0.5 * world.config.speed)

    def tick(self) -> None:
        now = self.clock.wall()
        for node in self.view.nodes(self._wrote):
            taints = [as_dict(t) for t in spec_of(node).get("taints") or []]
            ready = (condition_of(node, "Ready") or {}).get("status")
            if FAILED_ANNOTATION in annotations_of(node):
                unreachable = sum(1 for t in taints if t.get("key") == UNREACHABLE)
                if ready != "Unknown" or unreachable < 2:
                    self._mark_unknown(node, now, taints)
            elif ready == "True" and any(t.get("key") in (UNREACHABLE, NOT_READY) for t in taints):
                self._set_taints(
                    node, [t for t in taints if t.get("key") not in (UNREACHABLE, NOT_READY)]
                )

    def _set_taints(self, node: dict[str, Any], taints: list[dict[str, Any]]) -> None:
        meta = meta_of(node)
        self._write(
            self.api.core.patch_node,
            meta["name"],
            {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "spec": {"taints": taints},
            },
            _content_type="application/merge-patch+json",
        )

    def _mark_unknown(self, node: dict[str, Any], now: float, taints: list[dict[str, Any]]) -> None:
        """The taints go first: their patch carries the node's resourceVersion, which the
        status patch would change."""
        name = meta_of(node)["name"]
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
        if (condition_of(node, "Ready") or {}).get("status") == "Unknown":
            return
        conditions = []
        for kind in NODE_CONDITIONS:
            current = condition_of(node, kind) or {}
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
        self.events.emit(
            node, "Node", "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady"
        )
