"""The fleet's load in the scale mode (``sim serve --telemetry-nodes N``).

The demo's story sizes its trainings to the whole world (the large one takes seven
eighths of the nodes), which at 5,000 nodes is not what a fleet runs. In the scale mode
the world runs :class:`FleetLoad` instead: at start it submits DiT trainings of 64 to 512
nodes (JobSets through Kueue, as ``krea-ops train launch`` makes them, running until
deleted) in the order of :data:`TRAINING_SIZES`, as many as fit in
:data:`TRAINING_SHARE` of the nodes (:func:`plan_trainings`: at 5,000 nodes eleven
trainings on 2,976 nodes, at 250 one of 128), and the inference Deployments (the
autoscaler of ``burst.py``) are sized as for :data:`INFERENCE_SIZED_FOR` nodes (up to
576 one-GPU replicas) rather than to the fleet. The DaemonSets run on every node.

Every node has its kubelet; only the first ``telemetry_nodes`` have devices, exporters
and readings (``WorldConfig.has_telemetry``), so trainings and inference that land on
the other nodes run in the API (phases, conditions, checkpoints) without GPU readings, and
random failures (``faults.FailureActor``) strike only nodes with devices.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from krea_ops.sim.common.actor import Actor, World, WorldConfig

__all__ = ["NAMESPACE", "FleetLoad", "plan_trainings", "scale_config"]

# Training sizes in nodes, in the order they are submitted (round after round).
TRAINING_SIZES = (512, 256, 128, 64, 512, 384, 192, 96)
TRAINING_SHARE = 0.6
INFERENCE_SIZED_FOR = 512
NAMESPACE = "training"


def plan_trainings(nodes: int, share: float = TRAINING_SHARE) -> list[tuple[str, int]]:
    """(name, nodes) of the trainings a fleet of ``nodes`` runs: sizes from
    :data:`TRAINING_SIZES` in turn, each taken while the total stays within ``share`` of
    the nodes (pure)."""
    budget = int(nodes * share)
    out: list[tuple[str, int]] = []
    total = 0
    while True:
        added = False
        for size in TRAINING_SIZES:
            if total + size <= budget:
                out.append((f"dit-{len(out):02d}-{size}n", size))
                total += size
                added = True
        if not added:
            return out


def scale_config(
    nodes: int,
    telemetry_nodes: int,
    gpus_per_node: int = 8,
    seed: int = 0,
    speed: float = 1.0,
    **extra: Any,
) -> WorldConfig:
    """The world of the scale mode: ``nodes`` GPU nodes, devices and exporters on the
    first ``telemetry_nodes``, the fleet's load instead of the story."""
    from krea_ops.sim.machines.burst import default_services

    if not 0 <= telemetry_nodes <= nodes:
        raise ValueError(f"telemetry_nodes must be within 0..{nodes}, not {telemetry_nodes}")
    knobs: dict[str, Any] = {
        "fleet_load": True,
        "inference_services": default_services(min(nodes, INFERENCE_SIZED_FOR)),
        # GPM samples every 5 s rather than 2 (as the demo's world)
        "gpm_interval_s": 5.0,
    }
    knobs.update(extra)
    return WorldConfig(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        seed=seed,
        speed=speed,
        exporters=telemetry_nodes > 0,
        telemetry_nodes=telemetry_nodes,
        extra=knobs,
    )


class FleetLoad(Actor):
    """Submits the fleet's trainings once (an existing one, from an earlier run on the
    same state, is left as it is); they run until deleted."""

    name = "fleet-load"
    period_s = 60.0

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.plan = plan_trainings(world.config.nodes)
        self.submitted: list[str] = []

    def tick(self) -> None:
        from krea_ops.sim.machines.training import submit_training

        for name, nodes in self.plan:
            if name in self.submitted:
                continue
            try:
                submit_training(
                    self.world.client,
                    name,
                    nodes,
                    self.world.config.gpus_per_node,
                )
            except ApiException as exc:
                if exc.status == 404:
                    return  # the JobSet CRD is not served yet: next tick
                if exc.status != 409:
                    raise
            self.submitted.append(name)
