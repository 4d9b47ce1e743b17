"""A short per-GPU history of the fleet reads: temperature and tensor activity of the last
``points`` refreshes, for the node screen's sparklines.

float32 ring buffers, one per node: about 16 MB at 4,096 nodes x 8 GPUs x 60 points.
Only a long-running reader (the dashboard) keeps one; a one-shot command does not.
"""

from __future__ import annotations

import math
import threading
from array import array
from dataclasses import dataclass

from krea_ops.fleet import FleetSnapshot, usable

HISTORY_POINTS = 60


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


class FleetHistory:
    """Thread-safe: fleet reads record from a worker thread, the screen reads on the UI
    thread."""

    def __init__(self, points: int = HISTORY_POINTS) -> None:
        self._lock = threading.Lock()
        self._rings: dict[str, _Ring] = {}
        self._times: list[float] = []
        self._points = points

    def record(self, snap: FleetSnapshot) -> None:
        with self._lock:
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

    def of(self, node: str) -> GpuHistory | None:
        with self._lock:
            ring = self._rings.get(node)
            if ring is None:
                return None
            n = len(self._times)
            w = ring.width
            temps = {i: tuple(ring.temp[p * w + i] for p in range(n)) for i in range(w)}
            tensor = {i: tuple(ring.tensor[p * w + i] for p in range(n)) for i in range(w)}
            return GpuHistory(tuple(self._times), temps, tensor)
