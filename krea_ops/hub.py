"""The dashboard's data: one object that reads each kind of snapshot on demand.

The dashboard calls one method per kind (``fleet``, ``queue``, ``burst``, ``training``,
``node_pods``, ``why``) from its worker threads, at most one call per kind at a time;
every method returns frozen snapshots from the core (the same ones the CLI prints) or
raises a ``KreaError`` with the one line to show. Nothing here knows about Textual.

The hub also keeps a short per-GPU history (temperature and tensor activity, the last
``HISTORY_POINTS`` fleet refreshes) in float32 ring buffers, about 16 MB at 4,096 x 8
GPUs, for the node screen's sparklines.
"""

from __future__ import annotations

import contextlib
import math
import threading
from array import array
from dataclasses import dataclass
from typing import Any

from krea_ops.errors import KreaError, Unavailable
from krea_ops.fleet import FleetSnapshot, load_fleet, usable
from krea_ops.health import HealthPolicy, severities
from krea_ops.kube.cluster import Cluster, connect
from krea_ops.model import PodInfo, Severity
from krea_ops.settings import Settings

HISTORY_POINTS = 60


@dataclass(frozen=True)
class HubInfo:
    cluster: str  # API server URL
    context: str | None
    telemetry: str  # "prometheus http://..." / "scrape of 64 exporters" / "none: why"


@dataclass(frozen=True)
class GpuHistory:
    """Oldest first; NaN where the value was unknown at that refresh."""

    times: tuple[float, ...]
    temperature_c: dict[int, tuple[float, ...]]
    tensor_active_ratio: dict[int, tuple[float, ...]]


class _Ring:
    """``points`` samples of ``width`` floats per node, float32."""

    def __init__(self, width: int, points: int) -> None:
        self.width = width
        self.points = points
        self.temp = array("f", [math.nan]) * (width * points)
        self.tensor = array("f", [math.nan]) * (width * points)


class Hub:
    def __init__(
        self,
        settings: Settings,
        cluster: Cluster | None = None,
        *,
        source: Any | None = None,
        history_points: int = HISTORY_POINTS,
    ) -> None:
        self.settings = settings
        self.cluster = cluster or connect(settings.kubeconfig, settings.context)
        self.policy = HealthPolicy.from_settings(settings)
        self._source = source
        self._source_error: str | None = None
        self._source_lock = threading.Lock()
        self._history_lock = threading.Lock()
        self._rings: dict[str, _Ring] = {}
        self._times: list[float] = []
        self._points = history_points
        self.last_fleet: FleetSnapshot | None = None

    # -- telemetry source -----------------------------------------------------------

    def _telemetry(self) -> tuple[Any | None, str | None]:
        """The source, opened on first use and again after it could not be opened (the
        Prometheus address may appear in the ConfigMap later, as in the demo)."""
        with self._source_lock:
            if self._source is None:
                from krea_ops.telemetry import open_source

                try:
                    self._source = open_source(self.settings, self.cluster)
                    self._source_error = None
                except Unavailable as exc:
                    self._source_error = str(exc)
            return self._source, self._source_error

    def info(self) -> HubInfo:
        source, error = self._source, self._source_error
        telemetry = source.describe() if source is not None else f"none: {error or 'not yet'}"
        return HubInfo(self.cluster.host, self.settings.context, telemetry)

    # -- snapshots ------------------------------------------------------------------

    def fleet(self) -> FleetSnapshot:
        source, error = self._telemetry()
        snap = load_fleet(self.cluster, source, self.policy, source_error=error)
        self.last_fleet = snap
        self._record(snap)
        return snap

    def node_pods(self, node: str) -> list[PodInfo]:
        return self.cluster.pods_on_node(node)

    def node_severity(self) -> dict[str, Severity] | None:
        snap = self.last_fleet
        if snap is None or snap.telemetry_error:
            return None
        return severities(snap.views)

    def queue(self) -> tuple[Any, tuple[Any, ...]]:
        """(QueueSnapshot, workloads) from ``krea_ops.queue``; drift uses the verdicts of
        the last fleet refresh."""
        from krea_ops.queue import read_queues, read_workloads

        snap = read_queues(self.cluster, node_severity=self.node_severity())
        return snap, tuple(read_workloads(self.cluster))

    def why(self, name: str, namespace: str | None) -> Any:
        from krea_ops.queue import why

        return why(self.cluster, name, namespace, node_severity=self.node_severity())

    def burst(self) -> Any:
        from krea_ops.burst.status import burst_status

        return burst_status(self.cluster)

    def training(self) -> list[Any]:
        from krea_ops.training.runs import parse_mount, read_runs

        return read_runs(
            self.cluster,
            mount=parse_mount(self.settings.training_checkpoint_mount),
            checkpoint_seconds=self.settings.training_checkpoint_seconds,
            failures_per_1000_node_days=self.settings.training_failures_per_1000_node_days,
        )

    def close(self) -> None:
        with self._source_lock:
            if self._source is not None:
                with contextlib.suppress(KreaError):
                    self._source.close()
                self._source = None

    # -- history --------------------------------------------------------------------

    def _record(self, snap: FleetSnapshot) -> None:
        with self._history_lock:
            self._times.append(snap.collected_at)
            if len(self._times) > self._points:
                del self._times[0]
            slot = (len(self._times) - 1) if len(self._times) < self._points else None
            for view in snap.views:
                tel = view.telemetry
                width = max(view.info.gpu_capacity or 0, len(tel.gpus) if tel else 0)
                if width == 0:
                    continue
                ring = self._rings.get(view.info.name)
                if ring is None or ring.width < width:
                    ring = self._rings[view.info.name] = _Ring(width, self._points)
                temps = [math.nan] * ring.width
                tensor = [math.nan] * ring.width
                if usable(tel):
                    for g in tel.gpus:
                        if 0 <= g.index < ring.width:
                            if g.temperature_c is not None:
                                temps[g.index] = g.temperature_c
                            if g.tensor_active_ratio is not None:
                                tensor[g.index] = g.tensor_active_ratio
                w = ring.width
                if slot is None:  # full: shift left by one point
                    ring.temp[: -w or None] = ring.temp[w:]
                    ring.tensor[: -w or None] = ring.tensor[w:]
                    at = (self._points - 1) * w
                else:
                    at = slot * w
                ring.temp[at : at + w] = array("f", temps)
                ring.tensor[at : at + w] = array("f", tensor)

    def history(self, node: str) -> GpuHistory | None:
        with self._history_lock:
            ring = self._rings.get(node)
            if ring is None:
                return None
            n = len(self._times)
            w = ring.width
            temps = {i: tuple(ring.temp[p * w + i] for p in range(n)) for i in range(w)}
            tensor = {i: tuple(ring.tensor[p * w + i] for p in range(n)) for i in range(w)}
            return GpuHistory(tuple(self._times), temps, tensor)
