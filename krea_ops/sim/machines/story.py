"""The story the demo world tells in its first minutes (``WorldConfig.story``).

``krea-ops demo`` and ``krea-ops sim serve`` build their world with ``story_config``: the
same cluster, Kueue, virtual kubelet and devices as any world, with an operator's day
compressed into a few wall minutes. Every beat is an API call a person could make
(a JobSet created, a fault ConfigMap as ``krea-ops sim inject`` writes one); what follows
from it is the world's own machinery:

1. At start a small training (``dit-b-ablation``, an eighth of the nodes) is submitted;
   the inference Deployments come up. Inference has no on-prem quota of its own in this
   world (``training_quota_fraction`` 1.0): it borrows the GPUs training does not use yet,
   which is what makes it the first thing to go when training wants them back.
2. Once inference serves on-prem (and ``large_after_s`` has passed), the large training
   ``dit-xl-pretrain`` (every other node) is submitted, and once it is admitted a sweep
   that will have to wait for quota (``dit-l-sweep``, for ``queue why``). Kueue reclaims
   the borrowed GPUs: it preempts the inference pods (``Preempted``,
   ``InCohortReclamation``); their ReplicaSets recreate them,
   Kueue admits the new pods on flavor ``burst`` (no on-prem quota is left), the scheduler
   binds them to ``burst-vk``, and the virtual kubelet places them at the cheapest
   provider, where their cost accrues.
3. At ``hot_after_s`` a GPU of the large training loses its fan (a ``hot-gpu`` fault) and
   climbs past the hot threshold under load.
4. Once the large training has saved a checkpoint and is writing the next one, a GPU of
   another of its nodes fails (``crash`` with cause ``gpu-sram``, XID 95, repaired after
   ``repair_s``). The pods there fail, the JobSet restarts the gang, the half-written
   checkpoint stays behind without ``.metadata``, and once the node is back the training
   resumes from the newest complete checkpoint.
5. The small training was submitted to run for ``small_runs_s``: it completes then and
   Kueue releases its quota; its nodes are free. Where the bundled controllers run
   (``krea-ops demo`` starts them), this closes the loop: burst-taint stops new
   placements offsite and migrate-back brings the inference pods home onto those GPUs
   (and node-health, which quarantined the hot GPU's node, left the large training one
   node short until then). Recorded as beat ``small-done``.

Times are wall seconds, so the story keeps its pace at any ``--speed``: what the world
simulates in those seconds (checkpoint interval and write time, repair time) is scaled by
the speed, so at 60x the large training checkpoints every 10 simulated minutes and the
GPU is repaired after 15 simulated minutes; at 1x it all happens in about three minutes.
Each beat is recorded, with its simulated time, in ConfigMap ``story`` of namespace
``krea-sim``; a beat already recorded there (a world restarted on its state) is not
repeated.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from krea_ops.sim.common.actor import Actor, World, WorldConfig

__all__ = ["LARGE", "QUEUED", "SMALL", "Story", "StoryActor", "story_config"]

STORY_CONFIGMAP = "story"
SMALL, LARGE, QUEUED = "dit-b-ablation", "dit-xl-pretrain", "dit-l-sweep"
NAMESPACE = "training"
INFERENCE_NAMESPACE = "inference"
TRAINING_SECONDS = 86400.0  # the runs outlast the demo
CRASH_CAUSE = "gpu-sram"  # XID 95: an uncontained ECC error; the GPU needs a reset


@dataclass(frozen=True)
class Story:
    """The beats' pacing, in wall seconds."""

    large_after_s: float = 10.0
    give_up_waiting_s: float = 90.0  # submit the large training even if inference never ran
    hot_after_s: float = 20.0
    checkpoint_every_s: float = 10.0
    checkpoint_write_s: float = 5.0
    repair_s: float = 15.0
    small_runs_s: float = 120.0  # then the small training completes


