"""What every actor of the simulated world shares: configuration, clock, RNG, a client."""

from __future__ import annotations

import abc
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from krea_ops.sim.common.clock import SimClock


@dataclass(frozen=True)
class Provider:
    """An external GPU provider the virtual kubelet can place burst pods at."""

    name: str
    usd_per_gpu_hour: float
    capacity_gpus: int
    failures_per_1000_pod_hours: float


DEFAULT_PROVIDERS = (
    Provider("lambda", 2.49, 512, 2.0),
    Provider("coreweave", 2.79, 1024, 1.0),
    Provider("runpod", 1.99, 256, 6.0),
)


@dataclass(frozen=True)
class WorldConfig:
    nodes: int = 64
    gpus_per_node: int = 8
    hcas_per_node: int = 8
    seed: int = 0
    speed: float = 1.0
    # Meta's Llama 3 report: about 6.5 interruptions per 1,000 node-days at 16k GPUs.
    failures_per_1000_node_days: float = 6.5
    failure_multiplier: float = 1.0
    providers: tuple[Provider, ...] = DEFAULT_PROVIDERS
    checkpoint_interval_s: float = 600.0
    exporters: bool = True
    prometheus: bool = True
    # The demo's story (krea_ops.sim.machines.story): trainings and faults on a schedule.
    story: bool = False
    # Which control plane the machines run on: "embedded" (our API server with its
    # scheduler, kcm, Job/JobSet and Kueue stand-ins) or "upstream" (the real binaries,
    # krea_ops.sim.upstream; only the machines run here).
    control_plane: str = "embedded"
    # The scale mode (``sim serve --telemetry-nodes N``): None, every node has its devices,
    # exporter and readings (the world as it always was); N, only the first N nodes do, the
    # rest are API objects kept alive by the kubelets only, the machines read the cluster
    # through watches instead of lists, and the fleet's load (``machines/fleet.py``) runs
    # instead of the demo's story.
    telemetry_nodes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def scale_mode(self) -> bool:
        return self.telemetry_nodes is not None

    def has_telemetry(self, node: str) -> bool:
        """Whether ``node`` (``gpu-node-NNN``) has simulated devices and an exporter: every
        node outside the scale mode, else the first ``telemetry_nodes`` of the fleet."""
        if self.telemetry_nodes is None:
            return True
        digits = node.rpartition("-")[2]
        return digits.isdigit() and int(digits) < self.telemetry_nodes


class World:
    """The context actors run in. ``client`` is an official ``kubernetes.client.ApiClient``
    for the simulated API server; ``state_dir`` holds checkpoints and sysfs trees."""

    def __init__(self, config: WorldConfig, clock: SimClock, client: Any, state_dir: Path) -> None:
        self.config = config
        self.clock = clock
        self.client = client
        self.state_dir = state_dir
        self.stop = clock.stop
        self.services: dict[str, Any] = {}  # shared handles between actors (devices, ...)

    def rng(self, name: str) -> random.Random:
        """A random stream of its own per actor, reproducible from the seed."""
        return random.Random(f"{self.config.seed}:{name}")


class Actor(abc.ABC):
    """A loop that calls ``tick()`` every ``period_s`` simulated seconds on its own thread.

    An exception in ``tick`` is reported (at most once a minute per actor) and the loop
    goes on: one misbehaving actor must not stop the world.
    """

    name = "actor"
    period_s = 10.0

    def __init__(self, world: World) -> None:
        self.world = world
        self.clock = world.clock
        self.rng = world.rng(self.name)
        self.errors = 0
        self.ticks = 0
        self._last_report = 0.0
        self._thread: threading.Thread | None = None

    def setup(self) -> None:  # noqa: B027 (an optional hook)
        """Create what the actor needs before its first tick."""

    @abc.abstractmethod
    def tick(self) -> None:
        """One step of the actor's work."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"sim-{self.name}", daemon=True)
        self._thread.start()

    def join(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        self._guard(self.setup)
        while not self.world.stop.is_set():
            self._guard(self.tick)
            self.ticks += 1
            if self.clock.wait(self.period_s):
                return

    def _guard(self, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:
            if self.world.stop.is_set():
                return
            self.errors += 1
            now = time.monotonic()
            if now - self._last_report > 60:
                self._last_report = now
                print(f"sim {self.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
