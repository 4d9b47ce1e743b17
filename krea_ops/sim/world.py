"""Assemble and run the simulated world on a simulated API server.

This module is the one place that knows every actor: each part below builds its actors
(and the shared services they need) explicitly, and :data:`PARTS` lists the parts in the
order they start. No other world module imports another's actors.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from krea_ops.sim.apiserver.local import LocalApiServer
from krea_ops.sim.common.actor import Actor, World, WorldConfig
from krea_ops.sim.common.api import Api, ClusterView, WatchedClusterView
from krea_ops.sim.common.clock import SimClock
from krea_ops.sim.machines.burst import InferenceAutoscaler, VirtualKubelet
from krea_ops.sim.machines.devices import DeviceActor, DeviceService
from krea_ops.sim.machines.faults import FailureActor, FaultActor
from krea_ops.sim.machines.fleet import FleetLoad
from krea_ops.sim.machines.joins import NodeJoins
from krea_ops.sim.machines.kubelet import Kubelet
from krea_ops.sim.machines.nodes import bootstrap
from krea_ops.sim.machines.story import StoryActor
from krea_ops.sim.machines.training import TrainingActor
from krea_ops.sim.machines.validation import ValidationActor
from krea_ops.sim.standins.kueue import KueueActor, kueue_objects
from krea_ops.sim.standins.nodelifecycle import NodeLifecycle
from krea_ops.sim.standins.scheduler import Scheduler
from krea_ops.sim.standins.workloads import Controllers
from krea_ops.sim.upstream.controlplane import UpstreamControlPlane


def upstream(world: World) -> bool:
    """True when the world runs on the upstream control plane (only machines run here)."""
    return world.config.control_plane == "upstream"


def kueue_feature_gates(config: WorldConfig) -> dict[str, bool]:
    """The feature gates of the real Kueue that the embedded one's switches in
    ``WorldConfig.extra`` stand for (``unadmitted_workloads_observability``: Kueue's
    tiered QuotaReserved reasons)."""
    gates: dict[str, bool] = {}
    if config.extra.get("unadmitted_workloads_observability"):
        gates["UnadmittedWorkloadsObservability"] = True
    return gates


def cluster_actors(world: World) -> list[Actor]:
    """Kubelets, and on the embedded control plane the node lifecycle controller, the
    scheduler and the workload controllers, sharing one view of pods and nodes; creates
    the nodes and the system DaemonSets first (synchronously), so the other parts' actors
    find them in place when they start. On the upstream control plane the kubelets'
    shared endpoint serves ``kubectl logs`` (the API server proxies there) and the real
    scheduler and controller-manager do the rest."""
    api = Api(world.client)
    # The scale mode follows the cluster through watches: a relist of 5,000 nodes and
    # their pods every half second is more than the whole world may spend.
    view = (
        WatchedClusterView(api, threading.Event()) if world.config.scale_mode else ClusterView(api)
    )
    world.services["cluster-view"] = view
    kubelet = Kubelet(world, view, api)
    endpoint = None
    if upstream(world):
        from krea_ops.sim.machines.kubelet_server import KubeletServer

        server = KubeletServer(world.state_dir, world.client)
        world.services["kubelet-server"] = server
        endpoint = ("127.0.0.1", server.port)
    bootstrap(world, api, kubelet.lease_duration_s, endpoint)
    # nodes that join later (``krea-ops sim add-node``)
    joins = NodeJoins(world)
    if upstream(world):
        return [kubelet, joins]
    return [
        kubelet,
        joins,
        NodeLifecycle(world, view, api),
        Scheduler(world, view, api),
        Controllers(world, view, api),
    ]


def device_actors(world: World) -> list[Actor]:
    """The device, fault and failure actors; creates the devices and their exporters now,
    and ``krea-ops-config`` exists once this returns."""
    service = DeviceService(world)
    world.services["devices"] = service
    service.start()
    service.publish()
    return [DeviceActor(world, service), FaultActor(world, service), FailureActor(world, service)]


def kueue_actors(world: World) -> list[Actor]:
    """Kueue with the Job and JobSet controllers (the embedded control plane's; the real
    ones run on the upstream control plane), the trainings they run, and the node
    validation Jobs' containers (``machines/validation.py``)."""
    if upstream(world):
        return [TrainingActor(world), ValidationActor(world)]
    return [KueueActor(world), TrainingActor(world), ValidationActor(world)]


def burst_actors(world: World) -> list[Actor]:
    """The virtual kubelet and, unless ``inference_services`` is False in
    ``WorldConfig.extra``, the inference autoscaler."""
    out: list[Actor] = [VirtualKubelet(world)]
    services = world.config.extra.get("inference_services")
    if services is not False:
        out.append(InferenceAutoscaler(world, services))
    return out


