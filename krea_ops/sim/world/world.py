"""Assemble and run the simulated world on a simulated API server."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from krea_ops.sim.local import LocalApiServer
from krea_ops.sim.world.actor import Actor, World, WorldConfig
from krea_ops.sim.world.clock import SimClock

# Each module provides ``actors(world) -> list[Actor]``, started in this order.
ACTOR_MODULES: tuple[str, ...] = (
    "krea_ops.sim.world.cluster",
    "krea_ops.sim.world.devices",
    "krea_ops.sim.world.kueue",
    "krea_ops.sim.world.burst",
)


class SimWorld:
    """The API server with the cluster world acting on it.

    ``with SimWorld(config, state_dir) as world: ...`` starts everything;
    ``world.sim`` is the LocalApiServer, ``world.world`` the actors' context.
    """

    def __init__(
        self,
        config: WorldConfig,
        state_dir: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_out: Path | str | None = None,
        modules: tuple[str, ...] | None = None,
    ) -> None:
        self.clock = SimClock(config.speed)
        self.sim = LocalApiServer(
            state_dir, host=host, port=port, kubeconfig_out=kubeconfig_out, clock=self.clock.now
        )
        self.client = self.sim.api_client()
        self.world = World(config, self.clock, self.client, self.sim.state_dir)
        self.actors: list[Actor] = []
        try:
            for name in modules if modules is not None else ACTOR_MODULES:
                module: Any = importlib.import_module(name)
                self.actors.extend(module.actors(self.world))
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
