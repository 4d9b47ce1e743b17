"""Assemble and run the simulated world on a simulated API server.

This module is the one place that knows every actor: each part below builds its actors
(and the shared services they need) explicitly, and :data:`PARTS` lists the parts in the
order they start. No other world module imports another's actors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from krea_ops.sim.local import LocalApiServer
from krea_ops.sim.world.actor import Actor, World, WorldConfig
from krea_ops.sim.world.api import Api, ClusterView
from krea_ops.sim.world.burst import InferenceAutoscaler, VirtualKubelet
from krea_ops.sim.world.clock import SimClock
from krea_ops.sim.world.controllers import Controllers
from krea_ops.sim.world.devices import DeviceActor, DeviceService
from krea_ops.sim.world.faults import FailureActor, FaultActor
from krea_ops.sim.world.kubelet import Kubelet
from krea_ops.sim.world.kueue import KueueActor
from krea_ops.sim.world.nodes import bootstrap
from krea_ops.sim.world.scheduler import Scheduler
from krea_ops.sim.world.training import TrainingActor


def cluster_actors(world: World) -> list[Actor]:
    """Kubelets, the scheduler and the workload controllers, sharing one view of pods and
    nodes; creates the nodes and the system DaemonSets first (synchronously), so the
    other parts' actors find them in place when they start."""
    api = Api(world.client)
    view = ClusterView(api)
    world.services["cluster-view"] = view
    kubelet = Kubelet(world, view, api)
    bootstrap(world, api, kubelet.lease_duration_s)
    return [kubelet, Scheduler(world, view, api), Controllers(world, view, api)]


def device_actors(world: World) -> list[Actor]:
    """The device, fault and failure actors; creates the devices and their exporters now,
    and ``krea-ops-config`` exists once this returns."""
    service = DeviceService(world)
    world.services["devices"] = service
    service.start()
    service.publish()
    return [DeviceActor(world, service), FaultActor(world, service), FailureActor(world, service)]


def kueue_actors(world: World) -> list[Actor]:
    """Kueue with the Job and JobSet controllers, and the trainings they run."""
    return [KueueActor(world), TrainingActor(world)]


def burst_actors(world: World) -> list[Actor]:
    """The virtual kubelet and, unless ``inference_services`` is False in
    ``WorldConfig.extra``, the inference autoscaler."""
    out: list[Actor] = [VirtualKubelet(world)]
    services = world.config.extra.get("inference_services")
    if services is not False:
        out.append(InferenceAutoscaler(world, services))
    return out


# The parts of the world, in the order their actors are built and started.
PARTS: dict[str, Callable[[World], list[Actor]]] = {
    "cluster": cluster_actors,
    "devices": device_actors,
    "kueue": kueue_actors,
    "burst": burst_actors,
}


class SimWorld:
    """The API server with the cluster world acting on it.

    ``with SimWorld(config, state_dir) as world: ...`` starts everything;
    ``world.sim`` is the LocalApiServer, ``world.world`` the actors' context.
    ``parts`` names the parts of :data:`PARTS` to run (tests run a subset), in any
    order: they start in the order of :data:`PARTS`.
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
    ) -> None:
        unknown = sorted(set(parts or ()) - set(PARTS))
        if unknown:
            raise ValueError(f"unknown world parts {unknown}: choose from {', '.join(PARTS)}")
        self.clock = SimClock(config.speed)
        # The API server stamps with the wall clock (its default), whatever the speed.
        self.sim = LocalApiServer(state_dir, host=host, port=port, kubeconfig_out=kubeconfig_out)
        self.client = self.sim.api_client()
        self.world = World(config, self.clock, self.client, self.sim.state_dir)
        self.actors: list[Actor] = []
        try:
            for name, build in PARTS.items():
                if parts is None or name in parts:
                    self.actors.extend(build(self.world))
            for actor in self.actors:
                actor.start()
        except Exception:
            self.close()
            raise

    @property
    def kubeconfig(self) -> Path:
        return self.sim.kubeconfig

    def close(self) -> None:
        self.clock.stop.set()
        for actor in self.actors:
            actor.join()
        for service in self.world.services.values():
            close = getattr(service, "close", None)
            if close is not None:
                close()
        self.client.close()
        self.sim.close()

    def __enter__(self) -> SimWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