def story_actors(world: World) -> list[Actor]:
    """The demo's story (``WorldConfig.story``: ``demo`` and ``sim serve``), the fleet's
    load in the scale mode (``extra["fleet_load"]``: ``machines/fleet.py``), else none."""
    if world.config.extra.get("fleet_load"):
        return [FleetLoad(world)]
    return [StoryActor(world)] if world.config.story else []


# The parts of the world, in the order their actors are built and started. The devices
# come first: their exporters and Prometheus (a process of its own, on the other core) start
# with every target known, so Prometheus' start-up, its target discovery and its first
# scrapes overlap the node bootstrap instead of following it (the demo's first readings).
PARTS: dict[str, Callable[[World], list[Actor]]] = {
    "devices": device_actors,
    "cluster": cluster_actors,
    "kueue": kueue_actors,
    "burst": burst_actors,
    "story": story_actors,
}

# What a part has just brought up, for the progress lines of ``demo`` and ``sim serve``.
STARTED: dict[str, Callable[[World], str]] = {
    "cluster": lambda w: f"nodes: {w.config.nodes} registered with their leases and DaemonSets",
    "devices": lambda w: f"exporters: {len(w.services['devices'].exporter_urls())} serving",
    "kueue": lambda _w: "Kueue: queues installed",
}

Progress = Callable[[str], None]

RAM_DIR = Path("/dev/shm")
SYSFS_PREFIX = "krea-sim-sysfs-"


def sysfs_in_ram(state_dir: Path) -> Path | None:
    """Put ``<state>/sysfs`` (the simulated InfiniBand trees) on tmpfs, as the real
    ``/sys`` is: a symlink to a fresh directory in /dev/shm; returns that directory.

    At 64 nodes the trees are ~28,000 files; creating them on ext4 cost ~0.4 ms each
    (11 s of the demo's start-up), on tmpfs ~0.04 ms. The trees go with the world
    (``close`` removes them), so a restarted world's counters start again, as after a
    reboot. None (nothing changed) where ``<state>/sysfs`` is already a directory or
    there is no writable tmpfs. Trees left by a world that was killed are removed first.
    """
    link = state_dir / "sysfs"
    if link.is_dir() and not link.is_symlink():
        return None
    if not (RAM_DIR.is_dir() and os.access(RAM_DIR, os.W_OK)):
        return None
    for stale in RAM_DIR.glob(SYSFS_PREFIX + "*"):
        owner = stale / ".owner"
        with contextlib.suppress(OSError):
            target = Path(owner.read_text())
            if not (target.is_symlink() and target.resolve() == stale.resolve()):
                shutil.rmtree(stale, ignore_errors=True)
    if link.is_symlink():
        link.unlink()
    ram = Path(tempfile.mkdtemp(prefix=SYSFS_PREFIX, dir=RAM_DIR))
    (ram / ".owner").write_text(str(link))
    link.symlink_to(ram, target_is_directory=True)
    return ram