def story_config(
    nodes: int = 64,
    gpus_per_node: int = 8,
    seed: int = 0,
    speed: float = 1.0,
    story: Story | None = None,
    **extra: Any,
) -> WorldConfig:
    """The world ``demo`` and ``sim serve`` run: the story on, its simulated durations
    scaled by the speed (``extra`` adds to or overrides the world's knobs)."""
    pace = story or Story()
    knobs: dict[str, Any] = {
        "training_quota_fraction": 1.0,
        "checkpoint_write_s": pace.checkpoint_write_s * speed,
        # GPM samples once per scrape interval (15 s by default) rather than every 2 s:
        # at 64 nodes the 2 s samplers were a sixth of a core the start-up needs
        "gpm_interval_s": 5.0,
        "story": pace,
    }
    knobs.update(extra)
    return WorldConfig(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        seed=seed,
        speed=speed,
        checkpoint_interval_s=pace.checkpoint_every_s * speed,
        story=True,
        extra=knobs,
    )


def sizes(nodes: int) -> dict[str, int]:
    """Nodes of each story training: the small one an eighth (at least one node where
    there are two or more), the large one the rest, the queued sweep a quarter (it waits
    for one of them to finish)."""
    small = max(1, nodes // 8) if nodes >= 2 else 0
    return {SMALL: small, LARGE: nodes - small, QUEUED: max(1, nodes // 4)}


class StoryActor(Actor):
    """Makes the story's beats happen, as an operator's script would (see the module)."""

    name = "story"

    def __init__(self, world: World) -> None:
        super().__init__(world)
        cfg = world.config
        self.story: Story = cfg.extra.get("story") or Story()
        self.period_s = max(1.0, 0.5 * cfg.speed)  # about twice a wall second
        self.sizes = sizes(cfg.nodes)
        self.started = time.monotonic()
        self.beats: dict[str, str] = {}
        self.hot_node: str | None = None
        from krea_ops.sim.common.jobapi import JobApi

        self.api = JobApi(world.client)

    # -- bookkeeping ------------------------------------------------------------------

    def _wall(self) -> float:
        return time.monotonic() - self.started

    def setup(self) -> None:
        from kubernetes.client.exceptions import ApiException

        from krea_ops.sim.machines.faults import FAULT_NAMESPACE, ensure_namespace

        ensure_namespace(self.api.core, FAULT_NAMESPACE)
        try:
            raw = self.api.core.read_namespaced_config_map(
                STORY_CONFIGMAP, FAULT_NAMESPACE, _preload_content=False
            )
            self.beats = dict(json.loads(raw.data).get("data") or {})
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.api.core.create_namespaced_config_map(
                FAULT_NAMESPACE,
                {"metadata": {"name": STORY_CONFIGMAP}, "data": {}},
                _preload_content=False,
            )

    def _done(self, beat: str, detail: str) -> None:
        from krea_ops.sim.machines.faults import FAULT_NAMESPACE

        self.beats[beat] = f"{self.clock.rfc3339()} {detail}"
        self.api.core.patch_namespaced_config_map(
            STORY_CONFIGMAP,
            FAULT_NAMESPACE,
            {"data": {beat: self.beats[beat]}},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )

    # -- the beats --------------------------------------------------------------------

    def tick(self) -> None:
        if "small-training" not in self.beats:
            self._submit(SMALL, run_s=self.story.small_runs_s)
            self._done("small-training", f"{SMALL} submitted ({self.sizes[SMALL]} nodes)")
        if "large-training" not in self.beats:
            if self._wall() >= self.story.large_after_s and (
                self._inference_on_prem() or self._wall() >= self.story.give_up_waiting_s
            ):
                self._submit(LARGE)
                self._done("large-training", f"{LARGE} submitted ({self.sizes[LARGE]} nodes)")
            return
        if "queued-training" not in self.beats and self._admitted(LARGE):
            # only now: submitted together, the sweep could be admitted first (same
            # priority, same second) and leave the large one waiting instead
            self._submit(QUEUED)
            self._done("queued-training", f"{QUEUED} submitted ({self.sizes[QUEUED]} nodes)")
        if "hot-gpu" not in self.beats and self._wall() >= self.story.hot_after_s:
            self._hot_gpu()
        if "crash" not in self.beats:
            self._maybe_crash()
        if "small-done" not in self.beats and self._completed(SMALL):
            self._done("small-done", f"{SMALL} completed; its {self.sizes[SMALL]} nodes are free")

    def _submit(self, name: str, run_s: float | None = None) -> None:
        from kubernetes.client.exceptions import ApiException

        from krea_ops.sim.machines.training import submit_training

        nodes = self.sizes[name]
        if nodes < 1:
            return
        try:
            submit_training(
                self.world.client,
                name,
                nodes,
                self.world.config.gpus_per_node,
                run_seconds=TRAINING_SECONDS if run_s is None else run_s * self.world.config.speed,
            )
        except ApiException as exc:
            if exc.status != 409:  # it exists from an earlier run on this state
                raise

    def _jobset(self, training: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        from krea_ops.sim.common.jobapi import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

        try:
            js: dict[str, Any] = self.api.custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, training
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return js

    def _admitted(self, training: str) -> bool:
        """Kueue admitted the training's workload (its JobSet is no longer suspended)."""
        js = self._jobset(training)
        return js is not None and not (js.get("spec") or {}).get("suspend", True)

    def _completed(self, training: str) -> bool:
        js = self._jobset(training)
        return js is not None and (js.get("status") or {}).get("terminalState") == "Completed"

    def _pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        raw = self.api.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        return list(json.loads(raw.data).get("items") or [])

    def _inference_on_prem(self) -> bool:
        from krea_ops.sim.machines.burst import VK_NODE

        return any(
            (p.get("status") or {}).get("phase") == "Running"
            and (p.get("spec") or {}).get("nodeName") not in (None, VK_NODE)
            for p in self._pods(INFERENCE_NAMESPACE, "krea.ai/workload=inference")
        )

    def _large_nodes(self) -> list[str]:
        """The nodes the large training's pods run on, in rank order."""
        pods = [
            p
            for p in self._pods(NAMESPACE, f"krea.ai/training={LARGE}")
            if (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        pods.sort(key=lambda p: (p.get("metadata") or {}).get("name", ""))
        return [str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")]

    def _hot_gpu(self) -> None:
        from krea_ops.sim.machines.faults import inject_fault

        nodes = self._large_nodes()
        if not nodes:
            return  # not running yet: the fan fails on a GPU under load
        node = nodes[len(nodes) // 2]
        gpu = self.rng.randrange(self.world.config.gpus_per_node)
        name = inject_fault(self.world.client, "hot-gpu", node, gpu=gpu, source="story")
        self.hot_node = node
        self._done("hot-gpu", f"{node} GPU {gpu} ({name})")

    def _maybe_crash(self) -> None:
        from krea_ops.sim.machines.faults import inject_fault
        from krea_ops.sim.machines.training import host_path, list_checkpoints

        root = host_path(self.world.state_dir, f"/checkpoints/{NAMESPACE}/{LARGE}")
        found = list_checkpoints(root)
        complete = [step for step, _, ok in found if ok]
        writing = [step for step, _, ok in found if not ok and complete and step > complete[0]]
        if not writing:
            return  # wait for a saved checkpoint and the next one half written
        nodes = [n for n in self._large_nodes() if n != self.hot_node] or self._large_nodes()
        if not nodes:
            return
        node = nodes[0]
        gpu = self.rng.randrange(self.world.config.gpus_per_node)
        name = inject_fault(
            self.world.client,
            "crash",
            node,
            gpu=gpu,
            value=CRASH_CAUSE,
            repair_s=round(self.story.repair_s * self.world.config.speed),
            source="story",
        )
        self._done(
            "crash",
            f"{node} GPU {gpu} {CRASH_CAUSE} ({name}) while step-{writing[0]} was being "
            f"written; newest complete step-{complete[0]}",
        )
