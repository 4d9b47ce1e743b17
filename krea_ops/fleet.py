"""The fleet in one snapshot: nodes from the API, telemetry from Prometheus or the
exporters, verdicts from the health policy. ``krea-ops gpus``, ``fabric``, ``nodes`` and
the dashboard's fleet screen all read through ``load_fleet``.

Telemetry failing (Prometheus down) does not fail the snapshot: the nodes are still
listed, every GPU node is UNKNOWN with the reason, and ``telemetry_error`` carries the
one-line error for the caller to print (and exit 1 on).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from krea_ops.errors import Unavailable
from krea_ops.health import HealthPolicy, fleet_views
from krea_ops.model import FleetTelemetry, NodeInfo, NodeView


@dataclass(frozen=True)
class FleetSnapshot:
    views: tuple[NodeView, ...]
    telemetry: FleetTelemetry | None
    telemetry_error: str | None
    source: str | None  # "prometheus http://..." / "scrape of N exporters"
    collected_at: float
    policy: HealthPolicy

    def view(self, node: str) -> NodeView | None:
        return next((v for v in self.views if v.info.name == node), None)


def select_nodes(
    cluster: Any, *, node: str | None = None, selector: str | None = None
) -> list[NodeInfo]:
    if node:
        return [cluster.node(node)]
    return list(cluster.nodes(selector))


def load_fleet(
    cluster: Any,
    source: Any | None,
    policy: HealthPolicy,
    *,
    nodes: list[NodeInfo] | None = None,
    node: str | None = None,
    selector: str | None = None,
    source_error: str | None = None,
) -> FleetSnapshot:
    """``source`` is a telemetry source (``krea_ops.telemetry``) or None when none could be
    opened (``source_error`` says why). ``nodes`` skips the node list (the caller has it)."""
    infos = nodes if nodes is not None else select_nodes(cluster, node=node, selector=selector)
    fleet: FleetTelemetry | None = None
    error = source_error
    wanted: Collection[str] | None = None
    if node or selector:
        wanted = {n.name for n in infos}
    if source is not None:
        try:
            fleet = source.collect(wanted)
        except Unavailable as exc:
            error = str(exc)
    views = fleet_views(infos, fleet, policy, telemetry_error=error)
    return FleetSnapshot(
        views=tuple(views),
        telemetry=fleet,
        telemetry_error=error,
        source=source.describe() if source is not None else None,
        collected_at=fleet.collected_at if fleet is not None else time.time(),
        policy=policy,
    )