class SimWorld:
    """The API server with the cluster world acting on it.

    ``with SimWorld(config, state_dir) as world: ...`` starts everything;
    ``world.sim`` is the LocalApiServer, ``world.world`` the actors' context.
    ``parts`` names the parts of :data:`PARTS` to run (tests run a subset), in any
    order: they start in the order of :data:`PARTS`. ``progress`` is told, one line at a
    time, what has come up (``demo`` and ``sim serve`` print it while the world starts).
    """

    def __init__(
        self,
        config: WorldConfig,
        state_dir: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_out: Path | str | None = None,
        parts: Sequence[str] | None = None,
        progress: Progress | None = None,
    ) -> None:
        unknown = sorted(set(parts or ()) - set(PARTS))
        if unknown:
            raise ValueError(f"unknown world parts {unknown}: choose from {', '.join(PARTS)}")
        self._t0 = time.monotonic()
        self._say = progress or (lambda _line: None)
        self.clock = SimClock(config.speed)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        # The API server stamps with the wall clock (its default), whatever the speed.
        self.sim: LocalApiServer | UpstreamControlPlane
        if config.control_plane == "upstream":
            if state_dir is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="krea-sim-")
                state_dir = self._tmp.name
            self.sim = UpstreamControlPlane(
                state_dir,
                host=host,
                port=port,
                kubeconfig_out=kubeconfig_out,
                node_grace_s=Kubelet.lease_duration_for(config),
                progress=self._say,
                kueue_feature_gates=kueue_feature_gates(config),
            )
            if parts is None or "kueue" in parts:
                # The project's Kueue setup (deploy/kueue, applied by the control plane),
                # sized to this world as the embedded Kueue's own objects are.
                self.sim.apply_objects(kueue_objects(config))
        elif config.control_plane == "embedded":
            self.sim = LocalApiServer(
                state_dir, host=host, port=port, kubeconfig_out=kubeconfig_out
            )
        else:
            raise ValueError(
                f"unknown control plane {config.control_plane!r}: embedded or upstream"
            )
        self._progress(f"API server: {self.sim.url}")
        self._ram_sysfs = sysfs_in_ram(self.sim.state_dir) if config.exporters else None
        self.client = self.sim.api_client()
        self.world = World(config, self.clock, self.client, self.sim.state_dir)
        self.actors: list[Actor] = []
        try:
            for name, build in self._parts(config):
                if parts is None or name in parts:
                    self.actors.extend(build(self.world))
                    if name in STARTED:
                        self._progress(STARTED[name](self.world))
            for actor in self.actors:
                actor.start()
        except Exception:
            self.close()
            raise

    def _progress(self, line: str) -> None:
        self._say(f"{line} ({time.monotonic() - self._t0:.1f} s)")

    @staticmethod
    def _parts(config: WorldConfig) -> list[tuple[str, Callable[[World], list[Actor]]]]:
        """:data:`PARTS` in order; in the scale mode the devices come after the cluster: the
        exporters' threads and Prometheus' first scrapes of hundreds of nodes starved the
        registration of thousands (and their overlap with it is worth nothing there)."""
        order = list(PARTS.items())
        if config.scale_mode:
            order.sort(key=lambda part: part[0] == "devices")
            order.sort(key=lambda part: part[0] not in ("cluster", "devices"))
        return order

    @property
    def kubeconfig(self) -> Path:
        return self.sim.kubeconfig

    def wait_for_readings(
        self, timeout_s: float = 60.0, cancel: Callable[[], bool] | None = None
    ) -> bool:
        """Block until a reader finds readings for every node: Prometheus (when the world
        runs one) published in ``krea-ops-config`` and holding one scrape of every
        exporter. Without Prometheus, readers scrape the exporters, which answer now.
        False if that did not happen within ``timeout_s`` (or ``cancel()`` said stop)."""
        devices = self.world.services.get("devices")
        if devices is None or not self.world.config.exporters:
            return True
        deadline = time.monotonic() + timeout_s
        expected = len(devices.exporter_urls())
        said: set[str] = set()
        scraped = -1
        while time.monotonic() < deadline and not (cancel is not None and cancel()):
            if devices.prometheus is None:
                return True
            url = self._published_prometheus()
            if url is None:
                if "starting" not in said:
                    said.add("starting")
                    self._progress("Prometheus: starting")
            else:
                now = self._scraped(url)
                if now >= expected:
                    self._progress(f"Prometheus: {url}, every exporter scraped once")
                    return True
                if now != scraped and now >= 0:
                    scraped = now
                    self._progress(f"Prometheus: first scrape, {now}/{expected} exporters")
            time.sleep(0.25)
        return False

    def _published_prometheus(self) -> str | None:
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        try:
            raw: Any = k8s.CoreV1Api(self.client).read_namespaced_config_map(
                "krea-ops-config", "krea-ops", _preload_content=False
            )
        except ApiException:
            return None
        url = (json.loads(raw.data).get("data") or {}).get("prometheusURL")
        return str(url) if url else None

    @staticmethod
    def _scraped(url: str) -> int:
        """Exporters Prometheus has scraped successfully (-1: it did not answer)."""
        query = urllib.parse.urlencode({"query": 'count(up{job="krea-exporter"} == 1)'})
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=2) as resp:
                result = json.loads(resp.read())["data"]["result"]
        except (OSError, ValueError, KeyError):
            return -1
        return int(float(result[0]["value"][1])) if result else 0

    def close(self, grace_s: float = 5.0) -> None:
        self.clock.stop.set()
        # One deadline for all: an actor in the middle of a tick finishes it first, and
        # waiting for each in turn made quitting take as long as all their ticks together.
        deadline = time.monotonic() + grace_s
        for actor in self.actors:
            actor.join(max(deadline - time.monotonic(), 0.0))
        for service in list(self.world.services.values()):
            close = getattr(service, "close", None)
            if close is not None:
                close()
        self.client.close()
        ram, self._ram_sysfs = getattr(self, "_ram_sysfs", None), None
        if ram is not None:
            with contextlib.suppress(OSError):
                (self.sim.state_dir / "sysfs").unlink()
            shutil.rmtree(ram, ignore_errors=True)
        self.sim.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> SimWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
